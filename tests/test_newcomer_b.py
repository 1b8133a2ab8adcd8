"""Issue 32, what a newcomer trips over (3b, 4, 5, 8, 10): labels that lines run through or that are too small to
read, text cut off, words that assume the wrong model or a problem set, a bad shape wiping out the Parameters page,
and the scaling constants' cramped sliders. Figures are checked on their dicts (label boxes estimated from the text
and the font size, as pages.attention.figures sizes its labels), pages with AppTest."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis.induction import formation_step
from core.analysis.scaling import CHINCHILLA, EPOCH_2024
from pages.parameters.figures import parameter_bar
from core.figures.generation_figures import distribution_bars, sweep_bars
from core.figures.induction_figures import formation_figure
from core.figures.scaling_figures import loss_map, loss_vs_D, loss_vs_N
from core.nn.model_card import read_heads
from core.nn.config import ModelConfig
from core.nn.params import count_parameters

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
CHAR_W, LINE_H = 0.55, 1.25  # a label character's width and a line's height, in font sizes
MIN_PX = 11  # the smallest readable label
FULL_PX, HALF_PX = 900, 450  # a stretched chart's width on a 1,400 px screen, and one of two side by side
DEFAULT_FONT = 12  # Plotly's
GRID_CHAR_PX, CELL_PAD_PX = 6.5, 16  # st.dataframe's 14 px text: about 6 px a character (measured on a screenshot)


def plain(text: str) -> str:
    return re.sub(r"<(?!br)[^>]*>", "", text)


def box_size(text: str, size: float) -> tuple[float, float]:
    """(width, height) in pixels of a label: its longest line, one line height per line."""
    lines = plain(text).split("<br>")
    return max(len(line) for line in lines) * CHAR_W * size, len(lines) * LINE_H * size


def extent(pos: float, length: float, anchor: str, low: str, high: str) -> tuple[float, float]:
    """The interval a label of ``length`` covers when anchored at ``pos`` (``low``: it starts there)."""
    if anchor == low:
        return pos, pos + length
    if anchor == high:
        return pos - length, pos
    return pos - length / 2, pos + length / 2


def font_sizes(obj, path=""):
    """Every (where, size) a figure dict sets for text: fonts, tick fonts, contour labels, bar texts."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            where = f"{path}.{k}"
            if k in ("font", "tickfont", "labelfont", "textfont", "insidetextfont", "outsidetextfont") \
                    and isinstance(v, dict) and v.get("size") is not None:
                yield where, v["size"]
            if k == "uniformtext" and isinstance(v, dict) and v.get("minsize") is not None:
                yield where, v["minsize"]
            if k == "text" and isinstance(v, str):
                yield from ((where, float(s)) for s in re.findall(r"font-size:\s*([\d.]+)px", v))
            yield from font_sizes(v, where)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from font_sizes(v, f"{path}[{i}]")


def small_text(fig) -> list:
    return [(w, s) for w, s in font_sizes(fig.to_dict()) if s < MIN_PX]


# ---------------------------------------------------------------- 3b: labels that lines run through, tiny labels

def test_the_threshold_label_of_the_heads_chart_is_clear_of_the_formation_line():
    """The shipped model's head formed at step 1,000 of 12,000: its red line, near the left edge, ran through the
    "threshold 0.30" label there. The label is now where no line of the panel can reach, and fits the figure."""
    rows = read_heads(SHIPPED)
    formed = formation_step(rows)
    assert formed is not None
    fig = formation_figure(rows)
    label = next(a for a in fig.layout.annotations if "threshold" in (a.text or ""))
    margin = fig.layout.margin
    plot_w = FULL_PX - margin.l - margin.r
    steps = [x for t in fig.data for x in t.x]
    line_px = (formed - min(steps)) / (max(steps) - min(steps)) * plot_w
    width, _ = box_size(label.text, label.font.size or DEFAULT_FONT)
    assert label.xref == "x domain"
    x0, x1 = extent(label.x * plot_w + (label.xshift or 0), width, label.xanchor or "center", "left", "right")
    assert not x0 <= line_px <= x1, (x0, line_px, x1)
    # outside the panel (x > 1), where neither the formation line nor any head's curve is drawn
    assert x0 > plot_w and x1 <= plot_w + margin.r, "the label is cut off at the figure's edge"


def _curve_points_px(fig, plot_w, plot_h):
    """Pixel positions (from the plot's bottom left) of every point of the solid curves."""
    xs = np.concatenate([np.log10(np.asarray(t.x, float)) for t in fig.data])
    lo, hi = xs.min(), xs.max()  # lines on a log axis: autorange spans the data
    y0, y1 = fig.layout.yaxis.range
    for t in fig.data:
        if t.line.dash is None and t.showlegend is not False:
            x = (np.log10(np.asarray(t.x, float)) - lo) / (hi - lo) * plot_w
            y = (np.asarray(t.y, float) - y0) / (y1 - y0) * plot_h
            yield from zip(x, y)


@pytest.mark.parametrize("law", [CHINCHILLA, EPOCH_2024], ids=["chinchilla", "epoch"])
@pytest.mark.parametrize("figure", [loss_vs_N, loss_vs_D])
def test_no_curve_runs_through_a_plateau_label(figure, law):
    """Each plateau is labelled with its value where no curve passes (in loss against D the curves ran through the
    labels, which sat just above the plateau they approach from above), no two labels overlap, and none is
    smaller than 11 px."""
    fig = figure(law)
    margin = fig.layout.margin
    plot_w, plot_h = HALF_PX - margin.l - margin.r, fig.layout.height - margin.t - margin.b
    y0, y1 = fig.layout.yaxis.range
    boxes = []
    for a in fig.layout.annotations:
        if a.yref not in (None, "y") or not re.search(r"\d\.\d{3}$", a.text) or a.text.startswith("L∞ ="):
            continue  # the plateau labels (the floor's label, under its dotted line at the left, is apart)
        size = a.font.size or DEFAULT_FONT
        assert size >= MIN_PX
        w, h = box_size(a.text, size)
        x = extent(a.x * plot_w + (a.xshift or 0), w, a.xanchor or "center", "left", "right")
        y = extent((a.y - y0) / (y1 - y0) * plot_h, h, a.yanchor or "middle", "bottom", "top")
        boxes.append((x, y, a.text))
    assert len(boxes) >= 3
    for px, py in _curve_points_px(fig, plot_w, plot_h):
        for (x0, x1), (b0, b1), text in boxes:
            assert not (x0 <= px <= x1 and b0 <= py <= b1), f"a curve runs through the label {text}"
    for i, (xa, ya, ta) in enumerate(boxes):
        for xb, yb, tb in boxes[i + 1:]:
            apart = xa[1] <= xb[0] or xb[1] <= xa[0] or ya[1] <= yb[0] or yb[1] <= ya[0]
            assert apart, f"labels {ta} and {tb} overlap"
        assert xa[1] <= plot_w + margin.r, f"label {ta} is cut off at the figure's edge"


def _sweep():
    chars = list(" \n.,;:!?'-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ&$3")  # 65, punctuation first
    z = torch.linspace(4.0, -4.0, len(chars))
    return chars, z


def test_the_sweeps_title_clears_the_panel_titles_and_its_token_labels_are_readable():
    chars, z = _sweep()
    fig = sweep_bars(chars, z, [0, 0.25, 0.5, 1, 2, 5])
    lay = fig.layout
    height, top = lay.height, lay.margin.t
    size = (lay.title.font.size if lay.title.font else None) or 17
    if lay.title.y is None:  # Plotly's "auto": the title's middle in the middle of the top margin
        title_bottom = top / 2 + LINE_H * size / 2
    else:
        assert lay.title.yref == "container" and lay.title.yanchor == "top"
        title_bottom = (1 - lay.title.y) * height + LINE_H * size
    panel_titles = [a for a in lay.annotations if (a.text or "").startswith("T = ")]
    assert len(panel_titles) == 6
    for a in panel_titles:
        assert a.yref == "paper" and a.y == 1 and a.yanchor == "bottom"  # standing on the panels' top edge
        _, h = box_size(a.text, a.font.size)
        assert title_bottom <= top - h, f"the title reaches {title_bottom:.0f} px, '{plain(a.text)}' starts at {top - h:.0f}"
    # the tokens on the axis, punctuation and ␣ ⏎ among them, are thin glyphs: larger than Plotly's 12 px
    assert lay.yaxis.tickfont.size >= 14
    assert not small_text(fig)
    for a in panel_titles:  # a second line in <sup> would be 70 % of 16 px: say its size
        assert "<sup>" not in a.text


def test_small_labels_are_at_least_11_px():
    chars, z = _sweep()
    figures = {"p(T)": distribution_bars(chars, z, 1.0), "loss map": loss_map(CHINCHILLA),
               "parameter bar": parameter_bar(count_parameters(ModelConfig(vocab_size=65, n_ctx=128, d_model=64,
                                                                           n_heads=4, n_layers=2)), 2),
               "loss against N": loss_vs_N(CHINCHILLA)}
    for name, fig in figures.items():
        assert not small_text(fig), (name, small_text(fig))


def test_a_large_vocabularys_p_of_t_labels_every_kth_token_without_overlap():
    """200 BPE tokens cannot all be labelled on one axis: every k-th is, turned, with its rank, at 11 px or more."""
    chars = [f"tok{i}" for i in range(1024)]
    fig = distribution_bars(chars, torch.randn(1024, generator=torch.Generator().manual_seed(0)), 1.0, unit="token")
    ax = fig.layout.xaxis
    vals = list(ax.tickvals)
    step = vals[1] - vals[0]
    plot_w = FULL_PX - fig.layout.margin.l - fig.layout.margin.r
    assert ax.tickangle == -90 and ax.tickfont.size >= MIN_PX
    assert step * plot_w / 200 >= LINE_H * ax.tickfont.size  # turned labels a line's height apart at least
    assert f"every {step}th labelled" in ax.title.text


# ---------------------------------------------------------------- pages

def text_of(at) -> str:
    parts = []
    for kind in ("markdown", "caption", "info", "error", "warning", "latex", "header", "subheader", "title"):
        parts += [str(el.value) for el in at.get(kind)]
    return "\n".join(parts)


def test_home_wraps_the_reproduce_command_and_shows_the_download_labels_whole(open_page):
    at = open_page("pages/home.py")
    command = next(c for c in at.get("code") if "python -m core.train" in c.value)
    assert command.proto.wrap_lines
    assert "```" not in text_of(at)  # no fence left to Markdown, which would not wrap it
    assert "Reproduce with:" in text_of(at)
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download the checkpoint folder (.zip)", "Download for transformers (.zip)"]
    for col in at.columns:  # in a fixed column a label is cut ("Download the checkpoint folde…")
        assert not col.get("download_button")
    part = json.loads(at.dataframe[0].proto.columns)["part"]
    assert part["width"] >= 400  # "output map, tied to the token embedding (the same matrix)" in full


def test_home_says_who_trained_the_model(tmp_path, open_page):
    at = open_page("pages/home.py")
    assert "trained by this project" not in text_of(at)
    assert any(c.value.startswith("Shipped with the app: trained by its makers") for c in at.caption)
    mine = tmp_path / "mine"
    shutil.copytree(SHIPPED, mine)
    config = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**config, "owner": "learner1"}))
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "mine", "te_owner": "learner1"})
    assert any(c.value == "Trained here, on the Training page, by you." for c in at.caption)
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "mine", "te_owner": "someone"})
    assert any(c.value == "Trained here, on the Training page, by a classmate." for c in at.caption)


@pytest.fixture(scope="module")
def parameters(open_page_once):
    return open_page_once("pages/parameters.py")


def test_a_refused_shape_is_said_beside_its_field_and_the_page_goes_on(parameters):
    at = parameters
    at.number_input(key="par_d").set_value(1000)
    at.number_input(key="par_h").set_value(7).run()
    assert not at.exception
    heads_col = next(c for c in at.columns if any(n.key == "par_h" for n in c.get("number_input")))
    assert any("not divisible by n_heads=7" in e.value for e in heads_col.error)  # beside the field
    text = text_of(at)
    for header in ("Counting the parameters", "The number of heads changes nothing", "The cost of attention",
                   "Memory for the attention weights", "Measured on this machine", "Training and inference in FLOPs"):
        assert header in text, header
    metrics = {m.label: m.value for m in at.metric}
    d = 1000
    assert metrics["Parameters per block"] == f"{4 * d * d + 2 * d * 256 + 4 * d:,}"  # h plays no part in it
    assert "MLP: measured slope" in metrics and "Training, 6ND" in metrics
    assert "Attention weights, all layers" not in metrics  # h · n² · L needs h
    assert "needs a valid number of heads h" in " ".join(i.value for i in at.info)
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]
    assert any(t.startswith("Cost of one layer for d = 1,000") for t in titles)
    at.number_input(key="par_h").set_value(8).run()
    assert not at.error and not at.exception
    assert "Attention weights, all layers" in {m.label for m in at.metric}


def test_parameters_words_and_widths(parameters):
    at = parameters
    at.selectbox(key="par_preset").select("GPT-2 small").run()
    at.toggle(key="par_bias").set_value(True)
    at.toggle(key="par_tied").set_value(True).run()  # GPT-2's terms: the longest part names and formulas
    text = text_of(at)
    assert "Problem 21" not in text and "Is attention cheaper than a recurrent layer" in text
    table = at.dataframe[0]
    assert "output map, tied to the token embedding (the same matrix)" in list(table.value["part"])
    widths = {k: v.get("width") for k, v in json.loads(table.proto.columns).items()}
    longest = max(len(p) for p in table.value["part"])
    assert widths["part"] >= longest * GRID_CHAR_PX + CELL_PAD_PX  # whole
    assert widths["formula"] >= max(len(f) for f in table.value["formula"]) * GRID_CHAR_PX + CELL_PAD_PX
    toggle_cols = [c for c in at.columns if c.get("toggle")]
    assert all(c.weight >= 0.5 for c in toggle_cols)  # "output map tied to the token embedding (GPT-2)" whole


@pytest.fixture
def scaling(open_page):
    return lambda: open_page("pages/scaling.py")


CONSTANTS = ("scal_logA", "scal_logB", "scal_alpha", "scal_beta", "scal_E")


def test_the_constants_have_room_steps_one_can_feel_and_exact_boxes(scaling):
    at = scaling()
    for key in CONSTANTS:
        col = next(c for c in at.columns if any(s.key == key for s in c.get("slider")))
        assert col.weight >= 0.3  # a third of the width at least, not a sixth
        assert at.slider(key=key).step == 0.01
        assert at.number_input(key=f"{key}_box").value == at.slider(key=key).value
    at.number_input(key="scal_alpha_box").set_value(0.3456).run()  # an exact value typed
    assert not at.exception
    assert at.slider(key="scal_alpha").value == pytest.approx(0.3456)
    assert at.selectbox(key="scal_preset").value.startswith("Custom") and r"N^{0.3456}" in text_of(at)
    at.slider(key="scal_beta").set_value(0.31).run()  # the slider moves the box
    assert at.number_input(key="scal_beta_box").value == pytest.approx(0.31)
    at.selectbox(key="scal_preset").select("Epoch replication (Besiroglu et al. 2024)").run()  # a preset moves both
    assert at.slider(key="scal_alpha").value == 0.3478 and at.number_input(key="scal_alpha_box").value == 0.3478


def test_the_famous_models_table_fits_under_short_headers(scaling):
    at = scaling()
    table = at.dataframe[0]
    config = json.loads(table.proto.columns)
    assert "source" not in table.value.columns  # the long citations are in the expander under it
    headers = [config.get(c, {}).get("label", c) for c in table.value.columns]
    assert max(len(h) for h in headers) <= 9, headers
    assert config["loss at the optimum"]["label"] == "loss opt" and config["loss at the optimum"]["help"]
    # about 940 px for the table: the widest cell or header of each column, side by side, fits
    need = sum(max([len(headers[i])] + [len(f"{v:.4f}" if isinstance(v, float) else str(v))
                                         for v in table.value[c]]) * GRID_CHAR_PX + CELL_PAD_PX
               for i, c in enumerate(table.value.columns))
    assert need <= 940, need
    sources = next(e for e in at.expander if "come from" in e.label)
    assert "arXiv:2203.15556" in " ".join(m.value for m in sources.markdown)
