"""One NaN-safe head picker (core.analysis.picks) and every head picker of core that goes through it: tables with a
NaN in them (in the first cell too, where ``np.argmax`` and ``max(key=...)`` both stop), and all-NaN tables, which
give None or a clear error, never a NaN head. The right head is read off each hand-made table."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.analysis.picks import best_of, nan_argmax, nan_last

NAN = math.nan
# (L=2, h=3): the largest real score is at (1, 2); a NaN in the first cell and one more in the middle
TABLE = np.array([[NAN, 0.2, 0.1], [0.3, NAN, 0.9]])
ALL_NAN = np.full((2, 3), NAN)


def test_the_picker_skips_nan_and_says_none_when_nothing_is_left():
    assert nan_argmax(TABLE) == (1, 2)
    assert nan_argmax([NAN, 5.0, 5.0, 1.0]) == (1,)                        # the first of equal entries
    assert nan_argmax(torch.tensor([NAN, -1.0, -3.0])) == (1,)             # a tensor too
    assert nan_argmax([-math.inf, NAN]) == (0,)                             # -inf is a number, NaN is not
    assert nan_argmax(ALL_NAN) is None and nan_argmax([]) is None
    assert all(type(i) is int for i in nan_argmax(TABLE))
    rows = [{"s": NAN}, {"s": 2.0}, {"s": 7.0}, {"s": NAN}]
    assert best_of(rows, lambda r: r["s"]) is rows[2]
    assert best_of(rows[:1], lambda r: r["s"]) is None and best_of([], lambda r: r["s"]) is None
    assert sorted([1.0, NAN, 3.0, 2.0], key=lambda x: nan_last(-x))[:3] == [3.0, 2.0, 1.0]


def test_induction_best_head_and_previous_token_head():
    from core.analysis.induction import HeadScores

    s = HeadScores(previous_token=np.array([[NAN, 0.8, 0.1], [0.95, 0.2, NAN]]), induction=TABLE,
                   first_copy_loss=3.0, second_copy_loss=1.0)
    assert s.best_head() == (1, 2) and s.previous_token_head() == (1, 0)
    nan = HeadScores(previous_token=ALL_NAN, induction=ALL_NAN, first_copy_loss=NAN, second_copy_loss=NAN)
    with pytest.raises(ValueError, match="every head's induction score is NaN"):
        nan.best_head()
    with pytest.raises(ValueError, match="previous-token score is NaN"):
        nan.previous_token_head()


def test_the_model_cards_summary_skips_nan_scores():
    from core.analysis.induction import induction_summary

    rows = [{"step": 5, "layer": 0, "head": 0, "previous_token": NAN, "induction": NAN},
            {"step": 5, "layer": 0, "head": 1, "previous_token": 0.7, "induction": 0.1},
            {"step": 5, "layer": 1, "head": 0, "previous_token": 0.2, "induction": 0.6}]
    s = induction_summary(rows)
    assert (s["best_head"], s["best_induction"]) == ([1, 0], 0.6)
    assert (s["best_previous_token_head"], s["best_previous_token"]) == ([0, 1], 0.7)
    s = induction_summary(rows[:1])
    assert s["best_head"] is None and s["best_induction"] is None and s["best_previous_token_head"] is None


def test_the_strongest_patched_head_and_the_over_training_head():
    from core.analysis.over_training import OverTraining
    from core.analysis.prompt_pairs import strongest_head

    signed = np.array([[NAN, 0.2, 0.1], [-0.95, NAN, 0.9]])                 # the largest in size is -0.95
    assert strongest_head(signed) == (1, 0)
    assert strongest_head(ALL_NAN) == (1, 0)   # documented: the last layer's first head, for a page to open on
    ot = OverTraining(steps=[1, 2], token_loss=np.zeros((2, 3)), previous_token=np.zeros((2, 2, 3)),
                      induction=np.stack([np.zeros((2, 3)), TABLE]), lens_accuracy=np.zeros((2, 3)), writers=[],
                      attribution=np.zeros((2, 0)), target=0, period=None)
    assert ot.best_induction_head() == (1, 2)


def test_the_ranking_puts_nan_last_and_the_second_copys_head_skips_it():
    from core.analysis.head_ranking import Ranking
    from core.analysis.interventions import HeadEffect, rank_from_losses

    base = np.zeros(4)
    per_head = np.array([[[NAN] * 4, [1.0] * 4], [[3.0] * 4, [2.0] * 4]])  # (L=2, h=2, n-1=4), NaN at (0, 0)
    order = [(e.layer, e.head) for e in rank_from_losses(base, per_head)]
    assert order == [(1, 0), (1, 1), (0, 1), (0, 0)]
    second = [HeadEffect(0, 0, NAN, NAN), HeadEffect(0, 1, 1.0, 0.5), HeadEffect(1, 0, 1.0, 0.8)]
    r = Ranking(effects=second, second=second, base=0.0)
    assert (r.top_second.layer, r.top_second.head) == (1, 0)
    assert Ranking(effects=second, second=second[:1], base=0.0).top_second is None


def test_the_head_that_stares_at_the_future_skips_nan():
    from core.views.variants_view import future_stare

    from core.nn.hooks import ActivationCache

    def pattern(diag):  # a (1, h, 3, 3) pattern whose superdiagonal weights are ``diag`` per head
        p = torch.zeros(1, len(diag), 3, 3)
        for h, w in enumerate(diag):
            p[0, h, 0, 1] = p[0, h, 1, 2] = w
        return p

    def fake(*diags):  # a model whose layer l's attn.hook_pattern is pattern(diags[l])
        cache = ActivationCache({f"blocks.{l}.attn.hook_pattern": pattern(d) for l, d in enumerate(diags)})
        return SimpleNamespace(config=SimpleNamespace(n_layers=len(diags)),
                               run_with_cache=lambda idx, names: (None, cache))
    (layer, head), weight, _ = future_stare(fake([NAN, 0.4], [0.2, 0.6]), [1, 2, 3])
    assert (layer, head) == (1, 1) and weight == pytest.approx(0.6)
    # layer 0's real head is not lost behind its NaN
    assert future_stare(fake([NAN, 0.7], [0.2, 0.1]), [1, 2, 3])[0] == (0, 1)


def test_the_training_pages_best_head_skips_nan():
    from core.views.training_view import best_head

    rows = [dict(step=9, layer=0, head=0, induction=0.9), dict(step=10, layer=0, head=0, induction=NAN),
            dict(step=10, layer=0, head=1, induction=0.3), dict(step=10, layer=1, head=0, induction=0.5)]
    step, best = best_head(rows)
    assert step == 10 and (best["layer"], best["head"]) == (1, 0)
