import math

import numpy as np
import pytest
import torch

from core.analysis.attention import (attention_overview, changed_last, dependence_on_last, head_attention, head_window,
                                     layer_attention, pattern_roles, pool_pattern, future_dependence, future_mask,
                                     future_mass, head_roles, induction_chance, induction_scores, mask_after_softmax,
                                     masked_softmax, previous_token_score, first_token_score, row_entropy,
                                     run_attention, unmasked_softmax)
from core.analysis.induction import induction_score
from pages.attention.grid import all_heads_figure, head_roles_figure
from core.figures.attention_panels import future_mass_figure, head_panels, mask_order_figure
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from attention_hooks import attention


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=13, n_ctx=32, d_model=16, n_heads=2, n_layers=2)).eval()


def test_run_attention_matches_the_model(model):
    run = run_attention(model, [1, 2, 3, 4, 5])
    assert run.n_layers == 2 and run.n_heads == 2
    assert run.scores[0].shape == (2, 5, 5)
    assert np.allclose(run.pattern[1], masked_softmax(run.scores[1]), atol=1e-6)
    with pytest.raises(ValueError, match="empty"):
        run_attention(model, [])


def test_mask_variants():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(3, 6, 6)) * 3
    right, wrong, cheat = masked_softmax(s), mask_after_softmax(s), unmasked_softmax(s)
    assert np.allclose(right.sum(-1), 1)
    assert (right[..., future_mask(6)] == 0).all() and (wrong[..., future_mask(6)] == 0).all()
    sums = wrong.sum(-1)
    assert np.allclose(sums[..., -1], 1) and (sums[..., :-1] < 1).all()  # only the last row keeps all its mass
    assert np.allclose(future_mass(cheat), 1 - sums)
    assert np.allclose(cheat.sum(-1), 1)


def test_future_dependence(model):
    dep = future_dependence(model, [1, 2, 3, 4, 5, 6], layer=0, head=1)
    assert dep["mask_on_scores"] < 1e-7
    assert dep["mask_after_softmax"] > 1e-4


def test_hand_built_previous_token_head_scores_highest():
    n = 8
    prev = np.zeros((n, n))
    prev[0, 0] = 1
    prev[np.arange(1, n), np.arange(n - 1)] = 1
    first = np.zeros((n, n))
    first[:, 0] = 1
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    pats = np.stack([prev, first, uniform])
    assert np.argmax(previous_token_score(pats)) == 0 and previous_token_score(pats)[0] == 1
    assert np.argmax(first_token_score(pats)) == 1 and first_token_score(pats)[1] == 1
    ent = row_entropy(pats).mean(-1)
    assert ent[0] == 0 and ent[1] == 0 and np.argmax(ent) == 2
    assert np.isclose(row_entropy(uniform)[-1], np.log(n))


def test_induction_score_of_a_perfect_induction_head():
    T = 5
    n = 2 * T
    pat = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    ideal = pat.copy()
    rows = np.arange(T, n)
    ideal[rows] = 0
    ideal[rows, rows - T + 1] = 1
    assert induction_score(ideal, T) == 1
    assert np.isclose(induction_score(pat, T), induction_chance(n, T))


def test_induction_scores_and_roles_shapes(model):
    ind = induction_scores(model, period=8, n_seqs=3)
    assert ind.shape == (2, 2) and np.isfinite(ind).all() and (ind >= 0).all() and (ind <= 1).all()
    roles = head_roles(run_attention(model, list(range(10))), ind)
    assert set(roles) == {"previous_token", "first_token", "entropy", "induction"}
    assert all(v.shape == (2, 2) for v in roles.values())


def test_head_panels_figure_data(model):
    run = run_attention(model, list(range(7)))
    tokens = list("abc␣def")
    fig = head_panels(run.scores[0][1], run.pattern[0][1], tokens, unmasked=unmasked_softmax(run.scores[0][1]))
    scores, mask, weights, cheat, targets = fig.data  # targets: the weights' click targets (scatter)
    assert np.allclose(np.array(scores.z), run.scores[0][1])  # unmasked scores, future included
    assert not np.isnan(np.array(scores.z, dtype=float)).any()
    assert np.array_equal(np.array(mask.z) == 1, future_mask(7))
    w = np.array(weights.z, dtype=float)
    assert np.isnan(w[future_mask(7)]).all()  # masked cells have no value: grey, not a pale zero
    assert np.allclose(w[~future_mask(7)], run.pattern[0][1][~future_mask(7)])
    assert list(mask.text[0][1:]) == ["−∞"] * 6
    assert fig.layout.yaxis.range == (6.5, -0.5)  # query 0 at the top
    assert list(fig.layout.xaxis.ticktext) == tokens
    assert np.allclose(np.array(cheat.z, dtype=float).sum(-1), 1)
    with pytest.raises(ValueError):
        head_panels(run.scores[0][1], run.pattern[0][1], tokens[:3])


def test_other_figures(model):
    run = run_attention(model, list(range(12)))
    tokens = [str(i % 10) for i in range(12)]
    grid = all_heads_figure(run.pattern, selected=(1, 0))
    heat, targets = grid.data[:4], grid.data[4:]
    assert all(np.isnan(np.array(t.z, dtype=float)[future_mask(12)]).all() for t in heat)
    assert [list(t.customdata[0]) for t in targets] == [[0, 0], [0, 1], [1, 0], [1, 1]]  # click -> (layer, head)
    assert all(0 <= min(t.x) and max(t.x) <= 11 for t in targets)
    order = mask_order_figure(run.scores[0][0], tokens)
    right_sums, wrong_sums = order.data[2].x, order.data[3].x
    assert np.allclose(right_sums, 1) and wrong_sums[-1] == pytest.approx(1) and min(wrong_sums) < 1
    mass = future_mass_figure(future_mass(unmasked_softmax(run.scores[0][0])), tokens)
    assert mass.data[0].y[-1] == pytest.approx(0)
    zoom = mask_order_figure(run.scores[0][0], tokens[4:], offset=4)  # a window: whole rows still count
    assert np.allclose(zoom.data[2].x, 1) and np.allclose(zoom.data[3].x, order.data[3].x[4:])
    roles = head_roles_figure(head_roles(run, np.zeros((2, 2))))
    assert len(roles.data) == 4 and all(np.isfinite(np.array(t.z, dtype=float)).all() for t in roles.data)


def test_long_window_ticks_are_thinned(model):
    run = run_attention(model, [i % 13 for i in range(32)])
    fig = head_panels(run.scores[0][0], run.pattern[0][0], ["x"] * 32)
    assert len(fig.layout.xaxis.tickvals) == 32
    from core.figures.ticks import axis_ticks
    t = axis_ticks(["y"] * 128)
    assert len(t["tickvals"]) <= 48 and t["ticktext"][1].startswith("y ")


def test_head_window_cuts_whole_row_softmaxes(model):
    ids = [i % 13 for i in range(30)]
    view = head_window(*head_attention(model, ids, 1, 0), 5, 20)
    with torch.no_grad():
        s = attention(model, torch.tensor([ids]))[1].scores[0, 0].double()
    future = torch.ones(30, 30, dtype=torch.bool).triu(1)
    whole = torch.softmax(s, -1)
    assert view.unmasked.shape == (16, 16) and view.future_mass.shape == (16,)
    assert np.allclose(view.unmasked, whole[5:21, 5:21].numpy(), atol=1e-6)
    assert np.allclose(view.pattern, torch.softmax(s.masked_fill(future, -torch.inf), -1)[5:21, 5:21].numpy(), atol=1e-6)
    assert np.allclose(view.future_mass, (whole * future).sum(-1)[5:21].numpy(), atol=1e-6)
    assert view.mean_future_mass == pytest.approx(float((whole * future).sum(-1)[:-1].mean()), abs=1e-6)
    with pytest.raises(ValueError):
        head_window(*head_attention(model, ids, 0, 0), 20, 30)


def test_axis_ticks_turn_only_for_labels_longer_than_two_characters():
    from core.figures.ticks import axis_ticks
    assert axis_ticks(["a", "⏎", "␣"])["tickangle"] == 0  # characters stay upright, as the lecture draws them
    ticks = axis_ticks(["␣king", "␣the", "y"])
    assert "tickangle" not in ticks and ticks["ticktext"] == ["␣king", "␣the", "y"]


def forward_attention(model, ids):
    """Every layer's (scores, pattern) from the model's own forward pass (its hook points), float64: the reference."""
    with torch.no_grad():
        records = attention(model, torch.tensor([ids]))
    return [(r.scores[0].double().numpy(), r.pattern[0].double().numpy()) for r in records]


def test_run_attention_keeps_float32_and_the_one_layer_and_one_head_paths_agree(model):
    ids = [i * 5 % 13 for i in range(20)]
    ref = forward_attention(model, ids)
    run = run_attention(model, ids)
    assert run.scores[0].dtype == np.float32 and run.pattern[1].dtype == np.float32  # no float64 copies
    seen = []
    for layer, scores, pattern in layer_attention(model, ids):
        seen.append(layer)
        np.testing.assert_allclose(scores, ref[layer][0], atol=1e-5)
        np.testing.assert_allclose(pattern, ref[layer][1], atol=1e-6)
        for head in range(2):
            s, p = head_attention(model, ids, layer, head)
            assert s.shape == p.shape == (20, 20)
            np.testing.assert_allclose(s, ref[layer][0][head], atol=1e-5)
            np.testing.assert_allclose(p, ref[layer][1][head], atol=1e-6)
    assert seen == [0, 1]
    with pytest.raises(ValueError):
        head_attention(model, ids, 2, 0)


def test_pool_pattern_by_hand():
    rng = np.random.default_rng(0)
    w = 7
    raw = np.tril(rng.random((2, w, w)))
    pattern = raw / raw.sum(-1, keepdims=True)  # rows sum to 1, nothing on the future
    same, b = pool_pattern(pattern, 10)  # fits: every position its own cell, the future NaN
    assert b == 1 and np.isnan(same[:, future_mask(w)]).all()
    np.testing.assert_allclose(same[:, ~future_mask(w)], pattern[:, ~future_mask(w)])
    pooled, b = pool_pattern(pattern, 3)  # blocks of 3 positions: {0,1,2}, {3,4,5}, {6}
    assert b == 3 and pooled.shape == (2, 3, 3)
    blocks = [range(0, 3), range(3, 6), range(6, 7)]
    for I, rows in enumerate(blocks):
        for J, keys in enumerate(blocks):
            expected = np.mean([[sum(pattern[k, i, j] for j in keys) for i in rows] for k in range(2)], axis=1)
            if J > I:
                assert np.isnan(pooled[:, I, J]).all()
            else:
                np.testing.assert_allclose(pooled[:, I, J], expected)
    np.testing.assert_allclose(np.nansum(pooled, -1), 1)  # a row of cells keeps a row's total weight


def test_attention_overview_measures_and_thumbnails(model):
    ids = [i * 7 % 13 for i in range(30)]
    ref = forward_attention(model, ids)
    ov = attention_overview(model, ids, 4, 27, size=8)
    pats = np.stack([p for _, p in ref])  # (L, h, n, n)
    np.testing.assert_allclose(ov.roles["previous_token"], np.diagonal(pats, -1, -2, -1).mean(-1), atol=1e-6)
    np.testing.assert_allclose(ov.roles["first_token"], pats[..., 1:, 0].mean(-1), atol=1e-6)
    ent = -(np.where(pats > 0, pats * np.log(np.where(pats > 0, pats, 1)), 0)).sum(-1).mean(-1)
    np.testing.assert_allclose(ov.roles["entropy"], ent, atol=1e-5)
    assert ov.block == 3 and ov.thumbs.shape == (2, 2, 8, 8) and ov.thumbs.dtype == np.float32
    win = pats[..., 4:28, 4:28]  # 24 positions in 8 blocks of 3
    by_hand = win.reshape(2, 2, 8, 3, 8, 3).sum(-1).mean(-2)
    keep = ~future_mask(8)
    np.testing.assert_allclose(ov.thumbs[..., keep], by_hand[..., keep], atol=1e-6)
    assert np.isnan(ov.thumbs[..., future_mask(8)]).all()


def softmax_rows_by_hand(rows):
    """Row-wise softmax in plain Python floats; -inf entries get 0."""
    out = []
    for row in rows:
        top = max(row)
        e = [math.exp(v - top) if v != -math.inf else 0.0 for v in row]
        out.append([v / sum(e) for v in e])
    return out


def test_mask_orders_on_stacks_of_layers_and_heads_in_float64():
    """(L, h, n, n) scores with h != n, given as float32: the right order (mask, then softmax) and the wrong one
    (softmax, then zero the future) against softmaxes written out row by row in float64."""
    rng = np.random.default_rng(1)
    s = (rng.normal(size=(2, 3, 4, 4)) * 2).astype(np.float32)
    right, wrong, mass = masked_softmax(s), mask_after_softmax(s), future_mass(unmasked_softmax(s))
    assert right.dtype == wrong.dtype == np.float64 and right.shape == wrong.shape == (2, 3, 4, 4)
    for l in range(2):
        for h in range(3):
            rows = s[l, h].astype(np.float64).tolist()
            past = [[v if j <= i else -math.inf for j, v in enumerate(row)] for i, row in enumerate(rows)]
            np.testing.assert_allclose(right[l, h], softmax_rows_by_hand(past), rtol=1e-14, atol=1e-300)
            full = softmax_rows_by_hand(rows)
            np.testing.assert_allclose(wrong[l, h], [[p if j <= i else 0.0 for j, p in enumerate(row)]
                                                     for i, row in enumerate(full)], rtol=1e-14, atol=1e-300)
            np.testing.assert_allclose(mass[l, h], [sum(row[i + 1:]) for i, row in enumerate(full)], rtol=1e-13,
                                       atol=1e-300)


def test_dependence_on_last_by_hand():
    """Scores 0 everywhere, then the last key's scores (column 2) changed to x0 for query 0 and x1 for query 1.
    Mask first: rows 0 and 1 never see key 2, so nothing moves. Mask after: row i's past weights go from 1/3 to
    1/(2 + e^x_i), and the larger move is reported."""
    for x0, x1 in ((2.0, 0.5), (0.5, 2.0), (-1.0, 1.5)):
        a = np.zeros((3, 3), dtype=np.float32)
        b = a.copy()
        b[0, 2], b[1, 2], b[2, 2] = x0, x1, 7.0  # the last query's own row may change any way it likes
        dep = dependence_on_last(a, b)
        assert dep["mask_on_scores"] == 0.0
        want = max(abs(1 / 3 - 1 / (2 + math.exp(x))) for x in (x0, x1))
        assert dep["mask_after_softmax"] == pytest.approx(want, rel=1e-12)


def test_changed_last_replaces_the_last_token_by_the_next_id_or_the_one_given():
    assert changed_last([4, 2, 4], 5) == ([4, 2, 0], 0)  # (4 + 1) mod 5
    assert changed_last([1, 2], 5) == ([1, 3], 3)  # two tokens are enough
    assert changed_last([1, 2, 3], 5, replacement=0) == ([1, 2, 0], 0)
    with pytest.raises(ValueError, match=r"^need at least two tokens: one to change and one before it$"):
        changed_last([1], 5)


def test_future_dependence_reports_the_replacement_it_used(model):
    ids = [1, 2, 3, 4, 5, 6]
    dep = future_dependence(model, ids, layer=1, head=0, replacement=9)
    ref_a = forward_attention(model, ids)[1][0][0]
    ref_b = forward_attention(model, ids[:-1] + [9])[1][0][0]
    assert dep["replacement"] == 9 and set(dep) == {"replacement", "mask_on_scores", "mask_after_softmax"}
    assert dep["mask_after_softmax"] == pytest.approx(dependence_on_last(ref_a, ref_b)["mask_after_softmax"],
                                                      abs=1e-6)
    assert future_dependence(model, ids, 0, 0)["replacement"] == 7


def test_head_window_defaults_bounds_and_short_prompts():
    rng = np.random.default_rng(2)
    s = rng.normal(size=(5, 5))
    p = masked_softmax(s)
    whole = head_window(s, p)  # the whole prompt by default
    assert (whole.lo, whole.hi) == (0, 4)
    np.testing.assert_array_equal(whole.scores, s)
    np.testing.assert_array_equal(whole.pattern, p)
    one = head_window(s, p, 3, 3)  # one position
    assert one.scores.shape == (1, 1) and one.scores[0, 0] == s[3, 3] and (one.lo, one.hi) == (3, 3)
    for lo, hi in ((-1, 2), (3, 2), (0, 5)):
        with pytest.raises(ValueError, match=rf"^window {lo}\.\.{hi} is outside the prompt's 5 positions$"):
            head_window(s, p, lo, hi)
    # mean future mass over the queries that have a future: one query of two, none of one
    two = np.array([[0.0, 1.0], [0.5, 0.2]])
    assert head_window(two, masked_softmax(two)).mean_future_mass == pytest.approx(math.e / (1 + math.e), rel=1e-12)
    assert head_window(np.zeros((1, 1)), np.ones((1, 1))).mean_future_mass == 0.0


def test_position_scores_on_two_and_on_one_position():
    pats = np.array([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.6, 0.4]]])  # (2 heads, 2, 2)
    assert previous_token_score(pats).tolist() == [0.25, 0.6]
    assert first_token_score(pats).tolist() == [0.25, 0.6]
    for shape in ((3, 4, 1, 1), (5, 1, 1)):  # (L, h, 1, 1) and (h, 1, 1): no query has a past to choose
        for score in (previous_token_score(np.ones(shape)), first_token_score(np.ones(shape))):
            assert score.shape == shape[:-2] and np.isnan(score).all()
    one_head = np.broadcast_to(pats[:1], (3, 1, 2, 2))  # (L = 3, h = 1, 2, 2): the shape's other axes do not matter
    assert previous_token_score(one_head).tolist() == [[0.25]] * 3 == first_token_score(one_head).tolist()


def test_roles_of_float32_patterns_are_float64():
    pattern = np.array([[1.0, 0.0, 0.0], [0.3, 0.7, 0.0], [0.1, 0.2, 0.7]], dtype=np.float32)
    roles = pattern_roles(pattern)
    p = pattern.astype(np.float64)
    assert roles["previous_token"] == pytest.approx((p[1, 0] + p[2, 1]) / 2, rel=1e-15)
    assert roles["first_token"] == pytest.approx((p[1, 0] + p[2, 0]) / 2, rel=1e-15)
    ent = [-sum(v * math.log(v) for v in row if v > 0) for row in p.tolist()]
    assert roles["entropy"] == pytest.approx(sum(ent) / 3, rel=1e-14)


def test_induction_chance_is_the_mean_of_one_over_i_plus_one_over_the_second_copy():
    # n_ctx 24: period 12 (half the context), queries 12..23
    assert induction_chance(24) == pytest.approx(sum(1 / (i + 1) for i in range(12, 24)) / 12, rel=1e-15)
    # a vocabulary of 5 ids: period 5, queries 5..9
    assert induction_chance(24, vocab_size=5) == pytest.approx(sum(1 / (i + 1) for i in range(5, 10)) / 5, rel=1e-15)
    assert induction_chance(100, period=3) == pytest.approx((1 / 4 + 1 / 5 + 1 / 6) / 3, rel=1e-15)


class RecordingModel(torch.nn.Module):
    """Wraps a model and keeps every input it is run on."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config, self.seen = model, model.config, []

    def forward(self, idx, **kw):
        self.seen.append(idx.clone())
        return self.inner(idx, **kw)

    def run_with_cache(self, idx, **kw):  # the way in of an analysis that reads activations
        self.seen.append(idx.clone())
        return self.inner.run_with_cache(idx, **kw)


def test_induction_scores_probe_with_the_given_period_count_seed_and_tokenizer(model):
    from core.analysis.induction import head_scores, model_probe, repeat_probe

    class FewIds:  # a tokenizer whose whole printable tokens are ids 3..9
        def readable_ids(self):
            return list(range(3, 10))

    spy = RecordingModel(model)
    got = induction_scores(spy, FewIds(), period=5, n_seqs=3, seed=4)
    assert torch.equal(spy.seen[-1], repeat_probe(13, n_seqs=3, period=5, seed=4, choices=range(3, 10)))
    np.testing.assert_array_equal(got, head_scores(model, spy.seen[-1]).induction)
    induction_scores(spy)  # defaults: 8 sequences, seed 0, every id, the period n_ctx and vocabulary allow (13)
    assert torch.equal(spy.seen[-1], repeat_probe(13, n_seqs=8, period=13, seed=0))
    induction_scores(spy, FewIds())  # the tokenizer's 7 ids bound the period
    assert torch.equal(spy.seen[-1], model_probe(model, FewIds())) and spy.seen[-1].shape == (8, 14)


def test_one_layer_one_head_models_and_stacks_of_many():
    torch.manual_seed(1)
    small = Transformer(ModelConfig(vocab_size=7, n_ctx=8, d_model=4, n_heads=1, n_layers=1)).eval()
    ids = [1, 2, 3, 4, 5]
    run = run_attention(small, ids)
    roles = head_roles(run)
    assert set(roles) == {"previous_token", "first_token", "entropy"} and roles["entropy"].shape == (1, 1)
    ov = attention_overview(small, ids)
    assert ov.roles["previous_token"].shape == (1, 1) and (ov.lo, ov.hi, ov.block) == (0, 4, 1)
    assert ov.roles["previous_token"][0, 0] == pytest.approx(previous_token_score(run.pattern[0][0]), abs=1e-7)
    # a 2-D pattern and a (L, h, w, w) stack pool block by block, as the (h, w, w) case does
    rng = np.random.default_rng(3)
    raw = np.tril(rng.random((2, 3, 5, 5)))
    stack = raw / raw.sum(-1, keepdims=True)
    pooled, b = pool_pattern(stack, 3)
    assert b == 2 and pooled.shape == (2, 3, 3, 3)
    for l in range(2):
        for h in range(3):
            alone, _ = pool_pattern(stack[l, h], 3)
            np.testing.assert_allclose(alone, pooled[l, h], equal_nan=True)
    np.testing.assert_allclose(pool_pattern(stack[0, 0], 3)[0][1, 0], (stack[0, 0, 2:4, 0:2].sum(-1)).mean())
    assert pool_pattern(stack[0, 0].astype(np.float32), 3)[0].dtype == np.float64


def test_attention_overview_defaults_and_bounds(model):
    ids = [i % 13 for i in range(31)]
    ov = attention_overview(model, ids)  # the whole prompt, 48 cells a side at most: every position its own
    assert (ov.lo, ov.hi, ov.block) == (0, 30, 1) and ov.thumbs.shape == (2, 2, 31, 31)
    torch.manual_seed(0)
    wide = Transformer(ModelConfig(vocab_size=13, n_ctx=64, d_model=16, n_heads=2, n_layers=1)).eval()
    assert attention_overview(wide, ids + ids[:18]).block == 2  # 49 positions: two per cell
    assert attention_overview(model, ids, 5, 5).thumbs.shape == (2, 2, 1, 1)
    for lo, hi in ((-1, 3), (4, 3), (0, 31)):
        with pytest.raises(ValueError, match=rf"^window {lo}\.\.{hi} is outside the prompt's 31 positions$"):
            attention_overview(model, ids, lo, hi)
    with pytest.raises(ValueError, match=r"^window 0\.\.1 is outside the prompt's 1 positions$"):
        attention_overview(model, [5], 0, 1)
    with pytest.raises(ValueError, match=r"^the prompt is empty: there is nothing to attend to$"):
        run_attention(model, [])
