"""A class in the room (issue 44): the votes of a peer-instruction round, kept where every replica sees them.

One interface, ``ClassStore``, two backends that pass the same contract tests (tests/test_classroom_store.py):
``SqliteStore(path)`` (embedded, WAL mode, one file beside the models folder: correct across the replicas of one
machine) and ``RedisStore(url)`` (replicas on several machines; ``TE_CLASS_STORE=redis://host:6379/0``).
``store_from_env()`` picks one.

A class: ``create_class() -> (code, secret)``. The code is what students type (8 symbols of 32: 40 random bits, never
sequential); the secret alone runs the class, and only its SHA-256 is stored. A round: ``open_round`` (phase 1, vote
1), ``set_phase(..., 2)`` (discuss, vote again), ``reveal`` (the model's answer; voting ends). ``vote`` takes one of the
round's choices in the round's open phase; a second vote of the same voter in one phase replaces the first. A vote is
committed before ``vote`` returns, so a page that says "recorded" after it never loses one. A class expires
``ttl_s`` (12 h) after its last round opened (or after it was created, with none yet).

Every refusal is a ``ClassError`` (a ValueError) whose message can be shown as it is; a wrong secret is a
``PermissionError``. Nothing identifies a student but the ``voter`` string the caller passes (a random session id, or
a nickname the student chose).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

STORE_ENV = "TE_CLASS_STORE"
CODE_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # 32 symbols, no 0/O or 1/I: read off a projector
CODE_LEN = 8                                          # 32**8 = 2**40 codes
MIN_CHOICES, MAX_CHOICES = 2, 12  # a Lesson step may name up to 12 (8 heads, say); the page asks 2-6 of its own
MAX_TEXT = 2000                                       # a question's characters; a choice's: MAX_CHOICE
MAX_CHOICE = 200
MAX_VOTER = 64


class ClassError(ValueError):
    """A refusal in words (unknown or expired class, a limit, a choice that is not the round's, a closed phase)."""


@dataclass(frozen=True)
class ClassLimits:
    classes: int = 200            # open classes per server (store)
    students: int = 500           # distinct voters per class
    rounds: int = 100             # rounds per class
    votes_per_second: float = 4   # per voter and class: a burst above it is refused
    ttl_s: float = 12 * 3600      # a class expires this long after its last round opened
    idle_s: float = 3600          # ... and a class with no round yet this long after it was started (a tab left open)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def normalize_code(code) -> str:
    """What a student typed, as a code: upper case, spaces and dashes dropped; a ClassError if it cannot be one."""
    c = "".join(str(code or "").split()).replace("-", "").upper()
    if len(c) != CODE_LEN or any(ch not in CODE_ALPHABET for ch in c):
        raise ClassError(f"a class code is {CODE_LEN} letters and digits, such as K7M2 QX9P; that is not one")
    return c


def check_round(question, choices) -> tuple[str, tuple[str, ...]]:
    """A round's question and its 2-12 distinct, non-empty choices, or a ClassError that says what is wrong."""
    q = str(question or "").strip()
    if not q:
        raise ClassError("a round needs a question")
    if len(q) > MAX_TEXT:
        raise ClassError(f"the question is {len(q):,} characters; at most {MAX_TEXT:,}")
    cs = tuple(str(c).strip() for c in (choices or ()))
    if not MIN_CHOICES <= len(cs) <= MAX_CHOICES:
        raise ClassError(f"a round has {MIN_CHOICES} to {MAX_CHOICES} choices (got {len(cs)})")
    if any(not c for c in cs) or len(set(cs)) != len(cs):
        raise ClassError("each choice must be written and differ from the others")
    if any(len(c) > MAX_CHOICE for c in cs):
        raise ClassError(f"a choice is at most {MAX_CHOICE} characters")
    return q, cs


def _check_voter(voter) -> str:
    v = str(voter or "")
    if not v or len(v) > MAX_VOTER:
        raise ClassError(f"a voter is named by 1 to {MAX_VOTER} characters")
    return v


def _check_phase(phase) -> int:
    if phase not in (1, 2) or isinstance(phase, bool):
        raise ClassError(f"a vote is in phase 1 or 2 (got {phase!r})")
    return int(phase)


class ClassStore:
    """The interface (names are contracts: issue 44). Backends implement the underscored primitives' semantics."""

    limits: ClassLimits

    def create_class(self) -> tuple[str, str]:
        raise NotImplementedError

    def open_round(self, code, secret, question, choices, meta=None) -> int:
        """A new round in phase 1 (its id: 1, 2, ...). ``meta``: a small JSON-able dict every participant reads with
        the round (what the Class page needs to draw the question: a Lesson step's text, model and prompt)."""
        raise NotImplementedError

    def show_votes(self, code, secret, round_id) -> None:
        """Let every participant (the projector) see the round's counts per choice, not only how many voted."""
        raise NotImplementedError

    def set_phase(self, code, secret, round_id, phase) -> None:
        """Open vote 2 ("discuss and vote again"): vote 1 is closed from then on."""
        raise NotImplementedError

    def vote(self, code, round_id, voter, choice, phase) -> None:
        raise NotImplementedError

    def tally(self, code, secret, round_id, phase) -> dict[str, int]:
        raise NotImplementedError

    def reveal(self, code, secret, round_id, answer, words: str = "") -> None:
        """The model's answer (one of the choices, or None when it gives no single one) and its numbers in words;
        voting ends and every participant sees the counts."""
        raise NotImplementedError

    def close(self, code, secret) -> None:
        raise NotImplementedError

    def round_info(self, code, round_id=None) -> dict:
        """What any participant may see of a round (the latest when ``round_id`` is None): question, choices, meta,
        phase, how many voted in each phase, ``revealed`` with the answer and its words, and ``counts`` per choice in
        each phase once the teacher showed the votes or revealed the answer (None before)."""
        raise NotImplementedError

    def shift(self, code, secret, round_id) -> dict[tuple[str, str], int]:
        """Voters who voted in both phases: {(vote 1, vote 2): count}."""
        raise NotImplementedError

    def rounds(self, code, secret) -> list[dict]:
        """Every round of the class, for the teacher's CSV: question, choices, counts per choice in each vote, answer."""
        raise NotImplementedError


MAX_META = 16_384  # characters of a round's meta, as JSON


def check_meta(meta) -> str:
    try:
        text = json.dumps(meta or {})
    except (TypeError, ValueError) as e:
        raise ClassError(f"a round's details must be plain data: {e}") from None
    if len(text) > MAX_META:
        raise ClassError(f"a round's details are {len(text):,} characters as JSON; at most {MAX_META:,}")
    return text


def _info(code, rid, rd, n1, n2, counts) -> dict:
    """round_info's answer from a round's fields (rd: question, choices, meta, phase, shown, revealed, answer, words)."""
    return {"code": code, "round": int(rid), "question": rd["question"], "choices": rd["choices"], "meta": rd["meta"],
            "phase": rd["phase"], "votes": {1: n1, 2: n2}, "shown": rd["shown"] or rd["revealed"],
            "revealed": rd["revealed"], "answer": rd["answer"], "words": rd["words"],
            "counts": counts() if rd["shown"] or rd["revealed"] else None}


def _counts(choices, votes) -> dict[str, int]:
    out = {c: 0 for c in choices}
    for c in votes:
        if c in out:
            out[c] += 1
    return out


class SqliteStore(ClassStore):
    """The embedded store: one SQLite file in WAL mode, one connection per call (safe across threads and processes;
    ``BEGIN IMMEDIATE`` serialises the writers, so a limit is checked and a vote written as one step)."""

    def __init__(self, path, limits: ClassLimits = ClassLimits(), clock: Callable[[], float] = time.time):
        self.path, self.limits, self.clock = Path(path), limits, clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = self._db()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript("""
                CREATE TABLE IF NOT EXISTS classes (code TEXT PRIMARY KEY, secret TEXT NOT NULL, created REAL NOT NULL,
                    active REAL NOT NULL, closed INTEGER NOT NULL DEFAULT 0);
                CREATE TABLE IF NOT EXISTS rounds (code TEXT NOT NULL, id INTEGER NOT NULL, question TEXT NOT NULL,
                    choices TEXT NOT NULL, meta TEXT NOT NULL, phase INTEGER NOT NULL, shown INTEGER NOT NULL,
                    revealed INTEGER NOT NULL, answer TEXT, words TEXT NOT NULL, PRIMARY KEY (code, id));
                CREATE TABLE IF NOT EXISTS votes (code TEXT NOT NULL, id INTEGER NOT NULL, voter TEXT NOT NULL,
                    phase INTEGER NOT NULL, choice TEXT NOT NULL, PRIMARY KEY (code, id, voter, phase));
                CREATE TABLE IF NOT EXISTS voters (code TEXT NOT NULL, voter TEXT NOT NULL, window REAL NOT NULL,
                    n INTEGER NOT NULL, PRIMARY KEY (code, voter));
            """)
        finally:
            db.close()

    def _db(self) -> sqlite3.Connection:
        # autocommit mode: _tx opens and ends each transaction itself; the timeout waits out another writer's
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed vote survives the process being killed
        return db

    def _tx(self, fn, write: bool = True):
        """``fn(db)`` in one transaction: IMMEDIATE for a write (the writers queue, so a check and its write are one
        step), a plain deferred one for a read (readers never wait for the write lock under WAL)."""
        try:
            db = self._db()
        except sqlite3.Error as e:
            raise ClassError(f"the class store cannot be opened ({e})") from None
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                out = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out
        except sqlite3.Error as e:
            raise ClassError(f"the class store could not be read or written ({e}); try again") from None
        finally:
            db.close()

    def _purge(self, db, now):
        old = [r[0] for r in db.execute(
            "SELECT code FROM classes c WHERE active < ? OR (active < ? AND NOT EXISTS "
            "(SELECT 1 FROM rounds r WHERE r.code = c.code))", (now - self.limits.ttl_s, now - self.limits.idle_s))]
        for code in old:
            for table in ("votes", "voters", "rounds", "classes"):
                db.execute(f"DELETE FROM {table} WHERE code = ?", (code,))

    def _class(self, db, code, secret=None, now=None):
        code = normalize_code(code)
        row = db.execute("SELECT secret, active, closed, (SELECT COUNT(*) FROM rounds r WHERE r.code = classes.code) "
                         "FROM classes WHERE code = ?", (code,)).fetchone()
        now = self.clock() if now is None else now
        if row is None or row[1] < now - (self.limits.ttl_s if row[3] else self.limits.idle_s):
            raise ClassError(f"no class {code} is running (it may have ended or expired)")
        if secret is not None and not hmac.compare_digest(row[0], _hash(str(secret))):
            raise PermissionError("only the teacher who started this class can do that")
        if row[2]:
            raise ClassError(f"class {code} has ended")
        return code

    def _round(self, db, code, round_id) -> dict:
        row = db.execute("SELECT question, choices, meta, phase, shown, revealed, answer, words FROM rounds "
                         "WHERE code = ? AND id = ?", (code, int(round_id))).fetchone()
        if row is None:
            raise ClassError(f"class {code} has no round {round_id}")
        return {"question": row[0], "choices": tuple(json.loads(row[1])), "meta": json.loads(row[2]),
                "phase": row[3], "shown": bool(row[4]), "revealed": bool(row[5]), "answer": row[6], "words": row[7]}

    def _set(self, db, code, round_id, **fields):
        cols = ", ".join(f"{k} = ?" for k in fields)  # the names are this module's own, never the caller's
        db.execute(f"UPDATE rounds SET {cols} WHERE code = ? AND id = ?", (*fields.values(), code, int(round_id)))

    def create_class(self):
        def do(db):
            now = self.clock()
            self._purge(db, now)
            (n,) = db.execute("SELECT COUNT(*) FROM classes WHERE closed = 0").fetchone()
            if n >= self.limits.classes:
                raise ClassError(f"this server runs {n} classes, its limit; try again when one has ended")
            while True:
                code, secret = new_code(), secrets.token_urlsafe(24)
                try:
                    db.execute("INSERT INTO classes VALUES (?, ?, ?, ?, 0)", (code, _hash(secret), now, now))
                    return code, secret
                except sqlite3.IntegrityError:  # 2**40 codes: a collision is rare, not impossible
                    continue
        return self._tx(do)

    def open_round(self, code, secret, question, choices, meta=None):
        q, cs = check_round(question, choices)
        m = check_meta(meta)

        def do(db):
            now = self.clock()
            c = self._class(db, code, secret, now)
            (n,) = db.execute("SELECT COUNT(*) FROM rounds WHERE code = ?", (c,)).fetchone()
            if n >= self.limits.rounds:
                raise ClassError(f"a class holds at most {self.limits.rounds} rounds; start a new class")
            db.execute("INSERT INTO rounds VALUES (?, ?, ?, ?, ?, 1, 0, 0, NULL, '')", (c, n + 1, q, json.dumps(cs), m))
            db.execute("UPDATE classes SET active = ? WHERE code = ?", (now, c))
            return n + 1
        return self._tx(do)

    def set_phase(self, code, secret, round_id, phase):
        phase = _check_phase(phase)

        def do(db):
            c = self._class(db, code, secret)
            rd = self._round(db, c, round_id)
            if rd["revealed"]:
                raise ClassError("this round's answer is shown; open a new round")
            if phase < rd["phase"]:
                raise ClassError("vote 1 cannot open again once vote 2 has")
            # the counts shown of vote 1 must not show vote 2 live while the room votes again: shown again on request
            self._set(db, c, round_id, phase=phase, shown=int(rd["shown"] and phase == rd["phase"]))
        self._tx(do)

    def show_votes(self, code, secret, round_id):
        def do(db):
            c = self._class(db, code, secret)
            self._round(db, c, round_id)
            self._set(db, c, round_id, shown=1)
        self._tx(do)

    def vote(self, code, round_id, voter, choice, phase):
        voter, phase = _check_voter(voter), _check_phase(phase)

        def do(db):
            now = self.clock()
            c = self._class(db, code, None, now)
            rd = self._round(db, c, round_id)
            if rd["revealed"] or phase != rd["phase"]:
                raise ClassError("this vote is closed" if rd["revealed"] or phase < rd["phase"]
                                 else "vote 2 has not opened yet")
            if choice not in rd["choices"]:
                raise ClassError("that is not one of this round's choices")
            row = db.execute("SELECT window, n FROM voters WHERE code = ? AND voter = ?", (c, voter)).fetchone()
            if row is None:
                (n,) = db.execute("SELECT COUNT(*) FROM voters WHERE code = ?", (c,)).fetchone()
                if n >= self.limits.students:
                    raise ClassError(f"this class is full ({self.limits.students} students)")
                db.execute("INSERT INTO voters VALUES (?, ?, ?, 1)", (c, voter, now))
            elif now - row[0] >= 1.0:
                db.execute("UPDATE voters SET window = ?, n = 1 WHERE code = ? AND voter = ?", (now, c, voter))
            elif row[1] >= self.limits.votes_per_second:
                raise ClassError("too many votes at once; wait a second and vote again")
            else:
                db.execute("UPDATE voters SET n = n + 1 WHERE code = ? AND voter = ?", (c, voter))
            db.execute("INSERT OR REPLACE INTO votes VALUES (?, ?, ?, ?, ?)", (c, int(round_id), voter, phase, choice))
        self._tx(do)

    def _votes(self, db, c, round_id, phase):
        return [r[0] for r in db.execute("SELECT choice FROM votes WHERE code = ? AND id = ? AND phase = ?",
                                         (c, int(round_id), phase))]

    def tally(self, code, secret, round_id, phase):
        phase = _check_phase(phase)

        def do(db):
            c = self._class(db, code, secret)
            return _counts(self._round(db, c, round_id)["choices"], self._votes(db, c, round_id, phase))
        return self._tx(do, write=False)

    def reveal(self, code, secret, round_id, answer, words=""):
        def do(db):
            c = self._class(db, code, secret)
            if answer is not None and answer not in self._round(db, c, round_id)["choices"]:
                raise ClassError("the answer must be one of the round's choices")
            self._set(db, c, round_id, revealed=1, answer=answer, words=str(words)[:MAX_TEXT])
        self._tx(do)

    def close(self, code, secret):
        def do(db):
            c = self._class(db, code, secret)
            db.execute("UPDATE classes SET closed = 1 WHERE code = ?", (c,))
        self._tx(do)

    def round_info(self, code, round_id=None):
        def do(db):
            c = self._class(db, code)
            rid = round_id
            if rid is None:
                (rid,) = db.execute("SELECT MAX(id) FROM rounds WHERE code = ?", (c,)).fetchone()
                if rid is None:
                    return {"code": c, "round": None}
            rd = self._round(db, c, rid)
            v1, v2 = (self._votes(db, c, rid, p) for p in (1, 2))
            return _info(c, rid, rd, len(v1), len(v2),
                         lambda: {1: _counts(rd["choices"], v1), 2: _counts(rd["choices"], v2)})
        return self._tx(do, write=False)

    def shift(self, code, secret, round_id):
        def do(db):
            c = self._class(db, code, secret)
            self._round(db, c, round_id)
            rows = db.execute("SELECT a.choice, b.choice FROM votes a JOIN votes b ON a.code = b.code AND a.id = b.id "
                              "AND a.voter = b.voter WHERE a.code = ? AND a.id = ? AND a.phase = 1 AND b.phase = 2",
                              (c, int(round_id))).fetchall()
            out: dict[tuple[str, str], int] = {}
            for pair in rows:
                out[tuple(pair)] = out.get(tuple(pair), 0) + 1
            return out
        return self._tx(do, write=False)

    def rounds(self, code, secret):
        def do(db):
            c = self._class(db, code, secret)
            (n,) = db.execute("SELECT COUNT(*) FROM rounds WHERE code = ?", (c,)).fetchone()
            out = []
            for rid in range(1, n + 1):
                rd = self._round(db, c, rid)
                out.append({"round": rid, "question": rd["question"], "choices": rd["choices"], "meta": rd["meta"],
                            "revealed": rd["revealed"], "answer": rd["answer"],
                            "vote1": _counts(rd["choices"], self._votes(db, c, rid, 1)),
                            "vote2": _counts(rd["choices"], self._votes(db, c, rid, 2))})
            return out
        return self._tx(do, write=False)


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
        if secret is not None and not hmac.compare_digest(row[0], _hash(str(secret))):
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
            if self._create(keys=[self._k(code)], args=[_hash(secret), now, int(self.limits.idle_s) + 1]):
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
        phase = _check_phase(phase)
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
        voter, phase = _check_voter(voter), _check_phase(phase)
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
        phase = _check_phase(phase)
        c = self._class(code, secret)
        return _counts(self._round(c, round_id)["choices"], self.r.hvals(self._k(c, "v", int(round_id), phase)))

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
        return _info(c, rid, rd, len(v1), len(v2),
                     lambda: {1: _counts(rd["choices"], v1), 2: _counts(rd["choices"], v2)})

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
                        "vote1": _counts(rd["choices"], self.r.hvals(self._k(c, "v", rid, 1))),
                        "vote2": _counts(rd["choices"], self.r.hvals(self._k(c, "v", rid, 2)))})
        return out


def default_sqlite_path() -> Path:
    """classroom.sqlite beside the models folder (core.serve.paths): what a deployment keeps as a volume."""
    from core.serve.paths import user_models_dir

    return user_models_dir().parent / "classroom.sqlite"


def store_from_env(environ=None) -> ClassStore:
    """TE_CLASS_STORE: unset or a file path -> SqliteStore; redis://host:port/db -> RedisStore."""
    value = (os.environ if environ is None else environ).get(STORE_ENV, "").strip()
    if value.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(value)
    return SqliteStore(Path(value).expanduser() if value else default_sqlite_path())


# ----------------------------------------------------------------------------- what a round comes to
def round_summary(choices, vote1: dict, vote2: dict, answer) -> dict:
    """How many voted in each phase and, where the model gave one answer, the share right in each: {"n1", "n2",
    "right1", "right2"} (shares None when nobody voted in that phase or there is no single answer)."""
    n1, n2 = sum(vote1.values()), sum(vote2.values())
    share = lambda votes, n: None if answer is None or n == 0 else votes.get(answer, 0) / n  # noqa: E731
    return {"n1": n1, "n2": n2, "right1": share(vote1, n1), "right2": share(vote2, n2)}


SHIFT_ROW = "vote 1 ↓ · vote 2 →"  # the row labels' column: a name no choice of 2 to 200 plain characters is likely to take


def shift_rows(choices, shift: dict) -> list[dict]:
    """The shift between the votes as rows (one per vote-1 choice, a column per vote-2 choice): a 2-D table."""
    return [{SHIFT_ROW: a, **{b: shift.get((a, b), 0) for b in choices}} for a in choices]


CSV_FIELDS = ("round", "question", "kind", "model", "prompt", "choice", "vote 1", "vote 2", "model's answer")


def rounds_csv(rounds: list[dict]) -> str:
    """The teacher's download: one line per round and choice (counts in each vote), the model's answer on each."""
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(CSV_FIELDS)
    for r in rounds:
        meta = r.get("meta") or {}
        answer = r["answer"] if r.get("revealed") else ""
        for c in r["choices"]:
            w.writerow([r["round"], r["question"], meta.get("kind", "free"), meta.get("model", ""),
                        meta.get("prompt", ""), c, r["vote1"].get(c, 0), r["vote2"].get(c, 0),
                        "" if answer is None else answer])
    return out.getvalue()
