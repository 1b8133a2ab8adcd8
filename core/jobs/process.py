"""A job's spawned process: started with nothing of the server's ``__main__`` to re-run, at a lower priority, and
how it ended in words. A spawned interpreter (never a fork of the threaded server) runs a training run
(core.training.training_job) outside the server's GIL; a study's process group (core.training.study_job) uses the
words too."""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import types

from core.jobs.runner import BACKGROUND_NICE

SPAWN = multiprocessing.get_context("spawn")
_START_LOCK = threading.Lock()  # guards the swap of __main__ in start


def lower_priority(pid: int, parent_nice: int):
    """Set process ``pid`` to BACKGROUND_NICE more than its parent's niceness (19 at most), unless it is lower
    already."""
    target = min(19, parent_nice + BACKGROUND_NICE)
    try:
        if os.getpriority(os.PRIO_PROCESS, pid) < target:
            os.setpriority(os.PRIO_PROCESS, pid, target)
    except OSError:  # gone already, or not ours to change: the job then runs at the priority it has
        pass


def start(proc):
    """``proc.start()`` with nothing for the new interpreter to re-run as its main module. Spawn runs the
    parent's ``__main__`` file again in the child, and during a script run Streamlit installs the app script
    there: the child would first build the whole app (import Streamlit, load the shipped model) in bare mode."""
    with _START_LOCK:
        main, bare = sys.modules["__main__"], types.ModuleType("__main__")
        sys.modules["__main__"] = bare
        try:
            proc.start()
            # lowered at once, from here: the new interpreter spends its first seconds importing torch, which at
            # normal priority competed with a class's first page visits (its own call comes after the imports)
            lower_priority(proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
        finally:
            if sys.modules["__main__"] is bare:  # a script run that started meanwhile installed its own
                sys.modules["__main__"] = main


def signal_name(number: int) -> str:
    """"SIGKILL" for 9; "signal 40" for a number without a name (Linux's real-time signals have none)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_words(code: int | None) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it, as Python reports it)."""
    if code is not None and code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exit code {code}"
