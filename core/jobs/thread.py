"""A job in a thread of the server (core.jobs.runner): ``work(progress) -> result``, polled by the page.

A thread reads what the page already holds (a model: no second copy, no spawn) and hands back a result with nothing
pickled; torch releases the GIL in its matrix products, so the pages stay responsive. The thread lowers its own
priority (Linux's niceness is per thread) and sets its own torch threads to the cores it was granted.

The work reports through ``Progress`` and looks at ``progress.stopped()`` between two steps: that is where a stop
ends it (``JobStopped``) and where a pause holds it (its cores given back, until a resume gets them again).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from core.jobs.runner import BACKGROUND_NICE, Job, JobStatus, about
from core.serve.threads import use_threads

STATES = ("new", "queued", "starting", "running", "pausing", "paused", "stopping", "finished", "stopped", "failed")


class JobStopped(Exception):
    """Raised inside a job's work when its stop was asked for: it ends as "stopped", with no result."""


@dataclass(frozen=True, kw_only=True)
class ThreadJobStatus(JobStatus):
    """``what``: the job in words; ``phase``: what it does now; ``loss``: the last one reported."""
    what: str = ""
    phase: str = ""
    step: int = 0
    steps: int = 0
    loss: float | None = None

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / max(1, self.steps))

    @property
    def can_pause(self) -> bool:
        return self.state in ("starting", "running")

    @property
    def can_resume(self) -> bool:
        return self.state in ("pausing", "paused")

    @property
    def can_stop(self) -> bool:
        return self.state in ("queued", "starting", "running", "pausing", "paused")

    @property
    def words(self) -> str:
        """One line for a progress bar."""
        if self.state == "failed":
            return f"failed: {self.message}"
        if self.state == "queued":
            return f"queued ({'next' if not self.ahead else f'{self.ahead} ahead'}): {self.what}"
        left = f", {about(self.eta_s)} left" if self.eta_s is not None and self.moving else ""
        loss = f", loss {self.loss:.3f}" if self.loss is not None else ""
        return f"{self.state}: {self.phase}, step {self.step:,} of {self.steps:,}{loss}{left}"


class Progress:
    """What a job's work reports to its handle: ``phase(words)``, ``step(step, steps, loss)``; ``stopped()``
    True once a stop is asked for (a pause holds it there until resumed), and ``check()`` raises JobStopped then."""

    def __init__(self, job: "ThreadJob"):
        self._job = job

    def phase(self, words: str, steps: int | None = None):
        with self._job._lock:
            self._job._p["phase"] = words
            if steps is not None:
                self._job._p["steps"] = steps

    def step(self, step: int, steps: int | None = None, loss: float | None = None):
        with self._job._lock:
            p = self._job._p
            p["step"], p["loss"] = step, loss
            if steps is not None:
                p["steps"] = steps
            if p["paced_from"] is None:  # the pace is measured from the first step on: collection is not a step
                p["paced_from"] = (time.monotonic(), step)

    def stopped(self) -> bool:
        self._job._hold_if_paused()
        return self._job._stop.is_set()

    def check(self):
        if self.stopped():
            raise JobStopped()


def _lower_priority():
    """This thread's niceness raised by BACKGROUND_NICE: page runs get the cores first (Linux: per thread)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: the job runs at the page's priority
        pass


class ThreadJob(Job):
    """A thread running ``work(progress) -> result``: ``start()``, poll ``status()``, ``pause``/``resume``/``stop``,
    then ``result`` once finished."""
    kind = "thread"

    def __init__(self, work: Callable[[Progress], object], what: str, steps: int, owner: str | None = None,
                 cores: int = 1):
        super().__init__(what, cores, owner)
        self._work = work
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._go = threading.Event()   # set while the work may run (cleared by a pause, set again on its cores)
        self._go.set()
        self._p = dict(state="new", phase="waiting", step=0, steps=steps, loss=None, message=None, t0=None,
                       t1=None, paced_from=None, paused_s=0.0)
        self._result = None
        self._thread: threading.Thread | None = None

    def start(self) -> "ThreadJob":
        """Start it, or queue it until cores are free; JobBusy past its owner's limit."""
        if self._thread is not None or self._p["state"] != "new":
            raise RuntimeError("this job was started already")
        self._register()
        with self._lock:
            self._p.update(state="queued", t0=time.monotonic())
        self._claim_cores(ThreadJob._launch)
        return self

    def _launch(self):
        with self._lock:
            if self._p["state"] != "queued":  # stopped while it waited
                return
            self._p["state"] = "starting"
        self._thread = threading.Thread(target=self._run, name=f"te-job:{self.what}", daemon=True)
        self._thread.start()

    def _run(self):
        _lower_priority()
        use_threads(self.cores)
        end, message, result = "finished", None, None
        try:
            with self._lock:
                self._p["state"] = "running"
            result = self._work(Progress(self))
            if self._stop.is_set():  # a stop asked for after its last check: the result is not kept either
                end, result = "stopped", None
        except JobStopped:
            end = "stopped"
        except MemoryError:
            end, message = "failed", "the machine ran out of memory; try fewer latents or a smaller batch"
        except Exception as e:  # noqa: BLE001 - a job's failure is shown in words, never a traceback
            end, message = "failed", f"{type(e).__name__}: {e}"
        finally:
            self._result = result
            with self._lock:
                self._p.update(state=end, message=message, t1=time.monotonic())
            self._free_cores()

    def _hold_if_paused(self):
        """On the work's thread, between two steps: while paused, give the cores back and wait for a resume."""
        if self._go.is_set() or self._stop.is_set():
            return
        with self._lock:
            self._p["state"] = "paused"
        self._free_cores()
        t = time.monotonic()
        while not self._go.wait(0.2) and not self._stop.is_set():
            pass
        use_threads(self.cores)
        with self._lock:
            self._p["paused_s"] += time.monotonic() - t
            self._p["state"] = "stopping" if self._stop.is_set() else "running"

    def pause(self):
        with self._lock:
            if self._p["state"] not in ("starting", "running") or self._stop.is_set():
                return
            self._p["state"] = "pausing"
            self._go.clear()

    def resume(self):
        """A paused job waits in line for its cores again, and goes on once it has them."""
        with self._lock:
            if self._p["state"] not in ("pausing", "paused"):
                return
            if self._p["state"] == "pausing":  # it has not stopped yet: it simply goes on
                self._p["state"] = "running"
                self._go.set()
                return
            self._p["state"] = "queued"
        self._claim_cores(lambda job: job._go.set())

    def stop(self, wait: float | None = None) -> bool:
        """Ask it to end at its next check (between two optimiser steps); ``wait`` seconds for it (None: at once).
        True once it has ended. A queued job ends at once."""
        self._stop.set()
        with self._lock:
            never_ran = self._thread is None and self._p["state"] in ("new", "queued")
            if never_ran:
                self._p.update(state="stopped", t1=time.monotonic())
        if never_ran:
            self._free_cores()
        return self.join(wait) if wait else not self.status().active

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.status().active

    def status(self) -> ThreadJobStatus:
        with self._lock:
            p = dict(self._p)
        state = p["state"]
        if state in ("starting", "running", "pausing", "paused") and self._stop.is_set():
            state = "stopping"
        now = p["t1"] or time.monotonic()
        elapsed = 0.0 if p["t0"] is None else now - p["t0"] - p["paused_s"]
        eta = None
        if p["paced_from"] is not None and state in ("starting", "running"):
            t, s = p["paced_from"]
            if p["step"] > s:
                eta = (time.monotonic() - t - p["paused_s"]) / (p["step"] - s) * max(0, p["steps"] - p["step"])
        return ThreadJobStatus(state=state, what=self.what, phase=p["phase"], step=p["step"], steps=p["steps"],
                               loss=p["loss"], elapsed_s=elapsed, eta_s=eta, message=p["message"],
                               ahead=self.ahead() if state == "queued" else None)

    @property
    def result(self):
        """What the work returned, once finished; None before, and for a job stopped or failed."""
        return self._result if self.status().state == "finished" else None
