"""Turning logits into text: temperature, top-k and top-p filters, and the generation loop.

The loop is written once, as ``stream`` (an iterator that yields every new token with its probability
and the top alternatives), and ``generate`` just runs it to the end. Decoding is incremental: the model's
key/value cache holds the keys and values of every token already read, so each step feeds one token.
The model has learned absolute positions, so once the sequence outgrows n_ctx the window slides and
every position changes: the cache is rebuilt from the window, and the output is exactly that of the
plain loop ``model(idx[:, -n_ctx:])`` (a test checks it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


def _check_temperature(temperature) -> float:
    t = float(temperature)
    if math.isnan(t) or t < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    return t


def temperature_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """p_i(T) = exp(z_i/T) / sum_j exp(z_j/T) over the last dimension.

    Computed as exp((z_i - max z)/T): every exponent is <= 0, so nothing overflows for tiny T and the
    largest term is exactly 1. T = 0 is the limit itself: one-hot on the argmax, uniform over exact ties.
    T = inf is the other limit: uniform over the entries with finite logits. Logits of -inf get
    probability 0 at every T; a row whose entries are all -inf (nothing allowed) is uniform, which is
    what the tie rule gives when every entry ties.
    """
    t = _check_temperature(temperature)
    z = logits if logits.is_floating_point() else logits.float()
    zmax = z.amax(dim=-1, keepdim=True)
    if 0 < t < math.inf:
        ok = torch.isfinite(zmax)
        if bool(ok.all()):  # the usual case, once per generated token: no row needs the tie rule
            e = torch.exp((z - zmax) / t)  # gaps to the max are <= 0 (-inf stays -inf): nothing overflows
            return e / e.sum(dim=-1, keepdim=True)
    ties = (z == zmax).to(z.dtype)
    limit0 = ties / ties.sum(dim=-1, keepdim=True)  # one-hot, or uniform over the k tied maxima
    if t == 0:
        return limit0
    if math.isinf(t):
        finite = torch.isfinite(z).to(z.dtype)
        has = finite.sum(dim=-1, keepdim=True) > 0
        return torch.where(has, finite / finite.sum(dim=-1, keepdim=True).clamp_min(1), limit0)
    # gaps to the max are >= 0; rows with a max of +-inf would give inf - inf, so they fall back to the ties
    gaps = torch.where(ok, z - zmax, torch.zeros_like(z))  # (..., m) <= 0, -inf stays -inf
    e = torch.exp(gaps / t)
    p = e / e.sum(dim=-1, keepdim=True)
    return torch.where(ok, p, limit0)


def entropy(p) -> np.ndarray | float:
    """H(p) = -sum_i p_i log p_i in nats over the last axis, with 0 log 0 = 0: a float for one
    distribution (m,), an array for a stack of them (..., m)."""
    p = np.asarray(p, dtype=np.float64)
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)
    return float(h) if h.ndim == 0 else h


def top_k_filter(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """Logits with every entry below the k-th largest set to -inf (a new tensor).

    Entries tied with the k-th largest are all kept, so top-k = 1 keeps every tied maximum, as T = 0 does.
    k = None, or k >= m, keeps everything."""
    if k is None:
        return logits.clone()
    k = int(k)
    if k < 1:
        raise ValueError(f"top-k must be at least 1, got {k}")
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


TOP_P_TOLERANCE = 1e-6


def top_p_filter(logits: torch.Tensor, p: float | None) -> torch.Tensor:
    """Nucleus filter: keep the most probable tokens whose probabilities (softmax of ``logits``) first
    reach a total of at least p; the rest get -inf. The most probable token is always kept, so p -> 0
    is greedy; p = None or p >= 1 keeps everything. Apply it to logits already divided by T."""
    if p is None:
        return logits.clone()
    p = float(p)
    if math.isnan(p) or p < 0:
        raise ValueError(f"top-p must be a number in [0, 1], got {p!r}")
    if p >= 1:
        return logits.clone()
    probs = temperature_softmax(logits, 1.0)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of the strictly more probable tokens
    # a set within float32 rounding of p has reached p (0.5 can come out of a softmax as 0.49999997)
    drop_sorted = before >= p - TOP_P_TOLERANCE
    drop_sorted[..., 0] = False  # never empty
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def next_token_distribution(logits: torch.Tensor, temperature: float, top_k: int | None = None,
                            top_p: float | None = None) -> torch.Tensor:
    """The distribution a decoding step draws from: temperature first, then top-k, then top-p (on the
    tempered probabilities). At T = 0 the filters change nothing: the argmax is always kept."""
    t = _check_temperature(temperature)
    if t == 0:
        return temperature_softmax(logits, 0.0)
    return _tempered(logits if logits.is_floating_point() else logits.float(), t, top_k, top_p)


def _tempered(z: torch.Tensor, t, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """next_token_distribution for T > 0: ``t`` a float, or a (B, 1) tensor of finite temperatures, one per row."""
    zmax = z.amax(dim=-1, keepdim=True)
    z = torch.where(torch.isfinite(zmax), z - zmax, z)  # shift first, so z/T cannot overflow for tiny T
    finite = not isinstance(t, float) or math.isfinite(t)  # a tensor of temperatures holds finite ones only
    z = z / t if finite else torch.where(torch.isfinite(z), torch.zeros_like(z), z)
    z = top_p_filter(top_k_filter(z, top_k), top_p)
    return temperature_softmax(z, 1.0)


def _row_distributions(logits: torch.Tensor, temps: list[float], top_k: int | None = None,
                       top_p: float | None = None) -> torch.Tensor:
    """(B, m) logits -> next_token_distribution of each row at its own temperature temps[r]. The rows with
    0 < T < inf go as one batch (the same operations row by row, so the same numbers as one row at a time; a test
    checks it bit for bit), the limits T = 0 and T = inf one row at a time."""
    plain = [r for r, t in enumerate(temps) if 0 < t < math.inf]
    rows = torch.tensor(plain, dtype=torch.long)
    probs = torch.empty_like(logits)
    if plain:
        t = torch.tensor([temps[r] for r in plain], dtype=logits.dtype)[:, None]  # (b, 1)
        probs[rows] = _tempered(logits[rows], t, top_k, top_p)
    for r, t in enumerate(temps):
        if not 0 < t < math.inf:
            probs[r] = next_token_distribution(logits[r:r + 1], t, top_k, top_p)[0]
    return probs


def _draw(probs: torch.Tensor, temperature: float, generator) -> torch.Tensor:
    """(B, m) distributions -> (B,) tokens: the argmax at T = 0 (first of any exact ties), else a draw."""
    if temperature == 0:
        return probs.argmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@dataclass
class Step:
    """One generated token for each sequence of the batch."""
    token: torch.Tensor        # (B,) the chosen token ids
    prob: torch.Tensor         # (B,) the probability the model gave it, softmax(z) at T = 1
    sample_prob: torch.Tensor  # (B,) its probability under the distribution actually drawn from
    top_ids: torch.Tensor      # (B, k) the model's most likely tokens at this step, best first
    top_probs: torch.Tensor    # (B, k) their probabilities at T = 1
    window: int                # how many tokens the model read to produce this step
    slid: bool                 # True once the sequence outgrew n_ctx and the window slides


def stream(model, idx, max_new_tokens: int, temperature, top_k: int | None = None,
           top_p: float | None = None, generator=None, n_alternatives: int = 5,
           use_cache: bool = True) -> Iterator[Step]:
    """Yield one Step per new token. ``idx`` is (B, n) token ids with n >= 1 (or a list of ids).

    ``temperature`` and ``generator`` may also be lists, one per row: the rows then share every forward
    pass (one batch) but each samples as it would alone, so row r gives exactly what a one-row call with
    temperature[r] and generator[r] gives. use_cache=False recomputes the whole window every step (the
    textbook loop), for comparison."""
    idx = torch.as_tensor(idx, dtype=torch.long)
    if idx.dim() == 1:
        idx = idx[None]  # (n,) -> (1, n)
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError("generation needs at least one token to start from")
    max_new_tokens = int(max_new_tokens)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    per_row = isinstance(temperature, (list, tuple))
    if per_row:
        temps = [_check_temperature(t) for t in temperature]
        gens = list(generator) if isinstance(generator, (list, tuple)) else [generator] * len(temps)
        if not len(temps) == len(gens) == idx.shape[0]:
            raise ValueError("give one temperature (and one generator) per row of idx")
    else:
        _check_temperature(temperature)
    n_ctx = model.config.n_ctx
    k_alt = min(max(0, int(n_alternatives)), model.config.vocab_size)  # 0: no alternatives (fastest)
    device = next(model.parameters()).device
    seq = idx.to(device)
    past, pending = None, seq  # pending: tokens the model has not read yet
    with torch.inference_mode():  # no autograd bookkeeping at all: about 10% faster per step than no_grad
        for _ in range(max_new_tokens):
            slid = seq.shape[1] > n_ctx
            if not use_cache or slid or past is None or pending.shape[1] + past.length > n_ctx:
                # (re)build: read the whole window from position 0
                window = seq[:, -n_ctx:]
                out = model(window, use_cache=use_cache and window.shape[1] < n_ctx, last_only=True)
            else:
                out = model(pending, past=past, use_cache=True, last_only=True)
            past = out.present
            read = seq[:, -n_ctx:].shape[1]
            logits = out.logits[:, -1, :].float()  # (B, m) at the last position
            if per_row:  # each row with its own temperature and its own random numbers
                probs = _row_distributions(logits, temps, top_k, top_p)
                token = torch.stack([_draw(probs[r:r + 1], t, g)[0] for r, (t, g) in enumerate(zip(temps, gens))])
            else:
                probs = next_token_distribution(logits, temperature, top_k, top_p)
                token = _draw(probs, float(temperature), generator)
            if k_alt:
                model_p = temperature_softmax(logits, 1.0)
                top = torch.topk(model_p, k_alt, dim=-1)
                yield Step(token=token.cpu(), prob=model_p.gather(1, token[:, None])[:, 0].cpu(),
                           sample_prob=probs.gather(1, token[:, None])[:, 0].cpu(),
                           top_ids=top.indices.cpu(), top_probs=top.values.cpu(), window=read, slid=slid)
            else:  # generate() needs the tokens only
                yield Step(token=token, prob=None, sample_prob=None, top_ids=None, top_probs=None,
                           window=read, slid=slid)
            seq = torch.cat([seq, token[:, None]], dim=1)
            pending = token[:, None]


def generate(model, idx, max_new_tokens, temperature, top_k=None, top_p=None, generator=None, use_cache=True):
    """(B, n) token ids -> (B, n + max_new_tokens): greedy at T = 0, sampled otherwise (seeded by
    ``generator``), with the key/value cache (use_cache=False: the plain loop), sliding the window past n_ctx."""
    idx = torch.as_tensor(idx, dtype=torch.long)
    squeeze = idx.dim() == 1
    seq = idx[None] if squeeze else idx
    new = [s.token[:, None] for s in stream(model, seq, max_new_tokens, temperature, top_k, top_p, generator,
                                            n_alternatives=0, use_cache=use_cache)]
    out = torch.cat([seq.cpu(), *new], dim=1)
    return out[0] if squeeze else out
