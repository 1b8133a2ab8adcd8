"""Temperatures at the edge of float32 (issue 40): a T so small that it rounds to 0 in the logits' dtype gave 0/0 = NaN
probabilities and a text of line breaks. Below core.analysis.sampling.MIN_TEMPERATURE a T is T = 0 (greedy), above
MAX_TEMPERATURE it is T = inf; every answer here is worked out independently (an argmax, a count of finite logits,
a greedy loop over the plain model)."""
import math

import pytest
import torch

from core.analysis.sampling import (MAX_TEMPERATURE, MIN_TEMPERATURE, effective_temperature, generate,
                                    next_token_distribution, stream, temperature_softmax)

TINY = [1e-300, 1e-100, 1e-46, 1e-45, 1e-40, 1e-38]
HUGE = [1e39, 1e100, 1e300]


def _logits(seed=0, shape=(4, 30)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 3.0


def _one_hot(z):
    return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).to(z.dtype)


def test_the_bounds_are_float32s_smallest_normal_and_largest_number():
    assert MIN_TEMPERATURE == 2.0 ** -126 and MAX_TEMPERATURE == (2 - 2.0 ** -23) * 2.0 ** 127


@pytest.mark.parametrize("t", TINY)
def test_a_tiny_temperature_gives_the_one_hot_of_the_argmax(t):
    z = _logits()
    for p in (temperature_softmax(z, t), next_token_distribution(z, t), next_token_distribution(z, t, top_k=3),
              next_token_distribution(z, t, top_p=0.5), temperature_softmax(z.double(), t)):
        assert torch.isfinite(p).all()
        assert torch.equal(p, _one_hot(z).to(p.dtype))


@pytest.mark.parametrize("t", TINY)
def test_a_tiny_temperature_splits_evenly_over_tied_maxima(t):
    z = torch.tensor([[1.0, 3.0, 3.0, -2.0, 3.0]])
    assert torch.equal(temperature_softmax(z, t), torch.tensor([[0.0, 1 / 3, 1 / 3, 0.0, 1 / 3]]))


@pytest.mark.parametrize("t", HUGE)
def test_a_temperature_beyond_float32_is_uniform_over_the_finite_logits(t):
    z = _logits(1)
    z[:, :7] = -math.inf  # filtered out: -inf / inf was NaN
    p = temperature_softmax(z, t)
    assert torch.isfinite(p).all() and torch.equal(p[:, :7], torch.zeros(4, 7))
    assert torch.allclose(p[:, 7:], torch.full((4, 23), 1 / 23))


def test_the_effective_temperature_names_what_is_used():
    assert [effective_temperature(t) for t in (1e-300, MIN_TEMPERATURE / 2, MIN_TEMPERATURE, 0.7, 1e39)] == [
        0.0, 0.0, MIN_TEMPERATURE, 0.7, math.inf]
    with pytest.raises(ValueError):
        effective_temperature(-1e-300)


def _greedy_by_hand(model, ids, n):
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq[-model.config.n_ctx:]])).logits[0, -1]
            seq.append(int(logits.argmax()))
    return seq


@pytest.mark.parametrize("t", [1e-300, 1e-45])
def test_generating_at_a_tiny_temperature_is_greedy_with_finite_probabilities(tiny_model, t):
    ids = [1, 2, 3, 4]
    gen = torch.Generator().manual_seed(5)
    steps = list(stream(tiny_model, ids, 20, t, generator=gen))  # past n_ctx = 16: the window slides too
    assert [int(s.token) for s in steps] == _greedy_by_hand(tiny_model, ids, 20)[4:]
    assert all(math.isfinite(float(s.sample_prob)) and float(s.sample_prob) == 1.0 for s in steps)
    assert generate(tiny_model, ids, 20, t).tolist() == _greedy_by_hand(tiny_model, ids, 20)
    # one row per temperature (the Generation page's continuations): the tiny one is the greedy row
    rows = generate(tiny_model, torch.tensor([ids, ids]), 20, [t, 0.0], generator=torch.Generator().manual_seed(1))
    assert rows[0].tolist() == rows[1].tolist() == _greedy_by_hand(tiny_model, ids, 20)
