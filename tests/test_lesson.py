"""The lesson's grading rules (core.lesson.grading) on numbers chosen by hand, and the measures the steps share
(core.lesson.measures) against a computation written here. Each step's grade against an independent answer:
tests/test_lesson_steps.py."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SHIPPED
from core import lesson as LS
from core.analysis.interventions import mean_logprob
from core.nn.checkpoint import load_checkpoint


def test_close_calls_and_choices():
    assert LS.close_call({"a": 1.0, "b": 0.96}) and not LS.close_call({"a": 1.0, "b": 0.9})
    g = LS.grade_choice({"a": 1.0, "b": 0.5}, "b")
    assert (g.correct, g.answer) == (False, "a") and LS.grade_choice({"a": 1.0, "b": 0.5}, "a").correct is True
    assert LS.grade_choice({"a": 1.0, "b": 0.97}, "a").correct is None  # within 5%
    with pytest.raises(ValueError):
        LS.grade_choice({}, "a")


def test_a_nan_option_is_nobodys_answer():
    g = LS.grade_choice({"a": float("nan"), "b": 0.5, "c": 0.1}, "b")
    assert (g.correct, g.answer) == (True, "b")
    none = LS.grade_choice({"a": float("nan"), "b": float("nan")}, "a")
    assert none.correct is None and none.answer is None and none.call == "no answer"


def test_direction_is_graded_only_outside_the_noise():
    assert LS.grade_direction(0.5, 0.1, "up").correct is True
    g = LS.grade_direction(-0.5, 0.1, "up")
    assert (g.correct, g.answer) == (False, "down")
    assert LS.grade_direction(0.05, 0.1, "same").correct is None
    assert LS.grade_direction(float("nan"), 0.1, "up").correct is None
    with pytest.raises(ValueError):
        LS.grade_direction(0.5, 0.1, "sideways")


def test_numbers_within_their_tolerance():
    assert LS.grade_number(49_000, 49_408, 0.02).correct is True
    assert LS.grade_number(45_000, 49_408, 0.02).correct is False
    assert LS.grade_number(float("nan"), 1.0, 0.5).correct is False


def test_switching_off_a_head_that_writes_nothing_changes_nothing(tiny_model):
    with torch.no_grad():
        tiny_model.blocks[0].attn.out.weight.zero_()  # head L1 H1 writes nothing (nor do its neighbours)
    change, noise, rep = LS.copy_loss_change(tiny_model, [1, 2, 3, 4, 5, 6], [(0, 0)], n_ctx=16)
    assert rep == [1, 2, 3, 4, 5, 6] * 2 and change == 0.0 and noise == LS.MIN_NOISE
    assert LS.grade_direction(change, noise, "up").correct is None


@pytest.mark.parametrize("start", [0, 1, 3])
def test_mean_logprob_scores_every_token_from_start(tiny_model, start):
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    x = torch.tensor([ids])
    with torch.no_grad():
        lp = F.log_softmax(tiny_model(x).logits[0, :-1], -1)[torch.arange(7), x[0, 1:]]  # entry i: ids[i + 1]
    first = max(start, 1)  # token 0 has nothing before it to be predicted from
    assert mean_logprob(tiny_model, ids, start) == pytest.approx(float(lp[first - 1:].mean()), abs=1e-6)


def test_a_long_prompt_keeps_its_end_and_leaves_room_for_the_draws():
    ids = list(range(200))
    kept, new = LS.fitted_prompt(ids, 128)
    assert (kept, new) == (list(range(112, 200)), 40)  # 88 + 40 = 128
    assert LS.fitted_prompt(ids[:10], 128) == (ids[:10], 40)
    kept, new = LS.fitted_prompt(ids, 32)  # a short context: half of it for the draws
    assert (kept, new) == (list(range(184, 200)), 16)


def test_which_text_is_cold():
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode("ROMEO:\n")
    texts = {0.2: tok.encode("I will not be the "), 2.0: tok.encode("zQ;x!Vk ?qP")}
    pair = LS.temperature_pair(model, ids, lambda t, s: texts[t], seed=1)  # odd seed: the hot one first
    assert pair["texts_ids"] == [texts[2.0], texts[0.2]] and pair["cold"] == 1
    assert pair["logprob"][1] > pair["logprob"][0] + 0.1
    assert LS.which_is_cold(pair, 1).correct is True and LS.which_is_cold(pair, 0).correct is False
    same = LS.temperature_pair(model, ids, lambda t, s: texts[0.2], seed=0)
    assert LS.which_is_cold(same, 0).correct is None


def test_key_choices_are_the_first_and_the_last_positions():
    assert LS.key_choices(5) == [0, 1, 2, 3, 4]
    assert LS.key_choices(30) == [0] + list(range(15, 30)) and len(LS.key_choices(30)) == LS.CHOICES
    assert np.isin(LS.key_choices(100, 4), [0, 97, 98, 99]).all()
