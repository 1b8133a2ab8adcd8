"""The arithmetic of the Switch heads off page: how long ranking every head will take (said before it starts),
the ranking itself, a layer at a time, and the loss on each copy of a repeated prompt.

The model work is core.analysis.interventions' (``layer_head_losses``, ``rank_from_losses``); which losses belong to
which copy is core.analysis.induction's (``copy_slices``). Layers and heads count from 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from core.analysis import interventions
from core.serve.fmt import head_label, nats_than
from core.analysis.induction import THRESHOLD, copy_slices
from core.analysis.interventions import HeadEffect, rank_from_losses

RANK_TIMED_TOKENS = 64  # the timing pass reads at most this many tokens: a long prompt is timed short, scaled up
COPY_GAIN = 0.1  # nats: a second copy cheaper than the first by less than this says the model barely copies


# ----------------------------------------------------------------------------- what it will cost

def rank_timing(config, n: int) -> tuple[int, int]:
    """(rows, length) of the forward pass to time for a ranking on n tokens. The ranking runs h rows at once,
    much faster per row than one row alone on a short prompt, so a batch of h rows is timed, on at most
    RANK_TIMED_TOKENS tokens."""
    return config.n_heads, min(n, RANK_TIMED_TOKENS)


def rank_seconds(config, n: int, timed: float) -> float:
    """The expected seconds of ranking every head on n tokens, from ``timed``, the seconds of the pass
    ``rank_timing`` names: ``head_losses_cost`` passes of the whole model, each costing one row of that batch,
    scaled in proportion from the length timed up to n (timed short, so that the estimate itself stays cheap)."""
    rows, length = rank_timing(config, n)
    # core.analysis.interventions' count, looked up at each call: a test makes it huge to see the page ask before ranking
    return interventions.head_losses_cost(config, n) * timed / rows * n / length


def continuation_read(n: int, steps: int, n_ctx: int, pass_seconds: Callable[[], float], budget_s: float) -> int:
    """How many of the prompt's n tokens a greedy continuation of ``steps`` tokens reads: all of them, unless the
    text outgrows n_ctx and the steps past it, each rerunning the whole window (``pass_seconds()`` each, asked
    only then: timing a pass costs one), would take over ``budget_s``; then the last n_ctx - steps, so that
    every step fits the window."""
    slid = n + steps - n_ctx  # new tokens that would each rerun the whole window of n_ctx positions
    if slid > 0 and slid * pass_seconds() > budget_s:
        return n_ctx - steps
    return n


# ----------------------------------------------------------------------------- the ranking

def per_head_losses(layer_losses: Callable[[int], np.ndarray], n_layers: int,
                    done: Callable[[int], None] | None = None) -> np.ndarray:
    """(L, h, n-1) per-token losses with each head off alone, from ``layer_losses(l)`` ((h, n-1), one layer:
    ``layer_head_losses``, or a page's cache of it); ``done(l + 1)`` after each layer, for a progress bar."""
    rows = []
    for layer in range(n_layers):
        rows.append(layer_losses(layer))
        if done is not None:
            done(layer + 1)
    return np.stack(rows)  # L x (h, n-1) -> (L, h, n-1)


@dataclass
class Ranking:
    """Every head switched off alone, ranked by how much it raises the mean loss (largest first)."""
    effects: list[HeadEffect]        # over the whole prompt
    second: list[HeadEffect] | None  # over the second copy's predictions, for a prompt written twice; else None
    base: float                      # the mean loss over the whole prompt with every head on

    @property
    def top(self) -> HeadEffect:
        return self.effects[0]

    @property
    def top_second(self) -> HeadEffect | None:
        """The head that matters most for the second copy (None without one)."""
        return max(self.second, key=lambda e: e.increase) if self.second else None


def rank(base: np.ndarray, per_head: np.ndarray, period: int | None = None) -> Ranking:
    """``per_head_losses``'s numbers, with ``base`` (n-1,) the losses with every head on, as a ``Ranking``; with
    ``period``, the prompt is that many tokens written twice and the second copy is ranked on its own too."""
    second = rank_from_losses(base, per_head, copy_slices(period)[1]) if period else None
    return Ranking(effects=rank_from_losses(base, per_head), second=second, base=float(base.mean()))


# ----------------------------------------------------------------------------- a prompt written twice

def copy_means(losses: np.ndarray, period: int) -> tuple[float, float]:
    """(first copy, second copy): the mean of a repeated prompt's next-token losses (n-1,) over each copy's
    predictions (``copy_slices``)."""
    first, second = copy_slices(period)
    return float(losses[first].mean()), float(losses[second].mean())


def copy_table(before: np.ndarray, after: np.ndarray, period: int) -> dict[str, list[float]]:
    """The page's table of a prompt written twice: column -> [with every head on, with the heads off], the mean
    loss on each copy and the drop from the first to the second (what copying earns)."""
    rows = [copy_means(before, period), copy_means(after, period)]
    return {"first copy": [f for f, _ in rows], "second copy": [s for _, s in rows],
            "drop (first − second)": [f - s for f, s in rows]}


def reads_first_copy(gain: float) -> bool:
    """Whether a drop of ``gain`` nats from the first copy to the second says the model copies."""
    return gain > COPY_GAIN


# ----------------------------------------------------------------------------- what the numbers say

def copy_verdict(gain_on: float, gain_off: float, off: str) -> str:
    """The caption under the table of a prompt written twice: what the drop from the first copy to the second
    says with every head on, and with the heads ``off`` (their label) switched off."""
    verdict = ("the model reads the first copy to predict the second" if reads_first_copy(gain_on) else
               "the model barely uses the first copy: it has no working induction head")
    return (f"With all heads on, the loss on the second copy is {nats_than(gain_on, 'on the first')}: {verdict}. "
            f"With {off} it is {nats_than(gain_off, 'on the first')}. An induction head shows as a large drop that "
            "shrinks when the head is switched off.")


def ranking_text(ranking: Ranking, induction: np.ndarray, mode: str) -> str:
    """The Markdown under the ranking: which head matters most, and for a prompt written twice, which matters
    most for the second copy and whether it is an induction head (its score in ``induction``, (L, h))."""
    top, s = ranking.top, ranking.top_second
    text = (f"Each head switched off alone ({mode}), every other head on. The rise is the mean loss with the head off "
            f"minus {ranking.base:.3f} nats with all heads on. Here **{head_label(top.layer, top.head)}** "
            f"matters most: {top.increase:+.3f} nats over the whole prompt.")
    if s is None:
        return text
    score = float(induction[s.layer, s.head])
    return text + f" On the second copy alone it is **{head_label(s.layer, s.head)}** ({s.increase:+.3f} nats), " + (
        f"an induction head (score {score:.2f}): the head that copies from the first copy." if score >= THRESHOLD
        else f"which is no induction head (score {score:.2f}): it matters for reading text in general, not for "
             "copying.")


def continuation_note(read: int, n: int, steps: int, n_ctx: int, pass_seconds: float, unit: str, units: str) -> str:
    """Why a continuation reads only the last ``read`` of the prompt's n tokens (``continuation_read``)."""
    return (f"The continuations read the last {read:,} of your {n:,} {units}, so that {steps} new ones fit in the "
            f"context of {n_ctx:,}: past it the window slides, and every new {unit} would rerun all {n_ctx:,} "
            f"positions (about {pass_seconds:.1f} s each on this server).")


def rank_cost_note(config, n: int, expected: float, units: str) -> str:
    """What a ranking on n tokens will cost, said before it starts: passes of the model and seconds."""
    passes = interventions.head_losses_cost(config, n)
    return (f"Ranking switches each of the {config.n_layers * config.n_heads} heads off in turn: on this prompt of "
            f"{n:,} {units} that is about {passes:.0f} forward passes of the whole model, **about {expected:.0f} s** "
            "on this server now.")
