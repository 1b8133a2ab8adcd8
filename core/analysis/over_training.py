"""Every view at every step: the same prompt run through each snapshot a model kept of its training
(core.nn.snapshots), reduced to what the Over training page draws. One forward pass with every intermediate
(core.analysis.trace) per snapshot; the rest is arithmetic on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.induction import copy_slices, induction_score
from core.analysis.interventions import repeat_period
from core.analysis.picks import nan_argmax
from core.analysis.trace import direct_logit_attribution, lens_accuracy, lens_top, trace


@dataclass
class OverTraining:
    """The prompt at each snapshot. S snapshots, n positions, L layers, h heads."""
    steps: list[int]              # (S,) the snapshots' steps, ascending
    token_loss: np.ndarray        # (S, n-1) nats: the loss of predicting token i + 1 from position i
    previous_token: np.ndarray    # (S, L, h) mean weight from each query to the token just before it
    induction: np.ndarray         # (S, L, h) weight on the keys after earlier copies of the query token (NaN: none)
    lens_accuracy: np.ndarray     # (S, L+1) the share of positions whose lens favourite at each stage is right
    writers: list[str]            # (W,) the writers of the last prediction: embedding, each head, each MLP
    attribution: np.ndarray       # (S, W) each writer's share of the logit of ``target`` at the last position
    target: int                   # the token attributed: the final model's favourite after the prompt
    period: int | None            # T when the prompt is a text written twice (the classic induction score)

    @property
    def mean_loss(self) -> np.ndarray:
        return self.token_loss.mean(axis=1)  # (S,)

    def copy_losses(self) -> tuple[np.ndarray, np.ndarray] | None:
        """((S,), (S,)) mean loss on the first and on the second copy at each snapshot, for a prompt written twice
        (the probe's own split, core.analysis.induction.copy_slices); None for any other prompt."""
        if self.period is None:
            return None
        first, second = copy_slices(self.period)
        return self.token_loss[:, first].mean(axis=1), self.token_loss[:, second].mean(axis=1)

    def best_induction_head(self) -> tuple[int, int]:
        """(layer, head) with the highest induction score on the prompt at the last snapshot; (0, 0) when no token
        repeats (every score NaN)."""
        at = nan_argmax(self.induction[-1])  # over (L, h), NaN skipped
        return (0, 0) if at is None else (at[0], at[1])


def copy_keys(ids) -> np.ndarray:
    """(n, n) bool: key j is marked for query i when j <= i and token j - 1 equals token i, i.e. j follows an
    earlier copy of the query's token: where an induction head looks."""
    a = np.asarray(ids)
    n = len(a)
    same = a[None, :-1] == a[:, None]                      # (n, n-1): token j equals token i
    keys = np.zeros((n, n), bool)
    keys[:, 1:] = same                                     # key j + 1 follows token j
    # keys before the query only: a token that repeats its predecessor ("ll") would mark the query itself
    return keys & np.tril(np.ones((n, n), bool), k=-1)


def prompt_induction(pattern: np.ndarray, ids) -> tuple[np.ndarray, int | None]:
    """((L, h), period) the induction score of every head on the prompt itself, from its (L, h, n, n) pattern.
    On a text written twice (period T), the classic score: the mean weight of the second copy's queries on the key
    after their earlier occurrence. On any other prompt: the mean, over queries whose token occurred before, of the
    total weight on the keys right after those occurrences (NaN when no token repeats)."""
    period = repeat_period(list(ids))
    if period is not None:
        return induction_score(pattern, period), period
    keys = copy_keys(ids)                                  # (n, n)
    has = keys.any(axis=1)                                 # (n,) queries with an earlier copy
    if not has.any():
        return np.full(pattern.shape[:2], np.nan), None
    mass = (pattern * keys).sum(-1)                        # (L, h, n) weight on the marked keys
    return mass[..., has].mean(-1), None


@torch.no_grad()
def over_training(models: list[tuple[int, object]], ids: list[int], target: int | None = None) -> OverTraining:
    """Run ``ids`` through every (step, model) of ``models`` (ascending steps). ``target``: the token whose logit
    at the last position is attributed at every step (default: the last model's favourite, so that every step
    explains the same prediction)."""
    if len(ids) < 2:
        raise ValueError("the prompt needs at least 2 tokens: one prediction to score")
    x = torch.tensor([ids])
    traces = [(step, model, trace(model, x)) for step, model in models]
    if target is None:
        target = int(traces[-1][2].logits[0, -1].argmax())
    losses, prev, ind, acc, attr, period, writers = [], [], [], [], [], None, []
    for step, model, tr in traces:
        logits = tr.logits[0, :-1]                                         # (n-1, m)
        losses.append(F.cross_entropy(logits, x[0, 1:], reduction="none").numpy())
        pat = torch.stack(tr.pattern, dim=1)[0].double().numpy()           # L x (1, h, n, n) -> (L, h, n, n)
        prev.append(np.diagonal(pat, offset=-1, axis1=-2, axis2=-1).mean(-1))  # (L, h) over queries 1..n-1
        score, period = prompt_induction(pat, ids)
        ind.append(score)
        acc.append(lens_accuracy(lens_top(model, tr, k=1), ids))
        a = direct_logit_attribution(model, tr, target, len(ids) - 1)
        writers = a.names
        attr.append(a.values)
    return OverTraining(steps=[s for s, _, _ in traces], token_loss=np.stack(losses), previous_token=np.stack(prev),
                        induction=np.stack(ind), lens_accuracy=np.stack(acc), writers=writers,
                        attribution=np.stack(attr), target=target, period=period)


@torch.no_grad()
def head_patterns(models: list[tuple[int, object]], ids: list[int], layer: int, head: int) -> np.ndarray:
    """(S, n, n) one head's attention pattern on ``ids`` at every snapshot."""
    x = torch.tensor([ids])
    return np.stack([model(x, return_attn=True).attn[layer].pattern[0, head].numpy() for _, model in models])


def pick_steps(steps: list[int], k: int) -> list[int]:
    """At most ``k`` of ``steps``, spread evenly over the list (the first and the last kept): small multiples of a
    head that fit a page's width."""
    if len(steps) <= k:
        return list(steps)
    idx = sorted({round(i * (len(steps) - 1) / (k - 1)) for i in range(k)})
    return [steps[i] for i in idx]
