"""The embedded class store: one SQLite file in WAL mode, shared by the replicas of one machine (core.serve.classroom)."""
from __future__ import annotations

import json
import logging
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from core.serve.class_rules import (MAX_WORDS, PUBLIC, ClassError, ClassLimits, ClassStore, StoreUnavailable,
                                    check_meta, check_phase, check_round, check_secret, check_voter, client_key,
                                    counts_of, freed_in, gone, hash_secret, new_code, normalize_code, round_view,
                                    wait_words)

# A class's rows in every table carry its code. votes: one row per voter, round and vote (1 or 2), a later
# choice replacing the earlier (INSERT OR REPLACE), so a count is a row count. voters: window and n are a one-second
# rate window per voter (votes_per_second). meta: one row, 'id', the random mark that tells this file from one made
# afresh in its place (_same_store)
SCHEMA = """
    CREATE TABLE IF NOT EXISTS classes (code TEXT PRIMARY KEY, secret TEXT NOT NULL, created REAL NOT NULL,
        active REAL NOT NULL, closed INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE IF NOT EXISTS rounds (code TEXT NOT NULL, id INTEGER NOT NULL, question TEXT NOT NULL,
        choices TEXT NOT NULL, meta TEXT NOT NULL, phase INTEGER NOT NULL, shown INTEGER NOT NULL,
        revealed INTEGER NOT NULL, answer TEXT, words TEXT NOT NULL, PRIMARY KEY (code, id));
    CREATE TABLE IF NOT EXISTS votes (code TEXT NOT NULL, id INTEGER NOT NULL, voter TEXT NOT NULL,
        phase INTEGER NOT NULL, choice TEXT NOT NULL, PRIMARY KEY (code, id, voter, phase));
    CREATE TABLE IF NOT EXISTS voters (code TEXT NOT NULL, voter TEXT NOT NULL, window REAL NOT NULL,
        n INTEGER NOT NULL, PRIMARY KEY (code, voter));
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# columns added after the first release (issue 54): a store file written before them gains them on open
ADDED = (("classes", "client", "TEXT"), ("classes", "locked", "INTEGER NOT NULL DEFAULT 0"),
         ("voters", "client", "TEXT"), ("voters", "joined", "REAL NOT NULL DEFAULT 0"))


def _unusable(path: Path, e: Exception) -> StoreUnavailable:
    """Why the store's file cannot be used, and what to do, in words (the Class page shows this to everyone, so it
    names the file, not the server's folders: the full path goes to the server's log)."""
    logging.getLogger(__name__).warning("class store %s cannot be used: %s", path, e)
    msg, path = str(e).lower(), _shown(path)
    fix = ("Move it aside or delete it (the classes in it are lost), or set TE_CLASS_STORE to another file's path, "
           "then reload the Class page; every other page works meanwhile")
    if "readonly" in msg or "read-only" in msg or isinstance(e, PermissionError):
        return StoreUnavailable(f"the class store {path} cannot be written (it or its folder is read-only). Give the "
                                "server write access to both, or set TE_CLASS_STORE to a writable file's path, then "
                                "reload the Class page; every other page works meanwhile")
    if "not a database" in msg or "malformed" in msg or "encrypted" in msg:
        return StoreUnavailable(f"the class store {path} is not a readable SQLite database (damaged, or another "
                                f"file under its name). {fix}")
    return StoreUnavailable(f"the class store {path} cannot be opened ({e}). {fix}")


def _shown(path: Path) -> str:
    return f"'{path.name}' (TE_CLASS_STORE, or beside the models folder by default)"


class SqliteStore(ClassStore):
    """The embedded store: one SQLite file in WAL mode, one connection per call (safe across threads and processes;
    ``BEGIN IMMEDIATE`` serialises the writers, so a limit is checked and a vote written as one step)."""

    def __init__(self, path, limits: ClassLimits = ClassLimits(), clock: Callable[[], float] = time.time):
        self.path, self.limits, self.clock = Path(path), limits, clock
        self.reset_at: float | None = None  # when this process found the file gone or replaced, and made a fresh one
        self._lock = threading.Lock()
        self._id = self._init()

    # ------------------------------------------------------------------ the file: opened, checked, made afresh
    def _init(self) -> str:
        """Make or open the store's file and prove it can be written; the store's id (a random mark written when the
        file was made: a file deleted and made again has another, even on the same inode) or a StoreUnavailable."""
        p = self.path
        if p.is_dir():
            raise StoreUnavailable(f"the class store {_shown(p)} is a folder, not a file. Move it aside, or set "
                                   "TE_CLASS_STORE to a file's path, then reload the Class page; every other page "
                                   "works meanwhile")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreUnavailable(f"the folder of the class store {_shown(p)} cannot be made ({e.strerror or e}). "
                                   "Set TE_CLASS_STORE to a file in a folder the server can write, then reload the "
                                   "Class page; every other page works meanwhile") from None
        try:
            db = self._db()
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
                for table, col, decl in ADDED:
                    if col not in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
                # a write at open: a read-only file or folder is found now, not at the first vote
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT OR IGNORE INTO meta VALUES ('id', ?)", (secrets.token_hex(8),))
                (mark,) = db.execute("SELECT value FROM meta WHERE key = 'id'").fetchone()
                db.execute("COMMIT")
            finally:
                db.close()
        except (sqlite3.Error, OSError) as e:
            raise _unusable(p, e) from None
        return mark

    def _renew(self):
        """The file was deleted or replaced while serving: a fresh store, and the time, so that a class that is no
        longer found is said to be lost to the reset rather than to have expired."""
        with self._lock:
            if not self.path.exists():
                for tail in ("-wal", "-shm"):  # a log left by the old file would be replayed into the new one
                    Path(f"{self.path}{tail}").unlink(missing_ok=True)
            self._id = self._init()
            self.reset_at = self.clock()

    def _same_store(self, db) -> bool:
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'id'").fetchone()
        except sqlite3.OperationalError:  # no such table: an empty file made in the old one's place
            return False
        return row is not None and row[0] == self._id

    def _db(self) -> sqlite3.Connection:
        # autocommit mode: _tx opens and ends each transaction itself; the timeout waits out another writer's
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed vote survives the process being killed
        return db

    def _tx(self, fn, write: bool = True):
        """``fn(db)`` in one transaction: IMMEDIATE for a write (the writers queue, so a check and its write are one
        step), a plain deferred one for a read (readers never wait for the write lock under WAL)."""
        if not self.path.exists():
            self._renew()
        try:
            db = self._db()
        except sqlite3.Error as e:
            raise _unusable(self.path, e) from None
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            if not self._same_store(db):  # another replica made the file afresh: this one learns of the reset
                db.execute("ROLLBACK")
                self._renew()
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                out = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out
        except sqlite3.Error as e:
            if "readonly" in str(e).lower() or "not a database" in str(e).lower() or "malformed" in str(e).lower():
                raise _unusable(self.path, e) from None
            raise ClassError(f"the class store could not be read or written ({e}); try again") from None
        finally:
            db.close()

    # ------------------------------------------------------------------ rules every call shares
    # A class lives ttl_s after its last activity once it has a round, idle_s before (a class that never asked
    # anything frees its place sooner); the two ? take (ttl_s, idle_s) in that order
    def _expiry_sql(self) -> str:
        return "c.active + CASE WHEN EXISTS (SELECT 1 FROM rounds r WHERE r.code = c.code) THEN ? ELSE ? END"

    # Expired classes are deleted only when a class is made (no background thread, and a read never writes);
    # until then _class treats one past its time as gone
    def _purge(self, db, now):
        old = [r[0] for r in db.execute(f"SELECT code FROM classes c WHERE {self._expiry_sql()} < ?",
                                        (self.limits.ttl_s, self.limits.idle_s, now))]
        for code in old:
            for table in ("votes", "voters", "rounds", "classes"):
                db.execute(f"DELETE FROM {table} WHERE code = ?", (code,))

    def _class(self, db, code, secret=PUBLIC, now=None) -> str:
        code = normalize_code(code)
        row = db.execute("SELECT secret, active, closed, (SELECT COUNT(*) FROM rounds r WHERE r.code = classes.code) "
                         "FROM classes WHERE code = ?", (code,)).fetchone()
        now = self.clock() if now is None else now
        if row is None or row[1] < now - (self.limits.ttl_s if row[3] else self.limits.idle_s):
            raise gone(code, self._reset(), "its file was deleted or replaced")
        # PUBLIC: a student's call, which names the class by its code alone
        if secret is not PUBLIC:
            check_secret(row[0], secret)
        if row[2]:
            raise ClassError(f"class {code} has ended")
        return code

    def _round(self, db, code, round_id) -> dict:
        row = db.execute("SELECT question, choices, meta, phase, shown, revealed, answer, words FROM rounds "
                         "WHERE code = ? AND id = ?", (code, int(round_id))).fetchone()
        if row is None:
            raise ClassError(f"class {code} has no round {round_id}")
        # choices and meta are stored as JSON text (SQLite has no list type)
        return {"question": row[0], "choices": tuple(json.loads(row[1])), "meta": json.loads(row[2]),
                "phase": row[3], "shown": bool(row[4]), "revealed": bool(row[5]), "answer": row[6], "words": row[7]}

    def _set(self, db, code, round_id, **fields):
        cols = ", ".join(f"{k} = ?" for k in fields)  # the names are this module's own, never the caller's
        db.execute(f"UPDATE rounds SET {cols} WHERE code = ? AND id = ?", (*fields.values(), code, int(round_id)))

    # ------------------------------------------------------------------ a class
    def create_class(self, client=None):
        def do(db):
            now = self.clock()
            self._purge(db, now)
            live = db.execute(f"SELECT client, {self._expiry_sql()} FROM classes c WHERE closed = 0",
                              (self.limits.ttl_s, self.limits.idle_s)).fetchall()
            if len(live) >= self.limits.classes:
                raise ClassError(f"this server runs {len(live)} classes, its limit; a place frees "
                                 f"{freed_in([x[1] for x in live], now)}, or sooner when one ends")
            who = client_key(client)
            # no client: the teacher key's holder, exempt from the per-address limits
            if who is not None:
                self._address_places(db, who, now)
                recent = [r[0] for r in db.execute("SELECT created FROM classes WHERE client IS NOT NULL AND "
                                                   "created > ?", (now - 60,))]
                if len(recent) >= self.limits.new_per_minute:
                    raise ClassError(f"{len(recent)} classes were started on this server in the last minute, the "
                                     f"most without the teacher key; try again {wait_words(min(recent) + 60 - now)}")
            while True:
                code, secret = new_code(), secrets.token_urlsafe(24)
                try:
                    db.execute("INSERT INTO classes (code, secret, created, active, closed, client, locked) "
                               "VALUES (?, ?, ?, ?, 0, ?, 0)", (code, hash_secret(secret), now, now, who))
                    return code, secret
                except sqlite3.IntegrityError:  # 2**40 codes: a collision is rare, not impossible
                    continue
        return self._tx(do)

    def _address_places(self, db, who, now):
        """A keyless address: at most ``per_client`` live classes (one with no round holds its place ``place_s``) and
        at most ``per_client`` starts in ``place_s``, ended ones included (or start-and-end in a loop would take the
        server's new classes a minute from everyone)."""
        lim = self.limits
        rows = db.execute(f"SELECT created, closed, EXISTS (SELECT 1 FROM rounds r WHERE r.code = c.code), "
                          f"{self._expiry_sql()} FROM classes c WHERE client = ?", (lim.ttl_s, lim.idle_s, who))
        rows = rows.fetchall()
        live = [end if asked else start + lim.place_s for start, closed, asked, end in rows
                if not closed and (asked or start > now - lim.place_s)]
        if len(live) >= lim.per_client:
            raise ClassError(f"{len(live)} classes already run from your address, the most without the teacher key; "
                             f"a place frees {freed_in(live, now)} (a class with no question holds its place "
                             f"{lim.place_s / 60:.0f} minutes), or at once when you end one")
        starts = [r[0] for r in rows if r[0] > now - lim.place_s]
        if len(starts) >= lim.per_client:
            raise ClassError(f"{len(starts)} classes were started from your address in the last "
                             f"{lim.place_s / 60:.0f} minutes, the most without the teacher key; try again "
                             f"{wait_words(min(starts) + lim.place_s - now)}")

    def _reset(self):
        # a reset is named only while a class from before it could still have been running
        return self.reset_at if self.reset_at is not None and self.clock() - self.reset_at < self.limits.ttl_s else None

    def is_teacher(self, code, secret):
        def do(db):
            try:
                self._class(db, code, secret)
                return True
            except PermissionError:
                return False
        return self._tx(do, write=False)

    def lock_joining(self, code, secret, locked=True):
        def do(db):
            c = self._class(db, code, secret)
            db.execute("UPDATE classes SET locked = ? WHERE code = ?", (int(bool(locked)), c))
        self._tx(do)

    def close(self, code, secret):
        def do(db):
            c = self._class(db, code, secret)
            db.execute("UPDATE classes SET closed = 1 WHERE code = ?", (c,))
        self._tx(do)

    # ------------------------------------------------------------------ a round
    def open_round(self, code, secret, question, choices, meta=None):
        q, cs = check_round(question, choices)
        m = check_meta(meta)

        def do(db):
            now = self.clock()
            c = self._class(db, code, secret, now)
            (n,) = db.execute("SELECT COUNT(*) FROM rounds WHERE code = ?", (c,)).fetchone()
            if n >= self.limits.rounds:
                raise ClassError(f"a class holds at most {self.limits.rounds} rounds; start a new class")
            # ids count from 1 in the order opened and rounds are never deleted singly, so COUNT + 1 is the next id
            # (under BEGIN IMMEDIATE, two opens cannot take the same one); a question also restarts the class's clock
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

    def reveal(self, code, secret, round_id, answer, words=""):
        def do(db):
            c = self._class(db, code, secret)
            rd = self._round(db, c, round_id)
            if rd["revealed"]:
                raise ClassError("this round's answer is already shown; open a new round to ask again")
            if answer is not None and answer not in rd["choices"]:
                raise ClassError("the answer must be one of the round's choices")
            self._set(db, c, round_id, revealed=1, answer=answer, words=str(words)[:MAX_WORDS])
        self._tx(do)

    def vote(self, code, round_id, voter, choice, phase, client=None):
        voter, phase = check_voter(voter), check_phase(phase)

        def do(db):
            now = self.clock()
            c = self._class(db, code, PUBLIC, now)
            rd = self._round(db, c, round_id)
            if rd["revealed"] or phase != rd["phase"]:
                raise ClassError("this vote is closed" if rd["revealed"] or phase < rd["phase"]
                                 else "vote 2 has not opened yet")
            if choice not in rd["choices"]:
                raise ClassError("that is not one of this round's choices")
            # the rate limit: window is when this voter's current second began, n the votes in it
            row = db.execute("SELECT window, n FROM voters WHERE code = ? AND voter = ?", (c, voter)).fetchone()
            if row is None:
                self._admit(db, c, client, now)
                db.execute("INSERT INTO voters (code, voter, window, n, client, joined) VALUES (?, ?, ?, 1, ?, ?)",
                           (c, voter, now, client_key(client), now))
            elif now - row[0] >= 1.0:
                db.execute("UPDATE voters SET window = ?, n = 1 WHERE code = ? AND voter = ?", (now, c, voter))
            elif row[1] >= self.limits.votes_per_second:
                raise ClassError("too many votes at once; wait a second and vote again")
            else:
                db.execute("UPDATE voters SET n = n + 1 WHERE code = ? AND voter = ?", (c, voter))
            db.execute("INSERT OR REPLACE INTO votes VALUES (?, ?, ?, ?, ?)", (c, int(round_id), voter, phase, choice))
        self._tx(do)

    def _admit(self, db, c, client, now):
        """A voter new to class ``c``: refused while joining is locked, when the class is full, or when ``client``
        brought ``new_voters_per_minute`` new voters in the last minute (one browser starting fresh in a loop)."""
        if db.execute("SELECT locked FROM classes WHERE code = ?", (c,)).fetchone()[0]:
            raise ClassError("the teacher has locked joining: only students who voted before may vote now")
        (n,) = db.execute("SELECT COUNT(*) FROM voters WHERE code = ?", (c,)).fetchone()
        if n >= self.limits.students:
            raise ClassError(f"this class is full ({self.limits.students} students)")
        if client is None:
            return
        recent = [r[0] for r in db.execute("SELECT joined FROM voters WHERE code = ? AND client = ? AND joined > ?",
                                           (c, client_key(client), now - 60))]
        if len(recent) >= self.limits.new_voters_per_minute:
            raise ClassError(f"{len(recent)} new students joined this class from your network in the last minute, "
                             f"the most a minute; your choice is kept: press Vote again "
                             f"{wait_words(min(recent) + 60 - now)}")

    # ------------------------------------------------------------------ reading
    def _votes(self, db, c, round_id, phase):
        return [r[0] for r in db.execute("SELECT choice FROM votes WHERE code = ? AND id = ? AND phase = ?",
                                         (c, int(round_id), phase))]

    def tally(self, code, secret, round_id, phase):
        phase = check_phase(phase)

        def do(db):
            c = self._class(db, code, secret)
            return counts_of(self._round(db, c, round_id)["choices"], self._votes(db, c, round_id, phase))
        return self._tx(do, write=False)

    def round_info(self, code, round_id=None):
        def do(db):
            c = self._class(db, code)
            (joined,) = db.execute("SELECT COUNT(*) FROM voters WHERE code = ?", (c,)).fetchone()
            (locked,) = db.execute("SELECT locked FROM classes WHERE code = ?", (c,)).fetchone()
            rid = round_id
            if rid is None:
                (rid,) = db.execute("SELECT MAX(id) FROM rounds WHERE code = ?", (c,)).fetchone()
                if rid is None:
                    return {"code": c, "round": None, "joined": joined, "locked": bool(locked)}
            rd = self._round(db, c, rid)
            v1, v2 = (self._votes(db, c, rid, p) for p in (1, 2))
            return round_view(c, rid, rd, len(v1), len(v2),
                              lambda: {1: counts_of(rd["choices"], v1), 2: counts_of(rd["choices"], v2)},
                              joined, locked)
        return self._tx(do, write=False)

    def shift(self, code, secret, round_id):
        def do(db):
            c = self._class(db, code, secret)
            self._round(db, c, round_id)
            # each voter's (vote 1, vote 2) pair: the self-join meets a voter's two rows of one round
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
