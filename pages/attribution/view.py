"""The rules behind the Attribution graph page (pages/attribution.py): node names and places, the pruned graph as
lists of nodes and edges, a node's strongest edges with their head split, the query-key split as rows, what a GPT-2
sized model would take, and what one graph would take before it is built (``plan_graph``: its memory and time
against the server's budget, TE_ATTRIBUTION_MEMORY, with the shortest prompt or the feature cap that would fit).
Numbers and words; no Streamlit here."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import torch

from core.analysis.attribution import BATCH, MAX_LOGITS, Graph
from core.analysis.attribution_prune import Pruned
from core.serve.fmt import binary_bytes, visible
from core.serve.sizes import size_setting
from core.serve.fmt import duration_words
from core.analysis.supernodes import AGREE, propose
from core.analysis.trace import direct_read

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
    in float32, each block's feature leaves, their gradients and products (3 x width), about 40 d-wide activations
    and gradients per block, the logits and their gradient, the frozen patterns; and its row of edges (float64)."""
    L = config.n_layers
    S = features + (L + 2) * n
    return 4 * n * (3 * sum(widths) + 40 * L * config.d_model + 2 * config.vocab_size + 2 * L * config.n_heads * n) \
        + 16 * S


def graph_cost(config, widths, features: int, n: int, batch: int = BATCH, logits: int = MAX_LOGITS):
    """(peak bytes, seconds) of a graph with ``features`` feature nodes over ``n`` positions, for a model of
    ``config`` whose transcoders have ``widths`` latents per block. The peak is the larger of building it (the
    adjacency, then ``batch`` copies of the replacement run) and pruning it (PEAK_COPIES x the adjacency)."""
    L, d, m = config.n_layers, config.d_model, config.vocab_size
    S = features + (L + 2) * n
    N, R = S + logits, features + logits
    B = max(1, min(batch, R))
    memory = max(8 * N * N + B * _per_copy(config, widths, features, n), PEAK_COPIES * 8 * N * N)
    flops = 6 * n * (L * (4 * d * d + 2 * n * d) + sum(widths) * d + d * m)  # one copy, forward and backward
    seconds = math.ceil(R / B) * (B * (flops / FLOPS + S * SOURCE_S) + BATCH_S) + SOURCE_S * N * N * 1.5
    return int(memory), seconds


def _batch_for(config, widths, features: int, n: int, budget: int | None) -> int:
    """BATCH targets per backward pass, or fewer when their copies of the run would take over half the budget (a
    large vocabulary's logits, at every position of every copy)."""
    if budget is None:
        return BATCH
    return int(max(1, min(BATCH, (budget // 2) // _per_copy(config, widths, features, n))))


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

KIND_ROW = {"tokens": 0, "positions": 0}  # the embeddings sit at the bottom; block l's features at l + 1


def node_kind(g: Graph, i: int) -> str:
    for kind, sl in g.slices().items():
        if sl.start <= i < (sl.stop if sl.stop is not None else g.n_nodes):
            return kind
    raise IndexError(i)


def node_label(g: Graph, i: int, token_text) -> str:
    """A node in words: "L1 #87 at 'v' (63)", "error L2 at 'v' (63)", "token 'e' (26)", "position 26", "logit 'e'"."""
    sl, n = g.slices(), g.n_pos
    kind = node_kind(g, i)
    if kind == "features":
        l, p, f = (int(v) for v in g.features[i])
        return f"L{l + 1} #{f} at {visible(token_text(g.ids[p]))!r} ({p + 1})"
    if kind == "errors":
        k = i - sl["errors"].start
        return f"error L{k // n + 1} at {visible(token_text(g.ids[k % n]))!r} ({k % n + 1})"
    if kind == "tokens":
        p = i - sl["tokens"].start
        return f"token {visible(token_text(g.ids[p]))!r} ({p + 1})"
    if kind == "positions":
        return f"position {i - sl['positions'].start + 1}"
    return f"logit {visible(token_text(g.logit_tokens[i - sl['logits'].start]))!r}"


def node_place(g: Graph, i: int) -> tuple[float, float]:
    """(x, y): x the position (the logits one step right of the last), y the layer: embeddings 0, block l's features
    l + 1 (its error node a little below them), the logits on top."""
    sl, n = g.slices(), g.n_pos
    kind = node_kind(g, i)
    if kind == "features":
        l, p, _ = g.features[i]
        return float(p), float(l + 1)
    if kind == "errors":
        k = i - sl["errors"].start
        return float(k % n), k // n + 0.75
    if kind == "tokens":
        return float(i - sl["tokens"].start), 0.0
    if kind == "positions":
        return float(i - sl["positions"].start), -0.25
    return float(n - 1) + 1.0 + 0.15 * (i - sl["logits"].start), float(g.n_layers + 1)


def node_cell(g: Graph, i: int) -> tuple[int, int]:
    """(position, row) of a node's cell in the drawn graph: row 0 the embeddings, l + 1 block l (its features and
    its error node), n_layers + 1 the output (position: the logit's rank)."""
    sl, n = g.slices(), g.n_pos
    kind = node_kind(g, i)
    if kind == "features":
        l, p, _ = (int(v) for v in g.features[i])
        return p, l + 1
    if kind == "errors":
        k = i - sl["errors"].start
        return k % n, k // n + 1
    if kind == "logits":
        return i - sl["logits"].start, g.n_layers + 1
    return i - sl[kind].start, 0  # an embedding: tokens (and positions, where the graph has that slice)


def top_tokens(model, transcoders: dict, features, token_text) -> list[str]:
    """Each (layer, feature)'s short text on the graph: the token its decoder row promotes most when read straight
    through to the output (core.analysis.trace.direct_read). The one source of a feature's label: word
    explanations (core.features.explain) replace it here."""
    out = []
    for l, f in features:
        effect = direct_read(model, transcoders[l].W_dec[int(f)].detach())  # (m,)
        out.append(visible(token_text(int(torch.argmax(effect)))))
    return out


def node_text(g: Graph, i: int, token_text, feature_text: dict | None = None) -> str:
    """The short text drawn beside a node: a feature's label (``feature_text[node]``, "→ its top token"), an
    embedding's token, an error node's block, a logit's token and probability."""
    kind = node_kind(g, i)
    if kind == "features":
        return f"→{(feature_text or {}).get(i, '?')}"
    p, row = node_cell(g, i)
    if kind == "errors":
        return f"err L{row}"
    if kind == "tokens":
        return visible(token_text(g.ids[p]))
    if kind == "positions":  # drawn in the token's column, between the staggered tokens: no room for text
        return ""
    return f"{visible(token_text(g.logit_tokens[p]))} {g.logit_probs[p]:.2f}"


def pruned_lists(g: Graph, pr: Pruned, token_text, feature_text: dict | None = None):
    """(nodes, edges) of the pruned graph: each node with its label, short text, kind, cell (pos, row) and
    influence; each edge with its ends and weight, strongest first."""
    nodes = []
    for i in np.flatnonzero(pr.node_mask):
        i = int(i)
        p, row = node_cell(g, i)
        nodes.append({"node": i, "label": node_label(g, i, token_text), "kind": node_kind(g, i), "pos": p,
                      "row": row, "text": node_text(g, i, token_text, feature_text),
                      "influence": float(pr.node_influence[i])})
    t, s = np.nonzero(pr.edge_mask)
    w = g.adjacency[t, s]
    order = np.argsort(-np.abs(w))
    edges = [{"target": int(t[k]), "source": int(s[k]), "weight": float(w[k])} for k in order]
    return nodes, edges


def strongest_edges(g: Graph, target: int, token_text, parts: dict | None = None, k: int = 8) -> list[dict]:
    """The ``k`` largest edges into ``target`` (any node), with their head split when ``parts`` (one row of
    core.analysis.attribution.head_split) is given."""
    row = g.adjacency[target]
    out = []
    for s in np.argsort(-np.abs(row))[:k]:
        if row[s] == 0:
            break
        line = {"from": node_label(g, int(s), token_text), "weight": float(row[s])}
        if parts is not None:
            split = {name: float(v[int(s)]) for name, v in parts.items() if abs(v[int(s)]) >= 0.05 * abs(row[s])}
            line["through"] = ", ".join(f"{name} {v:+.2f}" for name, v in sorted(split.items(), key=lambda x: -abs(x[1])))
        out.append(line)
    return out


def qk_rows(split: dict, labels: list[str], k: int = 8) -> list[dict]:
    """The largest terms of a head's score split (core.analysis.attribution.qk_split), query side x key side."""
    T = split["terms"]
    flat = np.argsort(-np.abs(T).ravel())[:k]
    rows = [{"query side": labels[i // T.shape[1]], "key side": labels[i % T.shape[1]],
             "term": float(T.ravel()[i])} for i in flat if T.ravel()[i] != 0]
    rows.append({"query side": "constant terms (biases, LayerNorm shifts)", "key side": "",
                 "term": float(split["query_const"].sum() + split["key_const"].sum() + split["const"])})
    return rows


def source_labels(g: Graph, token_text) -> list[str]:
    """Labels of the graph's sources in node order (features, errors, tokens, positions)."""
    return [node_label(g, i, token_text) for i in range(g.slices()["logits"].start)]


def too_big(config, limit_layers: int = 4, limit_width: int = 256) -> str | None:
    """Why a model is too large for a live graph here, and what it would take; None when it is not."""
    if config.n_layers <= limit_layers and config.d_model <= limit_width:
        return None
    per_layer_s = 53 * (config.d_model / 64) ** 2  # a transcoder of d = 64 trains in ~53 s on one core here
    return (f"This model has {config.n_layers} blocks of width {config.d_model}. Its transcoders (one per block, "
            f"{8 * config.d_model:,} features each) would take about {config.n_layers * per_layer_s / 3600:.1f} "
            f"hours to train on this CPU and a graph would hold tens of thousands of feature nodes; circuit-tracer runs "
            f"graphs of this size on a GPU. Pick one of the two-block models here.")


def switch_words(result: dict, token_text, top: int) -> str:
    """What switching the pinned features off did to the top token, in the replacement and in the real model."""
    b, r, m = (result[k][top] for k in ("before", "replacement", "real"))
    return (f"p({visible(token_text(top))!r}): {b:.3f} before; {r:.3f} with them off in the replacement (patterns and "
            f"scales frozen, as the graph sees it); {m:.3f} in the real model with the same features taken out.")


def fmt_score(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.2f}"


def busiest_head(parts: dict) -> tuple[int, int] | None:
    """(block, head), counted from 0, of the head whose part of the edges in ``parts`` (a head_split) is largest."""
    heads = {k: float(np.abs(v).sum()) for k, v in parts.items() if k.startswith("L")}
    if not heads or max(heads.values()) == 0:
        return None
    name = max(heads, key=heads.get)  # "L2H4"
    block, head = name[1:].split("H")
    return int(block) - 1, int(head) - 1


def feature_words(profile: dict, layer: int, feature: int, ids: list[int], token_text, pos: int) -> str:
    """A feature's card in words: its activation at the node's position, where else it fires most in this prompt,
    and what it writes towards the output."""
    acts = profile["activations"]
    fired = [int(i) for i in np.argsort(-acts)[:5] if acts[i] > 0]
    where = ", ".join(f"{visible(token_text(ids[i]))!r} ({i + 1}: {acts[i]:.2f})" for i in fired) or "nowhere"
    up = ", ".join(repr(visible(token_text(t))) for t in profile["promotes"])
    down = ", ".join(repr(visible(token_text(t))) for t in profile["suppresses"])
    return (f"**Block {layer + 1}, feature #{feature}**: {acts[pos]:.2f} here, at {visible(token_text(ids[pos]))!r} "
            f"({pos + 1}); in this prompt it fires most at {where}. Read straight through to the output, "
            f"its direction favours {up} and disfavours {down}.")


def proposed_groups(g: Graph, nodes: list[dict], transcoders: dict, feature_text: dict,
                    threshold: float = AGREE) -> list[tuple[str, list[int]]]:
    """The supernodes the page proposes, (name, member nodes): kept features of one block whose decoder rows have
    cosine ≥ ``threshold`` (core.analysis.supernodes.propose), named by block, the first member's text and size."""
    feats = [n["node"] for n in sorted(nodes, key=lambda n: -n["influence"]) if n["kind"] == "features"]
    if len(feats) < 2:
        return []
    layers = [int(g.features[i][0]) for i in feats]
    rows = np.stack([transcoders[l].W_dec[int(g.features[i][2])].detach().double().numpy()
                     for l, i in zip(layers, feats)])  # (k, d)
    out = []
    for found in propose(layers, rows, threshold):
        members = [feats[j] for j in found]
        out.append((f"L{layers[found[0]] + 1} →{feature_text.get(members[0], '?')} ×{len(members)}", members))
    return out
