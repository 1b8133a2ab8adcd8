"""core.figures.intervention_figures: the figures, tables and markup of the "Switch heads off" page, read back from their data."""
import re

import numpy as np
import pytest

from core.figures.intervention_figures import (continuation_html, induction_frame, loss_change_html, next_token_bars,
                                               ranking_frame, stripe_figure)
from core.serve.fmt import head_label, heads_label
from core.analysis.interventions import HeadEffect

CHARS = list("\n abcdefghijklmnopqrstuvwxyz")


def test_heads_count_from_one_on_screen():
    assert head_label(0, 0) == "L1 H1" and head_label(1, 3) == "L2 H4"
    assert heads_label([(0, 2), (1, 0)]) == "L1 H3, L2 H1" and heads_label([]) == "no head"


def test_bars_show_the_top_characters_of_either_distribution_with_readable_labels():
    m = len(CHARS)
    before = np.full(m, 0.01)
    before[[1, 2, 3]] = [0.5, 0.2, 0.1]  # ' ', 'a', 'b'
    after = np.full(m, 0.01)
    after[[0, 4]] = [0.6, 0.3]  # '\n', 'c': likely only without the heads
    before, after = before / before.sum(), after / after.sum()
    fig = next_token_bars(CHARS, before, after, "L1 H1 off", actual=4, n_top=5)
    labels = list(fig.layout.xaxis.ticktext)
    assert labels == ["⏎", "␣", "c", "a", "b"]  # ordered by the larger of the two probabilities
    idx = [0, 1, 4, 2, 3]
    np.testing.assert_allclose(fig.data[0].y, before[idx])
    np.testing.assert_allclose(fig.data[1].y, after[idx])
    assert [t.name for t in fig.data] == ["all heads on", "L1 H1 off"] and fig.layout.barmode == "group"
    assert fig.layout.annotations[0].x == 2  # "really next" points at 'c'
    assert "'c'" in fig.layout.title.text and f"{after[4]:.3f}" in fig.layout.title.text
    with pytest.raises(ValueError):
        next_token_bars(CHARS, before[:-1], after, "x")


def test_loss_change_shades_each_character_by_its_change_and_escapes_the_text():
    text = "<b>\nx"
    before = np.array([1.0, 1.0, 1.0, 1.0])
    after = np.array([2.0, 1.0, 0.5, 1.0])  # 'b' worse, '>' unchanged, newline better, 'x' unchanged
    out = loss_change_html(text, before, after)
    assert "<b>" not in out and "&lt;" in out and "⏎<br>" in out
    spans = re.findall(r'<span title="[^"]*" style="background: rgba\((\d+), (\d+), (\d+), ([\d.]+)\)', out)
    assert len(spans) == 4  # one per predicted character; the first has no loss
    assert spans[0][:3] == ("214", "39", "40") and float(spans[0][3]) == pytest.approx(0.8)  # the largest rise: full red
    assert float(spans[1][3]) == 0.0
    assert spans[2][:3] == ("31", "119", "180") and float(spans[2][3]) == pytest.approx(0.4)  # half the scale, blue
    assert "loss 1.000 → 2.000 nats (+1.000)" in out
    with pytest.raises(ValueError):
        loss_change_html(text, before[:-1], after[:-1])


def test_small_changes_stay_pale():
    out = loss_change_html("ab", np.array([1.0]), np.array([1.05]))
    alpha = float(re.search(r"rgba\(214, 39, 40, ([\d.]+)\)", out).group(1))
    assert alpha == pytest.approx(0.8 * 0.05 / 0.5)  # scaled against at least half a nat, not stretched to full


def test_continuation_marks_where_it_parts_from_the_reference():
    out = continuation_html("<i>", "abXd", reference="abcd")
    assert "&lt;i&gt;" in out and "<i>" not in out
    assert out.count("background: #ffe08a") == 1 and 'border-radius: 2px;">X</span>' in out
    assert "#ffe08a" not in continuation_html("", "abcd")


def test_ranking_keeps_the_order_and_matches_the_second_copy_by_head():
    effects = [HeadEffect(1, 0, 2.5, 0.5), HeadEffect(0, 1, 2.1, 0.1)]
    second = [HeadEffect(0, 1, 3.0, 1.0), HeadEffect(1, 0, 2.2, 0.2)]  # another order
    induction = np.array([[0.0, 0.7], [0.1, 0.0]])
    frame = ranking_frame(effects, second, induction)
    assert list(frame["head"]) == ["L2 H1", "L1 H2"]
    assert list(frame["rise"]) == [0.5, 0.1]
    assert list(frame["second copy: rise"]) == [0.2, 1.0]
    assert list(frame["induction score"]) == [0.1, 0.7]
    assert list(ranking_frame(effects).columns) == ["head", "loss with it off", "rise"]


def test_induction_table_counts_from_one():
    frame = induction_frame(np.arange(6.0).reshape(2, 3))
    assert list(frame.index) == ["layer 1", "layer 2"] and list(frame.columns) == ["head 1", "head 2", "head 3"]
    assert frame.loc["layer 2", "head 1"] == 3.0


def test_stripe_marks_the_key_after_the_earlier_occurrence():
    T = 4
    n = 2 * T
    pattern = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    fig = stripe_figure(pattern, list("abcdabcd"), T, "t")
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == pytest.approx(0.5)  # the future is masked, not a pale 0
    line = fig.data[1]
    # counted from 1 as on screen: query 5 (the second 'a') looks at key 2 ('b', the character after the first 'a')
    assert list(line.y) == [5, 6, 7, 8] and list(line.x) == [2, 3, 4, 5]
    assert list(fig.data[0].x) == list(range(1, n + 1))  # the cells sit at the same positions
    assert list(fig.layout.yaxis.range) == [n + 0.5, 0.5]  # query 1 on top
    with pytest.raises(ValueError):
        stripe_figure(pattern[:-1, :-1], list("abcdabcd"), T)


def test_a_long_stripe_is_pooled_into_blocks_at_their_positions():
    T = 150
    n = 2 * T
    pattern = np.zeros((n, n))
    pattern[np.arange(n), np.arange(n)] = 1.0
    rows = np.arange(T, n)
    pattern[rows] = 0.0
    pattern[rows, rows - T + 1] = 1.0  # a perfect induction head on the second copy
    fig = stripe_figure(pattern, ["x"] * n, T, max_cells=100)  # blocks of 3 positions: 100 x 100 cells
    heat = fig.data[0]
    z = np.asarray(heat.z, dtype=float)
    assert z.shape == (100, 100) and heat.customdata is None
    assert list(heat.x[:2]) == [2.0, 5.0] and heat.y[-1] == 299.0  # block centres, in positions counted from 1
    # the stripe keeps its strength: block row I of the second copy puts all its weight on the key block(s) of
    # the keys i - T + 1 of its three queries
    I = 70  # queries 210..212 look at keys 61..63, blocks 20 and 21
    np.testing.assert_allclose(np.nansum(z[I]), 1.0)
    assert z[I, 20] == pytest.approx(2 / 3) and z[I, 21] == pytest.approx(1 / 3)
    assert np.isnan(z[0, 1]) and z[0, 0] == pytest.approx(1.0)
    line = fig.data[1]
    assert line.x[0] == 2 and line.y[0] == T + 1  # the line stays in positions (from 1)
    assert list(fig.layout.yaxis.range) == [n + 0.5, 0.5]
