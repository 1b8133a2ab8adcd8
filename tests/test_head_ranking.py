"""core.analysis.head_ranking (and the induction probe's period, the tables and phrases of the Switch heads off page):
hand-computed numbers, and a model whose heads are switched off by zeroing their columns of W_O."""
import copy
import re
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.analysis import head_ranking as HR
from core.figures import intervention_figures as IF
from core.serve.fmt import code_text, nats_than
from core.analysis.induction import THRESHOLD, model_period
from core.analysis.interventions import HeadEffect, layer_head_losses
from core.nn.config import ModelConfig
from core.nn.model import Transformer


# ----------------------------------------------------------------------------- cost

def test_rank_timing_is_a_batch_of_h_rows_at_most_64_tokens_long():
    c = ModelConfig(vocab_size=10, n_ctx=256, d_model=8, n_heads=4, n_layers=2)
    assert HR.rank_timing(c, 10) == (4, 10)
    assert HR.rank_timing(c, 200) == (4, 64)


def test_rank_seconds_of_a_one_layer_model_is_one_pass_plus_one_per_head():
    # with L = 1 the ranking is the pass with every head on, then h rows through the one block and the readout:
    # 1 + h passes, whatever the shape, each costing a row of the timed batch of h rows
    c = ModelConfig(vocab_size=10, n_ctx=256, d_model=4, n_heads=2, n_layers=1, d_ff=16)
    assert HR.rank_seconds(c, 8, 0.2) == pytest.approx(3 * 0.2 / 2)
    assert HR.rank_seconds(c, 128, 0.2) == pytest.approx(3 * 0.2 / 2 * 128 / 64)  # timed on 64, scaled to 128


def test_rank_seconds_of_two_layers_by_hand():
    c = ModelConfig(vocab_size=10, n_ctx=256, d_model=4, n_heads=2, n_layers=2, d_ff=16)
    n = 8
    block = n * (4 * 4 * 4 + 2 * 4 * 16) + n * (n + 1) * 4  # 1824 multiply-adds per block
    readout = n * 4 * 10                                      # 320
    forward = 2 * block + readout
    passes = (forward + 2 * (2 * block + readout) + 2 * (block + readout)) / forward  # l = 0 runs 2 blocks, l = 1 one
    assert block == 1824 and passes == pytest.approx(16192 / 3968)
    assert HR.rank_seconds(c, n, 1.0) == pytest.approx(passes / 2)


def test_continuation_reads_less_prompt_only_when_the_slid_steps_cost_too_much():
    def never():
        raise AssertionError("timed although no step slides")

    assert HR.continuation_read(50, 60, 128, never, 10) == 50           # 110 tokens fit in 128
    assert HR.continuation_read(68, 60, 128, never, 10) == 68           # exactly 128: nothing slides
    assert HR.continuation_read(100, 60, 128, lambda: 0.5, 10) == 68    # 32 slid steps x 0.5 s = 16 s > 10 s
    assert HR.continuation_read(100, 60, 128, lambda: 0.1, 10) == 100   # 3.2 s: all of it


# ----------------------------------------------------------------------------- the ranking

def test_per_head_losses_stacks_the_layers_and_reports_each():
    done = []
    out = HR.per_head_losses(lambda l: np.full((3, 5), float(l)), 4, done.append)
    assert out.shape == (4, 3, 5) and [float(out[l, 0, 0]) for l in range(4)] == [0.0, 1.0, 2.0, 3.0]
    assert done == [1, 2, 3, 4]
    assert HR.per_head_losses(lambda l: np.zeros((2, 1)), 2).shape == (2, 2, 1)  # no progress callback


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=24, d_model=16, n_heads=4, n_layers=2))
    with torch.no_grad():  # larger weights than the init, so that every head matters visibly
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return m.eval()


def without(model, layer, head):
    """A copy of ``model`` whose W_O reads nothing from one head: its d_h columns of W_O set to zero."""
    other = copy.deepcopy(model)
    d = model.config.d_head
    with torch.no_grad():
        other.blocks[layer].attn.out.weight[:, head * d:(head + 1) * d] = 0.0  # (d_out, d_in = h * d/h)
    return other


def losses(model, ids):
    idx = torch.tensor([ids])
    with torch.no_grad():
        return F.cross_entropy(model(idx).logits[0, :-1], idx[0, 1:], reduction="none").double().numpy()


def test_per_head_losses_of_a_model_equal_models_with_a_head_removed(model):
    ids = torch.randint(11, (14,), generator=torch.Generator().manual_seed(3)).tolist()
    got = HR.per_head_losses(lambda l: layer_head_losses(model, ids, l), model.config.n_layers)
    assert got.shape == (2, 4, 13)
    for layer in range(2):
        for head in range(4):
            np.testing.assert_allclose(got[layer, head], losses(without(model, layer, head), ids), atol=1e-5)
    ranking = HR.rank(losses(model, ids), got)
    assert ranking.base == pytest.approx(losses(model, ids).mean(), abs=1e-9)
    top = ranking.top
    assert top.loss == pytest.approx(losses(without(model, top.layer, top.head), ids).mean(), abs=1e-5)
    assert ranking.second is None and ranking.top_second is None


def test_rank_by_hand():
    # 8 tokens written as 4 twice: predictions 0..2 belong to the first copy, 4..6 to the second (3 to neither)
    base = np.ones(7)
    per_head = np.array([[[1, 1, 1, 1, 3, 3, 3],     # L1 H1 matters for the second copy only
                          [3, 3, 3, 3, 1, 1, 1]]])  # L1 H2 matters more overall
    r = HR.rank(base, per_head, period=4)
    assert r.base == 1.0
    assert [(e.layer, e.head) for e in r.effects] == [(0, 1), (0, 0)]
    assert [e.increase for e in r.effects] == pytest.approx([8 / 7, 6 / 7])
    assert r.top == r.effects[0]
    assert [(e.layer, e.head, e.increase) for e in r.second] == [(0, 0, 2.0), (0, 1, 0.0)]
    assert (r.top_second.layer, r.top_second.head) == (0, 0)


def test_copy_means_and_table_skip_the_first_token_of_the_second_copy():
    before = np.array([1.0, 2, 3, 9, 4, 5, 6])  # the 9 predicts the second copy's first token: no copy knows it
    after = np.array([2.0, 2, 2, 9, 2, 2, 2])
    assert HR.copy_means(before, 4) == (2.0, 5.0)
    assert HR.copy_table(before, after, 4) == {"first copy": [2.0, 2.0], "second copy": [5.0, 2.0],
                                               "drop (first − second)": [-3.0, 0.0]}


def test_what_the_numbers_say():
    assert HR.reads_first_copy(0.2) and not HR.reads_first_copy(0.1) and not HR.reads_first_copy(-1)
    text = HR.copy_verdict(0.5, -0.25, "L1 H1 off")
    assert "the loss on the second copy is 0.500 nats lower than on the first: the model reads the first copy" in text
    assert "With L1 H1 off it is 0.250 nats higher than on the first." in text
    assert "barely uses the first copy" in HR.copy_verdict(0.05, 0.0, "x")

    r = HR.Ranking(effects=[HeadEffect(0, 1, 2.5, 1.5), HeadEffect(0, 0, 1.2, 0.2)],
                   second=[HeadEffect(0, 0, 3.0, 2.0), HeadEffect(0, 1, 1.0, 0.0)], base=1.0)
    induction = np.array([[THRESHOLD, 0.1]])  # L1 H1 exactly at the threshold: an induction head
    text = HR.ranking_text(r, induction, "zero")
    assert "Each head switched off alone (zero)" in text and "minus 1.000 nats with all heads on" in text
    assert "**L1 H2** matters most: +1.500 nats over the whole prompt." in text
    assert f"On the second copy alone it is **L1 H1** (+2.000 nats), an induction head (score {THRESHOLD:.2f})" in text
    text = HR.ranking_text(r, np.array([[0.1, 0.9]]), "mean")
    assert "neither an induction head (induction score 0.10) nor a previous-token head" in text
    alone = HR.ranking_text(HR.Ranking(effects=r.effects, second=None, base=1.0), induction, "zero")
    assert "second copy" not in alone


def test_notes_name_their_numbers():
    c = ModelConfig(vocab_size=10, n_ctx=256, d_model=4, n_heads=2, n_layers=1, d_ff=16)
    text = HR.rank_cost_note(c, 8, 12.4, "tokens")
    assert "each of the 2 heads" in text and "8 tokens" in text and "about 3 forward passes" in text
    assert "**about 12 s**" in text
    text = HR.continuation_note(68, 100, 60, 128, 0.52, "token", "tokens")
    assert "the last 68 of your 100 tokens, so that 60 new ones fit in the context of 128" in text
    assert "(about 0.5 s each on this server)" in text


# ----------------------------------------------------------------------------- the probe's period

def fake(n_ctx, vocab_size):
    return types.SimpleNamespace(config=types.SimpleNamespace(n_ctx=n_ctx, vocab_size=vocab_size))


class Readable:
    def __init__(self, ids):
        self.ids = ids

    def readable_ids(self):
        return self.ids


def test_model_period_is_50_or_what_context_and_drawable_tokens_allow():
    assert model_period(fake(128, 65)) == 50               # the shipped model: 50 characters twice
    assert model_period(fake(16, 65)) == 8                 # two copies must fit in 16 positions
    assert model_period(fake(128, 20)) == 20               # no more distinct tokens than the vocabulary
    assert model_period(fake(1024, 50257), Readable(list(range(30)))) == 30  # a BPE: its readable tokens
    assert model_period(fake(1024, 50257), Readable(None)) == 50  # characters: every id


# ----------------------------------------------------------------------------- tables and phrases

def coloured(styled, color: str) -> set[str]:
    """The cells ('row0_col1', ...) the Styler's CSS paints ``color``: it writes one rule for all cells of a style."""
    css = styled.to_html().split("</style>")[0]
    return {cell for rule in css.split("}") if color in rule for cell in re.findall(r"_(row\d+_col\d+)", rule)}


def test_ranking_table_shows_three_decimals_and_marks_the_largest_rise():
    effects = [HeadEffect(0, 1, 2.5, 1.5), HeadEffect(0, 0, 1.2, 0.25)]
    second = [HeadEffect(0, 0, 3.0, 2.0), HeadEffect(0, 1, 1.0, 0.0)]
    styled = IF.ranking_table(effects, second, np.array([[0.9, 0.1]]))
    assert list(styled.data["head"]) == ["L1 H2", "L1 H1"]
    html = styled.to_html()
    assert "1.500" in html and "0.250" in html and "2.000" in html and "0.900" in html
    assert list(styled.data.columns)[2::2] == ["rise", "second copy: rise"]
    assert coloured(styled, IF.RISE_COLOR) == {"row0_col2", "row1_col4"}  # each rise column's largest


def test_induction_table_marks_every_score_at_or_above_the_threshold():
    scores = np.array([[0.1, THRESHOLD], [0.95, 0.2]])
    styled = IF.induction_table(scores, THRESHOLD)
    assert list(styled.data.index) == ["layer 1", "layer 2"] and list(styled.data.columns) == ["head 1", "head 2"]
    assert coloured(styled, IF.INDUCTION_COLOR) == {"row0_col1", "row1_col0"} and "0.950" in styled.to_html()


def test_phrases():
    assert code_text("a`b``c") == "a'b''c"
    assert nats_than(0.25, "on the first") == "0.250 nats lower than on the first"
    assert nats_than(-0.0004, "x") == "0.000 nats higher than x"
    assert nats_than(0.0, "x") == "0.000 nats lower than x"
