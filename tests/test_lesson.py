"""The lesson's grading (core.lesson): each question kind against an answer known by construction or computed here
independently, and the rule that a close call is not graded."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SHIPPED
from core import lesson as LS
from core.nn.checkpoint import load_checkpoint
from core.nn.model import ModelConfig, Transformer


def _pointing_model():
    """One layer whose head 1 looks at token 7 wherever it is: its query is a constant (the bias b_Q), its key reads
    the embedding's first coordinate, +1 for token 7 and -1 for every other token."""
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=10, n_ctx=16, d_model=8, n_heads=2, n_layers=1, bias=True)).eval()
    d = 8
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.blocks[0].ln1.weight.fill_(1.0)
        m.blocks[0].ln2.weight.fill_(1.0)
        m.ln_f.weight.fill_(1.0)
        m.tok_emb.weight[:, 0] = -1.0
        m.tok_emb.weight[7, 0] = 1.0
        m.tok_emb.weight[:, 1] = torch.arange(10.0) * 0.01  # rows differ a little elsewhere, not in what head 1 reads
        m.blocks[0].attn.qkv.bias[0] = 20.0                  # q of head 1: 20 along its first dimension
        m.blocks[0].attn.qkv.weight[d + 0, 0] = 1.0          # k of head 1, first dimension: the embedding's first coordinate
    return m


def test_which_key_finds_the_token_the_head_was_built_to_look_at():
    m = _pointing_model()
    ids = [1, 2, 7, 3, 4, 5]
    w = LS.key_weights(m, ids, 0, 0)
    assert w.argmax() == 2 and w[2] > 0.9
    assert LS.which_key(m, ids, 0, 0, guess=2) == LS.Grade(True, 2, LS.which_key(m, ids, 0, 0, 2).why)
    assert LS.which_key(m, ids, 0, 0, guess=5).correct is False
    twice = LS.which_key(m, [1, 7, 2, 7, 3], 0, 0, guess=1)  # two 7s: equal weights, too close to call
    assert twice.correct is None and "too close" in twice.why


def test_close_calls_and_choices():
    assert LS.close_call({"a": 1.0, "b": 0.96}) and not LS.close_call({"a": 1.0, "b": 0.9})
    g = LS.grade_choice({"a": 1.0, "b": 0.5}, "b")
    assert (g.correct, g.answer) == (False, "a")
    with pytest.raises(ValueError):
        LS.grade_choice({}, "a")


def test_direction_is_graded_only_outside_the_noise():
    assert LS.grade_direction(0.5, 0.1, "up").correct is True
    assert LS.grade_direction(-0.5, 0.1, "up") == LS.Grade(False, "down", LS.grade_direction(-0.5, 0.1, "up").why)
    assert LS.grade_direction(0.05, 0.1, "same").correct is None
    with pytest.raises(ValueError):
        LS.grade_direction(0.5, 0.1, "sideways")


def test_switching_off_a_head_that_writes_nothing_changes_nothing():
    m = _pointing_model()  # W_O is zero: no head writes anything
    change, noise, rep = LS.copy_loss_change(m, [1, 2, 3, 4, 5, 6], [(0, 0)], n_ctx=16)
    assert rep == [1, 2, 3, 4, 5, 6] * 2 and change == 0.0 and noise == LS.MIN_NOISE
    assert LS.grade_direction(change, noise, "up").correct is None


def test_the_shipped_induction_heads_loss_change_against_a_copy_without_it():
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode("Heavy the crown; light the feather of a")
    change, noise, rep = LS.copy_loss_change(model, ids, [(1, 3)], model.config.n_ctx)
    other = copy.deepcopy(model)
    dh = model.config.d_head
    with torch.no_grad():
        other.blocks[1].attn.out.weight[:, 3 * dh:4 * dh] = 0.0  # head L2 H4's columns of W_O
        x = torch.tensor([rep])
        before = F.cross_entropy(model(x).logits[0, :-1], x[0, 1:], reduction="none")
        after = F.cross_entropy(other(x).logits[0, :-1], x[0, 1:], reduction="none")
    half = len(rep) // 2
    assert change == pytest.approx(float((after - before)[half:].mean()), abs=1e-4)
    assert change > noise  # the induction head copies: the loss goes up
    assert LS.grade_direction(change, noise, "up").correct is True


def test_numbers_within_their_tolerance():
    c = ModelConfig(vocab_size=65, n_ctx=128, d_model=64, n_heads=4, n_layers=2)
    nums = LS.block_numbers(c)
    d, d_ff = 64, c.d_ff
    assert nums["per_block"] == 4 * d * d + 2 * d * d_ff + 4 * d
    assert nums["mlp_share"] == pytest.approx(2 * d * d_ff / (4 * d * d + 2 * d * d_ff + 4 * d))
    assert LS.grade_number(49_000, nums["per_block"], 0.02).correct is True
    assert LS.grade_number(45_000, nums["per_block"], 0.02).correct is False
    assert LS.grade_number(float("nan"), 1.0, 0.5).correct is False


def test_the_mask_experiment_moves_earlier_rows_only_after_the_softmax():
    model, tok = load_checkpoint(SHIPPED)
    dep = LS.mask_experiment(model, tok.encode("To be or not"), 0, 0)
    assert dep["mask_on_scores"] < LS.MASK_CHANGE < dep["mask_after_softmax"]
    assert LS.grade_yes_no(dep["mask_after_softmax"], LS.MASK_CHANGE, True).correct is True


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
