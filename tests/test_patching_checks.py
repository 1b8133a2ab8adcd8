"""The patching bugs found by reading (issue 41), each red before its fix: path_patch's default metric, "all others"
named the key's builder, the public functions' checks (lengths, context, identical prompts, heads, i < j), "no
receivers" exactly 0 when the two runs' metrics are equal, and the clean and corrupted runs made once per pair."""
import numpy as np
import pytest
import torch

from core.analysis import patching as P
from core.analysis.circuit import sources_view
from core.nn.config import ModelConfig
from core.nn.model import Transformer

CLEAN = [1, 2, 3, 4, 5, 1, 2, 3]
CORRUPT = [1, 2, 3, 9, 5, 1, 2, 3]


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=12, n_ctx=10, d_model=16, n_heads=2, n_layers=2)).eval()


def test_path_patch_with_its_default_metric_uses_the_pages_default_answers(model):
    want = P.path_patch(model, CLEAN, CORRUPT, (0, 1), [(1, 0)], "k", P.Metric(*P.default_answers(model, CLEAN,
                                                                                                  CORRUPT)))
    assert P.path_patch(model, CLEAN, CORRUPT, (0, 1), [(1, 0)], "k") == pytest.approx(want)


def test_no_receivers_is_zero_even_when_the_two_metrics_are_equal(model):
    same = P.Metric(answer=4, wrong=4)  # answer == wrong: the metric is 0 on both runs, the gap 0
    assert P.path_patch(model, CLEAN, CORRUPT, (0, 1), [], "k", same) == 0.0
    assert list(P.path_patch_senders(model, CLEAN, CORRUPT, [(0, 0), (0, 1)], [], "k", same)) == [0.0, 0.0]


def test_all_others_is_never_named_the_keys_builder():
    """Twelve sources: source 0 adds 1.0 to the score on the key's side, each of the ten smallest 0.3. Cut to the
    largest two, "all others" would sum to 3.0 and read as the builder; the reading is of the whole table."""
    names = [f"s{k}" for k in range(12)]
    table = np.zeros((12, 12))
    table[0, 0] = 1.0
    table[0, 2:] = 0.3
    table[1, 1] = 0.5
    _, rows, cols, reading = sources_view(table, names, k=3)
    assert "all others" in cols
    assert reading.key_builder == "s0" and reading.key_total == pytest.approx(1.0)


def test_the_public_functions_check_their_inputs_in_words(model):
    metric = P.Metric(4, 9)
    with pytest.raises(ValueError, match="same length"):
        P.patch_residual(model, CLEAN, CORRUPT[:-1], metric)
    with pytest.raises(ValueError, match="the two prompts are the same"):
        P.patch_heads(model, CLEAN, CLEAN, metric)
    long = [1] * 11
    with pytest.raises(ValueError, match="more than the model's context of 10"):
        P.patch_sublayers(model, long, [2] + long[1:], metric)
    with pytest.raises(ValueError, match="no head L3 H1"):
        P.patch_head_positions(model, CLEAN, CORRUPT, metric, 2, 0)
    with pytest.raises(ValueError, match="no head L2 H5"):
        P.path_patch(model, CLEAN, CORRUPT, (0, 0), [(1, 4)], "k", metric)
    with pytest.raises(ValueError, match="no head L1 H3"):
        P.score_sources(model, CLEAN, 0, 2, 5, 3)
    with pytest.raises(ValueError, match="0 <= j <= i"):
        P.score_sources(model, CLEAN, 1, 0, 3, 5)


def test_the_two_runs_are_made_once_per_prompt_pair(model, monkeypatch):
    calls = []
    real = P._forward

    def counting(m, idx, subs=None, record=False, **kw):
        calls.append(record and not subs)
        return real(m, idx, subs, record, **kw)

    monkeypatch.setattr(P, "_forward", counting)
    metric = P.Metric(4, 9)
    clean, corrupt = [2, 3, 4, 5, 6, 2, 3, 4], [2, 3, 4, 7, 6, 2, 3, 4]  # a pair no other test ran
    for stage in range(3):
        P.patch_residual(model, clean, corrupt, metric, stages=[stage])
    P.patch_residual(model, clean, corrupt, P.Metric(4, None))  # another metric: the same runs
    assert sum(calls) == 2  # the clean and the corrupted run, once each
    with torch.no_grad():  # weights changed in place: the runs are made again
        model.blocks[0].attn.qkv.weight.mul_(1.5)
    P.patch_residual(model, clean, corrupt, metric, stages=[0])
    assert sum(calls) == 4
