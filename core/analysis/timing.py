"""How long one forward pass takes on this server now: a page multiplies it by a count of passes to say, before
it starts, how long its work will take (ranking every head, text that slides past n_ctx).

The pass runs on the calling thread with the thread count it already has: setting one here would also set the
default of every thread started later, another session's page run included (see core.serve.threads).
"""
from __future__ import annotations

import time

import torch


@torch.no_grad()
def forward_seconds(model, rows: int, length: int, last_only: bool = False) -> float:
    """Seconds of one forward pass of ``rows`` sequences of ``length`` tokens. The tokens are all id 0: what a
    pass costs depends on the shapes, not on which tokens it reads. ``last_only``: the readout of the last
    position alone, as a step of text generation runs it."""
    idx = torch.zeros(rows, length, dtype=torch.long)  # (rows, length)
    t0 = time.perf_counter()
    model(idx, last_only=last_only)
    return time.perf_counter() - t0
