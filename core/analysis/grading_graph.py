"""The attribution graph graded against the answer keys (issue 59 §2; core.analysis.grading grades the other methods
and holds these two as ``attribution_graph`` and ``attribution_graph_edges``).

On each example, the attribution graph of the prompt (``core.analysis.attribution.attribution_graph``, circuit-tracer's
conventions: the answer's logit minus the mean logit is the target) on the key's model with its transcoders (shipped in
``assets/answer_keys/<name>/transcoders/``, made by ``python -m core.training.answer_keys transcoders``; found by the
fingerprint of the weights they were trained on), pruned as the Attribution page prunes it
(``attribution_prune.prune``: the nodes carrying NODE_THRESHOLD, 80 %, of the influence on the answer, then the edges
carrying EDGE_THRESHOLD, 98 %), its kept edges split by head (``attribution.head_split``: each edge's part along the
residual stream alone, through each single head, and through two heads in turn).

What is scored, on the pruned graph's normalized |A| (circuit-tracer's influence, ``attribution_prune.influence``):
a node's influence I is the share of the answer's input that reaches it over every path; an edge s -> t carries the
flow Â[t, s] (I_t + w_t), w the answer's weight (1). Each edge's flow is shared among its routes in proportion to
the size of each route's part (|direct|, |through L·H·|, |composed|, from head_split).

- a head's score: the flow routed through it, summed over every kept edge (a path crosses a layer's heads at most
  once, so it is a share of the answer's influence, 0 to 1);
- an MLP's score: the influence of its transcoder's features (a path passes at most one feature per block; its error
  nodes, what the transcoder misses, are not the features' and are not counted: a weak transcoder scores its MLP low);
- an edge (``attribution_graph_edges``): source -> head and head -> target get the flow routed through that head,
  source -> target the direct part; a source is the tokens (an input node) or an MLP (its features), a target an MLP
  (its features) or the logits. Not scored: head -> head edges (their flow is in the "composed" part, which
  head_split does not split by pair) and the error nodes as a source (they are no component; their flow through a
  head still counts for head -> target). The key's head -> head edges are left out of the grade.

What the graph cannot see, by construction: attention patterns are frozen, so a head that matters only through where
another head looks (a previous-token head feeding an induction head's keys, K-composition) carries no flow here. A
failure there is the method's, and the grade says it.

Units and controls, as core.analysis.grading's. Over the examples a score is the mean weighted by the graph's size on
each, the summed |edges| into the answer (``mass``, in logits): Σ_e score_e mass_e / Σ_e mass_e. The finding is the
largest score ("share"; margin and threshold CARRIES, 10 %, the share at which the explorer says a path carries the
answer). The nonsense task: the same graph explained for the example's nonsense token (``grading.nonsense_labels``'
first token, never the answer nor the counterpart's) as a second logit node, read off the same graph and head split
(the features and edges into them do not depend on the target), its scores weighted by its own mass over the
answer's summed mass: a random output's share counts as much of the answer as its edges weigh. The random twin
cannot be run: it has no transcoders (``null_controls.TWIN_GRAPH``). Cost: the same examples as the other methods
(grading.EXAMPLES), one graph and one head split of its kept rows each, both outputs on them: about 0.03 s an example
on these models.

What this shows, by key (bench/results/answer-keys.csv): on a one-step circuit (copy, sort) the key's head carries
nearly all of the answer's influence. Where the circuit is two heads in turn (induction: L1 H2's write read by L2
H1's values), most of the flow (50 to 78 %) is "composed" (one L1 head, then one L2 head), which head_split, and so
the page, does not split by pair: it is credited to no head, and the single hops left are small (L2 H1 15 %), so the
finding does not stand above the nonsense task. That is what the page shows a learner too ("composed" in its edge
table), so the grade keeps it so rather than guessing the pair.

The transcoders matter. An MLP the key keeps out of the circuit writes next to nothing (E||y||^2 from 1e-8 to 1e-3),
and its TopK transcoder still fires a few features whose writes are larger than the MLP's own output (mse above
E||y||^2) and cancel among themselves; normalized |A| counts their sizes, not their sum, so such a block gets
influence the model does not give it: sort's L1 MLP 73 %, counting's L2 MLP 12 %, the false positives of those
grades. The transcoders' numbers are in each key's transcoders/README.md.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np

from core.analysis.answer_keys import INPUT, KEYS_DIR, OUTPUT, all_components, list_keys, parse_component
from core.analysis.attribution import Graph, attribution_graph, head_split
from core.analysis.attribution_prune import influence, normalize, prune
from core.analysis.circuit import CARRIES, share_text
from core.analysis.grading_scores import Scores, _effect, _largest, candidate_edges
from core.analysis.sae import model_fingerprint
from core.analysis.transcoders import TRANSCODER_DIR, load_transcoders, missing_layers

_FOUND: dict[str, dict] = {}  # model fingerprint -> its transcoders ({} when none)


class NoTranscoders(ValueError):
    """The model has no transcoder for every block (a random twin never has)."""


def key_transcoders(model, root=None) -> dict:
    """{layer: transcoder} of the answer key whose weights ``model`` has (found under ``root``, default
    assets/answer_keys/, by the fingerprint its transcoders record); {} when no key's transcoders fit it."""
    fp = model_fingerprint(model)
    if fp not in _FOUND or root is not None:
        base = KEYS_DIR if root is None else root
        found = {}
        for name in list_keys(base):
            folder = base / name
            try:
                cfg = json.loads((folder / TRANSCODER_DIR / "layer-0" / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if cfg.get("trained_on") == fp:
                found = load_transcoders(folder, model.config, trained_on=fp)
                break
        _FOUND[fp] = found
    return _FOUND[fp]


def _name(g: Graph, node: int) -> str | None:
    """A node as the key names it: a feature is its block's MLP, a token embedding the tokens, a logit the logits;
    None for an error node (no component)."""
    sl = g.slices()
    if node < sl["features"].stop:
        return f"L{int(g.features[node][0]) + 1} MLP"
    if node < sl["errors"].stop:
        return None
    return INPUT if node < sl["tokens"].stop else OUTPUT


def flows(g: Graph, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(flow (N, N), node influence (N,)) of the answer ``k`` (the graph's k-th logit node) on the graph pruned as
    the page prunes it for that output alone."""
    w = np.zeros(len(g.logit_tokens))
    w[k] = 1.0
    pr = prune(replace(g, logit_probs=w))  # the page's pruning, with this output as the only one explained
    na = normalize(np.where(pr.edge_mask, g.adjacency, 0.0))
    weights = np.zeros(g.n_nodes)
    weights[g.slices()["logits"].start + k] = 1.0
    inf = influence(na, weights)
    return na * (inf + weights)[:, None], inf


def example_scores(model, transcoders: dict, ids, targets) -> list[dict]:
    """For each of ``targets`` (tokens) explained on one graph of ``ids``: ``route``'s scores."""
    g = attribution_graph(model, transcoders, list(ids), logit_tokens=list(targets))
    per = [flows(g, k) for k in range(len(targets))]
    rows = sorted(set().union(*(np.flatnonzero(f.any(1)).tolist() for f, _ in per)))
    parts = head_split(model, transcoders, g, rows) if rows else {}
    return [route(g, model.config.n_layers, rows, parts, flow, inf, k) for k, (flow, inf) in enumerate(per)]


def route(g: Graph, n_layers: int, rows: list[int], parts: dict, flow: np.ndarray, inf: np.ndarray, k: int) -> dict:
    """The scores of the graph's k-th output from its ``flows`` and the head split of the kept ``rows`` (``parts``:
    head_split's {"direct", "L1H1", ..., "composed"}, each (R, S)): {"components": {name: share}, "edges":
    {(source, target): share}, "composed": the flow through two heads in turn, "errors": the error nodes'
    influence (these two reported, not scored), "mass": the summed |edges| into the output}."""
    S = g.slices()["logits"].start
    heads = [n for n in parts if n.startswith("L")]  # "L1H2"
    label = {n: "{} H{}".format(*n.split("H")) for n in heads}  # "L1H2" -> "L1 H2", as the screen writes it
    names = [_name(g, i) for i in range(g.n_nodes)]
    # one-hot (nodes, names) maps: a route's (R, S) flows summed by what their ends are, in two products
    src_names = sorted({n for n in names[:S] if n is not None})
    dst_names = sorted({names[t] for t in rows if names[t] is not None})
    src = np.array([[names[s] == n for n in src_names] for s in range(S)], dtype=float).reshape(S, -1)
    dst = np.array([[names[t] == n for n in dst_names] for t in rows], dtype=float).reshape(len(rows), -1)
    f = flow[rows, :S]  # (R, S) the kept edges' flows
    size = sum(np.abs(v) for v in parts.values()) if parts else np.zeros_like(f)  # (R, S) the routes' total size
    routed = {n: f * np.abs(v) / np.where(size > 0, size, 1.0) for n, v in parts.items()}  # (R, S) each route's
    comps = {label[n]: float(routed[n].sum()) for n in heads}
    comps.update({f"L{l + 1} MLP": float(inf[:g.n_features][g.features[:, 0] == l].sum()) for l in range(n_layers)})
    edges: dict[tuple[str, str], float] = {}
    if rows:
        direct = dst.T @ routed["direct"] @ src  # (targets' names, sources' names)
        edges.update({(a, b): float(direct[j, i]) for j, b in enumerate(dst_names) for i, a in enumerate(src_names)})
        for n in heads:
            into, out_of = routed[n].sum(0) @ src, routed[n].sum(1) @ dst  # by source name; by target name
            edges.update({(a, label[n]): float(v) for a, v in zip(src_names, into)})
            edges.update({(label[n], b): float(v) for b, v in zip(dst_names, out_of)})
    return {"components": comps, "edges": edges, "composed": float(routed["composed"].sum()) if rows else 0.0,
            "errors": float(inf[g.slices()["errors"]].sum()), "mass": float(np.abs(g.adjacency[S + k, :S]).sum())}


def graph_edges(config) -> list[tuple[str, str]]:
    """The candidate edges the graph scores: grading's, less head -> head."""

    def head(n):
        return n not in (INPUT, OUTPUT) and parse_component(n, config).kind == "head"
    return [(s, t) for s, t in candidate_edges(config) if not (head(s) and head(t))]


def _scores(model, examples, labels, level: str):

    tcs = key_transcoders(model)
    if not tcs or missing_layers(tcs, model.config):
        raise NoTranscoders("this model has no transcoder for every block: the attribution graph cannot be built")
    names = all_components(model.config) if level == "components" else graph_edges(model.config)
    real, fake, mass = np.zeros(len(names)), np.zeros(len(names)), 0.0
    for i, e in enumerate(examples):
        targets = [e.answer] + ([labels[i].answer] if labels is not None else [])
        got = example_scores(model, tcs, e.clean, targets)
        real += got[0]["mass"] * np.array([got[0][level].get(n, 0.0) for n in names])
        mass += got[0]["mass"]
        if labels is not None:
            fake += got[1]["mass"] * np.array([got[1][level].get(n, 0.0) for n in names])
    values = real / max(mass, 1e-12)
    at = _largest(values, "share")
    what = names[at] if level == "components" else f"{names[at][0]} → {names[at][1]}"
    return Scores(names, values, CARRIES, level, _effect(values, "share"),
                  _effect(fake / max(mass, 1e-12), "share") if labels is not None else math.nan, mass, "share",
                  f"{what} carries {share_text(values[at])} of the answer's influence in the attribution graph")


def score_graph(model, examples, labels=None, norm=None):
    """Each head's and MLP's share of the answer's influence in the pruned graph (the module's doc), weighted mean
    over the examples; ``labels``: the nonsense tokens, read off the same graphs. ``norm``: unused (a twin
    has no transcoders). NoTranscoders where the model has none."""
    return _scores(model, examples, labels, "components")


def score_graph_edges(model, examples, labels=None, norm=None):
    """As ``score_graph``, each scorable edge's share (the module's doc)."""
    return _scores(model, examples, labels, "edges")
