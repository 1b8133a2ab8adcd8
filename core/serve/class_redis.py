"""The class store for replicas on several machines: one Redis server (core.serve.classroom).

Every write is one Lua script (the class, its secret, the round and the limits checked and the write made in one step,
as SQLite's transactions do), so two teacher actions or two votes never interleave between a check and its write."""
from __future__ import annotations

import functools
import json
import secrets
import time
from typing import Callable

from core.serve.class_rules import (MAX_WORDS, PUBLIC, ClassError, ClassLimits, ClassStore, StoreUnavailable,
                                    check_meta, check_phase, check_round, check_voter, client_key,
                                    counts_of, freed_in, gone, hash_secret, new_code, normalize_code, round_view,
                                    wait_words)

# the class's checks, shared by every script: running (within its life), the secret (ARGV hash '' = a participant),
# not ended. KEYS[1] is the class's hash.
_CLASS_LUA = """
local function class_ok(now, ttl, idle, hash)
  local c = redis.call('HMGET', KEYS[1], 'secret', 'active', 'closed', 'rounds')
  if not c[1] or not c[2] then return 'noclass' end
  local life = idle
  if tonumber(c[4] or '0') > 0 then life = ttl end
  if tonumber(c[2]) < now - life then return 'noclass' end
  if hash ~= '' and c[1] ~= hash then return 'denied' end
  if c[3] == '1' then return 'ended' end
  return nil
end
"""

# KEYS: class, round, votes of (round, phase), voters, joins of this client. ARGV: voter, choice, phase, now, ttl,
# students, votes a second, idle, client ('' = none), new voters a minute
_VOTE_LUA = _CLASS_LUA + """
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local bad = class_ok(now, ttl, tonumber(ARGV[8]), '')
if bad then return {bad} end
local r = redis.call('HMGET', KEYS[2], 'choices', 'phase', 'revealed')
if not r[1] then return {'noround'} end
local p, ph = tonumber(ARGV[3]), tonumber(r[2])
if r[3] == '1' or p < ph then return {'closed'} end
if p > ph then return {'notyet'} end
local ok = false
for _, c in ipairs(cjson.decode(r[1])) do if c == ARGV[2] then ok = true end end
if not ok then return {'badchoice'} end
local w = redis.call('HGET', KEYS[4], ARGV[1])
if not w then
  if redis.call('HGET', KEYS[1], 'locked') == '1' then return {'locked'} end
  if redis.call('HLEN', KEYS[4]) >= tonumber(ARGV[6]) then return {'full'} end
  if ARGV[9] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - 60)
    local n = redis.call('ZCARD', KEYS[5])
    if n >= tonumber(ARGV[10]) then
      local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
      return {'rate', tostring(n), first[2]}
    end
    redis.call('ZADD', KEYS[5], now, ARGV[1])
    redis.call('EXPIRE', KEYS[5], 120)
  end
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[4] .. ' 1')
else
  local sep = string.find(w, ' ')
  local win, n = tonumber(string.sub(w, 1, sep - 1)), tonumber(string.sub(w, sep + 1))
  if now - win >= 1 then redis.call('HSET', KEYS[4], ARGV[1], ARGV[4] .. ' 1')
  elseif n >= tonumber(ARGV[7]) then return {'rate1'}
  else redis.call('HSET', KEYS[4], ARGV[1], string.sub(w, 1, sep - 1) .. ' ' .. tostring(n + 1)) end
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
local left = redis.call('TTL', KEYS[1])
if left > 0 then
  redis.call('EXPIRE', KEYS[3], left)
  redis.call('EXPIRE', KEYS[4], left)
end
return {'ok'}
"""

# KEYS: class, live classes (zset code -> when it expires), this client's places (zset code -> when its place frees),
# classes started a minute, this client's starts (zset code -> when). ARGV: now, idle, classes, per client, new a
# minute, secret hash, client ('' = the teacher key), code, place_s
_CREATE_LUA = """
local now, idle, place = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[9])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n = redis.call('ZCARD', KEYS[2])
if n >= tonumber(ARGV[3]) then return {'full', tostring(n), redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]} end
if ARGV[7] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local m = redis.call('ZCARD', KEYS[3])
  if m >= tonumber(ARGV[4]) then return {'mine', tostring(m), redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]} end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - place)
  local s = redis.call('ZCARD', KEYS[5])
  if s >= tonumber(ARGV[4]) then
    return {'starts', tostring(s), tostring(tonumber(redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]) + place)}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 60)
  local k = redis.call('ZCARD', KEYS[4])
  if k >= tonumber(ARGV[5]) then
    return {'minute', tostring(k), tostring(tonumber(redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')[2]) + 60)}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'secret', ARGV[6], 'created', ARGV[1], 'active', ARGV[1], 'closed', 0, 'rounds', 0,
           'client', ARGV[7], 'locked', 0)
redis.call('EXPIRE', KEYS[1], math.floor(idle) + 1)
redis.call('ZADD', KEYS[2], now + idle, ARGV[8])
if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[3], now + place, ARGV[8])
  redis.call('EXPIRE', KEYS[3], 86400)
  redis.call('ZADD', KEYS[5], now, ARGV[8])
  redis.call('EXPIRE', KEYS[5], math.floor(place) + 1)
  redis.call('ZADD', KEYS[4], now, ARGV[8])
  redis.call('EXPIRE', KEYS[4], 120)
end
return {'ok'}
"""

# a new round in one step: the class checked, the count and the round's fields together (no reader sees a count
# without its round), the class's life moved on. KEYS: class, round-key prefix, live classes. ARGV: now, ttl, idle,
# hash, rounds limit, question, choices, meta, owner-zset prefix, code, the class's key prefix
_OPEN_LUA = _CLASS_LUA + """
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = class_ok(now, ttl, tonumber(ARGV[3]), ARGV[4])
if bad then return {bad} end
local n = tonumber(redis.call('HGET', KEYS[1], 'rounds') or '0')
if n >= tonumber(ARGV[5]) then return {'rounds'} end
local key = KEYS[2] .. tostring(n + 1)
redis.call('HSET', key, 'question', ARGV[6], 'choices', ARGV[7], 'meta', ARGV[8], 'phase', 1, 'shown', 0,
           'revealed', 0, 'answer', 'null', 'words', '')
redis.call('HSET', KEYS[1], 'rounds', n + 1, 'active', ARGV[1])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[10])
local client = redis.call('HGET', KEYS[1], 'client') or ''
if client ~= '' then
  redis.call('ZADD', ARGV[9] .. client, now + ttl, ARGV[10])
  redis.call('EXPIRE', ARGV[9] .. client, math.floor(ttl) + 1)
end
-- every key of the class lives ttl from now, set here in the same step (a dropped connection after the script must
-- not leave a round that never expires). Relative: counted on this store's clock, which a test's need not share.
local life = math.floor(ttl) + 1
redis.call('EXPIRE', KEYS[1], life)
redis.call('EXPIRE', ARGV[11] .. 'voters', life)
for i = 1, n + 1 do
  redis.call('EXPIRE', KEYS[2] .. tostring(i), life)
  redis.call('EXPIRE', ARGV[11] .. 'v:' .. tostring(i) .. ':1', life)
  redis.call('EXPIRE', ARGV[11] .. 'v:' .. tostring(i) .. ':2', life)
end
return {'ok', tostring(n + 1)}
"""

# a teacher's action on a class or its round, checked and written in one step. KEYS: class, round, live classes.
# ARGV: action, now, ttl, idle, hash, owner-zset prefix, code, then the action's own
_TEACH_LUA = _CLASS_LUA + """
local act, now = ARGV[1], tonumber(ARGV[2])
local bad = class_ok(now, tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
if bad then return {bad} end
if act == 'check' then return {'ok'} end
if act == 'lock' then redis.call('HSET', KEYS[1], 'locked', ARGV[8]) return {'ok'} end
if act == 'close' then
  redis.call('HSET', KEYS[1], 'closed', 1)
  redis.call('ZREM', KEYS[3], ARGV[7])
  local client = redis.call('HGET', KEYS[1], 'client') or ''
  if client ~= '' then redis.call('ZREM', ARGV[6] .. client, ARGV[7]) end
  return {'ok'}
end
local r = redis.call('HMGET', KEYS[2], 'choices', 'phase', 'shown', 'revealed')
if not r[1] then return {'noround'} end
if act == 'show' then redis.call('HSET', KEYS[2], 'shown', 1) return {'ok'} end
if act == 'phase' then
  local p, cur = tonumber(ARGV[8]), tonumber(r[2])
  if r[4] == '1' then return {'phaseshown'} end
  if p < cur then return {'backwards'} end
  local shown = 0
  if r[3] == '1' and p == cur then shown = 1 end
  redis.call('HSET', KEYS[2], 'phase', p, 'shown', shown)
  return {'ok'}
end
if act == 'reveal' then
  if r[4] == '1' then return {'already'} end
  if ARGV[8] ~= 'null' then
    local ok, want = false, cjson.decode(ARGV[8])
    for _, c in ipairs(cjson.decode(r[1])) do if c == want then ok = true end end
    if not ok then return {'badanswer'} end
  end
  redis.call('HSET', KEYS[2], 'revealed', 1, 'answer', ARGV[8], 'words', ARGV[9])
  return {'ok'}
end
return {'unknown'}
"""


def _guarded(fn):
    """A RedisStore method whose connection errors reach the page as a StoreUnavailable in words."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        import redis  # local: optional dependency, only the Redis class store needs it

        try:
            return fn(self, *args, **kwargs)
        except redis.exceptions.RedisError as e:
            raise StoreUnavailable(f"the class store (Redis at {self.where}) is down or cannot be reached "
                                   f"({type(e).__name__}); votes already recorded stay in Redis. Try again in a "
                                   "moment") from None
    return call


class RedisStore(ClassStore):
    """The store for replicas on several machines: one Redis (``redis://host:6379/0``). Each key of a class expires
    with it (EXPIRE, moved on at each new round); ``te:class:live`` lists the live classes by when they expire."""

    PREFIX = "te:class:"

    def __init__(self, url: str, limits: ClassLimits = ClassLimits(), clock: Callable[[], float] = time.time):
        # local: optional dependency, only the Redis class store needs it
        import redis  # pinned in requirements.txt; only this backend needs it

        self.url, self.limits, self.clock = url, limits, clock
        self.where = url.split("@")[-1].split("//")[-1]  # host:port/db, never a password
        self.r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self._vote, self._create = self.r.register_script(_VOTE_LUA), self.r.register_script(_CREATE_LUA)
        self._open, self._teach = self.r.register_script(_OPEN_LUA), self.r.register_script(_TEACH_LUA)
        self.reset_at: float | None = None   # when this process saw Redis come back without its data
        self._epoch: str | None = None       # the mark this process saw in Redis (te:class:epoch)

    def _k(self, code, *parts) -> str:
        return self.PREFIX + ":".join([code, *map(str, parts)])

    def _hash(self, secret) -> str:
        # None, "" or a non-string: a hash no class has, so the script answers 'denied' once the class is found
        return hash_secret(secret) if isinstance(secret, str) and secret else "!"

    def _watch_epoch(self) -> None:
        """A mark kept in Redis: gone or changed means Redis restarted without its data (no AOF, no snapshot)."""
        key = self.PREFIX + "epoch"
        self.r.set(key, secrets.token_hex(8), nx=True)
        now = self.r.get(key)
        if self._epoch is not None and now != self._epoch:
            self.reset_at = self.clock()
        self._epoch = now

    def _fail(self, out, c, rid=None):
        """The scripts' refusals in words."""
        what = out[0]
        if what == "noclass":
            self._watch_epoch()
            recent = self.reset_at is not None and self.clock() - self.reset_at < self.limits.ttl_s
            raise gone(c, self.reset_at if recent else None, "Redis restarted without keeping its data")
        if what == "denied":
            raise PermissionError("only the teacher who started this class can do that")
        if what == "rate":
            raise ClassError(f"{out[1]} new students joined this class from your network in the last minute, the "
                             f"most a minute; your choice is kept: press Vote again "
                             f"{wait_words(float(out[2]) + 60 - self.clock())}")
        raise ClassError({
            "ended": f"class {c} has ended", "noround": f"class {c} has no round {rid}", "closed": "this vote is closed",
            "notyet": "vote 2 has not opened yet", "badchoice": "that is not one of this round's choices",
            "full": f"this class is full ({self.limits.students} students)",
            "locked": "the teacher has locked joining: only students who voted before may vote now",
            "rate1": "too many votes at once; wait a second and vote again",
            "rounds": f"a class holds at most {self.limits.rounds} rounds; start a new class",
            "phaseshown": "this round's answer is shown; open a new round",
            "backwards": "vote 1 cannot open again once vote 2 has",
            "already": "this round's answer is already shown; open a new round to ask again",
            "badanswer": "the answer must be one of the round's choices"}.get(what, what))

    def _teacher(self, action, code, secret, round_id=0, *extra):
        c = normalize_code(code)
        out = self._teach(keys=[self._k(c), self._k(c, "r", int(round_id)), self.PREFIX + "live"],
                          args=[action, repr(self.clock()), self.limits.ttl_s, self.limits.idle_s, self._hash(secret),
                                self.PREFIX + "owner:", c, *extra])
        if out[0] != "ok":
            self._fail(out, c, round_id)

    def _class(self, code, secret=PUBLIC):
        """A participant's or teacher's read: the class running (and the secret its teacher's)."""
        c = normalize_code(code)
        if self._epoch is None:
            self._watch_epoch()
        if secret is PUBLIC:
            row = self.r.hmget(self._k(c), "active", "rounds", "closed")
            life = self.limits.ttl_s if int(row[1] or 0) else self.limits.idle_s
            if row[0] is None or float(row[0]) < self.clock() - life:
                self._fail(["noclass"], c)
            if row[2] == "1":
                raise ClassError(f"class {c} has ended")
        else:
            self._teacher("check", c, secret)
        return c

    def _round(self, c, round_id) -> dict:
        row = self.r.hmget(self._k(c, "r", int(round_id)), "question", "choices", "meta", "phase", "shown", "revealed",
                           "answer", "words")
        if row[0] is None:
            raise ClassError(f"class {c} has no round {round_id}")
        return {"question": row[0], "choices": tuple(json.loads(row[1])), "meta": json.loads(row[2]),
                "phase": int(row[3]), "shown": row[4] == "1", "revealed": row[5] == "1",
                "answer": json.loads(row[6]), "words": row[7]}

    @_guarded
    def durability(self):
        import redis  # local: optional dependency, only the Redis class store needs it

        try:
            aof = self.r.config_get("appendonly").get("appendonly")
            save = self.r.config_get("save").get("save")
        except redis.exceptions.ResponseError:  # CONFIG renamed or refused (a managed Redis): cannot tell
            return None
        if aof == "yes" or (save or "").strip():
            return None
        return (f"The class store (Redis at {self.where}) keeps votes in memory only: they survive a restart of this "
                "app's replicas, but not a restart of Redis itself. Run Redis with appendonly yes (deploy/compose.yaml "
                "does) to keep them.")

    @_guarded
    def create_class(self, client=None):
        now, who = self.clock(), client_key(client) or ""
        self._watch_epoch()
        while True:  # 2**40 codes: a collision is rare; the script writes the class only where none is
            code, secret = new_code(), secrets.token_urlsafe(24)
            out = self._create(keys=[self._k(code), self.PREFIX + "live", self.PREFIX + "owner:" + (who or "-"),
                                     self.PREFIX + "started", self.PREFIX + "starts:" + (who or "-")],
                               args=[repr(now), self.limits.idle_s, self.limits.classes, self.limits.per_client,
                                     self.limits.new_per_minute, hash_secret(secret), who, code, self.limits.place_s])
            if out[0] == "ok":
                return code, secret
            if out[0] == "full":
                raise ClassError(f"this server runs {out[1]} classes, its limit; a place frees "
                                 f"{freed_in([float(out[2])], now)}, or sooner when one ends")
            if out[0] == "mine":
                raise ClassError(
                    f"{out[1]} classes already run from your address, the most without the teacher key; a place frees "
                    f"{freed_in([float(out[2])], now)} (a class with no question holds its place "
                    f"{self.limits.place_s / 60:.0f} minutes), or at once when you end one")
            if out[0] == "starts":
                raise ClassError(f"{out[1]} classes were started from your address in the last "
                                 f"{self.limits.place_s / 60:.0f} minutes, the most without the teacher key; try "
                                 f"again {wait_words(float(out[2]) - now)}")
            if out[0] == "minute":
                raise ClassError(f"{out[1]} classes were started on this server in the last minute, the most without "
                                 f"the teacher key; try again {wait_words(float(out[2]) - now)}")

    @_guarded
    def is_teacher(self, code, secret):
        try:
            self._class(code, secret)
            return True
        except PermissionError:
            return False

    @_guarded
    def lock_joining(self, code, secret, locked=True):
        self._teacher("lock", code, secret, 0, int(bool(locked)))

    @_guarded
    def close(self, code, secret):
        self._teacher("close", code, secret)

    @_guarded
    def open_round(self, code, secret, question, choices, meta=None):
        q, cs = check_round(question, choices)
        m = check_meta(meta)
        now, c = self.clock(), normalize_code(code)
        out = self._open(keys=[self._k(c), self._k(c, "r", ""), self.PREFIX + "live"],
                         args=[repr(now), self.limits.ttl_s, self.limits.idle_s, self._hash(secret), self.limits.rounds,
                               q, json.dumps(cs), m, self.PREFIX + "owner:", c, self._k(c, "")])
        if out[0] != "ok":
            self._fail(out, c)
        return int(out[1])

    @_guarded
    def set_phase(self, code, secret, round_id, phase):
        self._teacher("phase", code, secret, round_id, check_phase(phase))

    @_guarded
    def show_votes(self, code, secret, round_id):
        self._teacher("show", code, secret, round_id)

    @_guarded
    def reveal(self, code, secret, round_id, answer, words=""):
        self._teacher("reveal", code, secret, round_id, json.dumps(answer), str(words)[:MAX_WORDS])

    @_guarded
    def vote(self, code, round_id, voter, choice, phase, client=None):
        voter, phase = check_voter(voter), check_phase(phase)
        c, rid, who = normalize_code(code), int(round_id), client_key(client) or ""
        out = self._vote(keys=[self._k(c), self._k(c, "r", rid), self._k(c, "v", rid, phase), self._k(c, "voters"),
                               self._k(c, "joins", who or "-")],
                         args=[voter, str(choice), phase, repr(self.clock()), self.limits.ttl_s, self.limits.students,
                               self.limits.votes_per_second, self.limits.idle_s, who,
                               self.limits.new_voters_per_minute])
        if out[0] != "ok":
            self._fail(out, c, rid)

    @_guarded
    def tally(self, code, secret, round_id, phase):
        phase = check_phase(phase)
        c = self._class(code, secret)
        return counts_of(self._round(c, round_id)["choices"], self.r.hvals(self._k(c, "v", int(round_id), phase)))

    @_guarded
    def round_info(self, code, round_id=None):
        c = self._class(code)
        joined, locked = self.r.hlen(self._k(c, "voters")), self.r.hget(self._k(c), "locked") == "1"
        rid = round_id if round_id is not None else int(self.r.hget(self._k(c), "rounds") or 0) or None
        if rid is None:
            return {"code": c, "round": None, "joined": joined, "locked": locked}
        rd = self._round(c, rid)
        v1, v2 = (self.r.hvals(self._k(c, "v", int(rid), p)) for p in (1, 2))
        return round_view(c, rid, rd, len(v1), len(v2),
                          lambda: {1: counts_of(rd["choices"], v1), 2: counts_of(rd["choices"], v2)}, joined, locked)

    @_guarded
    def shift(self, code, secret, round_id):
        c = self._class(code, secret)
        self._round(c, round_id)
        one, two = (self.r.hgetall(self._k(c, "v", int(round_id), p)) for p in (1, 2))
        out: dict[tuple[str, str], int] = {}
        for voter, a in one.items():
            if voter in two:
                out[(a, two[voter])] = out.get((a, two[voter]), 0) + 1
        return out

    @_guarded
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
