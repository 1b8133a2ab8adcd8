"""The embedded class store: one SQLite file in WAL mode, shared by the replicas of one machine (core.serve.classroom)."""
from __future__ import annotations

import hmac
import json
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Callable

from core.serve.class_rules import (MAX_TEXT, ClassError, ClassLimits, ClassStore, check_meta, check_phase,
                                    check_round, check_voter, counts_of, hash_secret, new_code, normalize_code,
                                    round_view)


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
        if secret is not None and not hmac.compare_digest(row[0], hash_secret(str(secret))):
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
                    db.execute("INSERT INTO classes VALUES (?, ?, ?, ?, 0)", (code, hash_secret(secret), now, now))
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
        phase = check_phase(phase)

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
        voter, phase = check_voter(voter), check_phase(phase)

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
        phase = check_phase(phase)

        def do(db):
            c = self._class(db, code, secret)
            return counts_of(self._round(db, c, round_id)["choices"], self._votes(db, c, round_id, phase))
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
            return round_view(c, rid, rd, len(v1), len(v2),
                         lambda: {1: counts_of(rd["choices"], v1), 2: counts_of(rd["choices"], v2)})
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
                            "vote1": counts_of(rd["choices"], self._votes(db, c, rid, 1)),
                            "vote2": counts_of(rd["choices"], self._votes(db, c, rid, 2))})
            return out
        return self._tx(do, write=False)
