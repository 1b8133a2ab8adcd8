"""The attribution graph's layout (issue 57): every drawn marker clear of every other at 1400 px, computed from the
figure itself (its axis ranges, height, margins and marker sizes), on both shipped models' default prompt and a
prompt of our own, with and without supernodes; every kept node carries a text; the logits in a column of their
own, each with its token and probability. Supernodes: the summed edges against sums over the adjacency."""
import itertools
from pathlib import Path

import numpy as np
import pytest

from core.analysis import attribution as A
from core.analysis import supernodes as S
from core.analysis.attribution_prune import prune
from core.analysis.transcoders import load_transcoders
from core.nn.checkpoint import load_checkpoint
from pages.attribution import view as av
from core.figures.attribution_graph import graph_figure
from core.figures.attribution_layout import WIDTH

MODELS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT = "Long live the king! Long live the queen! Long live the k"
OWN = "To be, or not to be, that is the question: to be"


@pytest.fixture(scope="module", params=["shakespeare-char", "shakespeare-bpe"])
def shipped(request):
    model, tok = load_checkpoint(MODELS / request.param)
    model.eval()
    return model, tok, load_transcoders(MODELS / request.param, model.config)


_LISTS: dict = {}


def lists(shipped, prompt, share=0.8):
    """(graph, pruned, nodes, edges, feature texts) of ``prompt``, built once per model and prompt."""
    if (id(shipped), prompt) not in _LISTS:
        _LISTS[id(shipped), prompt] = _lists(shipped, prompt, share)
    return _LISTS[id(shipped), prompt]


def _lists(shipped, prompt, share):
    model, tok, tcs = shipped
    g = A.attribution_graph(model, tcs, tok.encode(prompt)[-64:])
    pr = prune(g, share)
    text = lambda t: tok.shown_text([t])  # noqa: E731
    kept = [i for i in range(g.n_features) if pr.node_mask[i]]
    tops = av.top_tokens(model, tcs, [(int(g.features[i][0]), int(g.features[i][2])) for i in kept], text)
    feature_text = dict(zip(kept, tops))
    nodes, edges = av.pruned_lists(g, pr, text, feature_text)
    return g, pr, nodes, edges, feature_text


def marker_boxes(fig, plot_width: float):
    """(node, x0, x1, y0, y1) in px of every node marker the figure draws, at a plot area ``plot_width`` px wide."""
    lay = fig.layout
    (xa, xb), (ya, yb) = lay.xaxis.range, lay.yaxis.range
    height = lay.height - lay.margin.t - lay.margin.b
    boxes = []
    for trace in fig.data:
        if trace.mode is None or "markers" not in trace.mode or trace.customdata is None:
            continue  # edges, the edges' hover points, the crosses over switched-off features
        sizes = trace.marker.size if not np.isscalar(trace.marker.size) else [trace.marker.size] * len(trace.x)
        for node, x, y, s in zip(trace.customdata, trace.x, trace.y, sizes):
            px, py = (x - xa) / (xb - xa) * plot_width, (y - ya) / (yb - ya) * height
            boxes.append((node, px - s / 2, px + s / 2, py - s / 2, py + s / 2))
    return boxes


def assert_apart(fig, plot_width):
    boxes = marker_boxes(fig, plot_width)
    for a, b in itertools.combinations(boxes, 2):
        clear = a[2] <= b[1] or b[2] <= a[1] or a[4] <= b[3] or b[4] <= a[3]
        assert clear, f"nodes {a[0]} and {b[0]} overlap at {plot_width} px: {a[1:]} {b[1:]}"
    return boxes


@pytest.mark.parametrize("prompt", [DEFAULT, OWN])
def test_no_two_markers_overlap_and_every_node_has_its_text(shipped, prompt):
    g, pr, nodes, edges, feature_text = lists(shipped, prompt)
    fig = graph_figure(nodes, edges, g.n_layers, g.n_pos)
    margins = fig.layout.margin.l + fig.layout.margin.r
    boxes = assert_apart(fig, 1400 - margins)  # the figure stretched to 1400 px
    assert_apart(fig, WIDTH)  # and the chart's plot area in a 1400 px window, sidebar open
    assert sorted(b[0] for b in boxes) == sorted(n["node"] for n in nodes)  # every kept node drawn once
    texts = {n: t for trace in fig.data if trace.customdata is not None and trace.text is not None
             for n, t in zip(trace.customdata, trace.text)}
    kinds = {n["node"]: n["kind"] for n in nodes}
    for node, t in texts.items():
        assert t or kinds[node] == "positions", (node, kinds[node])
    for i in (n["node"] for n in nodes if n["kind"] == "features"):
        assert texts[i] == f"→{feature_text[i]}"
    # the logits: one column at the right of every other node, each labelled with its token and probability
    logit = next(t for t in fig.data if t.name == "logit")
    others = [x for t in fig.data if t.customdata is not None and t.name != "logit" for x in t.x]
    assert len(set(logit.x)) == 1 and logit.x[0] > max(others)
    sl = g.slices()["logits"]
    for node, t in zip(logit.customdata, logit.text):
        assert t.endswith(f"{g.logit_probs[node - sl.start]:.2f}")
    assert list(logit.y) == sorted(logit.y, reverse=True)  # the likeliest on top


def test_a_selected_node_lights_its_edges_and_dims_the_rest(shipped):
    g, pr, nodes, edges, _ = lists(shipped, DEFAULT)
    top = g.slices()["logits"].start
    fig = graph_figure(nodes, edges, g.n_layers, g.n_pos, selected=top)
    near = {top} | {e["source"] for e in edges if e["target"] == top}
    for trace in fig.data:
        if trace.customdata is not None:
            for node, o in zip(trace.customdata, trace.marker.opacity):
                assert (o == 1) == (node in near)


def test_supernodes_sum_their_members_edges_against_the_adjacency(shipped):
    g, pr, nodes, edges, feature_text = lists(shipped, DEFAULT)
    proposals = av.proposed_groups(g, nodes, shipped[2], feature_text)
    feats = [n["node"] for n in nodes if n["kind"] == "features"]
    members = proposals[0][1] if proposals else feats[:2]
    merged_nodes, merged_edges = S.merge(nodes, edges, [("mine", members)])
    gid = S.group_id(0)
    assert gid in {n["node"] for n in merged_nodes} and not set(members) & {n["node"] for n in merged_nodes}
    group = next(n for n in merged_nodes if n["node"] == gid)
    assert group["influence"] == pytest.approx(pr.node_influence[members].sum())
    # each edge out of (into) the group: the sum over the members' kept edges, read from the adjacency
    others = [n["node"] for n in nodes if n["node"] not in members]
    for t in others:
        want = sum(g.adjacency[t, m] for m in members if pr.edge_mask[t, m])
        got = [e["weight"] for e in merged_edges if e["source"] == gid and e["target"] == t]
        assert (got[0] if got else 0.0) == pytest.approx(want, abs=1e-12)
        want_in = sum(g.adjacency[m, t] for m in members if pr.edge_mask[m, t])
        got_in = [e["weight"] for e in merged_edges if e["target"] == gid and e["source"] == t]
        assert (got_in[0] if got_in else 0.0) == pytest.approx(want_in, abs=1e-12)
    fig = graph_figure(merged_nodes, merged_edges, g.n_layers, g.n_pos)
    assert_apart(fig, WIDTH)


def test_proposals_join_features_of_one_block_whose_decoders_agree():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=8), rng.normal(size=8)
    dirs = np.stack([a, a * 2 + 0.01 * b, b, a, -a])
    # 0 and 1 agree (cosine ~1) in block 0; 3 is the same direction in block 1, alone there; 4 points away
    assert S.propose([0, 0, 0, 1, 1], dirs, 0.5) == [[0, 1]]
    assert S.propose([0, 0, 0, 0, 0], dirs, 0.5) == [[0, 1, 3]]
    c = S.cosines(dirs)
    assert c[0, 3] == pytest.approx(1.0) and c[0, 4] == pytest.approx(-1.0)
    # explanations that read the same join features whose directions do not agree (2 and 4 in block 0), never across
    # blocks (3 in block 1 says the same), and a feature with none (None) joins nothing by words
    words = [None, None, "a capital after a stop", "a capital after a stop", "a capital after a stop"]
    assert S.propose([0, 0, 0, 1, 0], dirs, 0.5, words) == [[0, 1], [2, 4]]
    assert S.propose([0, 0, 0, 1, 0], dirs, 0.5, [None] * 5) == [[0, 1]]
    assert S.group_id_of(S.group_id(3)) == 3 and S.group_id(0) < 0
