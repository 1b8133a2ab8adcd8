"""Issue 44's store contract (core.serve.classroom), run on both backends: SQLite (a file in tmp_path) and a real
redis-server started here on a free port of 127.0.0.1 (skipped, with the reason, where none can start). Votes from
several processes at once, a repeated vote counted once, the secret, the phases, expiry and every limit."""
import multiprocessing as mp
import sqlite3
import shutil
import socket
import subprocess
import time
from collections import Counter

import pytest

from core.serve import classroom as C

CHOICES = ("L1 H1", "L1 H2", "L2 H1", "L2 H2")


class Clock:
    """A clock the test moves (expiry, the per-second vote limit)."""

    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install -r requirements.txt)")
    import redis

    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            if redis.Redis.from_url(url).ping():
                break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.skip("redis-server did not start on 127.0.0.1")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(params=["sqlite", "redis"])
def make(request, tmp_path):
    """make(limits=..., clock=...) -> a fresh store of the backend under test (an empty database each time)."""
    if request.param == "sqlite":
        def build(limits=C.ClassLimits(), clock=None):
            return C.SqliteStore(tmp_path / f"class-{time.monotonic_ns()}.sqlite", limits, clock or time.time)
    else:
        url = request.getfixturevalue("redis_url")
        import redis

        def build(limits=C.ClassLimits(), clock=None):
            redis.Redis.from_url(url).flushdb()
            return C.RedisStore(url, limits, clock or time.time)
    build.backend = request.param
    build.where = tmp_path if request.param == "sqlite" else None
    return build


def test_a_round_from_start_to_reveal(make):
    s = make()
    code, secret = s.create_class()
    assert len(code) == C.CODE_LEN and set(code) <= set(C.CODE_ALPHABET) and len(secret) >= 24
    rid = s.open_round(code, secret, "Which head copies?", CHOICES, meta={"step": "off", "model": "shakespeare-bpe"})
    for voter, choice in [("a", "L2 H2"), ("b", "L1 H1"), ("c", "L2 H2")]:
        s.vote(code, rid, voter, choice, 1)
    assert s.tally(code, secret, rid, 1) == {"L1 H1": 1, "L1 H2": 0, "L2 H1": 0, "L2 H2": 2}
    info = s.round_info(code)
    assert info["votes"] == {1: 3, 2: 0} and info["phase"] == 1 and info["meta"]["model"] == "shakespeare-bpe"
    assert info["counts"] is None and not info["shown"]  # the projector sees how many voted, not what
    s.show_votes(code, secret, rid)
    assert s.round_info(code)["counts"][1] == {"L1 H1": 1, "L1 H2": 0, "L2 H1": 0, "L2 H2": 2}
    with pytest.raises(C.ClassError, match="vote 2 has not opened"):
        s.vote(code, rid, "a", "L2 H2", 2)
    s.set_phase(code, secret, rid, 2)
    assert s.round_info(code)["counts"] is None  # vote 2 is not shown live while the room votes again
    with pytest.raises(C.ClassError, match="closed"):
        s.vote(code, rid, "d", "L2 H2", 1)  # vote 1 ended when vote 2 opened
    for voter, choice in [("a", "L2 H2"), ("b", "L2 H2"), ("c", "L1 H1")]:
        s.vote(code, rid, voter, choice, 2)
    assert s.tally(code, secret, rid, 2) == {"L1 H1": 1, "L1 H2": 0, "L2 H1": 0, "L2 H2": 2}
    assert s.shift(code, secret, rid) == {("L2 H2", "L2 H2"): 1, ("L1 H1", "L2 H2"): 1, ("L2 H2", "L1 H1"): 1}
    s.reveal(code, secret, rid, "L2 H2", words="L2 H2 off: +1.56 nats")
    info = s.round_info(code, rid)
    assert info["answer"] == "L2 H2" and info["revealed"] and info["words"] == "L2 H2 off: +1.56 nats"
    assert info["counts"][2] == {"L1 H1": 1, "L1 H2": 0, "L2 H1": 0, "L2 H2": 2}
    with pytest.raises(C.ClassError, match="closed"):
        s.vote(code, rid, "a", "L1 H1", 2)
    (row,) = s.rounds(code, secret)
    assert row["question"] == "Which head copies?" and row["answer"] == "L2 H2"
    assert row["vote1"]["L2 H2"] == 2 and row["vote2"]["L1 H1"] == 1
    s.close(code, secret)
    with pytest.raises(C.ClassError, match="ended"):
        s.vote(code, rid, "z", "L2 H2", 2)
    with pytest.raises(C.ClassError, match="ended"):
        s.round_info(code)


def test_a_round_revealed_without_a_single_answer(make):
    s = make()
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    assert s.round_info(code)["answer"] is None and not s.round_info(code)["revealed"]
    s.reveal(code, secret, rid, None, words="too close to call")
    info = s.round_info(code)
    assert info["revealed"] and info["answer"] is None and info["counts"] == {1: {"yes": 0, "no": 0},
                                                                              2: {"yes": 0, "no": 0}}
    with pytest.raises(C.ClassError, match="closed"):
        s.vote(code, rid, "a", "yes", 1)
    with pytest.raises(C.ClassError, match="plain data|at most"):
        s.open_round(code, secret, "q", ("yes", "no"), meta={"x": object()})
    with pytest.raises(C.ClassError, match="at most"):
        s.open_round(code, secret, "q", ("yes", "no"), meta={"x": "y" * 20_000})


def test_a_second_vote_in_a_phase_replaces_the_first(make):
    s = make()
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    s.vote(code, rid, "a", "yes", 1)
    s.vote(code, rid, "a", "no", 1)
    assert s.tally(code, secret, rid, 1) == {"yes": 0, "no": 1}


def test_only_the_secret_runs_the_class_and_nothing_changes_without_it(make):
    s = make()
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    s.vote(code, rid, "a", "yes", 1)
    other_code, other_secret = s.create_class()
    for wrong in ("", "guess", other_secret, secret + "x"):
        for call in (lambda: s.open_round(code, wrong, "q2", ("a", "b")), lambda: s.set_phase(code, wrong, rid, 2),
                     lambda: s.tally(code, wrong, rid, 1), lambda: s.reveal(code, wrong, rid, "yes"),
                     lambda: s.show_votes(code, wrong, rid),
                     lambda: s.close(code, wrong), lambda: s.shift(code, wrong, rid), lambda: s.rounds(code, wrong)):
            with pytest.raises(PermissionError):
                call()
    info = s.round_info(code)
    assert info["round"] == rid and info["phase"] == 1 and not info["revealed"] and not info["shown"]  # nothing moved
    assert s.tally(code, secret, rid, 1) == {"yes": 1, "no": 0}


@pytest.mark.parametrize("bad", ["", "ABC", "12345678", "K7M2QX9P!", None, "k7m2 qx9p-x"])
def test_a_code_that_cannot_be_one_is_refused_in_words(make, bad):
    s = make()
    with pytest.raises(C.ClassError, match="class code is"):
        s.vote(bad, 1, "a", "yes", 1)


def test_codes_are_random_and_a_typed_code_is_forgiving(make):
    s = make()
    codes = [s.create_class()[0] for _ in range(30)]
    assert len(set(codes)) == 30
    # not sequential: neighbours share few symbols at the same place (a counter would share most)
    same = sum(a == b for x, y in zip(codes, codes[1:]) for a, b in zip(x, y))
    assert same < 0.25 * C.CODE_LEN * 29
    assert len(C.CODE_ALPHABET) ** C.CODE_LEN >= 2 ** 30
    code = codes[0]
    assert C.normalize_code(" " + code[:4].lower() + "-" + code[4:] + " ") == code
    assert s.round_info(code.lower())["round"] is None


@pytest.mark.parametrize("question, choices, says", [
    ("", ("a", "b"), "needs a question"), ("q", ("a",), "2 to 12 choices"), ("q", tuple("abcdefghijklm"), "2 to 12"),
    ("q", ("a", "a"), "differ"), ("q", ("a", " "), "written"), ("q" * 3000, ("a", "b"), "at most")])
def test_a_bad_round_is_refused_before_anything_is_stored(make, question, choices, says):
    s = make()
    code, secret = s.create_class()
    with pytest.raises(C.ClassError, match=says):
        s.open_round(code, secret, question, choices)
    assert s.round_info(code)["round"] is None


def test_a_vote_is_one_of_the_rounds_choices_and_nothing_else(make):
    s = make()
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    for bad in ("maybe", "", "YES", "<script>", "yes " * 50):
        with pytest.raises(C.ClassError, match="not one of this round's choices"):
            s.vote(code, rid, "a", bad, 1)
    for phase in (0, 3, "1", True):
        with pytest.raises(C.ClassError, match="phase 1 or 2"):
            s.vote(code, rid, "a", "yes", phase)
    with pytest.raises(C.ClassError, match="no round 9"):
        s.vote(code, 9, "a", "yes", 1)
    with pytest.raises(C.ClassError, match="the answer must be one"):
        s.reveal(code, secret, rid, "maybe")
    assert s.tally(code, secret, rid, 1) == {"yes": 0, "no": 0}


def test_a_class_expires_twelve_hours_after_its_last_round(make):
    clock = Clock()
    s = make(clock=clock)
    code, secret = s.create_class()
    clock.t += 50 * 60
    rid = s.open_round(code, secret, "q", ("yes", "no"))  # the last round: the clock starts again here
    clock.t += 11 * 3600
    s.vote(code, rid, "a", "yes", 1)  # 11 h after its last round: still on
    clock.t += 1.5 * 3600
    with pytest.raises(C.ClassError, match="no class"):
        s.vote(code, rid, "b", "yes", 1)
    with pytest.raises(C.ClassError, match="no class"):
        s.tally(code, secret, rid, 1)


def test_a_class_with_no_round_expires_after_an_hour_and_frees_its_place(make):
    clock = Clock()
    s = make(C.ClassLimits(classes=1), clock)
    code, secret = s.create_class()
    clock.t += 50 * 60
    assert s.round_info(code)["round"] is None  # 50 minutes: still there
    clock.t += 11 * 60
    with pytest.raises(C.ClassError, match="no class"):
        s.round_info(code)
    if make.backend == "redis":  # the key's own expiry is real time; the test clock moved on without it
        import redis
        redis.Redis.from_url(s.url).delete(C.RedisStore.PREFIX + code)
    s.create_class()  # the idle class no longer counts against the limit


def test_the_limits_each_say_what_they_are(make):
    clock = Clock()
    s = make(C.ClassLimits(classes=2, students=3, rounds=2, votes_per_second=2), clock)
    code, secret = s.create_class()
    s.create_class()
    with pytest.raises(C.ClassError, match="runs 2 classes"):
        s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    s.open_round(code, secret, "q2", ("yes", "no"))
    with pytest.raises(C.ClassError, match="at most 2 rounds"):
        s.open_round(code, secret, "q3", ("yes", "no"))
    for v in "abc":
        s.vote(code, rid, v, "yes", 1)
    with pytest.raises(C.ClassError, match="full \\(3 students\\)"):
        s.vote(code, rid, "d", "yes", 1)
    s.vote(code, rid, "a", "no", 1)  # the second vote of a within one second: allowed (2 a second)
    with pytest.raises(C.ClassError, match="too many votes"):
        s.vote(code, rid, "a", "yes", 1)
    assert s.tally(code, secret, rid, 1) == {"yes": 2, "no": 1}  # the refused vote changed nothing
    clock.t += 1.0
    s.vote(code, rid, "a", "yes", 1)
    assert s.tally(code, secret, rid, 1) == {"yes": 3, "no": 0}
    s.close(code, secret)
    s.create_class()  # a closed class frees its place


def _voter(args):
    kind, where, code, rid, first, n = args
    s = C.SqliteStore(where) if kind == "sqlite" else C.RedisStore(where)
    for i in range(first, first + n):
        s.vote(code, rid, f"student-{i}", CHOICES[i % len(CHOICES)], 1)
        s.vote(code, rid, f"student-{i}", CHOICES[(i + 1) % len(CHOICES)], 1)  # changes their mind: counted once
    return n


@pytest.mark.slow
def test_votes_from_several_processes_at_once_are_all_counted_once(make, tmp_path):
    s = make()
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "Which head?", CHOICES)
    where = s.path if make.backend == "sqlite" else s.url
    jobs = [(make.backend, where, code, rid, 100 * k, 60) for k in range(4)]
    with mp.get_context("spawn").Pool(4) as pool:
        assert sum(pool.map(_voter, jobs)) == 240
    want = Counter(CHOICES[(i + 1) % len(CHOICES)] for k in range(4) for i in range(100 * k, 100 * k + 60))
    assert s.tally(code, secret, rid, 1) == {c: want[c] for c in CHOICES}
    assert s.round_info(code)["votes"][1] == 240


def test_redis_keys_expire_with_their_class(redis_url):
    """Every key of a class carries an expiry no later than the class's own (real Redis time, not a test clock), and a
    reader never sees a round count without its round."""
    import redis

    s = C.RedisStore(redis_url, C.ClassLimits(ttl_s=30))
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    s.vote(code, rid, "a", "yes", 1)
    s.show_votes(code, secret, rid)
    keys = r.keys(C.RedisStore.PREFIX + code + "*")
    assert len(keys) >= 4 and all(0 < r.ttl(k) <= 31 for k in keys), {k: r.ttl(k) for k in keys}
    r.delete(s._k(code, "r", rid))  # the round's key gone (expired): writes to it are refused, none recreates it
    with pytest.raises(C.ClassError, match="no round"):
        s.show_votes(code, secret, rid)
    assert not r.exists(s._k(code, "r", rid))


def test_a_store_that_cannot_be_reached_is_a_class_error(tmp_path):
    pytest.importorskip("redis")
    s = C.RedisStore("redis://127.0.0.1:1/0")  # nothing listens on port 1
    with pytest.raises(C.ClassError, match="cannot be reached"):
        s.create_class()
    bad = tmp_path / "folder-not-file"
    bad.mkdir()
    with pytest.raises((C.ClassError, sqlite3.Error, OSError)):
        C.SqliteStore(bad)


def test_store_from_env_picks_the_backend(tmp_path, monkeypatch):
    s = C.store_from_env({"TE_CLASS_STORE": str(tmp_path / "x.sqlite")})
    assert isinstance(s, C.SqliteStore) and s.path == tmp_path / "x.sqlite"
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path / "models"))
    s = C.store_from_env({})
    assert isinstance(s, C.SqliteStore) and s.path == tmp_path / "classroom.sqlite"  # beside the models folder
    pytest.importorskip("redis")
    r = C.store_from_env({"TE_CLASS_STORE": "redis://127.0.0.1:1/0"})  # connects lazily: no server needed here
    assert isinstance(r, C.RedisStore)


def test_sqlite_keeps_a_committed_vote_when_the_process_dies(tmp_path):
    """A vote is committed before vote() returns: a process killed right after loses nothing."""
    path = tmp_path / "c.sqlite"
    s = C.SqliteStore(path)
    code, secret = s.create_class()
    rid = s.open_round(code, secret, "q", ("yes", "no"))
    script = ("import os, sys; from core.serve.classroom import SqliteStore; s = SqliteStore(sys.argv[1]); "
              "s.vote(sys.argv[2], int(sys.argv[3]), 'a', 'no', 1); os._exit(9)")  # no clean shutdown at all
    import sys
    from conftest import ROOT
    rc = subprocess.run([sys.executable, "-c", script, str(path), code, str(rid)], cwd=ROOT).returncode
    assert rc == 9
    assert C.SqliteStore(path).tally(code, secret, rid, 1) == {"yes": 0, "no": 1}
