"""The class store for replicas on several machines: one Redis server (core.serve.classroom)."""
from __future__ import annotations

import hmac
import json
import secrets
import time
from typing import Callable

from core.serve.class_rules import (MAX_TEXT, ClassError, ClassLimits, ClassStore, check_meta, check_phase,
                                    check_round, check_voter, counts_of, hash_secret, new_code, normalize_code,
                                    round_view)

_VOTE_LUA = """
local cls = redis.call('HMGET', KEYS[1], 'active', 'closed')
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
if not cls[1] or tonumber(cls[1]) < now - ttl then return 'noclass' end
if cls[2] == '1' then return 'ended' end
local r = redis.call('HMGET', KEYS[2], 'choices', 'phase', 'revealed')
if not r[1] then return 'noround' end
local p, ph = tonumber(ARGV[3]), tonumber(r[2])
if r[3] == '1' or p < ph then return 'closed' end
if p > ph then return 'notyet' end
local ok = false
for _, c in ipairs(cjson.decode(r[1])) do if c == ARGV[2] then ok = true end end
if not ok then return 'badchoice' end
local w = redis.call('HGET', KEYS[4], ARGV[1])
if not w then
  if redis.call('HLEN', KEYS[4]) >= tonumber(ARGV[6]) then return 'full' end
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[4] .. ' 1')
else
  local sep = string.find(w, ' ')
  local win, n = tonumber(string.sub(w, 1, sep - 1)), tonumber(string.sub(w, sep + 1))
  if now - win >= 1 then redis.call('HSET', KEYS[4], ARGV[1], ARGV[4] .. ' 1')
  elseif n >= tonumber(ARGV[7]) then return 'rate'
  else redis.call('HSET', KEYS[4], ARGV[1], string.sub(w, 1, sep - 1) .. ' ' .. tostring(n + 1)) end
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
local left = math.floor(tonumber(cls[1]) + ttl - now) + 1
redis.call('EXPIRE', KEYS[3], left)
redis.call('EXPIRE', KEYS[4], left)
return 'ok'
"""


_CREATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'secret', ARGV[1], 'created', ARGV[2], 'active', ARGV[2], 'closed', 0, 'rounds', 0)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""

# a new round in one step: the count and the round's fields together, so no reader sees a count without its round
_OPEN_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
local n = tonumber(redis.call('HGET', KEYS[1], 'rounds') or '0')
if n >= tonumber(ARGV[1]) then return -1 end
local key = KEYS[2] .. tostring(n + 1)
redis.call('HSET', key, 'question', ARGV[2], 'choices', ARGV[3], 'meta', ARGV[4], 'phase', 1, 'shown', 0,
           'revealed', 0, 'answer', 'null', 'words', '')
redis.call('HSET', KEYS[1], 'rounds', n + 1, 'active', ARGV[5])
return n + 1
"""

# a round's fields written only while the round exists: an HSET on an expired key would make one with no expiry
_SET_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""


def _guarded(fn):
    """A RedisStore method whose connection errors reach the page as a ClassError in words."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        import redis

        try:
            return fn(*args, **kwargs)
        except redis.exceptions.RedisError as e:
            raise ClassError(f"the class store (Redis) cannot be reached ({type(e).__name__}); try again") from None
    return call


class RedisStore(ClassStore):
    """The store for replicas on several machines: one Redis (``redis://host:6379/0``). A vote is one Lua script (the
    class, round, phase, choice and limits checked and the vote written in one step, as SQLite's transaction does);
    every key of a class expires ``ttl_s`` after its last round opened (EXPIRE, moved on at each new round)."""

    PREFIX = "te:class:"

    def __init__(self, url: str, limits: ClassLimits = ClassLimits(), clock: Callable[[], float] = time.time):
        import redis  # pinned in requirements.txt; only this backend needs it

        self.url, self.limits, self.clock = url, limits, clock
        self.r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self._vote = self.r.register_script(_VOTE_LUA)
        self._create, self._open = self.r.register_script(_CREATE_LUA), self.r.register_script(_OPEN_LUA)
        self._set = self.r.register_script(_SET_LUA)
        for name in ("create_class", "open_round", "set_phase", "show_votes", "vote", "tally", "reveal", "close",
                     "round_info", "shift", "rounds"):
            setattr(self, name, _guarded(getattr(self, name)))

    def _k(self, code, *parts) -> str:
        return self.PREFIX + ":".join([code, *map(str, parts)])

    def _class(self, code, secret=None, now=None):
        code = normalize_code(code)
        row = self.r.hmget(self._k(code), "secret", "active", "closed", "rounds")
        now = self.clock() if now is None else now
        if row[0] is None or row[1] is None or float(row[1]) < now - (
                self.limits.ttl_s if int(row[3] or 0) else self.limits.idle_s):
            raise ClassError(f"no class {code} is running (it may have ended or expired)")
        if secret is not None and not hmac.compare_digest(row[0], hash_secret(str(secret))):
            raise PermissionError("only the teacher who started this class can do that")
        if row[2] == "1":
            raise ClassError(f"class {code} has ended")
        return code

    def _round(self, c, round_id) -> dict:
        row = self.r.hmget(self._k(c, "r", int(round_id)), "question", "choices", "meta", "phase", "shown", "revealed",
                           "answer", "words")
        if row[0] is None:
            raise ClassError(f"class {c} has no round {round_id}")
        return {"question": row[0], "choices": tuple(json.loads(row[1])), "meta": json.loads(row[2]),
                "phase": int(row[3]), "shown": row[4] == "1", "revealed": row[5] == "1",
                "answer": json.loads(row[6]), "words": row[7]}

    def _hset_live(self, c, round_id, **fields):
        args = [x for k, v in fields.items() for x in (k, v)]
        if not self._set(keys=[self._k(c, "r", int(round_id))], args=args):
            raise ClassError(f"class {c} has no round {round_id} any more (it may have expired)")

    def _keys(self, c):
        n = int(self.r.hget(self._k(c), "rounds") or 0)
        ks = [self._k(c), self._k(c, "voters")]
        for i in range(1, n + 1):
            ks += [self._k(c, "r", i), self._k(c, "v", i, 1), self._k(c, "v", i, 2)]
        return ks

    def create_class(self):
        now = self.clock()
        live = self.PREFIX + "live"
        self.r.zremrangebyscore(live, "-inf", now - self.limits.ttl_s)
        for old in self.r.zrangebyscore(live, "-inf", now - self.limits.idle_s):  # idle: its key may have expired
            if not self.r.exists(self._k(old)):
                self.r.zrem(live, old)
        n = self.r.zcard(live)
        if n >= self.limits.classes:
            raise ClassError(f"this server runs {n} classes, its limit; try again when one has ended")
        while True:  # 2**40 codes: a collision is rare; the script writes the class only where none is
            code, secret = new_code(), secrets.token_urlsafe(24)
            if self._create(keys=[self._k(code)], args=[hash_secret(secret), now, int(self.limits.idle_s) + 1]):
                break
        self.r.zadd(live, {code: now})
        return code, secret

    def open_round(self, code, secret, question, choices, meta=None):
        q, cs = check_round(question, choices)
        m = check_meta(meta)
        now = self.clock()
        c = self._class(code, secret, now)
        rid = self._open(keys=[self._k(c), self._k(c, "r", "")], args=[self.limits.rounds, q, json.dumps(cs), m, now])
        if rid == -1:
            raise ClassError(f"a class holds at most {self.limits.rounds} rounds; start a new class")
        if rid < 0:
            raise ClassError(f"no class {c} is running (it may have ended or expired)")
        self.r.zadd(self.PREFIX + "live", {c: now})
        with self.r.pipeline() as p:  # relative, counted on this store's clock (a test's clock need not be Redis's)
            for k in self._keys(c):
                p.expire(k, int(self.limits.ttl_s) + 1)
            p.execute()
        return rid

    def set_phase(self, code, secret, round_id, phase):
        phase = check_phase(phase)
        c = self._class(code, secret)
        rd = self._round(c, round_id)
        if rd["revealed"]:
            raise ClassError("this round's answer is shown; open a new round")
        if phase < rd["phase"]:
            raise ClassError("vote 1 cannot open again once vote 2 has")
        self._hset_live(c, round_id, phase=phase, shown=int(rd["shown"] and phase == rd["phase"]))

    def show_votes(self, code, secret, round_id):
        c = self._class(code, secret)
        self._round(c, round_id)
        self._hset_live(c, round_id, shown=1)

    def vote(self, code, round_id, voter, choice, phase):
        voter, phase = check_voter(voter), check_phase(phase)
        c, rid = normalize_code(code), int(round_id)
        out = self._vote(keys=[self._k(c), self._k(c, "r", rid), self._k(c, "v", rid, phase), self._k(c, "voters")],
                         args=[voter, str(choice), phase, repr(self.clock()), self.limits.ttl_s, self.limits.students,
                               self.limits.votes_per_second])
        if out != "ok":
            raise ClassError({
                "noclass": f"no class {c} is running (it may have ended or expired)", "ended": f"class {c} has ended",
                "noround": f"class {c} has no round {rid}", "closed": "this vote is closed",
                "notyet": "vote 2 has not opened yet", "badchoice": "that is not one of this round's choices",
                "full": f"this class is full ({self.limits.students} students)",
                "rate": "too many votes at once; wait a second and vote again"}.get(out, out))

    def tally(self, code, secret, round_id, phase):
        phase = check_phase(phase)
        c = self._class(code, secret)
        return counts_of(self._round(c, round_id)["choices"], self.r.hvals(self._k(c, "v", int(round_id), phase)))

    def reveal(self, code, secret, round_id, answer, words=""):
        c = self._class(code, secret)
        if answer is not None and answer not in self._round(c, round_id)["choices"]:
            raise ClassError("the answer must be one of the round's choices")
        self._hset_live(c, round_id, revealed=1, answer=json.dumps(answer), words=str(words)[:MAX_TEXT])

    def close(self, code, secret):
        c = self._class(code, secret)
        self._set(keys=[self._k(c)], args=["closed", 1])  # only while the class's key lives (it keeps its expiry)
        self.r.zrem(self.PREFIX + "live", c)

    def round_info(self, code, round_id=None):
        c = self._class(code)
        rid = round_id if round_id is not None else int(self.r.hget(self._k(c), "rounds") or 0) or None
        if rid is None:
            return {"code": c, "round": None}
        rd = self._round(c, rid)
        v1, v2 = (self.r.hvals(self._k(c, "v", int(rid), p)) for p in (1, 2))
        return round_view(c, rid, rd, len(v1), len(v2),
                     lambda: {1: counts_of(rd["choices"], v1), 2: counts_of(rd["choices"], v2)})

    def shift(self, code, secret, round_id):
        c = self._class(code, secret)
        self._round(c, round_id)
        one, two = (self.r.hgetall(self._k(c, "v", int(round_id), p)) for p in (1, 2))
        out: dict[tuple[str, str], int] = {}
        for voter, a in one.items():
            if voter in two:
                out[(a, two[voter])] = out.get((a, two[voter]), 0) + 1
        return out

    def rounds(self, code, secret):
        c = self._class(code, secret)
        out = []
        for rid in range(1, int(self.r.hget(self._k(c), "rounds") or 0) + 1):
            rd = self._round(c, rid)
            out.append({"round": rid, "question": rd["question"], "choices": rd["choices"], "meta": rd["meta"],
                        "revealed": rd["revealed"], "answer": rd["answer"],
                        "vote1": counts_of(rd["choices"], self.r.hvals(self._k(c, "v", rid, 1))),
                        "vote2": counts_of(rd["choices"], self.r.hvals(self._k(c, "v", rid, 2)))})
        return out
