"""AppTest of the Attribution graph page (issue 46): the graph of the shipped character and BPE models (their
transcoders are shipped beside them), its numbers the core's, the head split shown for the inspected node, features
switched off in the replacement and in the real model, the query-key split of a head; a model with no transcoders
and one too large say what they need; bad prompts say what is wrong."""
import numpy as np
import pytest
import torch

from core.analysis import attribution as A
from core.analysis import attribution_prune as P
from core.analysis.transcoders import load_transcoders
from core.nn.checkpoint import load_checkpoint
from pages.attribution import view as av
from core.nn.config import ModelConfig
from conftest import SHIPPED
from tests.test_page_scaling import text_of

PAGE = "pages/attribution.py"
PROMPT = "Long live the king! Long live the queen! Long live the k"  # the page's default


def metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture(scope="module")
def page(open_page_once):
    return open_page_once(PAGE, timeout=300)


def test_the_page_shows_the_cores_graph(page):
    at = page
    model, tok = load_checkpoint(SHIPPED)
    tcs = load_transcoders(SHIPPED, model.config)
    ids = tok.encode(PROMPT)[-64:]
    g = A.attribution_graph(model.eval(), tcs, ids)
    rep, comp = P.scores(g)
    assert metric(at, "Replacement score") == f"{rep:.2f}" and metric(at, "Completeness score") == f"{comp:.2f}"
    assert metric(at, "Active features") == f"{g.n_features:,}"
    pr = P.prune(g, 0.8)
    assert metric(at, "Features · edges kept") == f"{int(pr.node_mask[:g.n_features].sum())} · {int(pr.edge_mask.sum())}"
    # the inspected node opens on the output, and its strongest edge is the core's
    table = next(df.value for df in at.dataframe if "through" in df.value.columns)
    top = g.slices()["logits"].start
    s = int(np.argmax(np.abs(g.adjacency[top])))
    assert table.iloc[0]["weight"] == pytest.approx(g.adjacency[top, s], abs=1e-3)
    # the induction circuit on the default prompt: the head carrying most of the output's edges opens on the key
    # after the earlier "k", and the largest term of its score pairs the last "k" with that earlier "k"
    split = next(df.value for df in at.dataframe if "key side" in df.value.columns)
    assert split.iloc[0]["query side"] == f"token 'k' ({len(ids)})" and split.iloc[0]["key side"].startswith("token 'k'")


def test_the_pruning_slider_and_switching_features_off(open_page):
    at = open_page(PAGE, timeout=300)
    before = metric(at, "Features · edges kept")
    at.slider(key="attr_nodes").set_value(0.95).run()
    assert not at.exception and metric(at, "Features · edges kept") != before
    options = at.multiselect(key="attr_pinned").options
    assert options
    at.multiselect(key="attr_pinned").select(options[0]).run()
    assert not at.exception
    assert "with them off in the replacement" in text_of(at) and "in the real model" in text_of(at)
    import json
    spec = json.loads(next(c for c in at.get("plotly_chart") if "switched off" in c.proto.spec).proto.spec)
    crossed = next(t for t in spec["data"] if t.get("name") == "switched off")
    assert len(crossed["x"]) == 1  # the one feature switched off, crossed out on the graph


def test_the_query_key_split_adds_up_on_the_page(page):
    """The score the page states is the head's own score at the key position it names; its table is the largest
    terms of that score's split and the constant terms; and with the terms it leaves out they add up to the stated
    score (issue 55: before, a bound any finite table met)."""
    at = page
    model, tok = load_checkpoint(SHIPPED)
    model.eval()
    tcs = load_transcoders(SHIPPED, model.config)
    ids = tok.encode(PROMPT)[-64:]
    layer, head = at.selectbox(key="attr_qk_layer").value, at.selectbox(key="attr_qk_head").value
    q, key = len(ids) - 1, int(at.number_input(key="attr_qk_key").value) - 1  # the page counts positions from 1
    score = float(next(m for m in at.markdown if "its largest query-side" in m.value).value.split("**")[1])
    name = f"blocks.{layer}.attn.hook_attn_scores"
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.as_tensor(ids)[None], names=[name])
    assert score == pytest.approx(float(cache[name][0, head, q, key]), abs=6e-4)  # shown to 3 decimals
    shown = next(df.value for df in at.dataframe if "key side" in df.value.columns)["term"].to_numpy()
    split = A.qk_split(model, tcs, ids, layer, head, q, key)
    T = split["terms"].ravel()
    top = T[np.argsort(-np.abs(T))[:len(shown) - 1]]  # the table's rows but its last, the constant terms
    np.testing.assert_allclose(shown[:-1], top, atol=1e-6)
    left_out = T.sum() - top.sum()
    assert shown.sum() + left_out == pytest.approx(score, abs=6e-4)


def test_the_bpe_model(open_page):
    at = open_page(PAGE, timeout=300, state={"te_model_name": "shakespeare-bpe"})
    assert not at.exception
    assert metric(at, "Replacement score") != "n/a"


def test_bad_prompts_say_what_is_wrong(open_page):
    at = open_page(PAGE, timeout=300)
    at.text_area(key="attr_prompt").input("").run()
    assert "Type a prompt of at least two" in text_of(at)
    at.text_area(key="attr_prompt").input("K").run()
    assert "Type a prompt of at least two" in text_of(at) and not at.exception
    at.text_area(key="attr_prompt").input("To be, or not to be: that is the question. " * 2).run()
    assert not at.exception and "The graph reads the last 64 of the prompt's 86 characters" in text_of(at)


def test_a_model_too_large_says_what_it_would_take():
    gpt2_small = ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_heads=12, n_layers=12, bias=True,
                             activation="gelu_tanh", tie_weights=True)
    words = av.too_big(gpt2_small)
    assert "12 blocks of width 768" in words and "6,144 features each" in words and "hours" in words
    assert av.too_big(load_checkpoint(SHIPPED)[0].config) is None


def test_a_feature_node_shows_where_it_fires_and_what_it_writes(open_page):
    at = open_page(PAGE, timeout=300)
    box = at.selectbox(key="attr_node")
    feature = next(o for o in box.options if o.startswith("L"))  # a feature's label: "L2 #124 at 'k' (56)"
    box.select(feature).run()
    assert not at.exception
    card = next(m.value for m in at.markdown if m.value.startswith("**Block"))
    model, tok = load_checkpoint(SHIPPED)
    tcs = load_transcoders(SHIPPED, model.config)
    ids = tok.encode(PROMPT)
    layer, number = int(feature[1]) - 1, int(feature.split("#")[1].split()[0])
    pos = int(feature.rsplit("(", 1)[1].rstrip(")")) - 1
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.as_tensor(ids)[None], names=[f"blocks.{layer}.hook_mlp_in"])
        act = float(tcs[layer].encode(cache[f"blocks.{layer}.hook_mlp_in"][0])[pos, number])
    assert card.startswith(f"**Block {layer + 1}, feature #{number}**: {act:.2f} here") and f"({pos + 1})" in card


def test_a_new_prompt_sets_both_boxes_to_the_new_graphs_own(open_page):
    """Issue 57: after a new prompt the closed boxes named the old graph's output and node. The page now sets both
    to the new graph's own on the same run: read once, after typing."""
    at = open_page(PAGE, timeout=300)
    old = at.selectbox(key="attr_token").value
    at.text_area(key="attr_prompt").input("To be, or not to be, that is the question: to b").run()
    assert not at.exception
    model, tok = load_checkpoint(SHIPPED)
    tcs = load_transcoders(SHIPPED, model.config)
    g = A.attribution_graph(model.eval(), tcs, tok.encode("To be, or not to be, that is the question: to b"))
    token, node = at.selectbox(key="attr_token"), at.selectbox(key="attr_node")
    assert token.value == g.logit_tokens[0] != old and token.index == 0
    assert node.value == g.slices()["logits"].start
    assert node.format_func(node.value) == av.node_label(g, node.value, lambda t: tok.shown_text([t]))


def test_a_group_is_drawn_as_one_node_and_switched_off_at_once(open_page):
    at = open_page(PAGE, timeout=300)
    feats = at.multiselect(key="attr_group_members").options
    at.multiselect(key="attr_group_members").select(feats[0]).select(feats[1]).run()
    at.text_input(key="attr_group_name").input("pair").run()
    at.button(key="attr_group").click().run()
    assert not at.exception
    import json
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    group = next(t for t in spec["data"] if t.get("name") == "group")
    assert group["text"] == ["pair"] and group["customdata"] == [-1]
    off = at.multiselect(key="attr_pinned")
    assert "group pair" in off.options
    off.select("group pair").run()
    assert not at.exception and "with them off in the replacement" in text_of(at)


def test_a_feature_node_says_what_it_stands_for_on_hover(page):
    """Each kept feature's hover text carries the explanation saved beside its transcoder (issue 58), read here from
    the file itself: its words and detection score."""
    import json

    from core.features.explanations import load_explanations
    from core.analysis.transcoders import transcoder_folder

    spec = json.loads(page.get("plotly_chart")[0].proto.spec)
    feature = next(t for t in spec["data"] if t.get("name") == "feature")
    said = {l: {e["unit"]: e for e in load_explanations(transcoder_folder(SHIPPED, l))} for l in (0, 1)}
    checked = 0
    for hover in feature["hovertext"]:
        l, f = int(hover.split()[0][1:]) - 1, int(hover.split()[1][1:])  # "L1 #294 at 'k' (56): ..." -> 0, 294
        e = said[l].get(f)
        if e is not None and e["words"] != "unexplained":
            assert f"{e['detection']:.2f}" in hover and e["words"][:20] in hover, (hover, e)
            checked += 1
    assert checked >= 3
