"""The graph export (issue 57): the pruned graph written as circuit-tracer's graph JSON, parsed back and compared node
by node and edge by edge with the graph itself, from its adjacency and the pruning masks (not from the exporter's
code); the fields validated against models with circuit-tracer's field names and types (graph_models.py, schema 1);
the links' stable node names read back."""
import json

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from conftest import SHIPPED
from core.analysis import attribution as A
from core.analysis import graph_json as GJ
from core.analysis import supernodes as S
from core.analysis.attribution_prune import prune
from core.analysis.transcoders import load_transcoders
from core.nn.checkpoint import load_checkpoint

PROMPT = "Long live the king! Long live the queen! Long live the k"  # the Attribution page's default


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Meta(_Strict):  # circuit-tracer's Metadata: these fields, no others
    slug: str
    scan: str
    transcoder_list: list[str]
    prompt_tokens: list[str]
    prompt: str
    node_threshold: float | None
    schema_version: int | None


class Q(_Strict):
    pinnedIds: list[str]
    supernodes: list[list[str]]
    linkType: str
    clickedId: str
    sg_pos: str


class Node(_Strict):
    node_id: str
    feature: int
    layer: str
    ctx_idx: int
    feature_type: str
    token_prob: float
    is_target_logit: bool
    run_idx: int
    reverse_ctx_idx: int
    jsNodeId: str
    clerp: str
    influence: float | None
    activation: float | None


class Link(_Strict):
    source: str
    target: str
    weight: float


class File(_Strict):
    metadata: Meta
    qParams: Q
    nodes: list[Node]
    links: list[Link]


@pytest.fixture(scope="module")
def built():
    model, tok = load_checkpoint(SHIPPED)
    tcs = load_transcoders(SHIPPED, model.config)
    ids = tok.encode(PROMPT)[-64:]
    g = A.attribution_graph(model.eval(), tcs, ids)
    return g, prune(g, 0.8), tok


def _expected_id(g, i: int) -> str:
    """A node's id by circuit-tracer's conventions, written here from the graph's own layout."""
    sl, n = g.slices(), g.n_pos
    if i < g.n_features:
        l, p, f = g.features[i]
        return f"{l}_{f}_{p}"
    if i < sl["tokens"].start:
        l, p = divmod(i - g.n_features, n)
        return f"{l}_-1_{p}"
    if i < sl["tokens"].stop:
        p = i - sl["tokens"].start
        return f"E_{g.ids[p]}_{p}"
    if "positions" in sl and i < sl["positions"].stop:  # a position embedding: one input node with its token's
        p = i - sl["positions"].start
        return f"E_{g.ids[p]}_{p}"
    t = g.logit_tokens[i - sl["logits"].start]
    return f"{g.n_layers + 1}_{t}_{n - 1}"


def _export(g, pr, tok, **kw):
    raw = GJ.graph_json_bytes(g, pr, lambda t: tok.shown_text([t]), slug="s",
                              scan=GJ.scan_name("shakespeare-char"), prompt=PROMPT, node_threshold=0.8, **kw)
    return json.loads(raw.decode("utf-8"))


def test_every_node_and_edge_is_the_graphs(built):
    g, pr, tok = built
    out = _export(g, pr, tok)
    File.model_validate(out)  # every field circuit-tracer's models name, of their types, and no other
    ids = {i: _expected_id(g, i) for i in range(g.n_nodes)}
    members = {}
    for i, name in ids.items():
        members.setdefault(name, []).append(i)
    # edges: every edge pruning kept, its weight the adjacency's (summed where two nodes are written as one)
    want = {}
    for t, s in np.argwhere(pr.edge_mask):
        key = (ids[s], ids[t])
        want[key] = float(sum(g.adjacency[tt, ss] for tt in members[key[1]] for ss in members[key[0]]))
    got = {(e["source"], e["target"]): e["weight"] for e in out["links"]}
    assert len(got) == len(out["links"]) == len(want) > 0
    assert got.keys() == want.keys()
    for key, w in want.items():
        assert got[key] == pytest.approx(w, rel=1e-12, abs=1e-12), key
    # nodes: the kept ones (a kept node has an edge, or is an input or an output), each once
    kept = {ids[i] for i in np.flatnonzero(pr.node_mask)}
    by_id = {n["node_id"]: n for n in out["nodes"]}
    assert len(by_id) == len(out["nodes"]) and set(by_id) == kept
    inf = pr.node_influence
    grouped = {name: float(inf[m].sum()) for name, m in members.items()}
    total = sum(grouped.values())
    for name, node in by_id.items():
        i = members[name][0]
        assert node["jsNodeId"] and node["run_idx"] == 0 and node["reverse_ctx_idx"] == 0
        if i < g.n_features:
            l, p, f = (int(v) for v in g.features[i])
            assert node["feature_type"] == "cross layer transcoder" and node["layer"] == str(l)
            assert node["ctx_idx"] == p and node["feature"] == (l + f) * (l + f + 1) // 2 + f
            assert node["activation"] == pytest.approx(g.activations[i])
        elif node["feature_type"] == "logit":
            k = g.logit_tokens.index(int(name.split("_")[1]))
            assert node["token_prob"] == pytest.approx(g.logit_probs[k]) and node["is_target_logit"] == (k == 0)
            assert node["influence"] is None and node["layer"] == str(g.n_layers + 1)
            assert node["clerp"].startswith("Output \"")
            continue
        else:
            assert node["feature_type"] == ("embedding" if name.startswith("E_") else "mlp reconstruction error")
        # circuit-tracer's cumulative score: the share held by the nodes at least as influential as this one
        share = sum(v for v in grouped.values() if v >= grouped[name]) / total
        assert node["influence"] == pytest.approx(share, abs=1e-9), name
    meta = out["metadata"]
    assert meta["scan"] == "transformer-explorer/shakespeare-char" and meta["schema_version"] == 1
    assert meta["prompt_tokens"] == [tok.shown_text([t]).replace("\n", "⏎").replace("\t", "→").replace("\r", "↵")
                                   for t in g.ids]
    assert meta["node_threshold"] == 0.8 and meta["prompt"] == PROMPT


def test_the_inspected_and_pinned_nodes_are_named_in_qparams(built):
    g, pr, tok = built
    kept = [int(i) for i in np.flatnonzero(pr.node_mask[:g.n_features])]
    logit = g.slices()["logits"].start
    out = _export(g, pr, tok, clicked=logit, pinned=kept[:2])
    assert out["qParams"]["clickedId"] == _expected_id(g, logit)
    assert out["qParams"]["pinnedIds"] == [_expected_id(g, i) for i in kept[:2]]


def test_node_names_survive_a_rebuilt_graph(built):
    g, _, _ = built
    for i in [0, g.n_features - 1, g.slices()["logits"].start]:
        name = GJ.node_name(g, i)
        assert GJ.find_node(g, name) == i
    l, p, f = (int(v) for v in g.features[0])
    assert GJ.node_name(g, 0) == f"L{l + 1}.{p + 1}.{f}"  # block and position as the screen counts them
    assert GJ.find_node(g, f"L{l + 1}.{p + 1}.999999") is None
    assert GJ.find_node(g, "logit.999999") is None
    assert GJ.node_name(g, g.n_features) is None  # an error node: no link names it
    for bad in ("L0.1.2", "L1.0.2", "7", "L1.2", "<script>", "logit.x"):
        with pytest.raises(ValueError):
            GJ.find_node(g, bad)


def test_the_slug_names_the_file_and_differs_by_prompt_and_output():
    a = GJ.slug_for("Shakespeare Char!", [1, 2, 3])
    assert a.startswith("attribution-shakespeare-char-") and len(a.split("-")[-1]) == 8
    assert a != GJ.slug_for("Shakespeare Char!", [1, 2, 4]) and a != GJ.slug_for("Shakespeare Char!", [1, 2, 3], 5)


def test_a_group_switched_off_is_written_as_its_members_never_as_the_last_node(built):
    """A group's node is negative (core.analysis.supernodes.group_id): read as an index it named the graph's last
    feature in a link's off= and pinned the last logit in the export."""
    g, pr, tok = built
    kept = [int(i) for i in np.flatnonzero(pr.node_mask[:g.n_features])]
    groups = [("mine", kept[:2])]
    assert GJ.node_name(g, S.group_id(0)) is None
    assert S.switched_off([kept[3], S.group_id(0), kept[0], S.group_id(5)], groups) == [kept[3], kept[0], kept[1]]
    out = _export(g, pr, tok, pinned=[S.group_id(0)], clicked=S.group_id(0))
    assert out["qParams"]["pinnedIds"] == [] and out["qParams"]["clickedId"] == ""
    out = _export(g, pr, tok, pinned=S.switched_off([S.group_id(0)], groups))
    assert out["qParams"]["pinnedIds"] == [_expected_id(g, i) for i in kept[:2]]


def test_a_links_off_counts_each_feature_once_and_names_what_its_cap_leaves_out(built):
    g, pr, _ = built
    kept = [int(i) for i in np.flatnonzero(pr.node_mask[:g.n_features])]
    pickable = [{"node": i, "kind": "features"} for i in kept]
    a, b = GJ.node_name(g, kept[0]), GJ.node_name(g, kept[1])
    _, off, ignored = GJ.link_nodes(g, None, ",".join([a] * 12 + [b]), pickable)
    assert off == [kept[0], kept[1]] and ignored == []  # twelve copies of one name are one feature
    names = [GJ.node_name(g, i) for i in kept[:14]]
    _, off, ignored = GJ.link_nodes(g, None, ",".join(names), pickable)
    assert off == kept[:12] and [k for k, _ in ignored] == ["off"] and "last 2 named" in ignored[0][1]
