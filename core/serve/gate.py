"""A queue you can see: at most ``slots`` heavy computations run at once, the others wait their turn.

Thirty students typing at once on a two-core server all get a share of the same cores: when every page run
computes at the same time, every one of them finishes late (processor sharing). A gate with as many slots as
cores lets the first arrivals finish first, in arrival order, and tells each waiting caller how many are ahead
of it, so the page can say "queued, 3 ahead" instead of a spinner that says nothing. The queue is bounded: past
``max_waiting`` callers, ``GateFull`` says the server is saturated.

Entering is re-entrant per thread (a gated section that calls another one does not wait for itself), and a caller
that is interrupted while it waits (a Streamlit rerun raises inside ``on_wait``) leaves the queue. A slot whose
thread has ended without giving it back (a script thread that died) is taken back at the next arrival. Besides the
``enter`` block, ``acquire`` and ``release`` let a slot be held from one point of a thread's work to another (a
page takes it where its heavy part begins; the app's frame gives it back when the page's run ends, however it ends).

``TE_COMPUTE_SLOTS`` sets the slots of the app's gate (default: the CPU count; 0 turns the gate off).

With a ``budget`` (core.serve.cores.CoreBudget, the server's one budget of cores), a slot also takes one of the
budget's cores, and waits while background jobs hold them all: the gate's lanes and the jobs share the cores.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator


SLOTS_ENV = "TE_COMPUTE_SLOTS"


def gate_slots() -> int:
    """The app's slots: ``TE_COMPUTE_SLOTS`` (0: no gate), default the CPU count."""
    try:
        return max(0, int(os.environ.get(SLOTS_ENV, "") or (os.cpu_count() or 1)))
    except ValueError:
        return os.cpu_count() or 1


class GateFull(RuntimeError):
    """More callers wait than the gate's bound allows."""


class Gate:
    def __init__(self, slots: int | None = None, max_waiting: int = 64, budget=None):
        self.budget = budget  # a CoreBudget, or None: the gate's slots alone limit it
        self.slots = max(1, int(slots or os.cpu_count() or 1))
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()   # tickets of the waiting callers, first come first
        self._running = 0
        self._tickets = itertools.count()
        self._owners: dict[int, threading.Thread] = {}  # the threads holding a slot

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def running(self) -> int:
        """Slots held by live threads."""
        with self._cond:
            self._reclaim()
            return self._running

    def held(self) -> bool:
        """Whether this thread holds a slot."""
        # the thread itself, not only its id: a new thread may get the id of one that died holding a slot
        return self._owners.get(threading.get_ident()) is threading.current_thread()

    def acquire(self, on_wait: Callable[[int], None] | None = None, poll_s: float = 0.2) -> int:
        """Take a slot for this thread until ``release`` (nothing happens if it holds one already); returns how
        many callers were in line ahead on arrival. ``on_wait`` as for ``enter``."""
        if self.held():
            return 0
        return self._wait_for_slot(on_wait, poll_s)

    def release(self) -> bool:
        """Give back this thread's slot, if it holds one (whatever the depth of ``enter`` blocks). True if it did."""
        if not self.held():
            return False
        self._give_back()
        return True

    def _give_back(self):
        with self._cond:
            if self._owners.pop(threading.get_ident(), None) is not None:
                self._running -= 1
                self._give_core()
            self._cond.notify_all()

    def _try_take(self) -> bool:
        """Under the lock: this thread takes a free slot (and a core of the budget) if there is one."""
        if self._running >= self.slots or (self.budget is not None and not self.budget.try_take_page()):
            return False
        self._running += 1
        self._owners[threading.get_ident()] = threading.current_thread()
        return True

    def _give_core(self, thread: threading.Thread | None = None):
        if self.budget is not None:
            self.budget.give_page(thread)

    def _reclaim(self):
        """Under the lock: slots of threads that ended without giving them back are free again."""
        for ident, thread in list(self._owners.items()):
            if not thread.is_alive():
                del self._owners[ident]
                self._running -= 1
                self._give_core(thread)

    @contextmanager
    def enter(self, on_wait: Callable[[int], None] | None = None, poll_s: float = 0.2) -> Iterator[int]:
        """Hold a slot for the block; yields how many callers were ahead on arrival. While waiting,
        ``on_wait(n_ahead)`` is called on arrival and whenever the number ahead changes (not under the lock: it
        may draw on a page, or raise to abandon the wait)."""
        took = not self.held()  # an outer block of this thread holds the slot already: it gives it back
        ahead = self.acquire(on_wait, poll_s)
        try:
            yield ahead
        finally:
            if took:
                self.release()

    def _wait_for_slot(self, on_wait, poll_s: float) -> int:
        """Take a slot, waiting in line if need be; returns how many callers were in line ahead on arrival."""
        with self._cond:
            self._reclaim()
            if not self._queue and self._try_take():
                return 0
            if len(self._queue) >= self.max_waiting:
                raise GateFull(f"{len(self._queue)} computations are already waiting")
            ticket = next(self._tickets)
            self._queue.append(ticket)
            arrived_behind = len(self._queue) - 1
        told = None
        try:
            while True:
                with self._cond:
                    self._reclaim()
                    ahead = self._queue.index(ticket)
                    if ahead == 0 and self._try_take():
                        self._queue.popleft()
                        self._cond.notify_all()  # the next in line may fit in a slot too
                        return arrived_behind
                if on_wait is not None and ahead != told:
                    on_wait(ahead)  # outside the lock: it may draw, or raise to give up
                    told = ahead
                with self._cond:
                    # a core the budget refused frees without a notify here: the wait's poll_s finds it
                    if self._queue.index(ticket) == ahead and not (ahead == 0 and self._running < self.slots
                                                                   and self.budget is None):
                        self._cond.wait(poll_s)
        except BaseException:
            with self._cond:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
            raise
