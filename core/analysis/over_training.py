"""Every view at every step: the same prompt run through each snapshot a model kept of its training
(core.nn.snapshots), reduced to what the Over training page draws. One forward pass with every intermediate
(core.analysis.trace) per snapshot; the rest is arithmetic on it.

One snapshot at a time: each is loaded (when given as a loader), traced, reduced to the few numbers the charts draw
and let go before the next, so the work's memory is one model and one trace, whatever the number of snapshots
(``view_memory`` estimates it before anything runs). A 9.5 M-parameter model's 21 snapshots, all loaded with all
their traces at once, took a server from 0.48 to 2.0 GB; 200 of them, past 11.9 GB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.induction import copy_slices, induction_score
from core.analysis.interventions import repeat_period
from core.analysis.picks import nan_argmax
from core.analysis.trace import direct_logit_attribution, lens_accuracy, lens_top, trace, trace_bytes
from core.nn.checkpoint import CheckpointError
from core.nn.params import count_parameters

MAX_VIEW_SNAPSHOTS = 24  # snapshots read per view: a default run keeps 21; more are thinned, first and last kept


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
    skipped: list = None          # [(step, why)] snapshots that could not be loaded (CheckpointError.shown), left out
    strip_head: tuple | None = None   # (layer, head) whose patterns were kept: ``best_induction_head``
    strip_steps: list = None          # (K,) the steps kept of it (those of ``strip`` that loaded)
    strip_patterns: np.ndarray = None  # (K, n, n) its attention pattern at each of them

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


def _model(m):
    """A model, from a model or from a loader that makes one (called only now: one snapshot in memory at a time)."""
    return m if isinstance(m, torch.nn.Module) else m()


@torch.no_grad()
def _reduce(model, x: torch.Tensor, ids: list[int], target: int | None) -> tuple[int, dict]:
    """(target, the numbers the charts draw) of one snapshot; its trace exists only inside this call."""
    tr = trace(model, x)
    if target is None:
        target = int(tr.logits[0, -1].argmax())
    logits = tr.logits[0, :-1]                                             # (n-1, m)
    row = {"loss": F.cross_entropy(logits, x[0, 1:], reduction="none").numpy()}
    pat = torch.stack(tr.pattern, dim=1)[0].double().numpy()               # L x (1, h, n, n) -> (L, h, n, n)
    row["prev"] = np.diagonal(pat, offset=-1, axis1=-2, axis2=-1).mean(-1)  # (L, h) over queries 1..n-1
    row["ind"], row["period"] = prompt_induction(pat, ids)
    row["pat"] = pat
    row["acc"] = lens_accuracy(lens_top(model, tr, k=1), ids)
    a = direct_logit_attribution(model, tr, target, len(ids) - 1)
    row["writers"], row["attr"] = a.names, a.values
    return target, row


@torch.no_grad()
def over_training(models: list[tuple[int, object]], ids: list[int], target: int | None = None,
                  strip: list[int] = ()) -> OverTraining:
    """Run ``ids`` through every (step, model) of ``models`` (ascending steps). A model may be given as a loader
    (no argument, returns the model; may raise CheckpointError): each is then loaded only when its turn comes and
    let go after it, and one that cannot be loaded is left out and named in ``skipped``. ``target``: the token
    whose logit at the last position is attributed at every step (default: the last loaded model's favourite, so
    that every step explains the same prediction). ``strip``: steps at which the attention pattern of the head
    that ``best_induction_head`` names is kept (the page's strip, drawn without reading those snapshots again).
    Fewer than two loaded: ``steps`` says so (empty arrays)."""
    if len(ids) < 2:
        raise ValueError("the prompt needs at least 2 tokens: one prediction to score")
    x = torch.tensor([ids])
    rows, skipped, best, kept = [], [], None, []
    for step, m in reversed(models):  # the last first: its favourite is the token every step explains
        try:
            model = _model(m)
        except CheckpointError as e:  # one bad file: named, and the other snapshots still draw
            skipped.append((step, e.shown))
            continue
        target, row = _reduce(model, x, ids, target)
        del model  # a loaded snapshot goes now, before the next is read
        if best is None:  # the last snapshot: the head the strip opens on
            at = nan_argmax(row["ind"])
            best = (0, 0) if at is None else (int(at[0]), int(at[1]))
        pat = row.pop("pat")  # (L, h, n, n): only one head's, at the strip's steps, is kept
        if step in strip:
            kept.append((step, pat[best].astype(np.float32)))
        rows.append((step, row))
    rows.reverse()
    skipped.reverse()
    kept.reverse()

    def stacked(name):
        return np.stack([r[name] for _, r in rows]) if rows else np.zeros((0,))

    return OverTraining(steps=[s for s, _ in rows], token_loss=stacked("loss"), previous_token=stacked("prev"),
                        induction=stacked("ind"), lens_accuracy=stacked("acc"),
                        writers=rows[-1][1]["writers"] if rows else [], attribution=stacked("attr"),
                        target=-1 if target is None else target, period=rows[-1][1]["period"] if rows else None,
                        skipped=skipped, strip_head=best, strip_steps=[s for s, _ in kept],
                        strip_patterns=np.stack([p for _, p in kept]) if kept else np.zeros((0, len(ids), len(ids))))


@torch.no_grad()
def head_patterns(models: list[tuple[int, object]], ids: list[int], layer: int, head: int) -> np.ndarray:
    """(S, n, n) one head's attention pattern on ``ids`` at every snapshot (a model or a loader each, as for
    ``over_training``, one in memory at a time; a loader's CheckpointError is raised)."""
    x, name = torch.tensor([ids]), f"blocks.{layer}.attn.hook_pattern"
    return np.stack([_model(m).run_with_cache(x, names=[name])[1][name][0, head].numpy() for _, m in models])


def view_memory(config, snapshots: int, n_tokens: int, held: int = 1, strip: int = 12) -> int:
    """Bytes the Over training views of ``snapshots`` snapshots on a prompt of ``n_tokens`` need at their peak,
    estimated before anything runs, as the Training form estimates a run: ``held`` models in float32 at once (the
    one being read, and those a cache keeps: up to every snapshot), the float16 tensors of the file being read, one
    Trace (core.analysis.trace.trace_bytes) with the float64 patterns the head scores are taken from, and what is
    kept of every snapshot (the numbers the charts draw, and one head's patterns for the strip)."""
    params = count_parameters(config)["total"]
    L, h, n = config.n_layers, config.n_heads, n_tokens
    models = 4 * params * max(1, min(held, snapshots))
    reading = 2 * params + trace_bytes(config, n) + 8 * L * h * n * n
    writers = 1 + L * (h + 2)
    kept = 8 * snapshots * (n + 2 * L * h + L + 1 + writers) + 4 * min(strip, snapshots) * n * n
    return models + reading + kept


def pick_steps(steps: list[int], k: int) -> list[int]:
    """At most ``k`` of ``steps``, spread evenly over the list (the first and the last kept): small multiples of a
    head that fit a page's width."""
    if len(steps) <= k:
        return list(steps)
    idx = sorted({round(i * (len(steps) - 1) / (k - 1)) for i in range(k)})
    return [steps[i] for i in idx]
