"""The rules behind the Attribution graph page (pages/attribution.py): node names and places, the pruned graph as
lists of nodes and edges, a node's strongest edges with their head split, the query-key split as rows, what a GPT-2
sized model would take. What one graph would take before it is built is core.analysis.attribution_cost.
Numbers and words; no Streamlit here."""
from __future__ import annotations

import math

import numpy as np
import torch

from core.analysis.attribution import Graph
from core.analysis.attribution_prune import Pruned
from core.serve.fmt import visible
from core.analysis.supernodes import AGREE, propose
from core.analysis.trace import direct_read

KIND_ROW = {"tokens": 0}  # the embeddings sit at the bottom; block l's features at l + 1


def node_kind(g: Graph, i: int) -> str:
    for kind, sl in g.slices().items():
        if sl.start <= i < (sl.stop if sl.stop is not None else g.n_nodes):
            return kind
    raise IndexError(i)


def node_label(g: Graph, i: int, token_text) -> str:
    """A node in words: "L1 #87 at 'v' (63)", "error L2 at 'v' (63)", "token 'e' (26)", "logit 'e'"."""
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
    """Labels of the graph's sources in node order (features, errors, token embeddings)."""
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
                    threshold: float = AGREE, words: dict | None = None) -> list[tuple[str, list[int]]]:
    """The supernodes the page proposes, (name, member nodes): kept features of one block whose decoder rows have
    cosine ≥ ``threshold`` or whose explanations read the same (``words``: node -> words, explained features only;
    core.analysis.supernodes.propose), named by block, the first member's text and size."""
    feats = [n["node"] for n in sorted(nodes, key=lambda n: -n["influence"]) if n["kind"] == "features"]
    if len(feats) < 2:
        return []
    layers = [int(g.features[i][0]) for i in feats]
    rows = np.stack([transcoders[l].W_dec[int(g.features[i][2])].detach().double().numpy()
                     for l, i in zip(layers, feats)])  # (k, d)
    out = []
    for found in propose(layers, rows, threshold, [(words or {}).get(i) for i in feats]):
        members = [feats[j] for j in found]
        out.append((f"L{layers[found[0]] + 1} →{feature_text.get(members[0], '?')} ×{len(members)}", members))
    return out
