"""What a newcomer trips over (issue 32): token labels that overlap, byte pieces nobody explains, a default zoom that
hides the start of a short prompt, the chosen key without a label, and a position slider that reruns the page on every
arrow key. The labels are checked on the figure's dicts, against the room each label needs (a turned label one line
of text, an upright one its width): independent of how the figure builder thins them."""
import json
from pathlib import Path

import numpy as np
import pytest

from core.analysis.attention import masked_softmax
from core.figures import attention_panels as AF
from pages.attention.figures import byte_pieces_note
from core.figures.ticks import AXIS_CHARS, FIGURE_PX
from core.figures.trace_figures import neuron_view
from core.nn.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
BPE = ROOT / "assets" / "models" / "shakespeare-bpe"
EMOJI_PROMPT = ("KING:\nThe moon is down; what news from the camp? 🙂 My lord, the enemy is at the gate, and "
                "日本 is far, far away from here.")
PROMPT_83 = "KING:\nThe moon is down; what news from the camp?\n\nMESSENGER:\nMy lord, the foe is at"
BYTES_NOTE = "a character the tokenizer splits into bytes"


@pytest.fixture(scope="module")
def bpe():
    return load_checkpoint(BPE)


def bpe_tokens(tok, text):
    ids = tok.encode(text)
    return ids, tok.visible_tokens(ids)


def random_scores(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, n))


def plot_px(layout) -> tuple[float, float]:
    """The plot area's width (for a chart as wide as the builder assumes) and height, in pixels."""
    m = layout["margin"]
    return FIGURE_PX - m["l"] - m["r"], layout["height"] - m["t"] - m["b"]


def assert_apart(axis: dict, cell_px: float, across: bool):
    """No two neighbouring labels of ``axis`` overlap: stacked or turned labels need a line's height between them
    (at least the font's size), upright ones side by side half their widths."""
    vals, text, size = axis["tickvals"], axis["ticktext"], axis["tickfont"]["size"]
    turned = across and axis.get("tickangle") not in (0, None)
    assert across is False or axis.get("tickangle") is not None, "an angle left to Plotly turns labels 30-60 degrees"
    for (a, ta), (b, tb) in zip(zip(vals, text), zip(vals[1:], text[1:])):
        gap = (b - a) * cell_px
        need = size if (turned or not across) else 0.5 * size * (len(ta) + len(tb)) / 2
        assert gap >= need, f"labels {ta!r} and {tb!r} are {gap:.1f} px apart, {need:.1f} needed"


# ---------------------------------------------------------------- 1. token labels on the Attention page

@pytest.mark.parametrize("n", [24, 48, 60, 96, 128])
def test_head_panel_labels_never_overlap(bpe, n):
    _, tok = bpe
    ids, tokens = bpe_tokens(tok, (EMOJI_PROMPT + " ") * 3)
    tokens = tokens[:n]
    s = random_scores(n)
    fig = AF.head_panels(s, masked_softmax(s), tokens).to_plotly_json()["layout"]
    width, height = plot_px(fig)
    for name in ("xaxis", "xaxis3"):
        dom = fig[name]["domain"]
        assert_apart(fig[name], width * (dom[1] - dom[0]) / n, across=True)
    assert_apart(fig["yaxis"], height / n, across=False)
    # a label longer than its room is cut on the axis, whole in the hover
    assert max(len(t) for t in fig["xaxis"]["ticktext"]) <= AXIS_CHARS + 4


def test_every_cell_names_its_query_and_key_tokens_whole(bpe):
    _, tok = bpe
    _, tokens = bpe_tokens(tok, EMOJI_PROMPT)
    tokens = tokens[:40] + ["␣extraordinarily"]  # longer than an axis label may be
    n = len(tokens)
    s = random_scores(n)
    panels = AF.head_panels(s, masked_softmax(s), tokens, offset=5)
    order = AF.mask_order_figure(np.pad(s, ((5, 0), (5, 0))), tokens, offset=5)
    for trace in [panels.data[0], order.data[0], order.data[1]]:
        cd = np.asarray(trace.customdata, dtype=object)
        assert "customdata[0]" in trace.hovertemplate and "customdata[1]" in trace.hovertemplate
        for i, j in [(n - 1, 0), (n - 1, n - 1), (20, 3)]:
            # the row's query and the column's key, counted from 1 as the screen does, their tokens whole
            assert cd[i, j, 0] == f"{5 + i + 1} '{tokens[i]}'"
            assert cd[i, j, 1] == f"{5 + j + 1} '{tokens[j]}'"
    hover = np.asarray(panels.data[0].customdata, dtype=object)  # the scores as the hover prints them: rounded text
    assert hover[n - 1, 0, 2] == f"{np.float32(s[n - 1, 0]):.3f}" and isinstance(hover[n - 1, 0, 2], str)
    # the weights panel's hover sits on its click targets (one per visible cell, j <= i), with [i, j] in prompt positions
    targets = panels.data[-1]
    cells = [tuple(c) for c in targets.customdata]
    for i, j in [(n - 1, 0), (n - 1, n - 1), (20, 3)]:
        text = targets.text[cells.index((5 + i, 5 + j))]
        assert f"query i={5 + i + 1} '{tokens[i]}'" in text and f"key j={5 + j + 1} '{tokens[j]}'" in text
    assert len(cells) == n * (n + 1) // 2 and (5, 6) not in cells  # no target on a masked cell
    assert "␣extraordinarily" not in panels.layout.yaxis.ticktext  # cut on the axis


def test_bytes_are_explained_once_and_only_when_there_are_any(bpe):
    _, tok = bpe
    ids = tok.encode(EMOJI_PROMPT)
    note = byte_pieces_note(tok, ids)
    assert BYTES_NOTE in note
    assert "⟨f0⟩ ⟨9f⟩ ⟨99⟩ ⟨82⟩ = 🙂" in note  # the bytes and the character they spell
    assert byte_pieces_note(tok, tok.encode("KING:\nThe moon is down")) is None
    char_model, char_tok = load_checkpoint(ROOT / "assets" / "models" / "shakespeare-char")
    assert byte_pieces_note(char_tok, char_tok.encode("The moon")) is None


def test_bpe_attention_page_explains_its_byte_pieces(open_page):
    at = open_page("pages/attention.py", state={"te_model_name": "shakespeare-bpe"})
    assert not any(BYTES_NOTE in c.value for c in at.caption)  # the default prompt has none
    at.text_area(key="attn_prompt").input(EMOJI_PROMPT).run()
    assert not at.exception
    notes = [c.value for c in at.caption if BYTES_NOTE in c.value]
    assert len(notes) == 1 and "🙂" in notes[0]


# ---------------------------------------------------------------- 2. the default zoom

def test_a_prompt_up_to_open_window_opens_whole(open_page):
    assert len(PROMPT_83) == 83 and 83 <= AF.OPEN_WINDOW <= 128
    at = open_page("pages/attention.py")
    at.text_area(key="attn_prompt").input(PROMPT_83).run()
    assert not at.exception
    assert at.slider(key="attn_window").value == (1, 83)  # the start of the prompt is on screen (from 1)
    panels = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert panels["layout"]["yaxis"]["range"] == [pytest.approx(82.5), -0.5]
    assert panels["layout"]["yaxis"]["ticktext"][0] == "K"  # every row labelled, the first one 'K'
    assert len(panels["layout"]["yaxis"]["tickvals"]) == 83


# ---------------------------------------------------------------- 3. "why mask the scores", the chosen key

@pytest.mark.parametrize("n", [12, 48, 96])
def test_mask_order_query_labels_do_not_overlap(bpe, n):
    _, tok = bpe
    _, tokens = bpe_tokens(tok, (EMOJI_PROMPT + " ") * 3)
    fig = AF.mask_order_figure(random_scores(n), tokens[:n]).to_plotly_json()["layout"]
    width, height = plot_px(fig)
    assert_apart(fig["yaxis"], height / n, across=False)
    dom = fig["xaxis"]["domain"]
    assert_apart(fig["xaxis"], width * (dom[1] - dom[0]) / n, across=True)
    # the panels beside the first share its rows: their labels would run into the panel on their left
    assert fig["yaxis2"]["showticklabels"] is False and fig["yaxis3"]["showticklabels"] is False


@pytest.mark.parametrize("nk, chosen", [(83, 41), (128, 0), (128, 40), (128, 41), (128, 77), (128, 127)])
def test_the_chosen_key_always_has_its_label(nk, chosen):
    dh = 16
    rng = np.random.default_rng(1)
    text = ((PROMPT_83 + "\n") * 2)[:nk].replace("\n", "⏎").replace(" ", "␣")
    labels = [f"{j} '{c}'" for j, c in enumerate(text)]
    fig = neuron_view(rng.normal(size=dh), rng.normal(size=(nk, dh)), np.full(nk, 1 / nk), labels, chosen,
                      labels[-1]).to_plotly_json()["layout"]
    axis = fig["yaxis2"]
    assert chosen in axis["tickvals"] and axis["ticktext"][axis["tickvals"].index(chosen)] == labels[chosen]
    dom = fig["yaxis2"]["domain"]
    assert_apart(axis, (fig["height"] - fig["margin"]["t"] - fig["margin"]["b"]) * (dom[1] - dom[0]) / nk,
                 across=False)


# ---------------------------------------------------------------- 11. the Inside page's position

def test_inside_position_applies_once_on_the_button(open_page):
    at = open_page("pages/inside.py")
    n = len(at.text_area(key="inside_prompt").value)
    slider = at.slider(key=f"inside_pos_{n}")
    assert slider.proto.form_id  # in a form: moving it (arrow keys, dragging) reruns nothing
    assert slider.value == n and slider.min == 1 and slider.max == n  # positions count from 1, as on every page
    slider.set_value(n - 3).run()  # moved, and the page reruns for another reason: it stays where it was
    assert f"At position **{n}**" in " ".join(m.value for m in at.markdown)
    at.slider(key=f"inside_pos_{n}").set_value(n - 3)
    at.button(key="inside_pos_follow").click().run()  # one rerun, on the button
    assert not at.exception
    assert at.slider(key=f"inside_pos_{n}").value == n - 3
    assert f"At position **{n - 3}**" in " ".join(m.value for m in at.markdown)
