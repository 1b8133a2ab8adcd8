"""A class voting at once (issue 44): real student sessions on the Class page of two app replicas sharing one store.

    python -m bench.class_load --students 60 --rounds 5 [--think 1 4] [--kill] [--json]

Starts two ``streamlit run app.py`` replicas on free ports, both with TE_CLASS_STORE set to one SQLite file (the
embedded default's setting: one machine, several processes). Students are websocket clients speaking Streamlit's own
protocol (deploy.client), half on each replica (as the balancer's stickiness would place them). Each student is its own
browser: its handshake carries its own ``_streamlit_xsrf`` cookie, the cookie the Class page counts one voter by
(issue 54). All come from 127.0.0.1, so the server's new-voter rate (TE_CLASS_NEW_VOTERS_PER_MINUTE, default 60)
applies: more students than that in the first minute are refused, as a hall behind one router would be. The teacher
drives the rounds through the store itself, with the calls the Class page's buttons make (open_round, set_phase,
reveal).

Each student, in each of ``--rounds`` rounds and both phases: polls its page (as the page's 2 s refresh does) until
the round and phase are open, thinks ``--think`` seconds, picks a choice, then sends the click that votes. "Recorded"
latency: from sending that click to the server's "script finished" with "Recorded" on the page. Every recorded vote
is kept on the student's side as (student, round, phase) -> its last recorded choice; after the run each round's
tallies in the store must equal those exactly: 0 lost, none counted twice. The teacher's view: a thread reads the
tally every 0.25 s, and for every recorded vote the delay until the tally includes it is measured (the teacher's page
adds its own 2 s refresh on top).

With ``--kill``: during round 2, replica 1 is killed (SIGKILL, no clean shutdown) and restarted on the same port; its
students reconnect (a new session, but the same browser with the same cookie, so the same voter) and vote on. The
votes they had recorded before stay counted. A student whose vote is still open when it reconnects sees Vote again
(the new session has forgotten it) and votes again, maybe otherwise: that vote must replace its first one.
Writes one JSON line with the figures (``--json``) or a short table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.serve.class_sqlite import SqliteStore  # noqa: E402
from core.serve.fmt import md_escape  # noqa: E402
from deploy.client import Session  # noqa: E402
from deploy.replicas import _healthy, free_port  # noqa: E402

CHOICES = ("up", "down", "same")
QUESTION = "With the induction head off, will the loss on the second copy go up, down, or stay the same?"


def start_replica(port: int, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--server.headless", "true",
                             "--server.fileWatcherType", "none"], cwd=ROOT, env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(url: str, timeout: float = 120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if _healthy(url):
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not start")


def xsrf_cookie() -> str:
    """A fresh browser's ``_streamlit_xsrf`` value, as Streamlit makes it (2|mask|masked token|time): 16 random bytes
    XORed with a 4-byte mask repeated. The Class page keys its voter on the unmasked token."""
    token, mask = secrets.token_bytes(16), secrets.token_bytes(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(token))
    return f"2|{mask.hex()}|{masked.hex()}|{int(time.time())}"


def browser(url: str, xsrf: str = "", **kw) -> Session:
    """A tab of the browser whose XSRF cookie is ``xsrf`` (sent as a browser does: the Cookie header, and the token
    in the subprotocol list); no ``xsrf``: a script that keeps no cookies."""
    return Session(url, cookie=f"_streamlit_xsrf={xsrf}" if xsrf else "", xsrf=xsrf, **kw)


def alerts(s: Session) -> list[str]:
    """The bodies of the page's st.success/error/info boxes, as drawn (str(el) would add protobuf's escapes)."""
    return [el.alert.body for el in s.elements if el.WhichOneof("type") == "alert"]


def recorded(s: Session, choice: str, phase: int) -> bool:
    """The student page's "Recorded: **<choice>** (vote N)" box, the choice Markdown-escaped as the page draws it."""
    return any(a.startswith(f"Recorded: **{md_escape(choice)}** (vote {phase})") for a in alerts(s))


def _widget(s: Session, kind: str, prefix: str):
    """(id, label) of the first ``kind`` element whose label starts with ``prefix``."""
    for el in s.elements:
        if el.WhichOneof("type") == kind and getattr(el, kind).label.startswith(prefix):
            return getattr(el, kind).id, getattr(el, kind).label
    return None, None


class Student(threading.Thread):
    def __init__(self, i, urls, code, rounds, think, out, stop):
        super().__init__(daemon=True)
        self.i, self.urls, self.code, self.rounds, self.think = i, urls, code, rounds, think
        self.url = urls[i % len(urls)]
        self.out, self.stop = out, stop
        self.rng = random.Random(i)
        self.xsrf = xsrf_cookie()  # this student's browser: kept across reconnects, as a browser keeps its cookies
        self.s = None
        self.reloaded = False
        self.errors: list[str] = []

    def connect(self):
        while not self.stop.is_set():
            try:
                self.s = browser(self.url, self.xsrf, timeout=60)
                self.s.run("classroom", query=f"class={self.code}")
                return
            except Exception:
                time.sleep(0.5)  # the replica is down: try again, as the browser's reconnect does

    def page(self, widgets=None):
        try:
            self.s.run("classroom", widgets, query=f"class={self.code}")
            return True
        except Exception:
            self.out["reconnects"].append(self.i)
            self.connect()
            self.reloaded = True  # the new session has forgotten this student's votes: its page shows Vote again
            return False

    def vote(self, r, phase, choice) -> bool:
        """Pick ``choice`` and press Vote in round ``r``, vote ``phase``; whether the page said "Recorded"."""
        for _ in range(3):  # a vote lost to a dead replica before "recorded" is voted again
            rid, _ = _widget(self.s, "radio", "Your prediction")
            if not rid or not rid.endswith(f"class_choice_{r}_{phase}"):
                self.page()
                continue
            if not self.page({rid: choice}):
                continue
            bid, _ = _widget(self.s, "button", "Vote")
            bid = bid or _widget(self.s, "button", "Change my vote")[0]
            t0 = time.perf_counter()
            ok = self.page({rid: choice, bid: True})
            dt = time.perf_counter() - t0
            if ok and recorded(self.s, choice, phase):
                self.out["recorded"].append(dt)
                # keyed by student, not session: one browser is one voter, its later vote replaces the earlier
                self.out["votes"][(self.i, r, phase)] = (choice, time.time())
                self.reloaded = False
                return True
        return False

    def run(self):
        self.connect()
        last = None  # the (round, phase) this student last recorded
        for r in range(1, self.rounds + 1):
            for phase in (1, 2):
                while not self.stop.is_set():  # wait for this round and phase, polling as the fragment does
                    rid, _ = _widget(self.s, "radio", "Your prediction")
                    if rid and rid.endswith(f"class_choice_{r}_{phase}"):
                        break
                    if self.reloaded and last and rid and rid.endswith(f"class_choice_{last[0]}_{last[1]}"):
                        # reconnected while its vote is still open, the page offers Vote again: a student votes
                        # again, maybe otherwise. The same browser: the store must keep this vote, not both
                        self.reloaded = False
                        if self.vote(*last, self.rng.choice(CHOICES)):
                            self.out["revotes"].append(self.i)
                        continue
                    if self.s.exceptions:  # the page itself fails: waiting longer shows nothing more
                        self.errors.append(f"student {self.i}: the page raised {self.s.exceptions[0][:200]}")
                        self.out["broken"].set()
                        return
                    time.sleep(1.0)
                    self.page()
                if self.stop.is_set():
                    return
                time.sleep(self.rng.uniform(*self.think))
                if self.vote(r, phase, self.rng.choice(CHOICES)):
                    last = (r, phase)
                else:
                    self.errors.append(f"student {self.i}: round {r} phase {phase} never recorded")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.class_load")
    p.add_argument("--students", type=int, default=60)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--think", type=float, nargs=2, default=(1.0, 4.0))
    p.add_argument("--kill", action="store_true", help="kill replica 1 during round 2 and restart it")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="te-class-load-"))
    store_path = work / "classroom.sqlite"
    env = {**os.environ, "TE_CLASS_STORE": str(store_path), "TE_MODELS_DIR": str(work / "models")}
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    procs = [start_replica(port, env, work / f"app{k + 1}.log") for k, port in enumerate(ports)]
    for url in urls:
        wait_healthy(url)
    store = SqliteStore(store_path)
    code, secret = store.create_class()
    out = {"recorded": [], "votes": {}, "reconnects": [], "revotes": [], "broken": threading.Event()}
    stop = threading.Event()
    students = [Student(i, urls, code, args.rounds, tuple(args.think), out, stop) for i in range(args.students)]

    seen_at: dict = {}  # (round, phase, total) -> first time the teacher's read saw that many votes

    def teacher_reads():
        while not stop.is_set():
            info = store.round_info(code)
            if info["round"]:
                seen_at.setdefault((info["round"], info["phase"], info["votes"][info["phase"]]), time.time())
            time.sleep(0.25)

    t_start = time.time()
    rid = store.open_round(code, secret, QUESTION, CHOICES)
    for s in students:
        s.start()
    reader = threading.Thread(target=teacher_reads, daemon=True)
    reader.start()
    killed = None
    try:
        for r in range(1, args.rounds + 1):
            if r > 1:
                rid = store.open_round(code, secret, QUESTION, CHOICES)
            for phase in (1, 2):
                if phase == 2:
                    store.set_phase(code, secret, rid, 2)
                deadline = time.time() + 180
                while time.time() < deadline and not out["broken"].is_set():
                    done = sum(1 for k in out["votes"] if k[1:] == (r, phase))
                    if done >= args.students:
                        break
                    if args.kill and r == 2 and phase == 1 and killed is None and done >= args.students // 3:
                        killed = time.time()
                        os.killpg(procs[0].pid, signal.SIGKILL)  # a crash: no clean shutdown
                        procs[0].wait()
                        procs[0] = start_replica(ports[0], env, work / "app1.log")
                        wait_healthy(urls[0])
                    time.sleep(0.2)
            store.reveal(code, secret, rid, "up", "bench")
    finally:
        time.sleep(1)
        stop.set()
        for s in students:
            s.join(10)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # every recorded vote, counted once: the last one per (student, round, phase) against the store's tallies
    lost = 0
    for r in range(1, args.rounds + 1):
        for phase in (1, 2):
            want = {c: 0 for c in CHOICES}
            for (i, rr, ph), (choice, _) in out["votes"].items():
                if (rr, ph) == (r, phase):
                    want[choice] += 1
            got = store.tally(code, secret, r, phase)
            lost += sum(abs(want[c] - got[c]) for c in CHOICES)
    # the teacher's read: the delay from a vote recorded to a read that counted at least that many votes
    lag = []
    for (i, r, phase), (_, t) in out["votes"].items():
        n_before = sum(1 for k, (_, t2) in out["votes"].items() if k[1:] == (r, phase) and t2 <= t)
        later = [ts for (rr, ph, n), ts in seen_at.items() if (rr, ph) == (r, phase) and n >= n_before]
        if later:
            lag.append(max(0.0, min(later) - t))
    rec = sorted(out["recorded"])
    result = {"students": args.students, "rounds": args.rounds, "think_s": list(args.think), "kill": args.kill,
              "votes_recorded": len(out["votes"]), "lost_or_double": lost,
              "recorded_p50_s": round(statistics.median(rec), 3) if rec else None,
              "recorded_p95_s": round(rec[int(0.95 * (len(rec) - 1))], 3) if rec else None,
              "recorded_max_s": round(rec[-1], 3) if rec else None,
              "teacher_read_lag_p95_s": round(sorted(lag)[int(0.95 * (len(lag) - 1))], 3) if lag else None,
              "reconnects": len(out["reconnects"]), "revotes_after_reconnect": len(out["revotes"]),
              "errors": sum(len(s.errors) for s in students),
              "wall_s": round(time.time() - t_start, 1)}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0 if lost == 0 and result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
