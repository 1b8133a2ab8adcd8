"""An attribution graph's influence, pruning and its two scores (core.analysis.attribution builds the graph), as
circuit-tracer computes them: each target's inputs as shares of |A|, the influence of every node on the logits through
all paths, the nodes and edges that carry most of it, and the replacement and completeness scores."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.analysis.attribution import Graph

NODE_THRESHOLD = 0.8    # pruning, as circuit-tracer prunes: nodes up to 80 % of the influence on the logits
EDGE_THRESHOLD = 0.98   # and edges up to 98 %


def normalize(adjacency: np.ndarray, inplace: bool = False) -> np.ndarray:
    """Rows of |A| scaled to sum to one (a row of zeros stays zero): each target's inputs as shares (``inplace``:
    over ``adjacency``, an N x N copy saved)."""
    a = np.abs(adjacency, out=adjacency if inplace else None)
    a /= np.maximum(a.sum(1, keepdims=True), 1e-10)
    return a


def influence(normalized: np.ndarray, weights: np.ndarray, max_iter: int = 1000) -> np.ndarray:
    """weights @ (A + A^2 + ...): how much of the weighted targets each node reaches through every path; the graph
    has no cycles, so the series ends after as many steps as the graph is deep."""
    current = weights @ normalized
    total = current.copy()
    for _ in range(max_iter):
        current = current @ normalized
        if not current.any():
            return total
        total += current
    raise RuntimeError("the influence did not converge: the graph has a cycle")


def _logit_weights(g: Graph) -> np.ndarray:
    w = np.zeros(g.n_nodes)
    w[g.slices()["logits"]] = g.logit_probs
    return w


def _cut(scores: np.ndarray, share: float) -> float:
    """The score above which the largest scores make up ``share`` of their total (scores are ≥ 0; only the positive
    ones are sorted: in a graph's N x N edge scores, most are 0)."""
    s = scores[scores > 0]  # a copy, sorted in place
    if s.size == 0:
        return 0.0
    s.sort()
    s, cum = s[::-1], np.cumsum(s[::-1])  # descending
    i = int(np.searchsorted(cum, share * cum[-1]))
    return s[i] if i < len(s) else (0.0 if s.size < scores.size else s[-1])  # past the last: the zeros' turn


@dataclass
class Pruned:
    node_mask: np.ndarray   # (N,) bool
    edge_mask: np.ndarray   # (N, N) bool
    node_influence: np.ndarray


def prune(g: Graph, node_threshold: float = NODE_THRESHOLD, edge_threshold: float = EDGE_THRESHOLD) -> Pruned:
    """circuit-tracer's pruning: keep the nodes that carry ``node_threshold`` of the influence on the logits (the
    embeddings and logits always), then the edges that carry ``edge_threshold`` of the remaining graph's influence,
    then drop features and errors left without an edge out (and features without one in), until nothing changes."""
    if not (0 <= node_threshold <= 1 and 0 <= edge_threshold <= 1):
        raise ValueError("the thresholds are shares from 0 to 1")
    w = _logit_weights(g)
    sl = g.slices()
    node_inf = influence(normalize(g.adjacency), w)
    keep = node_inf >= _cut(node_inf, node_threshold)
    keep[sl["tokens"].start:] = True  # embeddings and logits
    a = g.adjacency.copy()
    a[~keep] = 0
    a[:, ~keep] = 0
    na = normalize(a, inplace=True)
    edge_scores = np.multiply(na, (influence(na, w) + w)[:, None], out=na)  # na is not needed past this line
    edges = edge_scores >= max(_cut(edge_scores, edge_threshold), 1e-300)
    del a, na, edge_scores
    inner = slice(0, sl["tokens"].start)  # features and errors
    while True:
        before = keep.copy()
        edges[~keep] = False
        edges[:, ~keep] = False
        keep[inner] &= edges[:, inner].any(0)  # an edge out
        keep[sl["features"]] &= edges[sl["features"]].any(1)  # an edge in
        if (keep == before).all():
            break
    return Pruned(keep, edges & keep[:, None] & keep[None, :], node_inf)


def scores(g: Graph) -> tuple[float, float]:
    """(replacement score, completeness score), circuit-tracer's ``compute_graph_scores``: with the logit nodes
    weighted by their probabilities and ``influence`` of the normalized |A|, the replacement score is the token
    embeddings' influence over that of the token embeddings and error nodes together (how much of the input's
    influence on the output reaches it through features alone); the completeness score is the mean, weighted by
    each node's influence plus its logit weight, of the share of its normalized input that comes from no error node
    (a node with no input counts 1). Equal to circuit-tracer's on the same graph; on the same model and transcoders
    when the graph was built with its conventions (``target="demeaned"``, the default; position embeddings constant)."""
    sl = g.slices()
    w = _logit_weights(g)
    na = normalize(g.adjacency)
    inf = influence(na, w)
    embed = inf[sl["tokens"]].sum()
    err = inf[sl["errors"]].sum()
    replacement = float(embed / (embed + err)) if embed + err > 0 else math.nan
    out = inf + w
    non_error = 1 - na[:, sl["errors"]].sum(1)
    completeness = float((non_error * out).sum() / out.sum())
    return replacement, completeness

