"""How fast this server trains, for the estimate the training page shows before a run starts.

Runs report the rate they reach (``observe_rate``), so the next estimate reflects the server as it is
now; before any run, a few steps of the lecture's model on synthetic text are timed once per process.
Rates are FLOP/s counted as 6·N per token (``core.analysis.cost.training_flops``).
"""
from __future__ import annotations

import threading
import time

import torch

from core.analysis.cost import training_flops
from core.nn.model import LECTURE
from core.nn.params import count_parameters
from core.serve.threads import training_threads, use_threads
from core.training.trainer import TrainConfig, Trainer

_RATE: dict[str, float] = {}
_RATE_LOCK = threading.Lock()


def observe_rate(n_params: int, tokens_per_s: float | None):
    """A run reports the tokens/s it reached."""
    if tokens_per_s:
        with _RATE_LOCK:
            _RATE["observed"] = training_flops(n_params, tokens_per_s)


def measured_flop_rate() -> tuple[float | None, str]:
    """(FLOP/s, how it was measured) for training on this server: the rate the latest run reached, else a
    quick measurement (a few steps of the lecture's model, once per process). (None, the reason) if the
    quick measurement failed."""
    with _RATE_LOCK:
        if "observed" in _RATE:
            return _RATE["observed"], "the latest training run on this server"
        if "quick" not in _RATE:
            # in a thread of its own, with the threads a run gets, so the page's thread keeps its setting
            worker = threading.Thread(target=_quick_rate, name="te-rate")
            worker.start()
            worker.join()
        if "quick" not in _RATE:
            return None, "the quick test of the lecture's model failed on this server"
        return _RATE["quick"], "a quick test of the lecture's model on this server"


def _quick_rate():
    """A few steps of the lecture's model on synthetic text; stores FLOP/s (6·N per token) in _RATE."""
    use_threads(training_threads())
    g = torch.Generator().manual_seed(0)
    chars = [chr(32 + i) for i in range(LECTURE.vocab_size)]
    text = "".join(chars[i] for i in torch.randint(len(chars), (4_000,), generator=g).tolist())
    batch = 8  # small: this runs while a page renders
    tr = Trainer(text, LECTURE.to_dict(), TrainConfig(batch_size=batch, steps=100, seed=0))
    tr.step()  # the first step pays for allocations
    t0 = time.perf_counter()
    for _ in range(2):
        tr.step()
    _RATE["quick"] = training_flops(count_parameters(tr.config)["total"], 2 * batch * LECTURE.n_ctx) / (time.perf_counter() - t0)
