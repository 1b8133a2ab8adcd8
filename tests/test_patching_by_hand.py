"""core.analysis.patching's values, not only its shapes, against the forward written out in tests/hand_forward.py
(from the weights alone, with a hook at every activation): path patching against the edge intervention it stands for,
every head table (q, k, v, z, pattern) and every per-position grid against the patch done by hand, and the residual
grid's stages one by one. Random models with biases (and GPT-2's GELU), in float64."""
import numpy as np
import pytest
import torch

from hand_forward import edge_path, hand_forward, logit_diff, replace_head
from core.analysis import patching as P
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.analysis.patching import (HEAD_KINDS, Metric, patch_head_positions, patch_heads, patch_residual, patch_sublayers,
                           path_patch, path_patch_senders, paths_into)

SHAPES = {  # (shape, seed): seeds whose random model the corruption moves visibly
    "gpt2-like": (dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=3, bias=True,
                       activation="gelu_tanh", tie_weights=True), 3),
    "lecture": (dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=4, n_layers=2), 0),
}
CLEAN = [1, 2, 3, 4, 5, 1, 2, 3]
CORRUPT = [1, 2, 3, 9, 5, 1, 2, 3]   # one token changed, at position 3
TOL = 1e-9                           # float64: the two forwards agree to rounding


@pytest.fixture(scope="module", params=list(SHAPES))
def model(request):
    shape, seed = SHAPES[request.param]
    torch.manual_seed(seed)
    m = Transformer(ModelConfig(**shape)).eval().double()
    with torch.no_grad():
        for p in m.parameters():     # biases and LayerNorm's gain and shift too: nothing sits at its init
            p.normal_(0, 1.0 if p.dim() == 2 else 0.5)
    return m


@pytest.fixture(scope="module")
def runs(model):
    """(the clean run's activations, the share restored of a patched run's logits, the metric): the answer and
    the wrong token are the two whose logits the corruption moves most apart, so that the gap is large."""
    clean_logits, clean = hand_forward(model, CLEAN)
    corrupt_logits, _ = hand_forward(model, CORRUPT)
    moved = clean_logits[-1] - corrupt_logits[-1]
    answer, wrong = int(moved.argmax()), int(moved.argmin())
    m_clean, m_corrupt = logit_diff(clean_logits, answer, wrong), logit_diff(corrupt_logits, answer, wrong)
    assert m_clean - m_corrupt > 0.1          # a gap worth restoring: the shares below are not rounding

    def share(logits):
        return (logit_diff(logits, answer, wrong) - m_corrupt) / (m_clean - m_corrupt)
    return clean, share, Metric(answer, wrong)


def test_the_hand_forward_is_the_model(model):
    with torch.no_grad():
        want = model(torch.tensor([CLEAN])).logits[0]
    assert torch.allclose(hand_forward(model, CLEAN)[0], want, atol=1e-10)


@pytest.mark.parametrize("via", ["q", "k", "v"])
def test_path_patch_is_the_edge_intervention(model, runs, via):
    _, share, metric = runs
    L, h = model.config.n_layers, model.config.n_heads
    sender = (0, 1)
    receivers = [(1, 0)] + ([(L - 1, h - 1)] if L > 2 else [(1, h - 1)])   # in two layers where there are three
    want = share(edge_path(model, CLEAN, CORRUPT, sender, receivers, via))
    assert path_patch(model, CLEAN, CORRUPT, sender, receivers, via, metric) == pytest.approx(want, abs=TOL)
    one = share(edge_path(model, CLEAN, CORRUPT, sender, [(1, 0)], via))
    assert path_patch(model, CLEAN, CORRUPT, sender, [(1, 0)], via, metric) == pytest.approx(one, abs=TOL)
    assert abs(want) > 5e-4 and abs(one) > 5e-4    # the patch moves the measure (not a check that 0 equals 0)


def test_every_sender_at_once_is_each_senders_edge_intervention(model, runs, monkeypatch):
    """path_patch_senders' rows and paths_into's entries: each sender's own edge intervention into one receiver."""
    _, share, metric = runs
    h = model.config.n_heads
    receiver = (model.config.n_layers - 1, 0)
    senders = [(l, r) for l in range(receiver[0]) for r in range(h)]
    want = [share(edge_path(model, CLEAN, CORRUPT, s, [receiver], "k")) for s in senders]
    got = path_patch_senders(model, CLEAN, CORRUPT, senders, [receiver], "k", metric)
    np.testing.assert_allclose(got, want, atol=TOL)
    into = paths_into(model, CLEAN, CORRUPT, receiver, metric)
    assert list(into) == senders and np.allclose(list(into.values()), want, atol=TOL)
    monkeypatch.setattr(P, "PATH_TOKENS", 3 * len(CLEAN))   # batches of three senders: 3 + 1 of the four
    np.testing.assert_allclose(path_patch_senders(model, CLEAN, CORRUPT, senders, [receiver], "k", metric), want,
                               atol=TOL)
    assert paths_into(model, CLEAN, CORRUPT, (0, 1), metric) == {}    # the first layer: no earlier head


@pytest.mark.parametrize("what", HEAD_KINDS)
def test_every_head_table_is_the_patch_done_by_hand(model, runs, what):
    clean, share, metric = runs
    L, h = model.config.n_layers, model.config.n_heads
    want = np.array([[share(hand_forward(model, CORRUPT, replace_head(what, l, r, clean))[0]) for r in range(h)]
                     for l in range(L)])
    np.testing.assert_allclose(patch_heads(model, CLEAN, CORRUPT, metric, what), want, atol=TOL)


@pytest.mark.parametrize("what", HEAD_KINDS)
def test_every_per_position_grid_is_the_patch_done_by_hand(model, runs, what):
    """patch_heads(per_position=True) and patch_head_positions, each against the hand-written patch at one position
    (the query row for q, z and pattern, the key for k and v), not against each other."""
    clean, share, metric = runs
    L, h, n = model.config.n_layers, model.config.n_heads, len(CLEAN)
    want = np.array([[[share(hand_forward(model, CORRUPT, replace_head(what, l, r, clean, p))[0]) for p in range(n)]
                      for r in range(h)] for l in range(L)])
    np.testing.assert_allclose(patch_heads(model, CLEAN, CORRUPT, metric, what, per_position=True), want, atol=TOL)
    for l, r in [(0, h - 1), (L - 1, 0)]:
        np.testing.assert_allclose(patch_head_positions(model, CLEAN, CORRUPT, metric, l, r, what), want[l, r],
                                   atol=TOL)
    assert np.abs(want[:, :, 3:]).max() > 1e-3      # something to find at and after the change


def _at(kind, layer, position, clean):
    def edit(k, l, t):
        if (k, l) != (kind, layer):
            return t
        t = t.clone()
        t[position] = clean[(kind, layer)][position]
        return t
    return edit


def test_residual_stages_and_sublayers_are_the_patch_done_by_hand(model, runs):
    clean, share, metric = runs
    L, n = model.config.n_layers, len(CLEAN)
    want = np.array([[share(hand_forward(model, CORRUPT, _at("resid", s, p, clean))[0]) for p in range(n)]
                     for s in range(L + 1)])
    np.testing.assert_allclose(patch_residual(model, CLEAN, CORRUPT, metric), want, atol=TOL)
    np.testing.assert_allclose(patch_residual(model, CLEAN, CORRUPT, metric, stages=[2, 0]), want[[2, 0]], atol=TOL)
    sub = np.array([[[share(hand_forward(model, CORRUPT, _at(kind, l, p, clean))[0]) for p in range(n)]
                     for kind in ("attn_out", "mlp_out")] for l in range(L)])
    np.testing.assert_allclose(patch_sublayers(model, CLEAN, CORRUPT, metric), sub, atol=TOL)
