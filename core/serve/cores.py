"""The server's one budget of cores: page runs (the compute gate's lanes, core.serve.gate) and background jobs
(core.jobs) all draw from it, so that nothing starts on a core another holds.

``cores`` is what the server may keep busy (``TE_CORES``, default the CPU count). Jobs together hold at most
``job_cores`` of them (``TE_JOB_CORES``, default one fewer than ``cores``, at least 1): a training run takes minutes,
and a page run must never wait minutes behind one. A page run takes one core, at once if one is free
(``try_take_page``); the gate polls again otherwise. A job asks for its cores with ``claim``: it gets them when they
are free and every job that asked before it has its own, else it waits in line, and ``Claim.ahead`` says how many
jobs are in line before it (the page's "queued, 2 ahead"). A job at the head of the line that waits only for cores
held by page runs keeps them: no new page run takes them (page runs last a second, so it waits a second, and a
steady stream of pages cannot starve it).

A granted claim calls its ``on_grant`` (outside the lock, on the thread that freed the cores), so a queued job
starts by itself.
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Callable

CORES_ENV = "TE_CORES"
JOB_CORES_ENV = "TE_JOB_CORES"


def _int_env(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, "") or default))
    except ValueError:
        return max(1, default)


class Claim:
    """A job's request for ``n`` cores: ``granted`` once it holds them, ``ahead`` jobs in line before it while it
    waits (None once granted or given up). ``release()`` gives the cores back, or leaves the line."""

    def __init__(self, budget: "CoreBudget", n: int, on_grant: Callable[[], None] | None, holder=None):
        self.budget, self.n, self.on_grant, self.holder = budget, n, on_grant, holder
        self.granted = False
        self.released = False
        self.number = 0  # arrival order, set by the budget

    @property
    def ahead(self) -> int | None:
        return self.budget.ahead(self)

    def release(self):
        self.budget.release(self)


class CoreBudget:
    def __init__(self, cores: int | None = None, job_cores: int | None = None):
        self.cores = max(1, int(cores or os.cpu_count() or 1))
        self.job_cores = max(1, min(self.cores, int(job_cores or max(1, self.cores - 1))))
        self._lock = threading.Lock()
        self._pages: list[threading.Thread] = []  # a page run's thread per core it holds
        self._held: list[Claim] = []     # granted job claims
        self._line: list[Claim] = []     # waiting job claims, first come first
        self._numbers = itertools.count()

    @classmethod
    def from_env(cls) -> "CoreBudget":
        cores = _int_env(CORES_ENV, os.cpu_count() or 1)
        return cls(cores, _int_env(JOB_CORES_ENV, max(1, cores - 1)))

    # --- reading
    @property
    def job_held(self) -> int:
        with self._lock:
            return sum(c.n for c in self._held)

    @property
    def page_held(self) -> int:
        with self._lock:
            self._reclaim()
            return len(self._pages)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._line)

    def share(self, want: int) -> int:
        """The cores a job asking for ``want`` is given: never more than jobs may hold together."""
        return max(1, min(int(want), self.job_cores))

    def ahead(self, claim: Claim) -> int | None:
        with self._lock:
            return self._line.index(claim) if claim in self._line else None

    def _reclaim(self):
        """Under the lock: cores of page threads that ended without giving them back are free again."""
        self._pages = [t for t in self._pages if t.is_alive()]

    def _free(self) -> int:
        self._reclaim()
        return self.cores - len(self._pages) - sum(c.n for c in self._held)

    def _reserved(self) -> int:
        """Under the lock: cores kept for the head of the line when only page runs stand in its way."""
        if not self._line:
            return 0
        head = self._line[0]
        fits_share = sum(c.n for c in self._held) + head.n <= self.job_cores
        return head.n if fits_share else 0

    # --- page runs
    def try_take_page(self) -> bool:
        """One core for this thread's page run, if one is free and not kept for a waiting job. True if taken."""
        with self._lock:
            if self._free() - self._reserved() < 1:
                return False
            self._pages.append(threading.current_thread())
            return True

    def give_page(self, thread: threading.Thread | None = None):
        """Give back a core ``thread`` (default: this one) holds for a page run; nothing if it holds none (a core
        of a thread that ended is taken back by the budget itself)."""
        thread = thread or threading.current_thread()
        with self._lock:
            if thread in self._pages:
                self._pages.remove(thread)
            granted = self._grant()
        _notify(granted)

    def regrant(self):
        """Grant what the line can get now (cores of ended page threads included); the job watchdog calls it."""
        with self._lock:
            granted = self._grant()
        _notify(granted)

    # --- jobs
    def claim(self, n: int, on_grant: Callable[[], None] | None = None, holder=None) -> Claim:
        """Ask for ``n`` cores (at most ``job_cores``); granted at once when free and nobody waits, else queued.
        ``on_grant`` runs once they are granted later (not when granted here: the caller reads ``granted``)."""
        c = Claim(self, self.share(n), on_grant, holder)
        with self._lock:
            c.number = next(self._numbers)
            self._line.append(c)
            granted = self._grant()
        _notify([g for g in granted if g is not c])
        return c

    def release(self, claim: Claim):
        with self._lock:
            claim.released = True
            if claim in self._line:
                self._line.remove(claim)
            if claim in self._held:
                self._held.remove(claim)
            claim.granted = False
            granted = self._grant()
        _notify(granted)

    def _grant(self) -> list[Claim]:
        """Under the lock: grant the line's claims from its head while they fit; returns those granted."""
        granted = []
        while self._line:
            head = self._line[0]
            if sum(c.n for c in self._held) + head.n > self.job_cores or head.n > self._free():
                break  # first come first: nobody passes the head of the line
            self._line.pop(0)
            self._held.append(head)
            head.granted = True
            granted.append(head)
        return granted


def _notify(claims: list[Claim]):
    for c in claims:
        if c.on_grant is not None:
            c.on_grant()


_BUDGET: CoreBudget | None = None
_BUDGET_LOCK = threading.Lock()


def server_budget() -> CoreBudget:
    """The server's budget, made from the environment on first use."""
    global _BUDGET
    with _BUDGET_LOCK:
        if _BUDGET is None:
            _BUDGET = CoreBudget.from_env()
        return _BUDGET


def set_server_budget(budget: CoreBudget | None) -> CoreBudget | None:
    """Replace the server's budget (tests; None: made from the environment again); returns the previous one."""
    global _BUDGET
    with _BUDGET_LOCK:
        previous, _BUDGET = _BUDGET, budget
        return previous
