"""core.analysis.timing: one forward pass timed on a model whose cost is known (a fake clock it advances itself)."""
import types

import torch

import core.analysis.timing


class Clock:
    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


class SlowModel:
    """Takes exactly 0.25 s of the fake clock per pass and records what it was asked."""

    def __init__(self, clock):
        self.clock, self.calls = clock, []

    def __call__(self, idx, last_only=False):
        self.calls.append((tuple(idx.shape), idx.dtype, int(idx.abs().sum()), last_only, torch.is_grad_enabled(),
                           torch.get_num_threads()))
        self.clock.now += 0.25


def test_forward_seconds_is_the_time_of_one_pass_of_the_asked_shape(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(core.analysis.timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    model = SlowModel(clock)
    threads = torch.get_num_threads()
    assert core.analysis.timing.forward_seconds(model, 3, 7) == 0.25
    assert core.analysis.timing.forward_seconds(model, 1, 128, last_only=True) == 0.25
    assert model.calls == [((3, 7), torch.long, 0, False, False, threads),  # token 0 throughout, no gradients
                           ((1, 128), torch.long, 0, True, False, threads)]
    assert torch.get_num_threads() == threads  # the thread count is left as it was, and was never changed inside


def test_forward_seconds_runs_a_real_model():
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    model = Transformer(ModelConfig(vocab_size=5, n_ctx=8, d_model=8, n_heads=2, n_layers=1)).eval()
    assert core.analysis.timing.forward_seconds(model, 2, 8) > 0
    assert core.analysis.timing.forward_seconds(model, 1, 8, last_only=True) > 0
