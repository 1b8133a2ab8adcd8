"""core.analysis.generation's page helpers: the decode loop against a greedy loop written here, the window plan and the
limit table by hand."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import core.analysis.generation as G
import core.analysis.sampling
from core.nn.config import ModelConfig
from core.nn.model import Transformer

CHARS = tuple("abcdefghijk")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=32, d_model=16, n_heads=2, n_layers=2))
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return m.eval()


def greedy_by_hand(model, ids, n):
    """argmax of a full forward pass each step (no key/value cache), with the T = 1 probability of each pick."""
    seq, probs = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            z = model(torch.tensor([seq])).logits[0, -1].double()
            seq.append(int(z.argmax()))
            probs.append(float(F.softmax(z, -1)[seq[-1]]))
    return seq[len(ids):], probs


def test_draw_at_t0_is_greedy_decoding(model):
    ids = [1, 2, 3, 4]
    steps, seconds = G.draw(model, ids, 20, 0.0, seed=5, chars=CHARS)
    want, probs = greedy_by_hand(model, ids, 20)
    assert [s["id"] for s in steps] == want and [s["ch"] for s in steps] == [CHARS[i] for i in want]
    np.testing.assert_allclose([s["prob"] for s in steps], probs, atol=1e-5)
    assert seconds >= 0 and not any(s["slid"] for s in steps)
    top1, _ = G.draw(model, ids, 20, 1.5, top_k=1, seed=9, chars=CHARS)  # top-k = 1 keeps only the argmax
    assert [s["id"] for s in top1] == want


def test_draw_is_reproducible_from_its_seed(model):
    a, _ = G.draw(model, (0, 5), 25, 1.0, seed=3, chars=CHARS)
    b, _ = G.draw(model, [0, 5], 25, 1.0, seed=3, chars=CHARS)
    c, _ = G.draw(model, [0, 5], 25, 1.0, seed=4, chars=CHARS)
    assert [s["id"] for s in a] == [s["id"] for s in b] != [s["id"] for s in c]


def test_draw_repaints_when_repaint_due_says_so(model, monkeypatch):
    monkeypatch.setattr(G, "repaint_due", lambda new, seconds: new >= 10)  # every 10 tokens, whatever the time
    shown = []
    steps, _ = G.draw(model, [1], 35, 0.0, chars=CHARS, repaint=lambda so_far: shown.append(len(so_far)))
    assert shown == [10, 20, 30] and len(steps) == 35


def test_draw_looks_up_the_sampler_when_called(model, monkeypatch):
    """A test replaces core.analysis.sampling.stream to prove that a text is not drawn twice: draw must use that one."""
    def refuse(*a, **k):
        raise RuntimeError("stream called")

    monkeypatch.setattr(core.analysis.sampling, "stream", refuse)
    with pytest.raises(RuntimeError, match="stream called"):
        G.draw(model, [1], 3, 1.0, chars=CHARS)
    with pytest.raises(RuntimeError, match="stream called"):
        G.continuations(model, [1], [0.0, 1.0], 3, 0, CHARS)


def test_window_plan_by_hand():
    def never():
        raise AssertionError("timed although no step slides")

    plan = G.window_plan(10, 20, 128, never)  # 30 tokens fit in 128
    assert (plan.read, plan.new, plan.slid, plan.seconds, plan.cut) == (10, 20, 0, 0.0, False)
    # 100 + 200 tokens in 128: 171 steps re-read the window (the first past it is the 29th new token)
    plan = G.window_plan(100, 200, 128, lambda: 0.1)
    assert (plan.read, plan.new, plan.slid, plan.cut) == (100, 200, 171, False) and plan.seconds == pytest.approx(17.1)
    plan = G.window_plan(100, 200, 128, lambda: 0.1, rows=2)  # two texts side by side: 34.2 s, over 30
    assert (plan.read, plan.new, plan.slid, plan.cut) == (64, 64, 171, True) and plan.seconds == pytest.approx(34.2)
    plan = G.window_plan(100, 200, 128, lambda: 0.5, budget_s=100)  # 85.5 s within a budget of 100
    assert not plan.cut and plan.read == 100


def test_tied_maxima():
    assert G.tied_maxima(torch.tensor([1.0, 3.0, 3.0, 2.0])) == [1, 2]
    assert G.tied_maxima(torch.tensor([0.0, 5.0, 1.0])) == [1]
    assert G.tied_maxima(torch.tensor([-math.inf, 0.0])) == [1]


def test_sweep_table_by_hand():
    z = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)  # p(T = 1) = (1/4, 3/4)
    rows = G.sweep_table(z, [1, 2])
    assert [r["T"] for r in rows] == ["1", "2", "limit T → 0⁺", "limit T → ∞"]
    p2 = np.array([1.0, math.sqrt(3.0)]) / (1 + math.sqrt(3.0))  # e^{z/2}, normalised
    for row, p in zip(rows, (np.array([0.25, 0.75]), p2, np.array([0.0, 1.0]), np.array([0.5, 0.5]))):
        nz = p[p > 0]
        assert row["entropy (nats)"] == pytest.approx(float(-(nz * np.log(nz)).sum()), abs=1e-9)
        assert row["largest probability"] == pytest.approx(p.max(), abs=1e-12)
        assert row["distance to one-hot"] == pytest.approx(1 - p[1], abs=1e-12)       # the argmax is token 1
        assert row["distance to uniform"] == pytest.approx(abs(p[1] - 0.5), abs=1e-12)  # 1/2 sum |p - 1/2|
