"""Issue 57's links: Features (prompt, SAE, feature), Attribution graph (prompt, output, node, pruning share, features
switched off) and Your scaling law (the forecast's base, width and D). A link opens the same view, its nodes named
stably (block, position, latent; a logit by its token id), and survives the page's own resets; a feature, node or
output the view lacks is named in words and the page opens its default there (AppTest with query_params)."""
import numpy as np
import pytest

from conftest import SHIPPED
from core.analysis import attribution as A
from core.analysis import graph_json as GJ
from core.analysis.attribution_prune import prune
from core.analysis.transcoders import load_transcoders
from core.nn.checkpoint import load_checkpoint

PROMPT = "To be or not to "  # the shipped character model spreads its next character over ten outputs here


def _url(at, key):
    v = at.query_params.get(key)
    return v[0] if isinstance(v, list) else v


def _ignored(at) -> str:
    return " ".join(w.value for w in at.warning if "link was ignored" in w.value)


@pytest.fixture(scope="module")
def graphs():
    """The page's graphs of PROMPT, built here by the core: the default one and that of its second output."""
    model, tok = load_checkpoint(SHIPPED)
    tcs = load_transcoders(SHIPPED, model.config)
    ids = tok.encode(PROMPT)
    first = A.attribution_graph(model.eval(), tcs, ids)
    second = first.logit_tokens[1]
    return first, A.attribution_graph(model, tcs, ids, logit_tokens=[second]), second


def test_an_attribution_link_opens_its_output_node_and_features_off(open_page, graphs):
    _, g, second = graphs
    pr = prune(g, 0.9)
    kept = sorted(np.flatnonzero(pr.node_mask[:g.n_features]), key=lambda i: -pr.node_influence[i])
    node, off = GJ.node_name(g, int(kept[1])), GJ.node_name(g, int(kept[2]))  # not the default node
    query = {"prompt": PROMPT, "output": str(second), "share": "0.9", "node": node, "off": off}
    at = open_page("pages/attribution.py", timeout=300, query=query)
    assert not _ignored(at)
    assert at.selectbox(key="attr_token").value == second and at.slider(key="attr_nodes").value == 0.9
    assert at.selectbox(key="attr_node").value == int(kept[1]) and at.multiselect(key="attr_pinned").value == [kept[2]]
    for _ in range(2):  # the page's resets on a new graph do not undo the link on the runs after it
        for key, value in query.items():
            assert _url(at, key) == value, key
        at.run()
        assert at.selectbox(key="attr_node").value == int(kept[1])
    assert [b.label for b in at.get("download_button")] == ["Download the graph (circuit-tracer's JSON)"]


def test_a_bad_attribution_link_names_each_field_and_opens_the_default(open_page, graphs):
    first, _, _ = graphs
    at = open_page("pages/attribution.py", timeout=300,
                   query={"prompt": PROMPT, "output": "99999", "node": "L1.1.999999", "off": "L9.1.1,<b>x</b>"})
    said = _ignored(at)
    for name in ("output", "node", "off"):
        assert f"**{name}**" in said
    assert "L1\\.1\\.999999" in said and "<b>" not in said
    assert at.selectbox(key="attr_token").value == first.logit_tokens[0]
    assert at.selectbox(key="attr_node").value == first.slices()["logits"].start  # the output, as by default
    assert at.multiselect(key="attr_pinned").value == []


def test_a_group_switched_off_goes_into_the_link_as_its_members(open_page, graphs):
    """A group's node number is negative: written as a node it named the graph's last feature in off=."""
    first, _, _ = graphs
    pr = prune(first, 0.8)
    kept = [int(i) for i in np.flatnonzero(pr.node_mask[:first.n_features])]
    at = open_page("pages/attribution.py", timeout=300, query={"prompt": PROMPT})
    at.multiselect(key="attr_group_members").set_value(kept[:2]).run()
    at.button(key="attr_group").click().run()
    at.multiselect(key="attr_pinned").set_value([-1]).run()
    assert not at.exception
    assert _url(at, "off") == ",".join(GJ.node_name(first, i) for i in kept[:2])
    again = open_page("pages/attribution.py", timeout=300, query={"prompt": PROMPT, "off": _url(at, "off")})
    assert not _ignored(again) and again.multiselect(key="attr_pinned").value == kept[:2]


def test_a_features_link_opens_its_sae_feature_and_prompt(open_page):
    at = open_page("pages/features.py", timeout=300, query={"prompt": "To be or not", "feature": "17"})
    sae = at.selectbox(key="feat_sae").value
    assert not _ignored(at) and at.radio(key="feat_kind").value == "SAE feature"
    assert at.number_input(key="feat_unit").value == 17 and at.text_area(key="feat_prompt").value == "To be or not"
    assert _url(at, "sae") == sae and _url(at, "feature") == "17" and _url(at, "prompt") == "To be or not"
    again = open_page("pages/features.py", timeout=300, query={"prompt": "To be", "sae": sae, "feature": "3"})
    assert again.number_input(key="feat_unit").value == 3 and again.selectbox(key="feat_sae").value == sae


def test_a_bad_features_link_names_the_feature_and_sae(open_page):
    plain = open_page("pages/features.py", timeout=300, query={"prompt": "To be or not"})
    at = open_page("pages/features.py", timeout=300, query={"prompt": "To be or not", "sae": "nope",
                                                            "feature": "99999999"})
    said = _ignored(at)
    assert "**feature**" in said and "**sae**" in said and "features, 0 to" in said
    assert at.number_input(key="feat_unit").value == plain.number_input(key="feat_unit").value  # the default card


def test_a_scaling_law_link_opens_its_forecast(open_page):
    plain = open_page("pages/scaling_fit.py", timeout=300)
    options = [int(o) for o in plain.selectbox(key="scal_fc_width").options]
    width = next(w for w in options if w != plain.selectbox(key="scal_fc_width").value)
    query = {"base": "shipped", "width": str(width), "D": "1234567"}
    at = open_page("pages/scaling_fit.py", timeout=300, query=query)
    assert not _ignored(at)
    for _ in range(2):  # the proposal's reset of the boxes runs first and does not undo the link
        assert at.selectbox(key="scal_fc_width").value == width
        assert at.number_input(key="scal_fc_tokens").value == 1234567 and at.radio(key="scal_fc_base").value == "shipped"
        assert all(_url(at, k) == v for k, v in query.items())
        at.run()
    bad = open_page("pages/scaling_fit.py", timeout=300, query={"base": "yours", "width": "7", "D": "5"})
    said = _ignored(bad)
    assert all(f"**{k}**" in said for k in ("base", "width", "D"))
    assert bad.selectbox(key="scal_fc_width").value == plain.selectbox(key="scal_fc_width").value
    assert bad.number_input(key="scal_fc_tokens").value == plain.number_input(key="scal_fc_tokens").value

