"""AppTest of the "Inside the model" page: the numbers it shows checked against the shipped model run directly in
the test (its fused forward pass, its modules one by one), and the bad inputs a learner types."""
import base64
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
from attention_hooks import attention

PAGE = "pages/inside.py"
PROMPT = "inside_prompt"


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(SHIPPED)


@pytest.fixture
def inside(open_page):
    """inside(prompt=None, **kw): the page, with this prompt typed."""
    def open_(prompt=None, **kw):
        at = open_page(PAGE, **kw)
        if prompt is not None:
            at.text_area(key=PROMPT).input(prompt).run()
        assert not at.exception, at.exception[0].message if at.exception else ""
        return at

    return open_


KEYS = ("inside_stream", "inside_step_rows", "inside_neuron", "inside_qk", "inside_values", "inside_mlp", "inside_lens",
        "inside_attribution", "inside_output")


def charts(at) -> dict:
    """{key: figure spec} of every chart on the page; Streamlit ends a keyed element's id with its key."""
    return {next(k for k in KEYS if c.proto.id.endswith(k)): json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def array(value) -> np.ndarray:
    """A Plotly JSON array: a plain list, or a typed array {dtype, bdata} in base64 (numpy sent as binary)."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
        shape = value.get("shape")  # "3, 64" for a matrix
        return flat.reshape([int(k) for k in str(shape).split(",")]) if shape else flat
    return np.array(value, dtype=float)


def logits_of(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double()  # (n, m), the fused fast path


def test_default_prompt_shows_the_models_own_numbers(inside, shipped):
    model, tok = shipped
    at = inside()
    shown = charts(at)
    assert set(shown) == set(KEYS)
    text = at.text_area(key=PROMPT).value
    ids = tok.encode(text)
    z = logits_of(model, ids)
    p = F.softmax(z[-1], -1).numpy()
    predicted = int(p.argmax())
    # the sentence under the slider names the prediction at the last position
    assert any(f"predicts **'{visible(tok.chars[predicted])}'** with probability {p[predicted]:.2f}" in m.value
               for m in at.markdown)
    # 6. the output at T = 1: the model's ten largest logits and their probabilities
    logit_bars, prob_bars = shown["inside_output"]["data"]
    top = np.argsort(-p)[:10]
    assert logit_bars["customdata"] == [visible(tok.chars[i]) for i in top]
    np.testing.assert_allclose(array(prob_bars["y"]), p[top], atol=1e-5)
    # 5. the attribution of the predicted character adds up to its logit, less the LayerNorm shift's constant
    bars = shown["inside_attribution"]["data"][0]
    const = float(model.head.weight[predicted].detach() @ model.ln_f.bias.detach())
    assert array(bars["x"]).sum() + const == pytest.approx(float(z[-1, predicted]), abs=1e-4)
    assert len(array(bars["x"])) == 1 + 2 * (4 + 1)  # embedding, 8 heads, 2 MLPs
    # 4. the lens's last row is the model's own favourite at every position shown (the last 40)
    table = shown["inside_lens"]["data"][0]
    n = len(ids)
    assert table["text"][-1] == [visible(tok.chars[t]) for t in z.argmax(-1)[n - 40:].tolist()]


def test_the_embedding_step_is_token_plus_position(inside, shipped):
    model, tok = shipped
    at = inside("To be, or not")
    rows = array(charts(at)["inside_step_rows"]["data"][0]["z"])
    ids, pos = tok.encode("To be, or not"), 12
    token, place = model.tok_emb.weight[ids[pos]].detach().numpy(), model.pos_emb.weight[pos].detach().numpy()
    np.testing.assert_allclose(rows[0], token, atol=1e-6)
    np.testing.assert_allclose(rows[1], place, atol=1e-6)
    np.testing.assert_allclose(rows[2], token + place, atol=1e-6)


def test_opening_an_attention_step_shows_each_heads_share_of_the_modules_output(inside, shipped):
    model, tok = shipped
    text = "To be, or not"
    at = inside(text)
    at.selectbox(key="inside_step_2").set_value("L1 attention").run()
    assert not at.exception
    shown = charts(at)
    rows = array(shown["inside_step_rows"]["data"][0]["z"])
    labels = shown["inside_step_rows"]["layout"]["yaxis"]["ticktext"]
    assert labels == ["stream before", "+ L1 H1 adds", "+ L1 H2 adds", "+ L1 H3 adds", "+ L1 H4 adds",
                      "= attention adds (sum)", "stream after"]
    ids = tok.encode(text)
    with torch.no_grad():  # block 1's attention module on the embedding, run here
        x = model.tok_emb.weight[ids] + model.pos_emb.weight[:len(ids)]
        added = model.blocks[0].attn(model.blocks[0].ln1(x[None]))
    np.testing.assert_allclose(rows[5], added[0, -1].numpy(), atol=1e-5)
    np.testing.assert_allclose(rows[1:5].sum(0), rows[5], atol=1e-5)  # the heads add up to it
    np.testing.assert_allclose(rows[0] + rows[5], rows[6], atol=1e-5)
    # the stream column frames the opened step
    assert shown["inside_stream"]["layout"]["shapes"][-1]["y0"] == 0.5


def test_position_head_and_key_pickers(inside, shipped):
    model, tok = shipped
    text = "KING:\nThe moon is down"
    ids = tok.encode(text)
    at = inside(text)
    n = len(ids)
    at.slider(key=f"inside_pos_{n}").set_value(8)  # the eighth position, index 7: the screen counts from 1
    at.button(key="inside_pos_follow").click().run()  # the slider sits in a form: it applies on the button
    at.selectbox(key="inside_layer").set_value(1).run()
    at.selectbox(key="inside_head").set_value(2).run()
    at.selectbox(key=f"inside_key_{n}_7_1_2").set_value(3).run()
    assert not at.exception
    with torch.no_grad():
        rec = attention(model, torch.tensor([ids]))[1]
    shown = charts(at)
    np.testing.assert_allclose(array(shown["inside_neuron"]["data"][2]["x"]), rec.pattern[0, 2, 7, :8].numpy(),
                               atol=1e-6)
    terms = array(shown["inside_qk"]["data"][0]["y"])
    assert terms.sum() / np.sqrt(model.config.d_head) == pytest.approx(float(rec.scores[0, 2, 7, 3]), abs=1e-4)
    latex = " ".join(el.value for el in at.latex)
    assert "s_{8,4}" in latex and f"{float(rec.scores[0, 2, 7, 3]):.3f}" in latex
    assert f"{float(rec.pattern[0, 2, 7, 3]):.4f}" in latex
    assert "at position 8" in shown["inside_attribution"]["layout"]["title"]["text"]


def test_temperature_changes_the_probabilities_only(inside, shipped):
    model, tok = shipped
    at = inside()
    at.number_input(key="inside_temperature").set_value(0.5).run()
    assert not at.exception
    ids = tok.encode(at.text_area(key=PROMPT).value)
    z = logits_of(model, ids)[-1]
    top = torch.argsort(z, descending=True)[:10].numpy()
    logit_bars, prob_bars = charts(at)["inside_output"]["data"]
    np.testing.assert_allclose(array(prob_bars["y"]), F.softmax(z / 0.5, -1).numpy()[top], atol=1e-5)
    np.testing.assert_allclose(array(logit_bars["y"]), z.numpy()[top], atol=1e-4)
    at.number_input(key="inside_temperature").set_value(0.0).run()  # the greedy limit: all on the top logit
    assert not at.exception
    assert array(charts(at)["inside_output"]["data"][1]["y"]).tolist() == [1.0] + [0.0] * 9


def test_empty_prompt_gives_a_hint_and_no_chart(inside):
    at = inside("")
    assert any("Type a few characters" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_one_character(inside, shipped):
    model, tok = shipped
    at = inside("A")
    assert not at.slider  # one position: nothing to choose
    assert any("One character" in c.value for c in at.caption)
    shown = charts(at)
    assert set(shown) == set(KEYS)
    assert shown["inside_lens"]["data"][2]["text"] == [[""]]  # nothing comes after it
    p = F.softmax(logits_of(model, tok.encode("A"))[0], -1).numpy()
    np.testing.assert_allclose(array(shown["inside_output"]["data"][1]["y"]), np.sort(p)[::-1][:10], atol=1e-5)


def test_500_characters_use_the_last_n_ctx(inside, shipped):
    model, tok = shipped
    text = ("All the world's a stage, and all the men and women merely players. " * 8)[:500]
    at = inside(text)
    assert any("only the last 128" in w.value for w in at.warning)
    ids = tok.encode(text)[-128:]
    z = logits_of(model, ids)
    shown = charts(at)
    assert shown["inside_lens"]["data"][0]["text"][-1] == [visible(tok.chars[t]) for t in z.argmax(-1)[88:].tolist()]
    p = F.softmax(z[-1], -1).numpy()
    np.testing.assert_allclose(array(shown["inside_output"]["data"][1]["y"]), np.sort(p)[::-1][:10], atol=1e-5)
    assert at.slider(key="inside_pos_128").value == 128


def test_unknown_characters_are_named_and_left_out(inside, shipped):
    model, tok = shipped
    at = inside("Hark! 🙂 who goes thére?")
    warning = " ".join(w.value for w in at.warning)
    assert "never seen" in warning and "🙂" in warning and "é" in warning
    known = "Hark!  who goes thre?"
    p = F.softmax(logits_of(model, tok.encode(known))[-1], -1).numpy()
    np.testing.assert_allclose(array(charts(at)["inside_output"]["data"][1]["y"]), np.sort(p)[::-1][:10], atol=1e-5)


def test_another_models_shape(inside, shipped, tmp_path):
    """One block of two heads, n_ctx 16: its own step box, its own pickers, nothing assumes the shipped shape."""
    _, tok = shipped
    torch.manual_seed(0)
    small = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1)).eval()
    save_checkpoint(tmp_path / "small", small, tok)
    at = inside("abcdefghijklmnopqrstuvwxyz", models_dir=tmp_path, state={"te_model_name": "small"})
    assert any("only the last 16" in w.value for w in at.warning)
    assert at.selectbox(key="inside_step_1").options == ["embedding", "L1 attention", "L1 MLP"]
    shown = charts(at)
    assert shown["inside_lens"]["layout"]["yaxis"]["ticktext"] == ["after the embedding", "after block 1"]
    assert len(array(shown["inside_attribution"]["data"][0]["x"])) == 1 + 2 + 1
