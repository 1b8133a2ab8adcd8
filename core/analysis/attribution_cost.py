"""What one attribution graph would take before it is built (issue 46; moved here from the page's folder in issue 57):
its peak memory and time from the prompt's active features (one forward pass, no graph), against the server's
budget (TE_ATTRIBUTION_MEMORY), and, over it, the refusal in words with the shortest end of the prompt or the
feature cap that would fit (``plan_graph``). Numbers and words; no Streamlit here."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.attribution import BATCH, MAX_LOGITS
from core.serve.fmt import binary_bytes, duration_words
from core.serve.sizes import size_setting

MEMORY_ENV = "TE_ATTRIBUTION_MEMORY"
DEFAULT_GRAPH_MEMORY = 2**30  # one graph's peak; the shipped models' 64-token graphs take about 0.35 GiB
MAX_GRAPH_SECONDS = 60        # the shipped models' take 1-5 s on one thread
# Measured on the shipped character model, one thread (bench.run --only attribution checks them): a graph's N x N
# float64 adjacency, then pruning's copy of it and its sorted positive edge scores (2.1x the adjacency at the peak on
# densely firing transcoders; 4.1x only if every node were kept and every edge nonzero, which pruning never leaves)
PEAK_COPIES = 3.0
FLOPS = 1e10                  # the replacement run's forward and backward passes per second, per copy of the prompt
SOURCE_S = 1e-7               # per (target, source) edge written, and per adjacency entry pruned and scored
BATCH_S = 0.02                # per batch of targets: the hooks, the constant terms, the sources' rows


def active_counts(model, transcoders: dict, ids) -> np.ndarray:
    """(L, n) how many features of each block's transcoder are active at each position: one forward pass, what a
    graph's size is estimated from before it is built."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    names = [f"blocks.{l}.hook_mlp_in" for l in range(model.config.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(ids[None], names=names)
        return np.stack([(transcoders[l].encode(cache[name][0]) > 0).sum(-1).numpy() for l, name in enumerate(names)])


def graph_budget(value: str | None = None) -> int | None:
    """Bytes one attribution graph may take at its peak: ``value``, by default the environment's
    TE_ATTRIBUTION_MEMORY (a size: 1G, 800M), else DEFAULT_GRAPH_MEMORY. None: no limit (0). ValueError, in words,
    when it is not a size."""
    return size_setting(MEMORY_ENV, DEFAULT_GRAPH_MEMORY, value)


def _per_copy(config, widths, features: int, n: int) -> int:
    """Bytes one copy of the prompt's replacement run holds while its targets' gradients are taken: per position,
    in float32, 3 x width per block (the MLP's and the transcoder's products; an upper bound, the graph's leaves being
    d-wide), about 40 d-wide activations and gradients per block, the logits and their gradient, the frozen patterns;
    and its row of edges (float64)."""
    L = config.n_layers
    S = features + (L + 1) * n  # sources: features, error nodes, token embeddings
    return 4 * n * (3 * sum(widths) + 40 * L * config.d_model + 2 * config.vocab_size + 2 * L * config.n_heads * n) \
        + 16 * S


def graph_cost(config, widths, features: int, n: int, batch: int = BATCH, logits: int = MAX_LOGITS):
    """(peak bytes, seconds) of a graph with ``features`` feature nodes over ``n`` positions, for a model of
    ``config`` whose transcoders have ``widths`` latents per block. The peak is the larger of building it (the
    adjacency, then ``batch`` copies of the replacement run) and pruning it (PEAK_COPIES x the adjacency)."""
    L, d, m = config.n_layers, config.d_model, config.vocab_size
    S = features + (L + 1) * n
    N, R = S + logits, features + logits
    B = max(1, min(batch, R))
    memory = max(8 * N * N + B * _per_copy(config, widths, features, n), PEAK_COPIES * 8 * N * N)
    # one copy's forward (attention, the transcoders, the output map), once for the B copies; its backward, once per
    # batch of targets (the transcoders' decoding is no part of it: the leaves are the MLP outputs)
    forward = 2 * n * (L * (4 * d * d + 2 * n * d) + sum(widths) * d + d * m)
    backward = 4 * n * (L * (4 * d * d + 2 * n * d) + d * m)
    seconds = B * forward / FLOPS + math.ceil(R / B) * (B * (backward / FLOPS + S * SOURCE_S) + BATCH_S) \
        + SOURCE_S * N * N * 1.5
    return int(memory), seconds


@dataclass(frozen=True)
class GraphPlan:
    active: int                # active features on the prompt
    features: int              # feature nodes the graph would hold (at most ``cap``)
    memory: int                # bytes at its peak
    seconds: float
    batch: int                 # targets per backward pass that keep it within the budget
    refusal: str | None = None  # why it is not built, with what would fit; None when it fits
    fits_tokens: int | None = None  # the longest end of the prompt that would fit
    fits_cap: int | None = None     # the most feature nodes that would fit on this prompt


def _batch_for(config, widths, features, n, budget) -> int:
    """BATCH, or fewer targets per pass when their copies of the run would take over half the budget."""
    if budget is None:
        return BATCH
    one = graph_cost(config, widths, features, n, batch=1)[0] - graph_cost(config, widths, 0, 0, batch=1)[0]
    per_copy = max(1, graph_cost(config, widths, features, n, batch=2)[0] - graph_cost(config, widths, features, n,
                                                                                       batch=1)[0])
    return int(max(1, min(BATCH, (budget // 2) // per_copy))) if one > 0 else BATCH


def plan_graph(model, transcoders: dict, ids, cap: int | None = None, budget: int | None = DEFAULT_GRAPH_MEMORY,
               max_seconds: float = MAX_GRAPH_SECONDS, units: str = "tokens") -> GraphPlan:
    """What the graph of ``ids`` would take, from its active features (one forward pass, no graph), against
    ``budget`` bytes and ``max_seconds``; over either, the refusal in words with the longest end of the prompt and
    the largest feature cap that would fit (each checked with the same estimate)."""
    config, n = model.config, len(ids)
    widths = [transcoders[l].config.d_sae for l in range(config.n_layers)]

    def cost(features, length):
        batch = _batch_for(config, widths, features, length, budget)
        return graph_cost(config, widths, features, length, batch) + (batch,)

    def fits(features, length):
        memory, seconds, _ = cost(features, length)
        return (budget is None or memory <= budget) and seconds <= max_seconds

    per_position = active_counts(model, transcoders, ids).sum(0)  # (n,) over the blocks
    active = int(per_position.sum())
    features = active if cap is None else min(active, int(cap))
    memory, seconds, batch = cost(features, n)
    if fits(features, n):
        return GraphPlan(active, features, memory, seconds, batch)

    def capped(f):
        return f if cap is None else min(f, int(cap))
    lo, hi = 1, n  # the longest end of the prompt that fits, from this run's counts at its positions ...
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(capped(int(per_position[-mid:].sum())), mid) else (lo, mid - 1)
    fits_tokens = None
    for m in range(lo, max(1, lo - 4), -1):  # ... then checked on its own (a shorter context fires differently)
        if m >= 2 and fits(capped(int(active_counts(model, transcoders, ids[-m:]).sum())), m):
            fits_tokens = m
            break
    lo, hi = 0, features  # the most feature nodes that fit on the whole prompt
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid, n) else (lo, mid - 1)
    fits_cap = lo if lo >= 1 and fits(lo, n) else None
    words = graph_refusal(config, active, features, n, memory, seconds, budget, max_seconds, fits_tokens, fits_cap,
                          units, widths)
    return GraphPlan(active, features, memory, seconds, batch, words, fits_tokens, fits_cap)


def graph_refusal(config, active, features, n, memory, seconds, budget, max_seconds, fits_tokens, fits_cap, units,
                  widths) -> str:
    """The refusal in words: what the graph would take, what the server allows, and what would fit."""
    allowed = f"{binary_bytes(budget)} ({MEMORY_ENV})" if budget is not None else "no memory limit"
    per = active / max(1, n * config.n_layers)
    dense = (f" These transcoders fire densely here: {per:,.0f} of their {max(widths):,} features per block and "
             "position, where a sparse transcoder fires a few dozen." if per > 0.25 * max(widths) else "")
    ways = []
    if fits_tokens is not None:
        ways.append(f"shorten the prompt to its last {fits_tokens} {units}")
    if fits_cap is not None:
        ways.append(f"keep at most {fits_cap:,} feature nodes (those with the most influence on the output; what the "
                    "others write joins the error nodes, so every edge stays exact)")
    fix = (" To fit, " + ", or ".join(ways) + ".") if ways else " Nothing shorter fits: a smaller model would."
    kept = f" (of {active:,} active)" if features < active else ""
    return (f"This graph is too large to build here: {features:,} feature nodes{kept} over {n} positions would take "
            f"about {binary_bytes(memory)} of memory at its peak and {duration_words(seconds)}, where one graph may "
            f"take {allowed} and {max_seconds:.0f} s.{dense}{fix}")
