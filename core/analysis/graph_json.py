"""A pruned attribution graph as circuit-tracer's graph JSON: the file its local viewer serves (`circuit-tracer
start-server --graph_file_dir DIR`) and Neuronpedia accepts for upload. The fields and their conventions are those of
circuit-tracer's ``frontend/graph_models.py`` (schema_version 1) and ``utils/create_graph_files.py``:

- a feature node is ``"{layer}_{latent}_{pos}"`` (layer and position from 0), its ``feature`` the Cantor pairing of
  (layer, latent); an error node ``"{layer}_-1_{pos}"``; a position's input ``"E_{token id}_{pos}"``, of
  feature_type "embedding"; a logit ``"{n_layers + 1}_{token id}_{last pos}"``, the first one the target;
- ``influence`` is circuit-tracer's cumulative score: the share of the total influence on the logits held by the
  nodes at least as influential as this one (what its viewer's pruning slider reads); logits carry none;
- a link is ``{"source", "target", "weight"}``, weight the graph's edge (``adjacency[target, source]``), for every
  edge pruning kept, in the order circuit-tracer writes them (target-major).

Where the graph still holds position embeddings as nodes of their own (the "positions" slice), a position's token
and position embedding are written as its one "embedding" node, as circuit-tracer's are: its edges the sums of the
two (exact, the graph being linear in its sources), kept where either was.

The page's links name nodes another way, one that survives a rebuilt graph: ``node_name`` ("L1.5.294": block and
position counted from 1 as the screen counts, then the latent; "logit.105": the output of token id 105), read back
by ``find_node``. No Streamlit here."""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np

from core.analysis.attribution import Graph
from core.analysis.attribution_prune import Pruned

SCHEMA_VERSION = 1
SCAN_PREFIX = "transformer-explorer"  # metadata.scan: ours, never a Neuronpedia model id such as gemma-2-2b
_FEATURE_NAME = re.compile(r"^L(\d{1,4})\.(\d{1,6})\.(\d{1,9})$")
_LOGIT_NAME = re.compile(r"^logit\.(\d{1,9})$")


def cantor(x: int, y: int) -> int:
    """circuit-tracer's ``feature`` of a transcoder latent: one number for (layer, latent)."""
    return (x + y) * (x + y + 1) // 2 + y


def process_token(text: str) -> str:
    """A token as circuit-tracer's viewer writes it (its ``process_token``): newline, tab and return made visible."""
    return text.replace("\n", "⏎").replace("\t", "→").replace("\r", "↵")


def scan_name(model_name: str) -> str:
    return f"{SCAN_PREFIX}/{model_name}"


def slug_for(model_name: str, ids, explain=None) -> str:
    """'attribution-<model>-<8 hex>': the file's name without .json (circuit-tracer's viewer reads <slug>.json), the
    hex naming the prompt's tokens and the explained output."""
    digest = hashlib.sha1(repr((list(map(int, ids)), explain)).encode()).hexdigest()[:8]
    model = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-") or "model"
    return f"attribution-{model}-{digest}"


def _kinds(g: Graph) -> np.ndarray:
    """(N,) each node's kind, from ``g.slices()`` (with or without a "positions" slice)."""
    out = np.empty(g.n_nodes, dtype=object)
    for kind, sl in g.slices().items():
        out[sl] = kind
    return out


def _groups(g: Graph) -> np.ndarray:
    """(N,) the node each node is written as: itself, or for a position embedding its position's token node."""
    group = np.arange(g.n_nodes)
    sl = g.slices()
    if "positions" in sl:
        group[sl["positions"]] = np.arange(sl["tokens"].start, sl["tokens"].stop)
    return group


def _node(g: Graph, i: int, kind: str, token_text, influence, label: str) -> dict:
    """One node with every field of circuit-tracer's ``Node``, in its order."""
    sl, n, L = g.slices(), g.n_pos, g.n_layers
    base = {"token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": label,
            "influence": influence, "activation": None}
    if kind == "features":
        l, p, f = (int(v) for v in g.features[i])
        head = {"node_id": f"{l}_{f}_{p}", "feature": cantor(l, f), "layer": str(l), "ctx_idx": p,
                "feature_type": "cross layer transcoder", "jsNodeId": f"{l}_{f}-0"}
        base["activation"] = float(g.activations[i])
    elif kind == "errors":
        l, p = divmod(i - sl["errors"].start, n)
        head = {"node_id": f"{l}_-1_{p}", "feature": -1, "layer": str(l), "ctx_idx": p,
                "feature_type": "mlp reconstruction error", "jsNodeId": f"{l}_{p}-0"}
    elif kind == "tokens":
        p = i - sl["tokens"].start
        t = int(g.ids[p])
        head = {"node_id": f"E_{t}_{p}", "feature": p, "layer": "E", "ctx_idx": p, "feature_type": "embedding",
                "jsNodeId": f"E_{t}-{p}"}
    else:  # logits: at the last position, on the layer above the last block
        k = i - sl["logits"].start
        t, prob = int(g.logit_tokens[k]), float(g.logit_probs[k])
        head = {"node_id": f"{L + 1}_{t}_{n - 1}", "feature": t, "layer": str(L + 1), "ctx_idx": n - 1,
                "feature_type": "logit", "jsNodeId": f"L_{t}-{n - 1}"}
        base.update(token_prob=prob, is_target_logit=k == 0, influence=None,
                    clerp=label or f'Output "{process_token(token_text(t))}" (p={prob:.3f})')
    return {**{k: head[k] for k in ("node_id", "feature", "layer", "ctx_idx", "feature_type")},
            **{k: base[k] for k in ("token_prob", "is_target_logit", "run_idx", "reverse_ctx_idx")},
            "jsNodeId": head["jsNodeId"], **{k: base[k] for k in ("clerp", "influence", "activation")}}


def cumulative_influence(values: np.ndarray) -> np.ndarray:
    """circuit-tracer's cumulative scores: for each node, the sum of the influences at least as large as its own
    (sorted descending, ties in node order) over their total."""
    order = np.argsort(-values, kind="stable")
    total = values.sum()
    out = np.zeros_like(values, dtype=float)
    out[order] = np.cumsum(values[order]) / (total if total > 0 else 1.0)
    return out


def _links(g: Graph, pr: Pruned, group: np.ndarray) -> list[tuple[int, int, float]]:
    """(source, target, weight) of the kept edges between written nodes, target-major; edges of two nodes written as
    one (a token and its position embedding) summed over the whole adjacency."""
    t, s = np.nonzero(pr.edge_mask)  # row-major: by target, then source
    if (group == np.arange(g.n_nodes)).all():
        return list(zip(s.tolist(), t.tolist(), g.adjacency[t, s].tolist()))
    out: dict[tuple[int, int], None] = {}
    for ti, si in zip(group[t].tolist(), group[s].tolist()):
        out.setdefault((ti, si))
    members = {int(r): np.flatnonzero(group == r) for r in np.unique(group[group != np.arange(g.n_nodes)])}
    links = []
    for ti, si in sorted(out):
        rows, cols = members.get(ti, [ti]), members.get(si, [si])
        links.append((si, ti, float(g.adjacency[np.ix_(rows, cols)].sum())))
    return links


def graph_json(g: Graph, pr: Pruned, token_text, *, slug: str, scan: str, prompt: str, node_threshold: float,
               clicked: int | None = None, pinned=(), labels: dict | None = None) -> dict:
    """The graph JSON of ``g`` pruned as ``pr``: metadata, qParams (``clicked``: the inspected node, ``pinned``: nodes
    to pin, both node indices), nodes and links. ``token_text``: a token id -> its text; ``labels``: node index ->
    a short text for its ``clerp``."""
    kinds, group = _kinds(g), _groups(g)
    written = np.flatnonzero(group == np.arange(g.n_nodes))
    keep = np.zeros(g.n_nodes, dtype=bool)
    np.logical_or.at(keep, group, pr.node_mask)  # a token's node is kept when its position's embedding is
    influence = np.zeros(g.n_nodes)
    np.add.at(influence, group, pr.node_influence)
    cumulative = np.zeros(g.n_nodes)
    cumulative[written] = cumulative_influence(influence[written])
    links = _links(g, pr, group)
    ids = {}
    for i in written[keep[written]]:
        ids[int(i)] = _node(g, int(i), kinds[i], token_text, float(cumulative[i]), (labels or {}).get(int(i), ""))
    links = [(s, t, w) for s, t, w in links if s in ids and t in ids]
    used = {s for s, _, _ in links} | {t for _, t, _ in links}
    shown = {i: d for i, d in ids.items() if i in used or d["feature_type"] in ("embedding", "logit")}  # as theirs
    name = {i: d["node_id"] for i, d in shown.items()}
    meta = {"slug": slug, "scan": scan, "transcoder_list": [],
            "prompt_tokens": [process_token(token_text(int(t))) for t in g.ids], "prompt": prompt,
            "node_threshold": float(node_threshold), "schema_version": SCHEMA_VERSION}
    real = lambda i: i is not None and 0 <= int(i) < g.n_nodes  # noqa: E731  a group's node is none of the graph's
    q = {"pinnedIds": [name[int(group[i])] for i in pinned if real(i) and int(group[i]) in name], "supernodes": [],
         "linkType": "both", "clickedId": name.get(int(group[clicked]), "") if real(clicked) else "",
         "sg_pos": ""}
    return {"metadata": meta, "qParams": q, "nodes": list(shown.values()),
            "links": [{"source": name[s], "target": name[t], "weight": w} for s, t, w in links]}


def graph_json_bytes(*args, **kwargs) -> bytes:
    """``graph_json`` as the UTF-8 file a download writes."""
    return json.dumps(graph_json(*args, **kwargs), ensure_ascii=False).encode("utf-8")


def graph_file(g: Graph, pr: Pruned, token_text, model_name: str, prompt: str, explain: int | None, share: float,
               clicked: int | None = None, pinned=()) -> bytes:
    """The file the Attribution page offers: ``graph_json_bytes`` with our slug and scan for ``model_name``, the
    output ``explain`` and the pruning ``share``; its name is ``slug_for(model_name, g.ids, explain) + ".json"``."""
    return graph_json_bytes(g, pr, token_text, slug=slug_for(model_name, g.ids, explain), scan=scan_name(model_name),
                            prompt=prompt, node_threshold=share, clicked=clicked, pinned=pinned)


# ------------------------------------------------------------------ stable node names, for links

def node_name(g: Graph, i: int) -> str | None:
    """A feature node as "L<block>.<position>.<latent>" (block and position from 1), a logit as "logit.<token id>";
    None for errors and embeddings (a link never names them)."""
    sl = g.slices()
    if not 0 <= i < g.n_nodes:  # a group's node (negative, core.analysis.supernodes) is none of the graph's
        return None
    if i < g.n_features:
        l, p, f = (int(v) for v in g.features[i])
        return f"L{l + 1}.{p + 1}.{f}"
    if i >= sl["logits"].start:
        return f"logit.{int(g.logit_tokens[i - sl['logits'].start])}"
    return None


def parse_node_name(name: str) -> tuple:
    """("feature", layer, position, latent) counted from 0, or ("logit", token id); ValueError, in words, otherwise."""
    text = str(name).strip()
    if m := _FEATURE_NAME.match(text):
        l, p, f = (int(v) for v in m.groups())
        if l < 1 or p < 1:
            raise ValueError(f"'{text[:30]}': blocks and positions count from 1")
        return "feature", l - 1, p - 1, f
    if m := _LOGIT_NAME.match(text):
        return "logit", int(m.group(1))
    raise ValueError(f"'{text[:30]}' is not a node like L1.5.294 (block, position, feature) or logit.105")


def find_node(g: Graph, name: str) -> int | None:
    """The node index ``name`` (``node_name``'s form) has in ``g``; None when ``g`` has no such node; ValueError when
    ``name`` is not of that form."""
    parsed = parse_node_name(name)
    if parsed[0] == "logit":
        return g.slices()["logits"].start + g.logit_tokens.index(parsed[1]) if parsed[1] in g.logit_tokens else None
    hit = np.flatnonzero((g.features == np.array(parsed[1:])).all(1)) if g.n_features else []
    return int(hit[0]) if len(hit) else None


def link_output(token: int, choices, token_text) -> str | None:
    """Why a link's output= cannot be explained on this prompt (None: it can)."""
    if token in choices:
        return None
    try:
        shown = f" ({token_text(token)!r})"
    except (ValueError, IndexError, KeyError):  # an id outside the vocabulary: no text to show
        shown = ""
    return f"token {token}{shown} is not one of this prompt's likeliest outputs: the likeliest is explained"


def _resolve(g: Graph, name: str, allowed) -> tuple[int | None, str | None]:
    try:
        i = find_node(g, name)
    except ValueError as e:
        return None, str(e)
    if i is None:
        return None, f"this graph has no node {name}"
    return (i, None) if i in allowed else (None, f"{name} is pruned away at this share")


def link_nodes(g: Graph, node: str | None, off: str | None, pickable: list[dict], most: int = 12):
    """A link's node= and off= on ``g``: (the node to inspect or None, the features to switch off, [(key, why)] for
    what ``g`` lacks); the node one of ``pickable`` (the page's kept nodes, {"node": index, "kind": ...}), the
    features of those, at most ``most``."""
    ignored, i = [], None
    switchable = {n["node"] for n in pickable if n["kind"] == "features"}
    if node is not None:
        i, why = _resolve(g, node, {n["node"] for n in pickable})
        if why:
            ignored.append(("node", f"{why}: the page inspects its default node"))
    names = list(dict.fromkeys(s.strip() for s in (off or "").split(",") if s.strip()))  # each once, then the cap
    found = [_resolve(g, s, switchable) for s in names[:most]]
    bad = [why for _, why in found if why]
    if bad:
        ignored.append(("off", "; ".join(bad) + (": those stay on" if len(bad) > 1 else ": it stays on")))
    if len(names) > most:
        ignored.append(("off", f"at most {most} features are switched off at once: the last {len(names) - most:,} "
                               "named stay on"))
    return i, list(dict.fromkeys(j for j, why in found if why is None)), ignored
