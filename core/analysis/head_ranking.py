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
from core.analysis.picks import best_of

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
        return best_of(self.second, lambda e: e.increase) if self.second else None  # None too when every one is NaN


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


PREVIOUS_TOKEN = 0.5  # a previous-token score at or above this counts as a previous-token head

# the move no single score shows: what the ranking text says whenever it speaks of the second copy
CIRCUIT = ("An induction head cannot work alone: it needs a previous-token head in an earlier layer, which writes "
           "into every position the token just before it. The induction head's keys read that (K-composition), so "
           "a query for A finds the position after the earlier A; switching off either head breaks the copy.")


@dataclass(frozen=True)
class HeadRole:
    """What a head is, from its scores and what switching it off does to the second copy (``head_role``)."""
    kind: str                   # "induction", "feeds induction", "previous-token" or "other"
    text: str                   # the phrase the ranking text puts after the head's name
    feeds: tuple[int, int] | None = None  # for "feeds induction": the induction head whose keys it builds


def head_role(layer: int, head: int, previous_token: np.ndarray, induction: np.ndarray,
              second_rise: float) -> HeadRole:
    """The role of head (layer, head), from the scores of every head ((L, h) each) and ``second_rise``, what
    switching it off alone adds to the second copy's mean loss (nats). The rule:

    - induction score at or above THRESHOLD: an induction head;
    - else a previous-token score at or above PREVIOUS_TOKEN, an induction head in a later layer (any
      head of a layer after this one at or above THRESHOLD), and switching it off raises the
      second copy's loss by more than COPY_GAIN: a previous-token head feeding that induction head (the one with
      the highest score);
    - else a previous-token score at or above PREVIOUS_TOKEN: a previous-token head that, by its ablation or for
      want of a later induction head, is not seen feeding one;
    - else: neither, by its scores."""
    ind, prev = float(induction[layer, head]), float(previous_token[layer, head])
    if ind >= THRESHOLD:
        return HeadRole("induction", f"an induction head (score {ind:.2f}): the head that copies from the first copy.")
    later = [(float(induction[l, k]), (l, k)) for l in range(layer + 1, induction.shape[0])
             for k in range(induction.shape[1]) if float(induction[l, k]) >= THRESHOLD]
    if prev >= PREVIOUS_TOKEN and later and second_rise > COPY_GAIN:
        score, fed = max(later)
        return HeadRole("feeds induction",
                        f"a previous-token head (previous-token score {prev:.2f}, induction score {ind:.2f}) feeding "
                        f"the induction head {head_label(*fed)} (induction score {score:.2f}) in a later layer: it "
                        "builds the keys that head copies by, so switching it off breaks the copy too.", feeds=fed)
    if prev >= PREVIOUS_TOKEN:
        why = ("no later layer has an induction head for it to feed" if not later else
               f"switching it off barely moves the second copy ({second_rise:+.3f} nats), so it is not seen feeding "
               "the induction head")
        return HeadRole("previous-token", f"a previous-token head (previous-token score {prev:.2f}, induction score "
                                          f"{ind:.2f}): {why}.")
    return HeadRole("other", f"neither an induction head (induction score {ind:.2f}) nor a previous-token head "
                             f"(previous-token score {prev:.2f}): its scores show no part in copying, so what it does "
                             "for the second copy is likely what it does for any text.")


def feeders(second: list[HeadEffect], previous_token: np.ndarray, induction: np.ndarray,
            fed: tuple[int, int]) -> list[HeadEffect]:
    """The heads of ``second`` (the second copy's ranking) that ``head_role`` calls previous-token heads feeding
    the induction head ``fed``, largest rise first."""
    return sorted((e for e in second if head_role(e.layer, e.head, previous_token, induction, e.increase).feeds == fed),
                  key=lambda e: -e.increase)


def ranking_text(ranking: Ranking, induction: np.ndarray, mode: str,
                 previous_token: np.ndarray | None = None) -> str:
    """The Markdown under the ranking: which head matters most, and for a prompt written twice, which matters
    most for the second copy and what it is (``head_role``, from its scores in ``induction`` and
    ``previous_token``, (L, h) each; None: no previous-token scores, every head scored 0), and when that is the
    induction head, the previous-token heads that feed it."""
    top, s = ranking.top, ranking.top_second
    text = (f"Each head switched off alone ({mode}), every other head on. The rise is the mean loss with the head off "
            f"minus {ranking.base:.3f} nats with all heads on. Here **{head_label(top.layer, top.head)}** "
            f"matters most: {top.increase:+.3f} nats over the whole prompt.")
    if s is None:
        return text
    prev = np.zeros_like(induction) if previous_token is None else previous_token
    role = head_role(s.layer, s.head, prev, induction, s.increase)
    text += f" On the second copy alone it is **{head_label(s.layer, s.head)}** ({s.increase:+.3f} nats), {role.text}"
    if role.kind == "feeds induction":
        own = next(e for e in ranking.second if (e.layer, e.head) == role.feeds)
        text += (f" Switching off {head_label(*role.feeds)} itself adds {own.increase:+.3f} nats to the second copy"
                 + (": the previous-token head costs the copy more." if s.increase > own.increase else "."))
    if role.kind == "induction":
        fed = feeders(ranking.second, prev, induction, (s.layer, s.head))
        if fed:
            text += " Its keys are built by " + ", ".join(
                f"**{head_label(e.layer, e.head)}** (previous-token score {float(prev[e.layer, e.head]):.2f}, "
                f"{e.increase:+.3f} nats on the second copy when off)" for e in fed) + \
                f", {'a previous-token head' if len(fed) == 1 else 'previous-token heads'} in an earlier layer."
    if role.kind in ("induction", "feeds induction") or bool(np.any(induction >= THRESHOLD)):
        text += " " + CIRCUIT
    return text


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
