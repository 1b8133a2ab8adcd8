"""Attention, inspected: what each head computes on a prompt, and what the causal mask changes.

All arrays here are numpy in [head, query_pos, key_pos] order (TransformerLens' convention), one
prompt at a time. ``run_attention`` is the only function that touches the model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.induction import PROBE_SEQS, head_scores, probe_period, repeat_probe
from core.model import future_mask as model_future_mask
from core.sampling import entropy, temperature_softmax


@dataclass
class AttentionRun:
    ids: list[int]
    scores: list[np.ndarray]    # per layer (h, n, n): q_i.k_j/sqrt(d_k) for every (i, j), before the mask
    pattern: list[np.ndarray]   # per layer (h, n, n): weights after the masked softmax

    @property
    def n_layers(self) -> int:
        return len(self.scores)

    @property
    def n_heads(self) -> int:
        return self.scores[0].shape[0]


@torch.no_grad()
def run_attention(model, ids: list[int]) -> AttentionRun:
    """One forward pass with the attention returned. ``ids`` must be non-empty and at most n_ctx long."""
    if not ids:
        raise ValueError("the prompt is empty: there is nothing to attend to")
    out = model(torch.tensor([ids], dtype=torch.long), return_attn=True)
    return AttentionRun(
        ids=list(ids),
        scores=[rec.scores[0].double().numpy() for rec in out.attn],
        pattern=[rec.pattern[0].double().numpy() for rec in out.attn],
    )


def future_mask(n: int) -> np.ndarray:
    """(n, n) booleans, True where key j is in the future of query i (j > i): the model's own mask."""
    return model_future_mask(n).numpy()


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, rows of -inf entries included: the sampler's own (T = 1)."""
    return temperature_softmax(torch.from_numpy(np.asarray(x, dtype=np.float64)), 1.0).numpy()


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """The right order: future scores set to -inf, then the softmax. Rows sum to 1 over the past."""
    n = scores.shape[-1]
    return softmax(np.where(future_mask(n), -np.inf, scores))


def unmasked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax with no mask: the weight each query would put on the future if it were allowed to."""
    return softmax(scores)


def mask_after_softmax(scores: np.ndarray) -> np.ndarray:
    """The wrong order: softmax over all keys, then future weights zeroed and NOT renormalised."""
    n = scores.shape[-1]
    return np.where(future_mask(n), 0.0, softmax(scores))


def future_mass(weights: np.ndarray) -> np.ndarray:
    """Per query row, the total weight on keys j > i: (..., n, n) -> (..., n)."""
    n = weights.shape[-1]
    return np.where(future_mask(n), weights, 0.0).sum(-1)


@dataclass
class HeadWindow:
    """One head of a run, cut to the window of positions lo..hi that a page shows. Every softmax is taken
    over the query's whole row first and only then cut, so a zoomed view shows the model's real weights."""
    lo: int
    hi: int
    scores: np.ndarray        # (w, w) scores before the mask
    pattern: np.ndarray       # (w, w) weights after the masked softmax (whole rows, then cut)
    unmasked: np.ndarray      # (w, w) softmax without the mask (whole rows, then cut)
    future_mass: np.ndarray   # (w,) weight the unmasked softmax puts on keys j > i, over whole rows
    mean_future_mass: float   # the same averaged over every query of the prompt that has a future


def head_window(run: AttentionRun, layer: int, head: int, lo: int = 0, hi: int | None = None) -> HeadWindow:
    """The matrices of one head for positions lo..hi (inclusive) of the prompt."""
    n = len(run.ids)
    hi = n - 1 if hi is None else hi
    if not 0 <= lo <= hi < n:
        raise ValueError(f"window {lo}..{hi} is outside the prompt's {n} positions")
    win = slice(lo, hi + 1)
    scores = run.scores[layer][head]
    cheat = unmasked_softmax(scores)            # (n, n): whole rows
    mass = future_mass(cheat)                   # (n,)
    return HeadWindow(lo=lo, hi=hi, scores=scores[win, win], pattern=run.pattern[layer][head][win, win],
                      unmasked=cheat[win, win], future_mass=mass[win],
                      mean_future_mass=float(mass[:-1].mean()) if n > 1 else 0.0)


@torch.no_grad()
def future_dependence(model, ids: list[int], layer: int, head: int, replacement: int | None = None) -> dict:
    """Change the last token and measure how much the weights of all earlier query rows move, for the
    mask applied to the scores (should be exactly 0) and for the mask applied after the softmax."""
    if len(ids) < 2:
        raise ValueError("need at least two tokens: one to change and one before it")
    vocab = model.config.vocab_size
    replacement = (ids[-1] + 1) % vocab if replacement is None else replacement
    changed = list(ids[:-1]) + [replacement]
    a, b = run_attention(model, ids), run_attention(model, changed)
    sa, sb = a.scores[layer][head], b.scores[layer][head]
    earlier = slice(0, len(ids) - 1)  # rows whose query comes before the changed token
    right = np.abs(masked_softmax(sa)[earlier] - masked_softmax(sb)[earlier]).max()
    wrong = np.abs(mask_after_softmax(sa)[earlier] - mask_after_softmax(sb)[earlier]).max()
    return {"replacement": replacement, "mask_on_scores": float(right), "mask_after_softmax": float(wrong)}


# ----------------------------------------------------------------------------- head roles

ROLE_INFO = {
    "previous_token": "mean weight a query puts on the token just before it (1 = always looks one step back)",
    "first_token": "mean weight a query (other than the first) puts on position 0, a common 'resting place'",
    "entropy": "mean entropy of a row in nats: 0 = all weight on one key, high = spread over many keys",
    "induction": "on a random sequence repeated twice, mean weight from a token in the second copy to the "
                 "token that followed its earlier occurrence (the induction-head move: ...A B ... A -> B)",
}


def row_entropy(pattern: np.ndarray) -> np.ndarray:
    """Entropy in nats of each row: (..., n, n) -> (..., n). 0 log 0 is taken as 0."""
    return entropy(pattern)


def previous_token_score(pattern: np.ndarray) -> np.ndarray:
    """(..., n, n) -> (...): mean over queries i >= 1 of a[i, i-1]."""
    n = pattern.shape[-1]
    if n < 2:
        return np.full(pattern.shape[:-2], np.nan)
    return np.diagonal(pattern, offset=-1, axis1=-2, axis2=-1).mean(-1)


def first_token_score(pattern: np.ndarray) -> np.ndarray:
    """(..., n, n) -> (...): mean over queries i >= 1 of a[i, 0] (query 0 has no choice)."""
    if pattern.shape[-1] < 2:
        return np.full(pattern.shape[:-2], np.nan)
    return pattern[..., 1:, 0].mean(-1)


def induction_score(pattern: np.ndarray, period: int) -> np.ndarray:
    """Pattern of a sequence whose second half repeats its first (period T): mean over the queries i of
    the second copy of a[i, i - T + 1], the key right after the query token's previous occurrence."""
    n = pattern.shape[-1]
    if n < 2 * period:
        raise ValueError("the sequence must hold two copies of the period")
    rows = np.arange(period, 2 * period)
    cols = rows - period + 1
    return pattern[..., rows, cols].mean(-1)


def induction_scores(model, period: int | None = None, n_seqs: int = PROBE_SEQS, seed: int = 0) -> np.ndarray:
    """(L, h) induction scores on the probe of core.induction: ``n_seqs`` strings of ``period`` distinct
    random tokens, each written twice (the measure the training log records)."""
    c = model.config
    period = period or induction_period(c.n_ctx, c.vocab_size)
    return head_scores(model, repeat_probe(c.vocab_size, n_seqs=n_seqs, period=period, seed=seed)).induction


def induction_period(n_ctx: int, vocab_size: int | None = None) -> int:
    return probe_period(n_ctx, vocab_size if vocab_size is not None else n_ctx)


def induction_chance(n_ctx: int, period: int | None = None, vocab_size: int | None = None) -> float:
    """Induction score of a head that spreads its weight evenly over the past (a[i, j] = 1/(i+1))."""
    period = period or induction_period(n_ctx, vocab_size)
    rows = np.arange(period, 2 * period)
    return float(np.mean(1.0 / (rows + 1)))


def head_roles(run: AttentionRun, induction: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """(L, h) arrays of each measure; the first three on the prompt's own pattern."""
    pats = np.stack(run.pattern)  # (L, h, n, n)
    roles = {
        "previous_token": previous_token_score(pats),
        "first_token": first_token_score(pats),
        "entropy": row_entropy(pats).mean(-1),
    }
    if induction is not None:
        roles["induction"] = induction
    return roles
