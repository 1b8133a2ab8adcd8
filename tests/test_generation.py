import pytest
import math
import re

import numpy as np
import torch

from core.analysis import generation as G
from core.analysis.generation import distinct_n, limits, log_grid, parse_temperatures, sweep, tv_distance
from core.figures.generation_figures import distinct_bars, distribution_bars, shaded_html, sweep_bars, sweep_curves
from core.analysis.sampling import entropy

CHARS = list("\n abcdefghijklmnopqrstuvwxyz<>&\"'")  # m = 33, with characters that need escaping


def logits(seed=0, m=len(CHARS)):
    return torch.randn(m, generator=torch.Generator().manual_seed(seed)) * 2


def test_entropy_and_distance():
    assert entropy([1, 0, 0]) == 0
    assert math.isclose(entropy([0.25] * 4), math.log(4))
    assert tv_distance([1, 0], [0, 1]) == 1 and tv_distance([0.5, 0.5], [0.5, 0.5]) == 0


def test_sweep_reaches_both_limits():
    z = logits()
    m = z.shape[0]
    data = sweep(z, [1e-4, 1.0, 1e4])
    assert data["entropy"][0] < 1e-6 and abs(data["entropy"][-1] - math.log(m)) < 1e-6
    assert abs(data["max_prob"][0] - 1) < 1e-9 and abs(data["max_prob"][-1] - 1 / m) < 1e-4
    assert data["to_one_hot"][0] < 1e-9 and data["to_uniform"][-1] < 1e-4
    grid = log_grid(1e-3, 1e3, 61)
    full = sweep(z, grid)
    assert np.all(np.diff(full["entropy"]) >= -1e-9)      # entropy grows with T
    assert np.all(np.diff(full["max_prob"]) <= 1e-9)      # the peak flattens
    assert np.all(np.diff(full["to_one_hot"]) >= -1e-9)
    assert np.all(np.diff(full["to_uniform"]) <= 1e-9)


def test_tied_limit():
    z = torch.tensor([2.0, 2.0, 0.0, -1.0])
    zero, inf = limits(z)
    assert np.allclose(zero, [0.5, 0.5, 0, 0]) and np.allclose(inf, 0.25)
    assert sweep(z, [1e-4])["to_one_hot"][0] < 1e-9


def test_distinct_n():
    assert distinct_n([1, 2, 3, 4, 5]) == 1.0
    assert distinct_n([1, 1, 1, 1, 1, 1]) == 0.25  # one distinct 3-gram out of four
    assert distinct_n([1, 2]) is None
    assert distinct_n("abab", n=2) == 2 / 3


def test_parse_temperatures():
    assert parse_temperatures("0, 0.25, 0.5, 1, 2, 5") == ([0, 0.25, 0.5, 1, 2, 5], [])
    temps, msgs = parse_temperatures("2 1;1, -3, abc, nan, inf")
    assert temps == [1.0, 2.0]
    text = " ".join(msgs)
    assert "'abc'" in text and "'nan'" in text and "-3" in text and "Repeated" in text
    temps, msgs = parse_temperatures(" ".join(str(i) for i in range(12)))
    assert len(temps) == 8 and "At most 8" in msgs[0]
    assert parse_temperatures("") == ([], [])


def test_sweep_bars_are_aligned():
    z = logits(1)
    temps = [0, 0.5, 1, 5]
    fig = sweep_bars(CHARS, z, temps, n_top=6)
    assert len(fig.data) == 4
    assert all(list(tr.y) == list(fig.data[0].y) for tr in fig.data)  # same tokens, same order
    assert list(fig.data[0].x).count(1.0) == 1 and sum(fig.data[0].x) == 1.0  # T = 0 is one-hot on the argmax
    assert fig.data[2].x[0] == max(fig.data[2].x)  # ordered by T = 1 probability
    assert fig.layout.xaxis.range == (0, 1)


def test_distribution_bars_shows_all_m_and_uniform_line():
    z = logits(2)
    fig = distribution_bars(CHARS, z, 1e4)
    assert len(fig.data[0].y) == len(CHARS)
    assert np.allclose(fig.data[0].y, 1 / len(CHARS), atol=1e-3)
    assert "⏎" in fig.layout.xaxis.ticktext and "␣" in fig.layout.xaxis.ticktext
    assert any(abs(s.y0 - 1 / len(CHARS)) < 1e-12 for s in fig.layout.shapes)


def test_sweep_curves_mark_the_limits():
    z = logits(3)
    m = len(CHARS)
    data = sweep(z, log_grid(1e-2, 1e2, 41))
    fig = sweep_curves(data, m, mark=0.5, points=sweep(z, [0.25, 3.0]))
    names = [tr.name for tr in fig.data]
    assert names[:4] == ["entropy", "max probability", "distance to one-hot (T → 0 limit)",
                         "distance to uniform (T → ∞ limit)"]
    levels = sorted(round(s.y0, 6) for s in fig.layout.shapes if s.y0 == s.y1)
    assert levels == sorted(round(v, 6) for v in (0, math.log(m), 1, 1 / m, 0))
    assert any(s.x0 == 0.5 for s in fig.layout.shapes)  # the slider's T
    assert fig.layout.xaxis3.type == "log"
    marks = [tr for tr in fig.data if tr.name == "your temperatures"]
    assert len(marks) == 4 and list(marks[0].x) == [0.25, 3.0]
    assert not any(s.x0 == 0.5 for s in sweep_curves(data, m).layout.shapes)  # no slider mark unless asked


def test_distinct_bars():
    fig = distinct_bars([0, 1], [0.2, None])
    assert list(fig.data[0].x) == ["T = 0", "T = 1"]
    assert fig.data[0].y[0] == 0.2 and np.isnan(fig.data[0].y[1])


def test_shaded_html_escapes_everything():
    steps = [{"ch": "<", "prob": 0.9, "sample_prob": 0.9, "alternatives": [("<", 0.9), ('"', 0.05)]},
             {"ch": "\n", "prob": 0.1, "sample_prob": 1.0, "alternatives": [("&", 0.5)]},
             {"ch": "b", "prob": 0.01, "sample_prob": 0.02, "alternatives": [("'", 0.5)]}]
    out = shaded_html('<script>alert("x")</script> & "quotes"', steps)
    assert "<script" not in out and "&lt;script&gt;" in out
    assert out.count("<span") == 4  # the prompt plus one span per generated character
    tags = re.findall(r"<(/?\w+)", out)
    assert set(tags) <= {"div", "/div", "span", "/span", "br"}
    titles = re.findall(r'title="([^"]*)"', out)
    assert len(titles) == 3 and "&lt;" in titles[0] and "&quot;" in titles[0]
    assert "⏎" in titles[1] and "drawn with 1.000" in titles[1]
    assert "rgba(255, 127, 14, 0.842)" in out  # p = 0.01 is shaded deep


def test_shaded_html_marks_where_each_token_ends():
    steps = [{"ch": t, "prob": 0.99, "sample_prob": 0.99, "alternatives": []} for t in (" the", " oar", "⟨e2 80⟩")]
    plain = shaded_html("x", steps)
    edged = shaded_html("x", steps, boundaries=True)
    assert "box-shadow" not in plain
    assert edged.count("box-shadow: inset -1px") == 3 and edged.count("<span") == 4
    assert ">⟨e2 80⟩</span>" in edged  # a piece of a character shows its bytes


def test_distinct_bars_in_tokens():
    assert "3-token sequence" in distinct_bars([1], [0.5], unit="token").layout.title.text


def test_md_escape_makes_markdown_literal():
    from core.serve.fmt import md_escape
    assert md_escape("[x](javascript:y) *b* $a$ `c` <i>") == (
        r"\[x\]\(javascript\:y\) \*b\* \$a\$ \`c\` \<i\>")
    assert md_escape("plain words") == "plain words"


def test_continuations_share_the_seed_and_greedy_is_first(tiny_model):
    from core.analysis.generation import continuations
    from core.analysis.sampling import generate
    chars = list("abcdefghijk")
    runs = continuations(tiny_model, [1, 2], [0.0, 1.0, 1.0], 12, seed=5, chars=chars)
    assert [len(r) for r in runs] == [12, 12, 12]
    assert [s["id"] for s in runs[0]] == generate(tiny_model, [1, 2], 12, 0.0)[2:].tolist()
    # same seed, same temperature: same text (rows of one batch may differ in the last float bits)
    assert [x["id"] for x in runs[1]] == [x["id"] for x in runs[2]]
    assert [x["prob"] for x in runs[1]] == pytest.approx([x["prob"] for x in runs[2]], rel=1e-5)
    s = runs[1][0]
    assert s["ch"] == chars[s["id"]] and len(s["alternatives"]) == 5 and 0 < s["prob"] <= 1


def _repaints(n_tokens: int, seconds_per_token: float) -> int:
    """How often a page following repaint_due redraws a streamed text of n_tokens, on a simulated clock."""
    shown, shown_at, count = 0, 0.0, 0
    for i in range(1, n_tokens + 1):
        now = i * seconds_per_token
        if G.repaint_due(i - shown, now - shown_at):
            shown, shown_at, count = i, now, count + 1
    return count


def test_streamed_text_is_redrawn_every_few_tokens_however_slow_each_step():
    # a busy server (0.2 s per token): a time-only rule would redraw after every one of the 200 tokens
    assert _repaints(200, 0.2) == 200 // G.REPAINT_TOKENS
    # a quiet one (1 ms per token, 0.2 s in all): not even one redraw before the final one
    assert _repaints(200, 0.001) == 0
    # in between, never more often than every REPAINT_SECONDS
    assert _repaints(2000, 0.005) <= 2000 * 0.005 / G.REPAINT_SECONDS


# ---------------------------------------------------------------- what a reader of the figures relies on

def panel_titles(fig) -> list[str]:
    """The subplot titles: annotations in paper coordinates (the reference lines' labels sit on axes)."""
    return [a.text for a in fig.layout.annotations if a.xref == "paper"]


def test_sweep_bars_panels_are_softmax_at_each_temperature():
    z = logits(4)
    temps = [0, 0.25, 1, 2, 5]
    fig = sweep_bars(CHARS, z, temps, n_top=8)
    top = torch.topk(torch.softmax(z, -1), 8).indices  # the order of every panel: most likely at T = 1 first
    labels = [{"\n": "⏎", " ": "␣"}.get(CHARS[i], CHARS[i]) for i in top]
    assert [tr.name for tr in fig.data] == ["T = 0", "T = 0.25", "T = 1", "T = 2", "T = 5"]
    for k, (tr, t) in enumerate(zip(fig.data, temps), start=1):
        expected = torch.nn.functional.one_hot(z.argmax(), len(CHARS)).double() if t == 0 else torch.softmax(z / t, -1)
        assert np.allclose(tr.x, expected[top].numpy(), atol=1e-6), t
        assert list(tr.y) == labels and tr.orientation == "h"
        suffix = "" if k == 1 else str(k)
        assert (tr.xaxis, tr.yaxis) == (f"x{suffix}", f"y{suffix}")
        assert fig.layout[f"xaxis{suffix}"].range == (0, 1)  # one probability scale in every panel
        assert fig.layout[f"xaxis{suffix}"].title.text == "probability"
    y1 = fig.layout.yaxis
    assert y1.type == "category" and y1.autorange == "reversed" and y1.title.text == "next character"  # top first
    assert all(fig.layout[f"yaxis{k}"].matches == "y" for k in range(2, 6))  # the same tokens on every row
    titles = panel_titles(fig)
    assert [t.split("<br>")[0] for t in titles] == ["T = 0", "T = 0.25", "T = 1", "T = 2", "T = 5"]
    assert f"top 8 hold {float(torch.softmax(z / 5, -1)[top].sum()):.0%}" in titles[-1]
    domains = [fig.layout[f"xaxis{'' if k == 1 else k}"].domain for k in range(1, 6)]
    assert domains[0][0] == 0 and abs(domains[-1][1] - 1) < 1e-9
    assert all(a[1] < b[0] for a, b in zip(domains, domains[1:]))  # side by side, left to right, no overlap


def test_distribution_bars_are_softmax_at_the_slider_t_with_the_uniform_line():
    z = logits(5)
    m = len(CHARS)
    fig = distribution_bars(CHARS, z, 0.5)
    order = torch.argsort(torch.softmax(z, -1), descending=True)
    assert np.allclose(fig.data[0].y, torch.softmax(z / 0.5, -1)[order].numpy(), atol=1e-6)
    assert fig.layout.title.text == "p(T) at T = 0.5" and fig.layout.yaxis.range == (0, 1.02)
    assert list(fig.layout.xaxis.tickvals) == list(range(m)) and len(fig.layout.xaxis.ticktext) == m
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 1 / m and (line.x0, line.x1, line.xref) == (0, 1, "x domain")  # across the plot
    (label,) = fig.layout.annotations
    assert label.text == f"uniform 1/m = {1 / m:.4f}" and label.y == 1 / m


def test_distribution_bars_of_a_large_vocabulary_show_the_most_likely():
    z = torch.randn(1000, generator=torch.Generator().manual_seed(6))
    chars = [f"t{i}" for i in range(1000)]
    fig = distribution_bars(chars, z, 2.0, unit="token", max_bars=50)
    top = torch.topk(z, 50).indices
    assert list(fig.layout.xaxis.ticktext) == [chars[i] for i in top]
    assert np.allclose(fig.data[0].y, torch.softmax(z / 2, -1)[top].numpy(), atol=1e-6)
    assert fig.layout.xaxis.title.text == "the 50 tokens most likely at T = 1 (of m = 1,000), most likely first"
    assert fig.layout.shapes[0].y0 == 1 / 1000


def test_sweep_curves_on_a_shared_log_axis_with_the_slider_mark_in_every_panel():
    z = logits(7)
    m = len(CHARS)
    data = sweep(z, log_grid(1e-3, 1e3, 121))
    fig = sweep_curves(data, m, mark=2.0, points=sweep(z, [0.5, 2.0]))
    for trace, key in zip(fig.data[:4], ("entropy", "max_prob", "to_one_hot", "to_uniform")):
        assert np.allclose(trace.x, data["T"], rtol=1e-6) and np.allclose(trace.y, data[key], atol=1e-6)
    assert [(tr.xaxis, tr.yaxis) for tr in fig.data[:4]] == [("x", "y"), ("x2", "y2"), ("x3", "y3"), ("x3", "y3")]
    assert all(fig.layout[ax].type == "log" for ax in ("xaxis", "xaxis2", "xaxis3"))
    assert fig.layout.xaxis.matches == fig.layout.xaxis2.matches == "x3"  # one T axis, labelled at the bottom
    assert fig.layout.xaxis3.title.text == "temperature T (log scale)"
    assert [fig.layout[ax].title.text for ax in ("yaxis", "yaxis2", "yaxis3")] == ["nats", "probability", "distance"]
    tops = [fig.layout[ax].domain for ax in ("yaxis", "yaxis2", "yaxis3")]
    assert tops[0][1] == 1 and tops[2][0] == 0 and tops[1][1] < tops[0][0] and tops[2][1] < tops[1][0]  # stacked
    titles = [a for a in fig.layout.annotations if a.xref == "paper"]
    assert [a.text for a in titles] == ["entropy H(p(T)) in nats", "largest probability max_i p_i(T)",
                                        "total variation distance to each limit"]
    assert [a.y for a in titles] == [d[1] for d in tops]  # each on top of its panel
    marks = [s for s in fig.layout.shapes if s.x0 == s.x1]
    assert [(s.x0, s.xref, s.yref, s.y0, s.y1) for s in marks] == [
        (2.0, "x", "y domain", 0, 1), (2.0, "x2", "y2 domain", 0, 1), (2.0, "x3", "y3 domain", 0, 1)]
    labels = {a.text: a.yref for a in fig.layout.annotations if a.xref != "paper"}
    assert labels == {"0 (one-hot)": "y", f"log m = {math.log(m):.3f} (uniform)": "y", "1 (one-hot)": "y2",
                      f"1/m = {1 / m:.4f} (uniform)": "y2", "0": "y3"}
    yours = [tr for tr in fig.data if tr.name == "your temperatures"]
    assert [tr.showlegend for tr in yours] == [True, False, False, False]  # one legend entry for the four
    assert np.allclose(yours[1].y, [float(torch.softmax(z / t, -1).max()) for t in (0.5, 2.0)], atol=1e-6)


@pytest.mark.parametrize("n", range(1, G.MAX_TEMPERATURES + 1))
def test_sweep_bars_fit_any_number_of_panels(n):
    temps = [0.5 * k for k in range(n)]
    fig = sweep_bars(CHARS, logits(8), temps)
    domains = [fig.layout[f"xaxis{'' if k == 1 else k}"].domain for k in range(1, n + 1)]
    assert domains[0][0] == 0 and domains[-1][1] == 1
    assert all(a[1] < b[0] for a, b in zip(domains, domains[1:]))
    assert len(panel_titles(fig)) == len(fig.data) == n


@pytest.mark.parametrize("n_prompt, n_new", [(3, 5), (10, 6), (16, 1), (16, 4), (5, 40), (12, 5)])
def test_slid_steps_counts_the_steps_stream_flags(tiny_model, n_prompt, n_new):
    from core.analysis.generation import fit_in_window, slid_steps
    from core.analysis.sampling import stream

    n_ctx = tiny_model.config.n_ctx  # 16
    ids = [i % 11 for i in range(n_prompt)]
    flags = [s.slid for s in stream(tiny_model, [ids], n_new, 1.0, generator=torch.Generator().manual_seed(0))]
    assert slid_steps(n_prompt, n_new, n_ctx) == sum(flags)
    read, new = fit_in_window(n_prompt, n_new, n_ctx)
    assert new == min(n_new, 8) and read == min(n_prompt, n_ctx - new)
    flags = [s.slid for s in stream(tiny_model, [ids[-read:]], new, 1.0, generator=torch.Generator().manual_seed(0))]
    assert not any(flags) and slid_steps(read, new, n_ctx) == 0


def test_step_records_read_every_row_as_the_tensors_hold_it():
    """step_records reads each tensor once; every field must equal what indexing the tensors row by row gives."""
    from core.analysis.sampling import Step
    torch.manual_seed(0)
    s = Step(token=torch.tensor([3, 1, 4]), prob=torch.rand(3), sample_prob=torch.rand(3),
             top_ids=torch.randint(0, 5, (3, 4)), top_probs=torch.rand(3, 4), window=7, slid=True)
    chars = list("abcde")
    for r, rec in enumerate(G.step_records(s, chars)):
        tid = int(s.token[r])
        assert rec == {"id": tid, "ch": chars[tid], "prob": float(s.prob[r]), "sample_prob": float(s.sample_prob[r]),
                       "alternatives": [(chars[int(i)], float(q)) for i, q in zip(s.top_ids[r], s.top_probs[r])],
                       "slid": True}
        assert type(rec["prob"]) is float and type(rec["alternatives"][0][1]) is float
