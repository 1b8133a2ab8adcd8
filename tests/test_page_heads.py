"""AppTest of the "Switch heads off" page: the edge cases, and the numbers it shows checked against the model
run directly in the test (a head switched off by zeroing its columns of W_O in a copy of the weights)."""
import base64
import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SHIPPED
from core.nn.checkpoint import load_checkpoint
from core.nn.model_store import save_checkpoint
from core.serve.fmt import visible
from core.nn.config import ModelConfig
from core.nn.model import Transformer

PAGE = "pages/heads.py"
PROMPT = "heads_prompt"
HEADS = "heads_off_2x4"  # the shipped model: 2 layers of 4 heads


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(SHIPPED)


@pytest.fixture
def heads_page(open_page):
    """heads_page(prompt=None, heads=None): the page, with this prompt typed and these heads picked."""
    def open_(prompt=None, heads=None, heads_key=HEADS, **kw):
        at = open_page(PAGE, **kw)
        if prompt is not None:
            at.text_area(key=PROMPT).input(prompt)
        if heads is not None:
            at.multiselect(key=heads_key).set_value(heads)
        if prompt is not None or heads is not None:
            at.run()
        assert not at.exception, at.exception[0].message if at.exception else ""
        return at

    return open_


def without(model, heads):
    """A copy of ``model`` whose W_O reads nothing from ``heads``: their columns of W_O set to zero."""
    other = copy.deepcopy(model)
    d = model.config.d_head
    with torch.no_grad():
        for layer, head in heads:
            other.blocks[layer].attn.out.weight[:, head * d:(head + 1) * d] = 0.0  # (d_out, d_in = h * d/h)
    return other


def losses(model, ids):
    idx = torch.tensor([ids])
    with torch.no_grad():
        return F.cross_entropy(model(idx).logits[0, :-1], idx[0, 1:], reduction="none").numpy()


def metrics(at):
    return {m.label: float(m.value.split()[0]) for m in at.metric}


def charts(at):
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def array(value) -> np.ndarray:
    """A Plotly JSON array: a plain list, or a typed array {dtype, bdata} in base64 (numpy sent as binary)."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.array(value, dtype=float)


def test_mean_loss_with_a_head_off_equals_the_model_with_its_w_o_columns_zeroed(heads_page, shipped):
    model, tok = shipped
    prompt = "Second Tailor:\nWe measured twice, then we cut the cloth once."
    at = heads_page(prompt, heads=[(1, 2)])
    ids = tok.encode(prompt)
    shown = metrics(at)
    assert shown["Mean loss, all heads on"] == pytest.approx(losses(model, ids).mean(), abs=6e-4)
    expected = losses(without(model, [(1, 2)]), ids).mean()
    assert shown["Mean loss, L2 H3 off"] == pytest.approx(expected, abs=6e-4)
    assert abs(expected - losses(model, ids).mean()) > 2e-3  # the head matters, so the check can tell them apart
    # the ranking: switching off L2 H3 alone gives the same loss again, in its row
    rank = at.dataframe[0].value.set_index("head")
    assert rank.loc["L2 H3", "loss with it off"] == pytest.approx(expected, abs=1e-5)
    assert list(rank["rise"]) == sorted(rank["rise"], reverse=True) and len(rank) == 8


def test_next_character_bars_show_the_models_own_distribution(heads_page, shipped):
    model, tok = shipped
    prompt = "To be, or not to be, that is the"
    at = heads_page(prompt, heads=[(0, 0)])
    ids = tok.encode(prompt)
    with torch.no_grad():
        p_on = F.softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1).numpy()
        p_off = F.softmax(without(model, [(0, 0)])(torch.tensor([ids])).logits[0, -1].double(), -1).numpy()
    bars = next(s for s in charts(at).values() if s["data"][0]["type"] == "bar")
    labels = bars["layout"]["xaxis"]["ticktext"]
    assert len(labels) == 10 and "␣" in labels  # a space shows as ␣, readable
    top = np.argsort(-np.maximum(p_on, p_off))[:10]
    assert labels == [visible(tok.chars[i]) for i in top]
    np.testing.assert_allclose(array(bars["data"][0]["y"]), p_on[top], atol=1e-5)
    np.testing.assert_allclose(array(bars["data"][1]["y"]), p_off[top], atol=1e-5)
    assert bars["data"][1]["name"] == "L1 H1 off"


def test_no_heads_selected_means_before_equals_after_and_the_ranking_stays(heads_page):
    at = heads_page(heads=[])
    assert any("All heads on: before = after" in i.value for i in at.info)
    shown = list(metrics(at).values())
    assert shown[0] == shown[1]
    assert len(at.dataframe[0].value) == 8  # every head ranked


def test_all_heads_off(heads_page, shipped):
    model, tok = shipped
    at = heads_page()
    at.button(key="heads_all").click().run()
    assert not at.exception
    assert len(at.multiselect(key=HEADS).value) == 8
    assert any("Every head is off" in i.value for i in at.info)
    every = [(l, h) for l in range(2) for h in range(4)]
    ids = tok.encode(at.text_area(key=PROMPT).value)
    assert metrics(at)["Mean loss, every head off"] == pytest.approx(losses(without(model, every), ids).mean(), abs=6e-4)
    at.button(key="heads_none").click().run()
    assert not at.exception and at.multiselect(key=HEADS).value == []


def test_empty_prompt_gives_a_hint_and_no_chart(heads_page):
    at = heads_page("")
    assert any("Type a few characters" in i.value for i in at.info)
    assert not at.get("plotly_chart") and not at.metric
    assert at.button(key="heads_repeat").disabled


def test_one_character_says_there_is_no_loss_to_compare(heads_page):
    at = heads_page("A")
    assert any("One character" in i.value for i in at.info)
    assert not at.metric
    assert len(charts(at)) == 1  # the next-character bars still show; the stripe needs two characters


def test_repeat_doubles_the_prompt_and_shows_both_copies(heads_page, shipped):
    model, tok = shipped
    prompt = "Now is the winter of our discontent"
    at = heads_page(prompt, heads=[(0, 1)])
    at.button(key="heads_repeat").click().run()
    assert not at.exception
    assert at.text_area(key=PROMPT).value == prompt + prompt
    T = len(prompt)
    ids = tok.encode(prompt + prompt)
    copies = at.table[0].value
    second = slice(T, 2 * T - 1)  # predictions of second-copy tokens T+1..2T-1
    assert float(copies.iloc[0]["second copy"]) == pytest.approx(losses(model, ids)[second].mean(), abs=6e-4)
    assert float(copies.iloc[1]["second copy"]) == pytest.approx(
        losses(without(model, [(0, 1)]), ids)[second].mean(), abs=6e-4)
    assert float(copies.iloc[0]["first copy"]) == pytest.approx(losses(model, ids)[:T - 1].mean(), abs=6e-4)
    rank = at.dataframe[0].value
    assert "second copy: rise" in rank.columns
    assert "on your prompt (period 35)" in list(charts(at).values())[-1]["layout"]["title"]["text"]


def test_500_characters_keep_the_last_n_ctx_and_repeat_only_half(heads_page):
    text = ("All the world's a stage, and all the men and women merely players. " * 8)[:500]
    at = heads_page(text)
    assert any("only the last 128" in w.value for w in at.warning)
    at.button(key="heads_repeat").click().run()
    assert not at.exception
    assert at.text_area(key=PROMPT).value == text[-64:] * 2
    assert any("only its last 64 characters were written twice" in c.value for c in at.caption)
    assert not at.warning  # 128 characters: nothing cut any more


def test_another_models_shape(heads_page, shipped, tmp_path):
    """A model of another shape (1 layer of 2 heads, n_ctx 16): its own head box, its own limits."""
    _, tok = shipped
    torch.manual_seed(0)
    small = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1)).eval()
    save_checkpoint(tmp_path / "small", small, tok)
    at = heads_page("abcdefghijkl", models_dir=tmp_path, state={"te_model_name": "small"}, heads=[(0, 1)],
                    heads_key="heads_off_1x2")
    assert "Mean loss, L1 H2 off" in metrics(at)
    at.button(key="heads_repeat").click().run()
    assert not at.exception and at.text_area(key=PROMPT).value == "efghijkl" * 2
    assert len(at.dataframe[0].value) == 2


def test_random_characters_twice_show_the_induction_head_copying(heads_page, shipped):
    """On distinct random characters written twice the shipped model's second copy is nearly free, and the
    rise when its induction head is off is large; both checked against the model run here."""
    model, tok = shipped
    at = heads_page("x", heads=[])
    at.button(key="heads_random").click().run()
    assert not at.exception
    text = at.session_state["heads_prompt"]
    ids = tok.encode(text)
    half = len(ids) // 2
    assert len(ids) == 2 * half and ids[:half] == ids[half:] and len(set(ids[:half])) == half
    base = losses(model, ids)
    assert base[half:].mean() < 0.5 * base[:half - 1].mean()  # the model copies
    copies = at.table[0].value
    assert float(copies.iloc[0]["second copy"]) == pytest.approx(base[half:].mean(), abs=6e-4)
