"""One job runner: a background job (a training run, a study, an SAE) holds cores of the server's one budget
(core.serve.cores) while it computes, waits in line for them when none are free, and is stopped once its browser
session has stopped looking at it.

A ``Job`` is the handle a page holds. Its kind says how it computes: ``ThreadJob`` (core.jobs.thread, a thread of the
server) or ``ProcessJob`` (core.jobs.process, a spawned interpreter); a study is a ``Job`` over a process group
(core.training.study_job). What they share lives here:

- the cores: ``_claim_cores(then)`` asks the budget for the job's cores and runs ``then`` once they are granted (at
  once, or later from the thread that freed them); ``_free_cores()`` gives them back when the job pauses or ends.
  While it waits its state is "queued" and ``JobStatus.ahead`` says how many jobs are in line before it.
- one limit per owner (a browser session): ``OWNER_LIMIT`` jobs of a kind at a time; past it ``JobBusy``.
- the heartbeat: a job whose page has ``watch``-ed it must be ``touch``-ed by that page (every poll, and a slow
  fragment while it is paused or queued); one not touched for ``heartbeat_s()`` seconds (``TE_JOB_HEARTBEAT_S``,
  default 60), or whose session the ``alive`` function reports ended, is abandoned: stopped and its cores freed,
  whatever else happens. One watchdog thread per server checks every job about once a second (and lets the
  process jobs read their messages, so an ended job frees its cores even when no page polls it).
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable

from core.serve.cores import server_budget

HEARTBEAT_ENV = "TE_JOB_HEARTBEAT_S"
HEARTBEAT_S = 60.0
# added to a background job's niceness: the students' page runs, at normal priority, get the cores first and
# the pages stay responsive while a job keeps its own cores busy
BACKGROUND_NICE = 10


def heartbeat_s() -> float:
    """Seconds a watched job lives on without its page touching it: ``TE_JOB_HEARTBEAT_S``, default 60."""
    try:
        return max(0.05, float(os.environ.get(HEARTBEAT_ENV, "") or HEARTBEAT_S))
    except ValueError:
        return HEARTBEAT_S


class JobBusy(RuntimeError):
    """A job may not start: its owner has as many jobs of its kind as one person may (the words say which)."""


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """A copy of a job's progress, safe to read from any thread. Each kind adds its own progress fields (a training
    run's losses, a study's runs) and names its states: ``ACTIVE`` (it holds its place: computes, waits in line or
    may go on by itself) and ``MOVING`` (its state will change without anyone asking, so a page keeps polling).
    ``ahead``: while "queued", how many jobs wait before it for the server's cores."""
    ACTIVE = ("queued", "starting", "running", "pausing", "paused", "stopping")
    MOVING = ("queued", "starting", "running", "pausing", "stopping")
    state: str
    message: str | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    ahead: int | None = None

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def moving(self) -> bool:
        return self.state in self.MOVING

    @property
    def queue_words(self) -> str:
        """Where a queued job stands, in the page's words; "" when it is not queued."""
        if self.state != "queued":
            return ""
        where = "it is next" if not self.ahead else f"{self.ahead} job{'s' if self.ahead != 1 else ''} ahead of it"
        return (f"Queued: every core this server gives to background jobs is taken, and {where}. It starts by "
                "itself as soon as cores are free.")


def about(seconds: float) -> str:
    """A wait in round words: "under a minute", "about 4 min", "about 1.5 h"."""
    # an estimate from a few steps' pace: more digits would promise a precision it does not have
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


_JOBS: "weakref.WeakSet[Job]" = weakref.WeakSet()  # weak: a handle whose session ended must be collectable
_JOBS_LOCK = threading.Lock()                       # the owner check and the registering are one step
_WATCHDOG: list[threading.Thread] = []


def jobs(kind: str | None = None) -> list["Job"]:
    """The server's jobs (of ``kind``), oldest first."""
    return sorted((j for j in list(_JOBS) if kind is None or j.kind == kind), key=lambda j: j.number)


def running_jobs(kind: str | None = None) -> int:
    """Jobs (of ``kind``) that hold their place: computing, queued, or paused."""
    return sum(1 for j in jobs(kind) if j.holds_place())


class Job:
    """A background job's handle. Subclasses compute; this class holds the cores, the owner's limit and the
    heartbeat. ``cores``: how many it asks for (the budget gives at most its job share)."""
    kind = "job"
    OWNER_LIMIT = 1  # jobs of this kind one owner may hold at a time
    _numbers = iter(range(1 << 62))

    def __init__(self, what: str, cores: int = 1, owner: str | None = None):
        self.what, self.owner, self.want_cores = what, owner, max(1, int(cores))
        self.number = next(Job._numbers)
        self.session: str | None = None
        self.alive: Callable[[str], bool] | None = None
        self._touched = time.monotonic()
        self._claim_box = [None]  # the current claim, shared with the finaliser (it must not hold the handle)
        weakref.finalize(self, _release_claim, self._claim_box)

    # --- what subclasses give
    def holds_place(self) -> bool:
        """Whether the job is active (computing, queued, paused): it counts against its owner's limit."""
        return self.status().active

    def status(self) -> JobStatus:
        raise NotImplementedError

    def stop(self, wait: float | None = None) -> bool:
        raise NotImplementedError

    def _poll(self):
        """Read what the job's worker reported (the watchdog calls it about once a second)."""

    def _abandon(self, why: str):
        """The job's session has ended: stop it at once (subclasses may discard more)."""
        self.stop(wait=None)

    # --- the page's side
    @property
    def cores(self) -> int:
        claim = self._claim_box[0]
        return claim.n if claim is not None else server_budget().share(self.want_cores)

    def watch(self, session: str | None, alive: Callable[[str], bool] | None = None) -> "Job":
        """Tie the job to a browser session: from now on it must be ``touch``-ed (see the module's heartbeat)."""
        self.session, self.alive = session, alive
        self.touch()
        return self

    def touch(self):
        self._touched = time.monotonic()

    def ahead(self) -> int | None:
        claim = self._claim_box[0]
        return None if claim is None else claim.ahead

    @property
    def queued(self) -> bool:
        claim = self._claim_box[0]
        return claim is not None and not claim.granted and not claim.released

    # --- for subclasses
    def _register(self):
        """JobBusy past the owner's limit; else the job joins the server's jobs (and the watchdog runs)."""
        with _JOBS_LOCK:
            if self.owner is not None and self not in _JOBS:
                mine = [j for j in jobs(self.kind) if j.owner == self.owner and j is not self and j.holds_place()]
                if len(mine) >= self.OWNER_LIMIT:
                    raise JobBusy(f"you are {mine[0].what} already (in another tab?); one person may have "
                                  f"{self.OWNER_LIMIT} such job{'s' if self.OWNER_LIMIT != 1 else ''} at a time: "
                                  "stop it, or wait for it to end")
            _JOBS.add(self)
        _start_watchdog()

    def _claim_cores(self, then: Callable[["Job"], None]) -> bool:
        """Ask for the job's cores; ``then(job)`` runs once they are granted: here if they are free (True), else
        later on the thread that frees them (False: the job is queued). ``then`` takes the job as its argument and
        the budget holds only a weak reference to it: a handle whose session has gone must stay collectable."""
        self._free_cores()
        ref = weakref.ref(self)

        def granted():
            job = ref()
            if job is not None and job._claim_box[0] is claim:
                then(job)
        claim = server_budget().claim(self.want_cores, on_grant=granted)
        self._claim_box[0] = claim
        if claim.granted:
            then(self)
        return claim.granted

    def _free_cores(self):
        claim, self._claim_box[0] = self._claim_box[0], None
        if claim is not None:
            claim.release()

    def _check_heartbeat(self, now: float, limit: float) -> bool:
        """Abandon the job if its session has stopped touching it, or has ended; True if it did."""
        if self.session is None or not self.holds_place():
            return False
        gone = now - self._touched > limit
        why = f"its page was not seen for {limit:g} s (the tab was closed)"
        if not gone and self.alive is not None:
            try:
                gone = not self.alive(self.session)
            except Exception:  # noqa: BLE001 - in doubt, a job is kept
                gone = False
            why = "its browser session ended"
        if gone:
            self._free_cores()
            self._abandon(why)
        return gone


def _release_claim(box: list):
    if box[0] is not None:
        box[0].release()


def _watch_all():
    while True:
        limit = heartbeat_s()
        now, job = time.monotonic(), None
        for job in jobs():
            try:
                job._poll()
                job._check_heartbeat(now, limit)
            except Exception:  # noqa: BLE001 - one broken handle must not end the watch over the others
                pass
        job = None  # no strong reference to the last handle between two rounds: it must stay collectable
        server_budget().regrant()  # cores of page threads that died holding them go to the jobs in line
        time.sleep(min(1.0, limit / 4))


def _start_watchdog():
    with _JOBS_LOCK:
        if not _WATCHDOG or not _WATCHDOG[0].is_alive():
            t = threading.Thread(target=_watch_all, name="te-job-watchdog", daemon=True)
            _WATCHDOG[:] = [t]
            t.start()
