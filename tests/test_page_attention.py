"""AppTest of the attention page with the default prompt and the awkward ones."""
import json

import pytest


@pytest.fixture
def attention(open_page):
    """attention(prompt=None): the attention page, with this prompt typed in if given."""
    def open_(prompt=None):
        at = open_page("pages/attention.py")
        if prompt is not None:
            at.text_area(key="attn_prompt").input(prompt)
            at.run()
        assert not at.exception
        return at

    return open_


def charts(at):
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def test_default_prompt_shows_every_view(attention):
    at = attention()
    specs = list(charts(at).values())
    assert len(specs) == 5  # three panels, why this weight (score sources), all heads, mask order, head roles
    panels = specs[0]
    assert [t["type"] for t in panels["data"]] == ["heatmap"] * 3 + ["scatter"]  # the weights' click targets
    assert panels["layout"]["yaxis"]["range"] == [pytest.approx(47.5), -0.5]  # 48 characters, query 0 on top
    assert not at.warning
    text = " ".join(m.value for m in at.markdown)
    assert "previous-token score" in text and "induction score" in text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Change in earlier rows, mask on the scores"] == "0.00e+00"
    assert float(metrics["Change in earlier rows, mask after the softmax"]) > 0


def test_toggle_unmasked_and_pick_another_head(attention):
    at = attention()
    at.toggle(key="attn_unmasked").set_value(True).run()
    at.selectbox(key="attn_layer").select(1).run()
    at.selectbox(key="attn_head").select(3).run()
    assert not at.exception
    specs = list(charts(at).values())
    assert len(specs[0]["data"]) == 5  # the fourth, unmasked panel, and the weights' click targets
    assert "layer 2, head 4" in specs[0]["layout"]["title"]["text"].lower()
    assert any("must not see yet" in c.value for c in at.caption)


def test_empty_prompt_gives_a_hint_and_no_chart(attention):
    at = attention("")
    assert not at.get("plotly_chart")
    assert any("Type a few characters" in i.value for i in at.info)
    at = attention("🙂🙂")  # only unknown characters: nothing left to show
    assert not at.get("plotly_chart") and at.warning


def test_long_prompt_uses_the_last_n_ctx_and_says_so(attention):
    at = attention("abcdefghij " * 50)  # 550 characters
    assert any("only the last 128" in w.value for w in at.warning)
    window = at.slider(key="attn_window")
    assert window.value == (33, 128)  # the last OPEN_WINDOW = 96 positions, counted from 1
    at.toggle(key="attn_unmasked").set_value(True).run()  # the fourth panel and its bars on a zoomed window
    assert not at.exception
    window.set_range(1, 128).run()
    assert not at.exception
    panels = list(charts(at).values())[0]
    assert panels["layout"]["yaxis"]["range"] == [pytest.approx(127.5), -0.5]


def test_unknown_characters_are_named_and_dropped(attention):
    at = attention("Good morrow, 🙂 señor <script>alert(1)</script>")
    warnings = " ".join(w.value for w in at.warning)
    assert "'🙂'" in warnings and "'ñ'" in warnings
    assert len(charts(at)) == 5


def test_single_character_prompt(attention):
    at = attention("A")
    assert len(charts(at)) == 5  # every chart renders for one character; the experiment needs two
    assert not at.metric
