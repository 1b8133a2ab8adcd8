"""AppTest of the Parameters and cost page: every preset, bad shapes, the lecture's numbers on screen."""
import json

import pytest

from core.serve import fmt
from core.analysis import cost

PAGE = "pages/parameters.py"


@pytest.fixture(scope="module")
def at(open_page_once):
    return open_page_once(PAGE)


def text_of(at) -> str:
    parts = []
    for kind in ("markdown", "latex", "caption", "metric", "error", "warning", "info"):
        for el in at.get(kind):
            parts.append(f"{getattr(el, 'label', '')} {getattr(el, 'value', '')} {getattr(el, 'body', '')}")
    return "\n".join(parts)


def charts(at) -> dict:
    specs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return {spec["layout"]["title"]["text"] if "title" in spec["layout"] else "parameter bar": spec for spec in specs}


def test_shipped_model_page(at):
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Parameters per block"] == "49,408"
    assert metrics["Attention's share of a block"] == "33.2%" and metrics["MLP's share of a block"] == "66.3%"
    text = text_of(at)
    assert "49{,}408" in text and "12d^2 + 4d" in text
    assert r"(100{,}000)^2 = 10^{10}" in text  # the lecture's long-context example, computed
    assert r"3.14 \times 10^{23}" in text  # GPT-3's training cost
    assert "n = 2d + d_{ff} = 384" in text
    assert "torch thread" in text and "logical CPUs" in text
    assert set(at.dataframe[0].value["agree"]) == {"✓"}
    heads = at.dataframe[1].value
    assert len(set(heads["attention counted"])) == 1 and len(heads) >= 4
    specs = charts(at)
    flops = specs["Cost of one layer for d = 64, d_ff = 256"]
    cross = next(t for t in flops["data"] if t["name"] == "crossovers")
    assert cross["x"] == [384, 64]
    timing = next(s for title, s in specs.items() if "one attention sublayer" in title)
    names = [t["name"] for t in timing["data"]]
    assert names[0] == "attention (measured)" and names[1].startswith("attention fit: slope")
    assert metrics["Attention: measured slope"] and metrics["MLP: measured slope"]
    assert "multiplied attention's time by" in text


def hand_count(vocab_size, n_ctx, d_model, n_heads, n_layers, d_ff=None):
    """The lecture's count, written out here rather than taken from core: per block 4d^2 (W_Q, W_K, W_V, W_O)
    + 2 d d_ff (the MLP) + 4d (two LayerNorms); then the token table m d, the position table n_ctx d, the final
    LayerNorm 2d and the untied output map d m."""
    d, m = d_model, vocab_size
    d_ff = 4 * d if d_ff is None else d_ff
    block = 4 * d * d + 2 * d * d_ff + 4 * d
    return n_layers * block + m * d + n_ctx * d + 2 * d + d * m


def test_hand_count_is_the_lectures():
    assert hand_count(65, 128, 64, 4, 2, 256) - 65 * 64 * 2 - 128 * 64 - 128 == 2 * 49_408


@pytest.mark.parametrize("preset", list(cost.SHAPE_LABELS))
def test_every_preset(at, preset):
    at.selectbox(key="par_preset").select(preset).run()
    assert not at.exception and not at.error
    values = cost.SHAPE_LABELS[preset]
    assert at.number_input(key="par_d").value == values["d_model"]
    assert at.number_input(key="par_L").value == values["n_layers"]
    assert set(at.dataframe[0].value["agree"]) == {"✓"}  # formula equals the meta-device model
    total = hand_count(**values)
    assert at.dataframe[0].value.set_index("part").loc["whole model", "counted in the model"] == total
    shown = f"{total:,}" if total < 1e9 else fmt.pretty_sci(total, 4)  # the page's rule: digits below a billion
    assert {m.label: m.value for m in at.metric}["Whole model"] == shown
    if preset == cost.GPT3:
        assert shown == "1.752 × 10¹¹"  # 175,211,200,512 parameters, untied output map
        assert r"\approx 1.74 \times 10^{11}" in text_of(at)


def test_bad_shape_is_refused_and_kept(at):
    at.selectbox(key="par_preset").select("lecture demo (d=64, h=4, L=2)").run()
    at.number_input(key="par_h").set_value(7).run()
    assert not at.exception
    assert any("not divisible by n_heads=7" in e.value for e in at.error)
    assert at.number_input(key="par_h").value == 7  # the input is kept for the learner to fix
    at.number_input(key="par_h").set_value(8).run()
    assert not at.error and {m.label: m.value for m in at.metric}["Parameters per block"] == "49,408"


def test_memory_inputs(at):
    at.selectbox(key="par_preset").select("lecture demo (d=64, h=4, L=2)").run()
    at.number_input(key="par_mem_n").set_value(1000).run()
    at.selectbox(key="par_mem_dtype").select("bfloat16").run()
    assert not at.exception
    text = text_of(at)
    assert r"(1{,}000)^2 = 10^{6}" in text
    h, L = at.number_input(key="par_h").value, at.number_input(key="par_L").value
    assert {m.label: m.value for m in at.metric}["Attention weights, all layers"] == fmt.human_bytes(h * 1000**2 * L * 2)


def test_the_widest_shape_the_form_allows(at):
    """Every field at its maximum (d = d_ff = m = n_ctx = 2,000,000, L = 300, h = d, n = 10^7 for the memory):
    the cost figure's 2n²d passes 2^63 there, which once raised a TypeError. The page draws everything, with
    the numbers the formulas give."""
    at.selectbox(key="par_preset").select("GPT-2 small").run()  # a change of preset, whatever came before
    widest = dict(par_d=2_000_000, par_h=2_000_000, par_L=300, par_dff=2_000_000, par_m=2_000_000,
                  par_nctx=2_000_000)
    for key, value in widest.items():
        at.number_input(key=key).set_value(value)
    at.number_input(key="par_mem_n").set_value(10_000_000).run()
    try:
        assert not at.exception, at.exception[0].message
        assert not at.error
        d = 2_000_000
        total = hand_count(vocab_size=d, n_ctx=d, d_model=d, n_heads=d, n_layers=300, d_ff=d)
        assert {m.label: m.value for m in at.metric}["Whole model"] == fmt.pretty_sci(total, 4)
        flops = charts(at)["Cost of one layer for d = 2,000,000, d_ff = 2,000,000"]
        cross = next(t for t in flops["data"] if t["name"] == "crossovers")
        assert cross["x"] == [2 * d + d, d]
        h, n = d, 10_000_000
        assert {m.label: m.value for m in at.metric}["Ratio h·n/d"] == f"{h * n // d:,}×"
    finally:  # the next test starts from a preset, not from this shape
        at.number_input(key="par_mem_n").set_value(cost.LECTURE_LONG_CONTEXT)
        at.selectbox(key="par_preset").select("lecture demo (d=64, h=4, L=2)").run()


def test_the_shares_of_a_block_are_written_with_the_terms_they_count(at):
    """With biases on, the shares' fractions hold the bias terms the counts include, and the numbers beside them
    are those fractions evaluated by hand."""
    at.selectbox(key="par_preset").select("lecture demo (d=64, h=4, L=2)").run()
    at.toggle(key="par_bias").set_value(True).run()
    try:
        d, dff = 64, 256
        block = 4 * d * d + 2 * d * dff + 9 * d + dff
        attn, mlp = (4 * d * d + 4 * d) / block, (2 * d * dff + dff + d) / block
        text = text_of(at)
        assert (rf"\frac{{4d^2 + 4d}}{{4d^2 + 2d\,d_{{ff}} + 9d + d_{{ff}}}} = {attn:.3f}" in text and
                rf"\frac{{2d\,d_{{ff}} + d_{{ff}} + d}}{{4d^2 + 2d\,d_{{ff}} + 9d + d_{{ff}}}} = {mlp:.3f}" in text)
    finally:
        at.toggle(key="par_bias").set_value(False).run()
    block = 4 * 64 * 64 + 2 * 64 * 256 + 4 * 64
    assert rf"\frac{{4d^2}}{{4d^2 + 2d\,d_{{ff}} + 4d}} = {4 * 64 * 64 / block:.3f}" in text_of(at)
