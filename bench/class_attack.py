"""One client against the Class page at full speed (issue 54, section 5): what it gets, and whether a real student
still votes afterwards.

    python -m bench.class_attack [--seconds 60] [--new-voters 20] [--json]

Starts one ``streamlit run app.py`` on a free port, with its own TE_MODELS_DIR and TE_CLASS_STORE (SQLite) in a temp
folder, no TE_TEACHER_KEY, TE_CLASS_NEW_VOTERS_PER_MINUTE=``--new-voters`` (low, so that the cap is what is
measured) and TE_TRUSTED_PROXY=127.0.0.1: the bench stands in for the balancer, and every handshake carries the
X-Forwarded-For a balancer would add, the attacker's address or the real student's. Then, one after the other:

(a) for ``--seconds``, a fresh session each time (no cookie, as a script keeps none) presses *Start a class*; the
    classes created are counted in the store's file (must be <= 3, the most per address without the key);
(b) for ``--seconds``, in a class the bench opened through the store, a fresh session each time with no cookie votes;
    the voters added are the store's "joined" (must be <= ``--new-voters``);
(c) a real student, a browser with its own cookie from another address, votes once: it must read "Recorded".
Exit status 0 when all three hold.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import deploy.client as client  # noqa: E402
from bench.class_load import _widget, alerts, browser, recorded, start_replica, xsrf_cookie  # noqa: E402
from core.serve.class_rules import ClassLimits  # noqa: E402
from core.serve.class_sqlite import SqliteStore  # noqa: E402
from deploy.replicas import _healthy, free_port  # noqa: E402

ATTACKER, STUDENT = "203.0.113.66", "198.51.100.7"  # documentation addresses (RFC 5737): two networks
CLASSES_PER_ADDRESS = ClassLimits().per_client  # live classes one address may run without the key (3)
CHOICES = ("up", "down", "same")


class ServerDidNotStart(RuntimeError):
    """streamlit could not serve at all (tests skip on it; a broken page is a failure, not this)."""


def tab(url: str, address: str, xsrf: str = ""):
    """A browser tab reaching the server through the balancer, which put ``address`` in X-Forwarded-For.
    deploy.client.Session sends no headers but the cookie, so its websocket connect is wrapped for this one
    handshake (the bench is one thread: nothing else connects meanwhile)."""
    real = client.connect

    def connect(*a, additional_headers=None, **kw):
        return real(*a, additional_headers={**(additional_headers or {}), "X-Forwarded-For": address}, **kw)
    with mock.patch.object(client, "connect", connect):
        return browser(url, xsrf, timeout=60)


def serve(work: Path, new_voters: int):
    """One replica on a free port: (process, url). Raises ServerDidNotStart when it never answers /_stcore/health."""
    env = {k: v for k, v in os.environ.items() if k != "TE_TEACHER_KEY"}  # the keyless server is the one attacked
    env.update(TE_MODELS_DIR=str(work / "models"), TE_CLASS_STORE=str(work / "classroom.sqlite"),
               TE_CLASS_NEW_VOTERS_PER_MINUTE=str(new_voters), TE_TRUSTED_PROXY="127.0.0.1")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_replica(port, env, work / "app.log")
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if _healthy(url):
                return proc, url
        except OSError:
            pass  # not listening yet
        time.sleep(0.3)
    stop(proc)
    tail = (work / "app.log").read_text(errors="replace")[-2000:]
    raise ServerDidNotStart(f"streamlit did not start on {url}: {tail}")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group (start_new_session): streamlit and any child
        proc.wait(10)
    except (ProcessLookupError, OSError):
        pass


def need(s, kind: str, label: str) -> str:
    """The id of the page's ``kind`` labelled ``label``; a page without it is a failure, said with what it showed."""
    wid = _widget(s, kind, label)[0]
    if wid is None:
        raise RuntimeError(f"no {kind} {label!r} on the Class page; it showed {alerts(s)} {s.exceptions[:1]}")
    return wid


def starts(url: str, seconds: float) -> dict:
    """(a): *Start a class* from a fresh cookie-less session, as fast as one client goes, for ``seconds``."""
    tries = refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = tab(url, ATTACKER)
        try:
            s.run("classroom")
            if time.monotonic() >= end:  # only clicks sent within the time count (see votes)
                break
            s.run("classroom", {need(s, "button", "Start a class"): True})
            tries += 1
            refused += any(a.startswith("Not started:") for a in alerts(s))
        finally:
            s.close()
    return {"tries": tries, "refused": refused}


def vote(s, code: str, choice: str, end: float = float("inf")) -> bool:
    """Open the class's page, pick ``choice``, press Vote (the three reruns a browser's clicks make), unless the
    clock (time.monotonic) has passed ``end`` before the press. Whether Vote was pressed."""
    s.run("classroom", query=f"class={code}")
    rid = need(s, "radio", "Your prediction")
    s.run("classroom", {rid: choice}, query=f"class={code}")  # Vote is disabled until a choice is picked
    if time.monotonic() >= end:
        return False
    s.run("classroom", {rid: choice, need(s, "button", "Vote"): True}, query=f"class={code}")
    return True


def votes(url: str, code: str, seconds: float) -> dict:
    """(b): a vote from a fresh cookie-less session each time (each a new voter to the page), for ``seconds``."""
    tries = refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = tab(url, ATTACKER)
        try:
            # the last press must fall within the time: the cap is a rolling minute, so a press 60.2 s after the
            # first join is rightly let in (measured: 61 with a cap of 60 when the last press ran past the end)
            if not vote(s, code, "up", end):
                break
            tries += 1
            refused += any(a.startswith("Not recorded:") and "joined this class from your network in the last minute"
                           in a for a in alerts(s))
        finally:
            s.close()
    return {"tries": tries, "refused": refused}


def attack(seconds: float = 60, new_voters: int = 20) -> dict:
    work = Path(tempfile.mkdtemp(prefix="te-class-attack-"))
    proc, url = serve(work, new_voters)
    r = {"ok": False, "work": str(work)}  # a failed run keeps its folder: the server's log is app.log there
    try:
        warm = tab(url, STUDENT)
        warm.run("classroom")  # the app's first run imports its libraries: not the attacker's clock
        warm.close()
        t0 = time.time()
        a = starts(url, seconds)
        store = SqliteStore(work / "classroom.sqlite")
        with sqlite3.connect(work / "classroom.sqlite") as db:  # every class so far is the attacker's: ours comes next
            (a["created"],) = db.execute("SELECT COUNT(*) FROM classes").fetchone()
        code, secret = store.create_class()  # the bench's class, as a teacher with the key would (no address)
        store.open_round(code, secret, "Will the loss go up, down, or stay the same?", CHOICES)
        b = votes(url, code, seconds)
        b["voters_added"] = store.round_info(code)["joined"]
        real = tab(url, STUDENT, xsrf_cookie())
        vote(real, code, "down")
        c = {"recorded": recorded(real, "down", 1), "alerts": alerts(real)}
        real.close()
        c["tally"] = store.tally(code, secret, 1, 1)
        r.update(seconds=seconds, new_voters_per_minute=new_voters, start=a, vote=b, student=c,
                 wall_s=round(time.time() - t0, 1),
                 ok=a["created"] <= CLASSES_PER_ADDRESS and b["voters_added"] <= new_voters and c["recorded"])
        return r
    finally:
        stop(proc)
        if r["ok"]:
            shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.class_attack")
    p.add_argument("--seconds", type=float, default=60.0, help="how long each attack runs (a and b)")
    p.add_argument("--new-voters", type=int, default=20, help="TE_CLASS_NEW_VOTERS_PER_MINUTE for the server")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    r = attack(args.seconds, args.new_voters)
    if args.json:
        print(json.dumps(r))
    else:
        a, b, c = r["start"], r["vote"], r["student"]
        print(f"{'attack, ' + str(args.seconds) + ' s each':<34}{'tries':>7}{'got':>6}{'refused':>9}{'cap':>5}")
        print(f"{'(a) Start a class, no cookie':<34}{a['tries']:>7}{a['created']:>6}{a['refused']:>9}"
              f"{CLASSES_PER_ADDRESS:>5}")
        print(f"{'(b) vote, fresh session, no cookie':<34}{b['tries']:>7}{b['voters_added']:>6}{b['refused']:>9}"
              f"{args.new_voters:>5}")
        print(f"(c) a real student from another address: {'recorded' if c['recorded'] else 'NOT recorded'} "
              f"(tally {c['tally']})")
        print("caps held, student voted" if r["ok"] else f"FAILED (the server's log: {r['work']}/app.log)")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
