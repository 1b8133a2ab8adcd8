"""Induction heads: the probe that measures them, the data that grows them, the log that watches them form.

An induction head completes patterns it has seen earlier in the same context: having seen ``... A B ...``,
at a later ``A`` it attends to the ``B`` that followed the earlier ``A`` and copies it. The probe is a
sequence of distinct random tokens written twice; in the second copy only that move predicts anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.picks import best_of, nan_argmax

PROBE_SEQS = 8      # sequences in the probe
PROBE_PERIOD = 50   # distinct random tokens per copy
THRESHOLD = 0.30    # an induction score at or above this counts as an induction head


def repeat_probe(vocab_size: int, n_seqs: int = PROBE_SEQS, period: int = PROBE_PERIOD, seed: int = 0,
                 choices=None) -> torch.Tensor:
    """(n_seqs, 2 * period) token ids: per row, ``period`` distinct random tokens, then the same tokens again.
    Distinct, so that every query of the second copy has exactly one earlier occurrence to look back at.
    ``choices``: the ids to draw from (default: the whole vocabulary), e.g. a BPE's tokens that are whole text."""
    pool = torch.arange(vocab_size) if choices is None else torch.as_tensor(list(choices), dtype=torch.long)
    if period > len(pool):
        raise ValueError(f"{period} distinct tokens need a vocabulary of at least {period} (got {len(pool)})")
    g = torch.Generator().manual_seed(seed)
    first = torch.stack([pool[torch.randperm(len(pool), generator=g)[:period]] for _ in range(n_seqs)])  # (S, T)
    return torch.cat([first, first], dim=1)  # (S, 2T)


def probe_period(n_ctx: int, vocab_size: int | None = None) -> int:
    """The probe's period for a model: 50 where context and vocabulary (the ids the probe draws from; None: no
    limit) allow, else the most that fits."""
    return max(1, min(PROBE_PERIOD, n_ctx // 2, n_ctx if vocab_size is None else vocab_size))


def probe_choices(tokenizer) -> list[int] | None:
    """The ids a model's probe draws from: for a BPE, its tokens that are whole printable text
    (``readable_ids``); for characters (or no tokenizer), None, every id. Why not a BPE's whole vocabulary:
    a byte-level BPE holds all 256 bytes, and a corpus in English never uses most of the non-ASCII ones nor
    any piece of a character it lacks. Their embedding rows never received a gradient, so a probe made of
    them measures what a head does with untrained rows, not what it learned (its first-copy loss is far
    above log m); whole tokens are also what a page can show as text."""
    return None if tokenizer is None else tokenizer.readable_ids()


def model_period(model, tokenizer=None) -> int:
    """The period of ``model_probe`` for ``model``: ``probe_period`` of its context and of the ids the probe
    draws from (``probe_choices(tokenizer)``), the number a page states of the probe."""
    return _period(model.config, probe_choices(tokenizer))


def _period(config, choices) -> int:
    return probe_period(config.n_ctx, config.vocab_size if choices is None else len(choices))


def model_probe(model, tokenizer=None, n_seqs: int = PROBE_SEQS, period: int | None = None,
                seed: int = 0) -> torch.Tensor:
    """The probe every head of ``model`` is measured on (the pages and the training log alike): ``repeat_probe``
    drawn from ``probe_choices(tokenizer)``, its period sized for the model (``model_period``) unless given."""
    c = model.config
    choices = probe_choices(tokenizer)  # once: a BPE's readable ids take a pass over its whole vocabulary
    return repeat_probe(c.vocab_size, n_seqs=n_seqs, period=period or _period(c, choices), seed=seed,
                        choices=choices)


def copy_slices(period: int) -> tuple[slice, slice]:
    """Slices of a repeated sequence's next-token losses (entry i predicts token i + 1), period T: predictions
    of first-copy tokens 1..T-1, and of second-copy tokens T+1..2T-1. Token T, the first of the second copy,
    is left out: nothing before it says which token starts the copy."""
    return slice(0, period - 1), slice(period, 2 * period - 1)


@dataclass
class HeadScores:
    previous_token: np.ndarray   # (L, h) mean weight from each query to the token just before it
    induction: np.ndarray        # (L, h) mean weight from each second-copy query to the key after its first occurrence
    first_copy_loss: float       # mean next-token loss (nats) on predictions of first-copy tokens
    second_copy_loss: float      # the same on the second copy, where an induction head can copy

    @property
    def in_context_gain(self) -> float:
        return self.first_copy_loss - self.second_copy_loss

    def best_head(self) -> tuple[int, int]:
        """(layer, head) with the highest induction score, NaN skipped (``core.analysis.picks.nan_argmax``);
        ValueError when every score is NaN (a model whose attention is not a number: no head to name)."""
        return _best(self.induction, "induction")

    def previous_token_head(self) -> tuple[int, int]:
        """(layer, head) with the highest previous-token score, NaN skipped; ValueError when every one is NaN."""
        return _best(self.previous_token, "previous-token")


def _best(table: np.ndarray, what: str) -> tuple[int, int]:
    at = nan_argmax(table)
    if at is None:
        raise ValueError(f"every head's {what} score is NaN (the model's attention is not a number): no best head")
    return at[0], at[1]


def induction_score(pattern: np.ndarray | torch.Tensor, period: int) -> np.ndarray:
    """The induction score, (..., n, n) -> (...): on a sequence whose second half repeats its first (period T),
    the mean over the second-copy queries i in [T, 2T) of a[i, i - T + 1], the weight on the key right after
    the query token's earlier occurrence. The one measure of the pages and the training log."""
    a = torch.as_tensor(pattern, dtype=torch.float64)
    n = a.shape[-1]
    if n < 2 * period:
        raise ValueError(f"the pattern covers {n} positions, fewer than two copies of period {period}")
    rows = torch.arange(period, 2 * period)
    return a[..., rows, rows - period + 1].mean(-1).numpy()


def stripe_scores(pattern: np.ndarray | torch.Tensor, period: int) -> tuple[np.ndarray, np.ndarray]:
    """From a (B, ..., n, n) pattern of repeated sequences (period T), the previous-token score (mean of
    a[i, i-1] over i >= 1) and the ``induction_score``, both averaged over the batch: (B, ...) -> (...)."""
    a = torch.as_tensor(pattern, dtype=torch.float64)
    prev = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).mean(-1)       # (B, ...) over queries 1..n-1
    return prev.mean(0).numpy(), induction_score(a, period).mean(0)


@torch.no_grad()
def head_scores(model, probe: torch.Tensor | None = None, seed: int = 0, tokenizer=None) -> HeadScores:
    """Measure every head of ``model`` on ``probe`` (default: ``model_probe(model, tokenizer)``, the probe of
    the pages and the training log; pass the model's tokenizer, or a BPE model is probed on bytes it never read)."""
    if probe is None:
        probe = model_probe(model, tokenizer, seed=seed)
    period = probe.shape[1] // 2
    was_training = model.training
    model.eval()
    logits, cache = model.run_with_cache(probe, names=lambda name: name.endswith("attn.hook_pattern"))
    model.train(was_training)
    pats = cache.layer("attn.hook_pattern", model.config.n_layers)  # L x (S, h, n, n)
    pats = torch.stack(pats, dim=1)  # -> (S, L, h, n, n)
    prev, ind = stripe_scores(pats, period)
    # position i predicts token i + 1; copy_slices says which predictions belong to which copy
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), probe[:, 1:], reduction="none")  # (S, 2T-1)
    first, second = copy_slices(period)
    return HeadScores(previous_token=prev, induction=ind, first_copy_loss=loss[:, first].mean().item(),
                      second_copy_loss=loss[:, second].mean().item())


def score_rows(step: int, scores: HeadScores) -> list[dict]:
    """One heads.csv row per (layer, head) for a measurement at ``step``."""
    L, h = scores.induction.shape
    return [{"step": step, "layer": l, "head": k,
             "previous_token": round(float(scores.previous_token[l, k]), 4),
             "induction": round(float(scores.induction[l, k]), 4),
             "first_copy_loss": round(scores.first_copy_loss, 4),
             "second_copy_loss": round(scores.second_copy_loss, 4),
             "in_context_gain": round(scores.in_context_gain, 4)}
            for l in range(L) for k in range(h)]


class HeadRecorder:
    """Measures the heads on one fixed probe (``model_probe``: give the run's tokenizer) every ``every`` steps
    and keeps the rows (for heads.csv)."""

    def __init__(self, model, every: int = 100, seed: int = 0, tokenizer=None):
        self.probe = model_probe(model, tokenizer, seed=seed)
        self.every = max(1, int(every))
        self.rows: list[dict] = []

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def record(self, model, step: int) -> HeadScores:
        scores = head_scores(model, self.probe)
        self.rows.extend(score_rows(step, scores))
        return scores


def formation_step(rows: list[dict], threshold: float = THRESHOLD) -> int | None:
    """The first recorded step at which some head's induction score reached ``threshold``; None if never."""
    steps = sorted({r["step"] for r in rows if r.get("induction", 0.0) >= threshold})
    return steps[0] if steps else None


def induction_summary(rows: list[dict], threshold: float = THRESHOLD) -> dict:
    """What a model card states about its heads: the step the head formed, and the final best head (NaN scores
    skipped; when every score of a kind is NaN its head and score are None)."""
    last = max(r["step"] for r in rows)
    final = [r for r in rows if r["step"] == last]
    best = best_of(final, lambda r: r.get("induction", math.nan))
    prev = best_of(final, lambda r: r.get("previous_token", math.nan))
    head = lambda r: None if r is None else [r["layer"], r["head"]]  # noqa: E731
    return {"threshold": threshold, "formed_at_step": formation_step(rows, threshold), "measured_at_step": last,
            "best_head": head(best), "best_induction": None if best is None else best["induction"],
            "best_previous_token_head": head(prev),
            "best_previous_token": None if prev is None else prev["previous_token"],
            "first_copy_loss": final[0].get("first_copy_loss"), "second_copy_loss": final[0].get("second_copy_loss")}


# ----------------------------------------------------------------------------- data with repeats

def add_repeats(windows: torch.Tensor, fraction: float, generator: torch.Generator, vocab_size: int,
                min_span: int = 8, max_span: int = 40, random_share: float = 1.0,
                pool: torch.Tensor | None = None) -> torch.Tensor:
    """A copy of ``windows`` (B, n) in which about ``fraction`` of the rows hold a repeated span: a span of
    ``min_span``..``max_span`` tokens at a random place is written again at a random later place, so that
    only "find the earlier copy of my token, then read what followed it" predicts the second copy. With
    probability ``random_share`` the span is first overwritten with random tokens (nothing but the copy
    predicts them); otherwise it is the row's own text. Distances vary row to row: no fixed offset pays.
    ``pool``: the ids random tokens are drawn from, uniformly (default: every id below ``vocab_size``)."""
    out = windows.clone()
    B, n = out.shape
    if fraction <= 0 or n < 2 * min_span:
        return out
    top = min(max_span, n // 2)
    for r in range(B):
        u = torch.rand(3, generator=generator).tolist()
        if u[0] >= fraction:
            continue
        span = int(torch.randint(min_span, top + 1, (1,), generator=generator))
        a = int(torch.randint(0, n - 2 * span + 1, (1,), generator=generator))           # first copy at a
        b = int(torch.randint(a + span, n - span + 1, (1,), generator=generator))       # second at b >= a + span
        if u[1] < random_share:
            if pool is None:
                out[r, a:a + span] = torch.randint(vocab_size, (span,), generator=generator)
            else:
                out[r, a:a + span] = pool[torch.randint(len(pool), (span,), generator=generator)]
        out[r, b:b + span] = out[r, a:a + span]
    return out
