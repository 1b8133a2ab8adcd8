"""SAE work in the background of a page: training one autoencoder (``SAEJob``), or the features-forming study
(core.features.forming), each in a thread of the server, polled by the page.

Thread, not process (the training page's runs are processes, core.training.training_job): an SAE run is 15-60 s
of large matrix products, during which torch releases the GIL, so the pages stay responsive (measured on a shared
two-core machine: a 128-token forward of the shipped model took a median 2.0 ms with a job running, 1.2 and 2.4 ms
without, before and after). A thread reads the model the page already holds (no second copy, no 340 MB interpreter, no 2-3 s spawn),
and its result is an SAE the page can use at once, with nothing pickled. What a process buys does not apply: a run
this short needs no pause, and its stop is a flag read between two optimiser steps. The thread lowers its own
priority (Linux's niceness is per thread) and sets its own torch threads (core.serve.threads.training_threads;
the setting is per thread, and every page run sets its own again, app.py).

Rules, checked before a job starts: its memory (core.features.train.memory_estimate) within the budget a training
run has (TE_RUN_MEMORY, core.training.job_settings.memory_budget), at most MAX_JOBS_PER_OWNER of them per owner (a
browser session) and MAX_JOBS per server; a refusal says which rule in words (``SAEBusyError``, ``ValueError``)."""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from core.analysis.sae import SAE
from core.analysis.sites import check_site, site_width
from core.features.train import SAESettings, memory_estimate, train_on, train_sae
from core.serve.fmt import binary_bytes
from core.serve.threads import training_threads, use_threads
from core.data.corpus import TRAIN_FRACTION
from core.training.job_common import BACKGROUND_NICE, JobBusyError, JobState, about
from core.training.job_settings import allowance_words
from core.data.budget import memory_budget

MAX_JOBS = 2             # SAE jobs per server at once: each takes half the cores (training_threads)
MAX_JOBS_PER_OWNER = 1   # per browser session: training an SAE or following features forming, one at a time
MAX_STEPS = 20_000       # a form's ceiling: at the default batch, about 15 minutes on one core

ACTIVE = ("starting", "running", "stopping")  # holds its slot; its state changes by itself, so a page polls


class SAEBusyError(JobBusyError):
    """This session, or this server, runs as many SAE jobs as it may."""


class JobStopped(Exception):
    """Raised inside a job's work when its stop was asked for: it ends as "stopped", with no result."""


@dataclass(frozen=True)
class SAEJobStatus(JobState):
    """A copy of a job's progress, safe to read from any thread. ``state``: starting, running, stopping, then
    finished, stopped or failed (``message`` says why, in words)."""
    ACTIVE = ACTIVE
    MOVING = ACTIVE
    state: str
    what: str                 # the job in words: "training an SAE on blocks.0.hook_resid_post"
    phase: str                # what it does now: "collecting activations", "training", "measuring", ...
    step: int
    steps: int
    loss: float | None        # the last reported loss (an SAE's: its reconstruction error / the variance)
    elapsed_s: float
    eta_s: float | None       # from the pace of the steps so far; None before the first
    message: str | None = None

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / max(1, self.steps))

    @property
    def can_stop(self) -> bool:
        return self.state in ("starting", "running")

    @property
    def words(self) -> str:
        """One line for a progress bar."""
        if self.state == "failed":
            return f"failed: {self.message}"
        left = f", {about(self.eta_s)} left" if self.eta_s is not None and self.active else ""
        loss = f", loss {self.loss:.3f}" if self.loss is not None else ""
        return f"{self.state}: {self.phase}, step {self.step:,} of {self.steps:,}{loss}{left}"


_JOBS: list["BackgroundJob"] = []  # the jobs holding a slot (starting, running or stopping)
_LOCK = threading.Lock()           # the check "a slot is free" and the taking of it are one step


def running_jobs() -> int:
    with _LOCK:
        return len(_JOBS)


def release_abandoned(exclude=None) -> int:
    """Stop every job whose browser session has ended (its ``alive(session)`` is False): only that session could
    have used its result. A job that recorded no session is left alone, and so is one whose liveness cannot be told
    (``alive`` raises). Stopped jobs leave the count at once, before their thread has quite ended. Returns how many."""
    released = 0
    for job in list(_JOBS):
        if job is exclude or job.session is None or job.alive is None or job._stop.is_set():
            continue
        try:
            gone = not job.alive(job.session)
        except Exception:  # noqa: BLE001 - in doubt, a job is kept
            gone = False
        if gone:
            job.stop()
            _give_slot(job)  # its thread gives it back again when it ends: removing twice is harmless
            released += 1
    return released


def _take_slot(job: "BackgroundJob"):
    release_abandoned(exclude=job)  # a closed tab's job must not hold the server's slots until its steps run out
    with _LOCK:
        mine = [j for j in _JOBS if job.owner is not None and j.owner == job.owner]
        if len(mine) >= MAX_JOBS_PER_OWNER:
            left = mine[0].status()
            wait = f" (it should end in {about(left.eta_s)})" if left.eta_s is not None else ""
            raise SAEBusyError(f"you are {left.what} already{wait}; one SAE job per person at a time: stop it or "
                               "wait for it to end")
        if len(_JOBS) >= MAX_JOBS:
            ends = [j.status().eta_s for j in _JOBS]
            ends = [e for e in ends if e is not None]
            when = f"the next should free in {about(min(ends))}" if ends else "they take about a minute"
            raise SAEBusyError(f"this server runs {len(_JOBS)} SAE jobs already, as many as it runs at once; {when}: "
                               "try again then")
        _JOBS.append(job)


def _give_slot(job: "BackgroundJob"):
    with _LOCK:
        if job in _JOBS:
            _JOBS.remove(job)


def _lower_priority():
    """This thread's niceness raised by BACKGROUND_NICE: page runs get the cores first (Linux: per thread)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: the job runs at the page's priority
        pass


class Progress:
    """What a job's work reports to its handle: ``phase(words)``, ``step(step, steps, loss)``; ``stopped()``
    True once a stop is asked for, and ``check()`` raises JobStopped then."""

    def __init__(self, job: "BackgroundJob"):
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
        return self._job._stop.is_set()

    def check(self):
        if self.stopped():
            raise JobStopped()


class BackgroundJob:
    """A thread running ``work(progress) -> result``; ``start()``, poll ``status()``, ``stop()``, then
    ``result`` once finished. ``memory``: bytes it will hold at its peak, checked against the server's budget
    at ``start``; ``owner``: who it counts against. ``watch(session, alive)`` lets a later job's start stop this one
    once its browser session has ended (``release_abandoned``)."""
    session: str | None = None
    alive: Callable[[str], bool] | None = None

    def __init__(self, work: Callable[[Progress], object], what: str, steps: int, memory: int,
                 owner: str | None = None, threads: int | None = None):
        self.what, self.owner, self.memory = what, owner, memory
        self.threads = threads or training_threads()
        self._work = work
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._p = dict(state="new", phase="waiting", step=0, steps=steps, loss=None, message=None, t0=None,
                       t1=None, paced_from=None)
        self._result = None
        self._thread: threading.Thread | None = None

    def watch(self, session: str | None, alive: Callable[[str], bool] | None) -> "BackgroundJob":
        self.session, self.alive = session, alive
        return self

    def start(self) -> "BackgroundJob":
        """Start it; ValueError when its memory is over the server's budget, SAEBusyError when no slot is free."""
        if self._thread is not None:
            raise RuntimeError("this job was started already")
        problem = memory_problem(self.memory, self.what)
        if problem:
            raise ValueError(problem)
        _take_slot(self)
        with self._lock:
            self._p.update(state="starting", t0=time.monotonic())
        self._thread = threading.Thread(target=self._run, name=f"te-sae-job:{self.what}", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        _lower_priority()
        use_threads(self.threads)
        end, message, result = "finished", None, None
        try:
            with self._lock:
                self._p["state"] = "running" if not self._stop.is_set() else "stopping"
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
            _give_slot(self)

    def status(self) -> SAEJobStatus:
        with self._lock:
            p = dict(self._p)
        state = "stopping" if p["state"] in ("starting", "running") and self._stop.is_set() else p["state"]
        now = p["t1"] or time.monotonic()
        elapsed = 0.0 if p["t0"] is None else now - p["t0"]
        eta = None
        if p["paced_from"] is not None and state in ACTIVE:
            t, s = p["paced_from"]
            if p["step"] > s:
                eta = (time.monotonic() - t) / (p["step"] - s) * max(0, p["steps"] - p["step"])
        return SAEJobStatus(state=state, what=self.what, phase=p["phase"], step=p["step"], steps=p["steps"],
                            loss=p["loss"], elapsed_s=elapsed, eta_s=eta, message=p["message"])

    def stop(self, wait: float | None = None) -> bool:
        """Ask it to end at its next check (between two optimiser steps); ``wait`` seconds for it (None: at once).
        True once it has ended."""
        self._stop.set()
        return self.join(wait) if wait else not self.status().active

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.status().active

    @property
    def result(self):
        """What the work returned, once finished; None before, and for a job stopped or failed."""
        return self._result if self.status().state == "finished" else None


def memory_problem(need: int, what: str = "this job") -> str | None:
    """Why a job of ``need`` bytes may not start on this server; None when it may."""
    try:
        budget = memory_budget()
    except ValueError as e:
        return f"No SAE job can start: {e}."
    if budget is None or need <= budget:
        return None
    return (f"{what[0].upper() + what[1:]} needs about {binary_bytes(need)} of memory; the server allows "
            f"{binary_bytes(budget)} per run (TE_RUN_MEMORY). Fewer latents, a smaller batch or a narrower site "
            "needs less.")


def memory_words(need: int) -> str:
    try:
        return f"It needs about {binary_bytes(need)} of memory; the server {allowance_words()}."
    except ValueError as e:
        return f"It needs about {binary_bytes(need)} of memory; {e}."


def held_tokens_bound(held_chars: int) -> int:
    """At most this many training vectors from a corpus of ``held_chars`` characters: a token is at least a
    character, and the held-out part is the last 10%."""
    return math.ceil(held_chars * (1 - TRAIN_FRACTION))


def check_settings(config, site: str, settings: SAESettings) -> SAESettings:
    """``settings`` if an SAE of them can be trained on ``site``; ValueError in words otherwise."""
    check_site(config, site)
    settings.config(site, site_width(config, site))
    if settings.steps > MAX_STEPS:
        raise ValueError(f"steps must be at most {MAX_STEPS:,}, got {settings.steps:,}")
    return settings


class SAEJob(BackgroundJob):
    """Training one SAE on ``site`` of ``model`` (core.features.train.train_sae) in the background; ``result`` is
    its TrainedSAE (sae, metrics, curve). ``corpus_chars``: the length of the corpus its held-out text comes from,
    for the memory estimate (None: the cap on collected vectors)."""

    def __init__(self, model, tokenizer, site: str, training: dict | None, settings: SAESettings,
                 owner: str | None = None, corpus_chars: int | None = None, threads: int | None = None):
        check_settings(model.config, site, settings)
        held = settings.max_vectors if corpus_chars is None else held_tokens_bound(corpus_chars)
        memory = memory_estimate(model.config, site, held, settings)

        def work(progress: Progress):
            progress.phase("collecting activations", settings.steps)

            def report(step, steps, loss):
                progress.phase("training")
                progress.step(step, steps, loss)
            trained = train_sae(model, tokenizer, site, training, settings, progress=report,
                                should_stop=progress.stopped)
            progress.check()  # stopped during training: no result (train_sae still measured what it had)
            return trained

        super().__init__(work, f"training an SAE on {site}", settings.steps, memory, owner, threads)
        self.site, self.settings = site, settings


# An SAE job is more than its steps (measured on the shipped models: the form said "under a minute" from the steps
# alone while the job took 58-85 s): the model's passes to collect the activations and to measure the result, at
# about JOB_FLOPS, and each step's bookkeeping beyond the timed ones (the dead latents' AuxK loss, the progress)
JOB_FLOPS = 2e10
STEP_OVERHEAD = 1.05


def job_seconds(model, settings: SAESettings, held_tokens: int, step_s: float) -> float:
    """Seconds an SAE job of ``settings`` should take on ``model``, whose held-out text has at most ``held_tokens``
    tokens: its steps at ``step_s`` each (``pace``), and the model's passes over the held-out text: the four fifths it
    trains on collected, then the evaluation's three runs and its activations collected again."""
    from core.features.train import EVAL_EVERY, EVAL_TOKENS

    params = sum(p.numel() for p in model.parameters())
    collected = min(settings.max_vectors, held_tokens * (EVAL_EVERY - 1) // EVAL_EVERY)
    measured = 4 * min(EVAL_TOKENS, held_tokens // EVAL_EVERY)
    return settings.steps * step_s * STEP_OVERHEAD + (collected + measured) * 2 * params / JOB_FLOPS


def pace(d_in: int, settings: SAESettings, probe_steps: int = 3, rounds: int = 3) -> float:
    """Seconds one optimiser step of an SAE of ``settings`` on ``d_in``-wide activations takes here, on this
    thread's torch threads: a few steps timed on random activations (after one that warms the kernels up), the
    median of ``rounds`` timings (on a shared machine, one timing of 4 steps read 29 and 55 ms for the same SAE)."""
    g = torch.Generator().manual_seed(0)
    acts = torch.randn(settings.batch_size * 2, d_in, generator=g)  # (2B, d_in)
    sae = SAE(settings.config("blocks.0.hook_resid_post", d_in), generator=g)
    train_on(sae, acts, replace(settings, steps=1))  # warm-up: the first step pays for allocations
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        train_on(sae, acts, replace(settings, steps=probe_steps))
        times.append((time.perf_counter() - t0) / probe_steps)
    return sorted(times)[len(times) // 2]
