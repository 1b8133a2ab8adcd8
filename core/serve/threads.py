"""Torch's intra-op thread count, owned here: every place that sets it goes through these functions.

A classroom server runs many sessions at once, and this model's operations are too small for a second
thread to pay off: with the cores oversubscribed, one-token decoding steps ran about 40x slower with two
threads than with one. So page runs use one thread (``TE_TORCH_THREADS`` overrides it), training runs use
half the cores, and measurements that want a count of their own set it inside ``torch_threads``.
Torch keeps the setting per thread once a thread has started; a new thread inherits the latest value.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch

THREADS_ENV = "TE_TORCH_THREADS"


def page_threads() -> int:
    """Threads for one page run: ``TE_TORCH_THREADS``, default 1."""
    try:
        return max(1, int(os.environ.get(THREADS_ENV, "1") or 1))
    except ValueError:
        return 1


def training_threads() -> int:
    """Intra-op threads for one training run: half the cores. A run that takes every core collapses (twenty
    times slower, measured on two cores) the moment anything else wants one, because its threads spin at
    each barrier waiting for a partner that is not scheduled; half leaves room for the page, the other
    pages and a second session's run."""
    return max(1, (os.cpu_count() or 1) // 2)


def use_threads(n: int | None) -> int:
    """Set this thread's count to n (None: leave it) and return the count now in force."""
    if n:
        torch.set_num_threads(int(n))
    return torch.get_num_threads()


@contextmanager
def torch_threads(n: int | None):
    """Run torch on n intra-op threads inside the block (None: unchanged, nothing is set), then restore the
    previous count. The setting is also the default for threads started meanwhile, so in the server, where every
    session is a thread, a page passes None and works on its run's own count (core.analysis.cost, the scaling fit); only
    processes of their own (training, the study's workers, the command line) set one."""
    if n is None:
        yield torch.get_num_threads()
        return
    previous = torch.get_num_threads()
    use_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
