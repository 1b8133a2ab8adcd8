import numpy as np
import pytest
import torch

from core.analysis.attention import (
    attention_overview, head_attention, head_window, layer_attention, pool_pattern,
    future_dependence, future_mask, future_mass, head_roles, induction_chance, induction_score, induction_scores,
    mask_after_softmax, masked_softmax, previous_token_score, first_token_score, row_entropy, run_attention,
    unmasked_softmax,
)
from core.figures.attention_figures import all_heads_figure, future_mass_figure, head_panels, head_roles_figure, mask_order_figure
from core.model import ModelConfig, Transformer


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
    scores, mask, weights, cheat = fig.data
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
    from core.figures.attention_figures import axis_ticks
    t = axis_ticks(["y"] * 128)
    assert len(t["tickvals"]) <= 48 and t["ticktext"][1].startswith("y ")


def test_head_window_cuts_whole_row_softmaxes(model):
    ids = [i % 13 for i in range(30)]
    view = head_window(*head_attention(model, ids, 1, 0), 5, 20)
    with torch.no_grad():
        s = model(torch.tensor([ids]), return_attn=True).attn[1].scores[0, 0].double()
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
    from core.figures.attention_figures import axis_ticks
    assert axis_ticks(["a", "⏎", "␣"])["tickangle"] == 0  # characters stay upright, as the lecture draws them
    ticks = axis_ticks(["␣king", "␣the", "y"])
    assert "tickangle" not in ticks and ticks["ticktext"] == ["␣king", "␣the", "y"]


def forward_attention(model, ids):
    """Every layer's (scores, pattern) from the model's own forward pass with return_attn, float64: the reference."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), return_attn=True)
    return [(r.scores[0].double().numpy(), r.pattern[0].double().numpy()) for r in out.attn]


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
