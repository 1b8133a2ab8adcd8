"""Attention, inspected: what each head computes on a prompt, and what the causal mask changes.

All arrays here are numpy in [head, query_pos, key_pos] order (TransformerLens' convention), one
prompt at a time. ``run_attention`` is the only function that touches the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.nn.hooks import HookRun

from core.analysis.induction import PROBE_SEQS, head_scores, model_probe, probe_period
from core.nn.model import attention_weights, future_mask as model_future_mask
from core.analysis.sampling import entropy, temperature_softmax


@dataclass
class AttentionRun:
    ids: list[int]
    scores: list[np.ndarray]    # per layer (h, n, n) float32: q_i.k_j/sqrt(d_k) for every (i, j), before the mask
    pattern: list[np.ndarray]   # per layer (h, n, n) float32: weights after the masked softmax

    @property
    def n_layers(self) -> int:
        return len(self.scores)

    @property
    def n_heads(self) -> int:
        return self.scores[0].shape[0]


def _idx(model, ids) -> torch.Tensor:
    if not ids:
        raise ValueError("the prompt is empty: there is nothing to attend to")
    return torch.tensor([list(ids)], dtype=torch.long)


@torch.no_grad()
def run_attention(model, ids: list[int]) -> AttentionRun:
    """One forward pass with every layer's attention returned, as the model's own float32 arrays (no copy).
    ``ids`` must be non-empty and at most n_ctx long. All of it at once: 2 L h n^2 floats, 1.2 GB for GPT-2
    small at 1,024 tokens, so the attention page asks for one head (``head_attention``) or for what it draws
    of every head (``attention_overview``) instead."""
    _, cache = model.run_with_cache(_idx(model, ids),
                                    names=lambda name: name.endswith(("attn.hook_attn_scores", "attn.hook_pattern")))
    L = model.config.n_layers
    return AttentionRun(
        ids=list(ids),
        scores=[s[0].numpy() for s in cache.layer("attn.hook_attn_scores", L)],  # (1, h, n, n) -> (h, n, n)
        pattern=[p[0].numpy() for p in cache.layer("attn.hook_pattern", L)],
    )


@torch.no_grad()
def layer_attention(model, ids: list[int]):
    """Yields (layer, scores, pattern) for every layer in turn, each (h, n, n) float32: one forward pass in which
    only one layer's matrices exist at a time (h n^2 floats instead of L h n^2)."""
    x = model.embed(_idx(model, ids))
    for layer in range(model.config.n_layers):
        run = _attention_run(layer)
        x = model.blocks_from(x, layer, layer + 1, hooks=run)
        yield layer, *_scores_pattern(run, layer)


@torch.no_grad()
def head_attention(model, ids: list[int], layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """One head's (scores, pattern), each (n, n) float32: the blocks before ``layer`` run, none after it."""
    c = model.config
    if not (0 <= layer < c.n_layers and 0 <= head < c.n_heads):
        raise ValueError(f"the model has no head ({layer}, {head})")
    x = model.blocks_from(model.embed(_idx(model, ids)), 0, layer)
    run = _attention_run(layer)
    model.blocks_from(x, layer, layer + 1, hooks=run)
    scores, pattern = _scores_pattern(run, layer)
    return scores[head].copy(), pattern[head].copy()  # a copy: not a view of every head


def _attention_run(layer: int) -> HookRun:
    """Hooks that keep one block's scores (before the mask) and pattern."""
    return HookRun(names=[f"blocks.{layer}.attn.hook_attn_scores", f"blocks.{layer}.attn.hook_pattern"], record=True)


def _scores_pattern(run: HookRun, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(h, n, n) scores and pattern of batch row 0 that ``run`` kept."""
    at = f"blocks.{layer}.attn."
    return run.store[at + "hook_attn_scores"][0].numpy(), run.store[at + "hook_pattern"][0].numpy()


def future_mask(n: int) -> np.ndarray:
    """(n, n) booleans, True where key j is in the future of query i (j > i): the model's own mask."""
    return model_future_mask(n).numpy()


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, rows of -inf entries included: the sampler's own (T = 1)."""
    return temperature_softmax(torch.from_numpy(np.asarray(x, dtype=np.float64)), 1.0).numpy()


def _weights(scores: np.ndarray, mask: str) -> np.ndarray:
    """The model's own attention_weights on numpy scores, in float64."""
    return attention_weights(torch.from_numpy(np.asarray(scores, dtype=np.float64)), mask).numpy()


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """The right order: future scores set to -inf, then the softmax. Rows sum to 1 over the past."""
    return _weights(scores, "scores")


def unmasked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax with no mask: the weight each query would put on the future if it were allowed to."""
    return _weights(scores, "none")


def mask_after_softmax(scores: np.ndarray) -> np.ndarray:
    """The wrong order: softmax over all keys, then future weights zeroed and NOT renormalised."""
    return _weights(scores, "after_softmax")


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


def head_window(scores: np.ndarray, pattern: np.ndarray, lo: int = 0, hi: int | None = None) -> HeadWindow:
    """One head's matrices (``head_attention``: (n, n) scores and pattern) cut to positions lo..hi (inclusive)."""
    n = scores.shape[-1]
    hi = n - 1 if hi is None else hi
    if not 0 <= lo <= hi < n:
        raise ValueError(f"window {lo}..{hi} is outside the prompt's {n} positions")
    win = slice(lo, hi + 1)
    cheat = unmasked_softmax(scores)            # (n, n): whole rows
    mass = future_mass(cheat)                   # (n,)
    return HeadWindow(lo=lo, hi=hi, scores=scores[win, win], pattern=pattern[win, win],
                      unmasked=cheat[win, win], future_mass=mass[win],
                      mean_future_mass=float(mass[:-1].mean()) if n > 1 else 0.0)


def dependence_on_last(scores: np.ndarray, changed: np.ndarray) -> dict:
    """How much the weights of the rows before the last move between two (n, n) score matrices of one head that
    differ only in the last token: for the mask on the scores and for the mask after the softmax."""
    earlier = slice(0, scores.shape[-1] - 1)  # rows whose query comes before the changed token
    sa, sb = np.asarray(scores, dtype=np.float64), np.asarray(changed, dtype=np.float64)
    right = np.abs(masked_softmax(sa)[earlier] - masked_softmax(sb)[earlier]).max()
    wrong = np.abs(mask_after_softmax(sa)[earlier] - mask_after_softmax(sb)[earlier]).max()
    return {"mask_on_scores": float(right), "mask_after_softmax": float(wrong)}


def changed_last(ids: list[int], vocab_size: int, replacement: int | None = None) -> tuple[list[int], int]:
    """(ids with the last token replaced, the replacement): by default the next id in the vocabulary."""
    if len(ids) < 2:
        raise ValueError("need at least two tokens: one to change and one before it")
    replacement = (ids[-1] + 1) % vocab_size if replacement is None else replacement
    return list(ids[:-1]) + [replacement], replacement


def future_dependence(model, ids: list[int], layer: int, head: int, replacement: int | None = None) -> dict:
    """Change the last token and measure how much the weights of all earlier query rows move, for the
    mask applied to the scores (should be exactly 0) and for the mask applied after the softmax."""
    changed, replacement = changed_last(ids, model.config.vocab_size, replacement)
    a, b = head_attention(model, ids, layer, head)[0], head_attention(model, changed, layer, head)[0]
    return {"replacement": replacement, **dependence_on_last(a, b)}


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


# induction_score (imported above) is core.analysis.induction's: one measure for the pages and the training log


def induction_scores(model, tokenizer=None, period: int | None = None, n_seqs: int = PROBE_SEQS,
                     seed: int = 0) -> np.ndarray:
    """(L, h) induction scores on core.analysis.induction's probe for ``model`` and its ``tokenizer``
    (``model_probe``): ``n_seqs`` strings of ``period`` distinct random tokens, each written twice. The
    numbers Switch heads off shows and the training log records."""
    return head_scores(model, model_probe(model, tokenizer, n_seqs=n_seqs, period=period, seed=seed)).induction


def induction_chance(n_ctx: int, period: int | None = None, vocab_size: int | None = None) -> float:
    """Induction score of a head that spreads its weight evenly over the past (a[i, j] = 1/(i+1))."""
    period = period or probe_period(n_ctx, vocab_size)
    rows = np.arange(period, 2 * period)
    return float(np.mean(1.0 / (rows + 1)))


def pattern_roles(pattern: np.ndarray) -> dict[str, np.ndarray]:
    """The measures taken on a prompt's own pattern, (..., n, n) -> (...) each."""
    pattern = np.asarray(pattern, dtype=np.float64)
    return {"previous_token": previous_token_score(pattern), "first_token": first_token_score(pattern),
            "entropy": row_entropy(pattern).mean(-1)}


def head_roles(run: AttentionRun, induction: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """(L, h) arrays of each measure; the first three on the prompt's own pattern."""
    per_layer = [pattern_roles(p) for p in run.pattern]  # one layer at a time: float64 copies of (h, n, n) only
    roles = {key: np.stack([r[key] for r in per_layer]) for key in per_layer[0]}
    if induction is not None:
        roles["induction"] = induction
    return roles


# ----------------------------------------------------------------------------- every head at once, small

def pool_pattern(pattern: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """A (..., w, w) pattern shrunk to at most ``size`` cells a side for a thumbnail: (pooled (..., t, t), b).
    Positions are grouped in blocks of b = ceil(w / size) (the last block may be shorter); cell (I, J) is the
    weight the queries of block I put on the keys of block J, averaged over those queries, so a row of cells
    sums to what a row of weights sums to. Cells whose keys all lie in the future of all its queries (J > I)
    are NaN: masked, as the full pattern's future is. b = 1 gives the pattern itself, future NaN."""
    pattern = np.asarray(pattern, dtype=np.float64)
    w = pattern.shape[-1]
    b = max(1, math.ceil(w / size))
    t = math.ceil(w / b)
    padded = np.zeros(pattern.shape[:-2] + (t * b, t * b))
    padded[..., :w, :w] = pattern
    sums = padded.reshape(pattern.shape[:-2] + (t, b, t, b)).sum(-1)  # (..., t, b, t): key blocks summed
    rows = np.minimum(b, w - np.arange(t) * b)                          # queries in each block
    pooled = sums.sum(-2) / rows[:, None]                               # (..., t, t)
    pooled[..., np.triu(np.ones((t, t), dtype=bool), 1)] = np.nan
    return pooled, b


@dataclass
class AttentionOverview:
    """What the page draws of every head at once, whatever the prompt's length: the measures of each head on
    the prompt and a thumbnail of each head's pattern over a window, pooled to at most ``size`` cells a side."""
    roles: dict[str, np.ndarray]  # (L, h) each: previous_token, first_token, entropy on the whole prompt
    thumbs: np.ndarray            # (L, h, t, t) float32: the pattern over positions lo..hi, pooled (future NaN)
    lo: int
    hi: int
    block: int                    # positions per thumbnail cell (1: every position its own cell)


def attention_overview(model, ids: list[int], lo: int = 0, hi: int | None = None, size: int = 48) -> AttentionOverview:
    """One forward pass, one layer's attention alive at a time: every head's measures and its thumbnail."""
    n = len(ids)
    hi = n - 1 if hi is None else hi
    if not 0 <= lo <= hi < max(n, 1):
        raise ValueError(f"window {lo}..{hi} is outside the prompt's {n} positions")
    roles, thumbs, block = [], [], 1
    win = slice(lo, hi + 1)
    for _, _, pattern in layer_attention(model, ids):
        per_head = [pattern_roles(p) for p in pattern]  # one head at a time: float64 copies of (n, n) only
        roles.append({key: np.array([r[key] for r in per_head]) for key in per_head[0]})
        pooled, block = pool_pattern(pattern[:, win, win], size)
        thumbs.append(pooled.astype(np.float32))
    return AttentionOverview(roles={key: np.stack([r[key] for r in roles]) for key in roles[0]},
                             thumbs=np.stack(thumbs), lo=lo, hi=hi, block=block)
