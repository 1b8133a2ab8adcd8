import math

import pytest
import torch

import numpy as np

from core.analysis.sampling import (entropy, generate, next_token_distribution, stream, temperature_softmax, top_k_filter,
                           top_p_filter)

INF = float("inf")


def random_logits(seed=0, shape=(5, 40), scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


@pytest.mark.parametrize("t", [0.0, 1e-4, 1e-2, 0.3, 1.0, 7.0, 1e2, 1e4, INF])
def test_probabilities_sum_to_one_for_every_t(t):
    p = temperature_softmax(random_logits(), t)
    assert torch.isfinite(p).all() and (p >= 0).all()
    assert torch.allclose(p.sum(-1), torch.ones(5), atol=1e-6)


def test_matches_softmax_of_scaled_logits():
    z = random_logits(1)
    for t in (0.5, 1.0, 3.0):
        assert torch.allclose(temperature_softmax(z, t), torch.softmax(z / t, dim=-1), atol=1e-6)


def test_limit_t_to_zero_is_one_hot_on_unique_argmax():
    z = random_logits(2).double()
    one_hot = torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).double()
    assert torch.equal(temperature_softmax(z, 0.0), one_hot)
    gaps = []
    for t in (1.0, 0.1, 0.01, 1e-3):
        gaps.append((temperature_softmax(z, t) - one_hot).abs().max().item())
    assert gaps == sorted(gaps, reverse=True)  # shrinking as T decreases
    assert gaps[-1] < 1e-6
    assert torch.allclose(temperature_softmax(z, 1e-4), one_hot, atol=1e-12)  # no overflow, no NaN


def test_limit_t_to_infinity_is_uniform():
    z = random_logits(3).double()
    m = z.shape[-1]
    uniform = torch.full_like(z, 1 / m)
    gaps = [(temperature_softmax(z, t) - uniform).abs().max().item() for t in (1.0, 10.0, 1e2, 1e4, 1e6)]
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 1e-6
    assert torch.allclose(temperature_softmax(z, INF), uniform)


def test_ties_give_uniform_over_the_tied_maxima():
    z = torch.tensor([1.0, 3.0, -2.0, 3.0, 3.0, 0.5])
    expected = torch.tensor([0, 1, 0, 1, 1, 0]) / 3
    assert torch.allclose(temperature_softmax(z, 0.0), expected)
    assert torch.allclose(temperature_softmax(z, 1e-3), expected, atol=1e-6)


def test_huge_logits_and_minus_infinity():
    z = torch.tensor([1e30, -1e30, 0.0, -INF])
    for t in (1e-4, 1.0, 1e4):
        p = temperature_softmax(z, t)
        assert not torch.isnan(p).any()
        assert p[3] == 0 and math.isclose(p.sum().item(), 1.0, rel_tol=1e-6)
    assert torch.equal(temperature_softmax(torch.tensor([2.0, -INF]), 1e4), torch.tensor([1.0, 0.0]))
    assert torch.allclose(temperature_softmax(torch.tensor([-INF, -INF]), 1.0), torch.tensor([0.5, 0.5]))
    assert torch.allclose(temperature_softmax(torch.tensor([0.0, 5.0, -INF]), INF), torch.tensor([0.5, 0.5, 0.0]))
    # at T = 1 too, a row of all -inf is uniform and a +inf takes everything, also beside an ordinary row
    rows = torch.tensor([[-INF, -INF, -INF], [INF, 0.0, -INF], [0.0, math.log(3.0), -INF]])
    assert torch.allclose(temperature_softmax(rows, 1.0), torch.tensor([[1 / 3] * 3, [1.0, 0.0, 0.0], [0.25, 0.75, 0.0]]))


def test_negative_or_nan_temperature_is_refused():
    with pytest.raises(ValueError, match="temperature"):
        temperature_softmax(torch.zeros(3), -1.0)
    with pytest.raises(ValueError, match="temperature"):
        temperature_softmax(torch.zeros(3), float("nan"))


def test_top_k_keeps_the_k_largest():
    z = torch.tensor([[0.1, 2.0, -1.0, 3.0, 0.5]])
    kept = torch.isfinite(top_k_filter(z, 2))
    assert kept.tolist() == [[False, True, False, True, False]]
    assert torch.equal(top_k_filter(z, 1).argmax(), z.argmax())
    assert torch.isfinite(top_k_filter(z, 1)).sum() == 1
    assert torch.equal(top_k_filter(z, 99), z) and torch.equal(top_k_filter(z, None), z)
    # ties at the boundary are all kept
    assert torch.isfinite(top_k_filter(torch.tensor([1.0, 2.0, 2.0, 0.0]), 1)).tolist() == [False, True, True, False]
    with pytest.raises(ValueError, match="at least 1"):
        top_k_filter(z, 0)


def test_top_p_keeps_the_smallest_set_reaching_p():
    p = torch.tensor([0.5, 0.05, 0.3, 0.15])
    z = p.log()
    kept = lambda q: torch.isfinite(top_p_filter(z, q)).tolist()  # noqa: E731
    assert kept(0.5) == [True, False, False, False]      # the top token alone reaches 0.5
    assert kept(0.6) == [True, False, True, False]       # 0.5 + 0.3
    assert kept(0.8) == [True, False, True, False]
    assert kept(0.81) == [True, False, True, True]
    assert kept(1e-9) == [True, False, False, False]     # p near 0 is greedy
    assert kept(0.0) == [True, False, False, False]
    assert kept(1.0) == [True] * 4
    # random rows: the kept set is a prefix in probability order whose mass reaches p
    zs = random_logits(4)
    for q in (0.1, 0.5, 0.9):
        filt = top_p_filter(zs, q)
        probs = torch.softmax(zs, -1)
        for row, frow in zip(probs, filt):
            keep = torch.isfinite(frow)
            assert row[keep].sum() >= q - 1e-6
            assert row[keep].min() >= row[~keep].max() if (~keep).any() else True
            # dropping the least likely kept token would fall short of q
            assert row[keep].sum() - row[keep].min() < q


def test_next_token_distribution_applies_filters_after_temperature():
    z = random_logits(5, shape=(40,))
    p = next_token_distribution(z, 2.0, top_k=5)
    assert (p > 0).sum() == 5 and math.isclose(p.sum().item(), 1.0, rel_tol=1e-6)
    top5 = torch.topk(z, 5).indices
    assert torch.allclose(p[top5], torch.softmax(z[top5] / 2.0, -1), atol=1e-6)
    assert torch.equal(next_token_distribution(z, 0.0, top_k=3, top_p=0.5), temperature_softmax(z, 0.0))
    assert torch.isfinite(next_token_distribution(z, 1e-4)).all()
    assert torch.allclose(next_token_distribution(z, 1e4), torch.full((40,), 1 / 40), atol=1e-4)


def _textbook_greedy(model, idx, n):
    """The plain loop: re-read the last n_ctx tokens every step, no cache."""
    for _ in range(n):
        logits = model(idx[:, -model.config.n_ctx:]).logits[:, -1]
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)
    return idx


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_greedy_equals_uncached_also_past_n_ctx(tiny_model, seed):
    torch.manual_seed(seed)
    idx = torch.randint(0, 11, (2, 3))
    n_new = 3 * tiny_model.config.n_ctx  # slides far past n_ctx = 16
    cached = generate(tiny_model, idx, n_new, 0.0)
    uncached = torch.cat([idx] + [s.token[:, None] for s in stream(tiny_model, idx, n_new, 0.0, use_cache=False)], 1)
    assert cached.shape == (2, 3 + n_new)
    assert torch.equal(cached, uncached)
    with torch.no_grad():
        assert torch.equal(cached, _textbook_greedy(tiny_model, idx, n_new))


def test_cached_and_uncached_step_probabilities_agree(tiny_model):
    idx = torch.tensor([[1, 2, 3]])
    a = list(stream(tiny_model, idx, 20, 0.0))
    b = list(stream(tiny_model, idx, 20, 0.0, use_cache=False))
    assert [s.window for s in a] == [min(3 + i, 16) for i in range(20)]
    assert [s.slid for s in a] == [3 + i > 16 for i in range(20)]
    for x, y in zip(a, b):
        assert torch.allclose(x.prob, y.prob, atol=1e-5) and torch.equal(x.top_ids, y.top_ids)


def test_sampling_is_reproducible_for_a_seed(tiny_model):
    idx = torch.tensor([[0, 5]])
    runs = [generate(tiny_model, idx, 40, 1.5, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    other = generate(tiny_model, idx, 40, 1.5, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(runs[0], other)


def test_greedy_is_deterministic_and_ignores_the_generator(tiny_model):
    idx = torch.tensor([[4]])
    a = generate(tiny_model, idx, 30, 0.0, generator=torch.Generator().manual_seed(1))
    b = generate(tiny_model, idx, 30, 0.0, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b)


def test_top_k_one_and_tiny_top_p_are_greedy(tiny_model):
    idx = torch.tensor([[3, 1]])
    greedy = generate(tiny_model, idx, 25, 0.0)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(tiny_model, idx, 25, 1.0, top_k=1, generator=g), greedy)
    assert torch.equal(generate(tiny_model, idx, 25, 1.0, top_p=1e-6, generator=g), greedy)


def test_sampled_tokens_stay_in_the_filtered_support(tiny_model):
    idx = torch.tensor([[2]])
    for s in stream(tiny_model, idx, 40, 5.0, top_k=3, generator=torch.Generator().manual_seed(3)):
        assert s.token.item() in s.top_ids[0, :3].tolist()
        assert s.sample_prob.item() > 0


def test_step_reports_probability_and_alternatives(tiny_model):
    steps = list(stream(tiny_model, [1, 2], 5, 1.0, generator=torch.Generator().manual_seed(0), n_alternatives=4))
    for s in steps:
        assert s.top_ids.shape == (1, 4) and s.top_probs.shape == (1, 4)
        assert (s.top_probs[0, :-1] >= s.top_probs[0, 1:]).all()
        assert 0 < s.prob.item() <= s.top_probs[0, 0].item() + 1e-7


def test_one_dimensional_input_and_bad_input(tiny_model):
    out = generate(tiny_model, [1, 2, 3], 4, 0.0)
    assert out.shape == (7,) and out[:3].tolist() == [1, 2, 3]
    assert generate(tiny_model, [1], 0, 0.0).tolist() == [1]
    with pytest.raises(ValueError, match="at least one token"):
        generate(tiny_model, torch.zeros(1, 0, dtype=torch.long), 3, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        generate(tiny_model, [1], 3, -0.5)


def test_long_prompt_is_windowed(tiny_model):
    idx = torch.randint(0, 11, (1, 40))  # longer than n_ctx = 16
    out = generate(tiny_model, idx, 5, 0.0)
    with torch.no_grad():
        assert torch.equal(out, _textbook_greedy(tiny_model, idx, 5))


def test_rows_with_their_own_temperature_match_one_row_runs():
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    from core.analysis.sampling import generate, stream

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=16, n_heads=2, n_layers=1)).eval()
    prompt = [1, 2, 3]
    temps = [0.0, 0.5, 1.0, 3.0]
    gens = [torch.Generator().manual_seed(7) for _ in temps]
    idx = torch.tensor([prompt] * len(temps))
    rows = torch.stack([s.token for s in stream(model, idx, 30, temps, generator=gens)], dim=1)  # past n_ctx too
    for r, t in enumerate(temps):
        alone = generate(model, torch.tensor([prompt]), 30, t, generator=torch.Generator().manual_seed(7))
        assert rows[r].tolist() == alone[0, len(prompt):].tolist()
    with pytest.raises(ValueError, match="one temperature"):
        next(stream(model, idx, 1, [1.0, 2.0]))


@pytest.mark.parametrize("top_k,top_p", [(None, None), (4, None), (None, 0.8)])
def test_rows_at_their_own_temperatures_equal_one_row_at_a_time(tiny_model, top_k, top_p):
    """stream with one temperature and one generator per row shares the forward passes; each row must still draw
    exactly what a one-row call draws (the page's continuations rely on it), the limits T = 0 and T = inf
    included. The distributions themselves are compared bit for bit with next_token_distribution row by row."""
    from core.analysis.sampling import _row_distributions
    torch.manual_seed(3)
    temps = [0.0, 0.3, 1.0, 2.5, INF, 0.7]
    z = torch.randn(len(temps), 11) * 3
    expected = torch.cat([next_token_distribution(z[r:r + 1], t, top_k, top_p) for r, t in enumerate(temps)])
    assert torch.equal(_row_distributions(z, temps, top_k, top_p), expected)
    idx = torch.tensor([[1, 2, 3]] * len(temps))
    gens = [torch.Generator().manual_seed(7) for _ in temps]
    rows = torch.stack([s.token for s in stream(tiny_model, idx, 30, temps, top_k, top_p, generator=gens)], 1)
    for r, t in enumerate(temps):
        alone = [int(s.token[0]) for s in stream(tiny_model, idx[r:r + 1], 30, t, top_k, top_p,
                                                  generator=torch.Generator().manual_seed(7))]
        assert rows[r].tolist() == alone, f"row {r} (T = {t})"


def test_decoders_stepped_together_draw_what_each_draws_alone(tiny_model):
    """bench.batching's best case of a batching worker: generations of different prompts (and rows) step together,
    the full-window reads of all of them in one forward pass. Each must draw what it draws alone, and a greedy one
    what the textbook loop (the whole window re-read every step, no cache) picks."""
    from bench.batching import step_together
    from core.analysis.sampling import Decoder
    torch.manual_seed(5)
    prompts = [torch.randint(0, 11, (1, n)) for n in (3, 9, 15, 40)]  # n_ctx = 16: short, long and too long
    specs = [(prompts[0], 0.0, None), (prompts[1], 1.0, None), (prompts[2].expand(2, -1), [0.5, 2.0], None),
             (prompts[3], 1.3, 4)]
    def seeds(t):
        return [torch.Generator().manual_seed(11) for _ in t] if isinstance(t, list) else torch.Generator().manual_seed(11)
    together = step_together(tiny_model, [Decoder(tiny_model, p, 25, t, k, generator=seeds(t)) for p, t, k in specs])
    assert sum(s.slid for run in together for s in run) > 50  # most steps re-read a full window, batched
    for (p, t, k), run in zip(specs, together):
        alone = list(stream(tiny_model, p, 25, t, k, generator=seeds(t)))
        assert [s.token.tolist() for s in run] == [s.token.tolist() for s in alone]
        assert all(torch.allclose(a.prob, b.prob, atol=1e-5) for a, b in zip(run, alone))
    with torch.no_grad():
        greedy = _textbook_greedy(tiny_model, prompts[0], 25)[0, 3:]
    assert [int(s.token[0]) for s in together[0]] == greedy.tolist()


@pytest.mark.parametrize("rows", [1, 4])
def test_a_draw_is_what_torch_multinomial_draws(rows):
    """The exponential race the decoder writes out (so rows can share one draw) picks, from the same generator
    state, the very token torch.multinomial picks: over many distributions, with zeros among them."""
    from core.analysis.sampling import _draw
    torch.manual_seed(0)
    for trial in range(300):
        p = torch.softmax(torch.randn(rows, 37) * 4, dim=-1)
        if trial % 3 == 0:
            p[:, : 20] = 0  # tokens a filter removed
            p = p / p.sum(-1, keepdim=True)
        ours, theirs = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        for _ in range(3):  # the generators stay in step too
            assert _draw(p, 1.0, ours).tolist() == torch.multinomial(p, 1, generator=theirs)[:, 0].tolist()


def test_rows_that_share_a_generator_draw_what_one_row_runs_draw(tiny_model):
    """The page's continuations hand one generator to every row: each row must still draw what a one-row run with
    its own generator at the same seed draws (one draw per step serves them all), T = 0 and top-p included."""
    temps = [0.0, 0.5, 1.0, 3.0, INF]
    idx = torch.tensor([[1, 2, 3]] * len(temps))
    for top_p in (None, 0.9):
        shared = torch.Generator().manual_seed(21)
        rows = torch.stack([s.token for s in stream(tiny_model, idx, 30, temps, top_p=top_p,
                                                    generator=[shared] * len(temps))], 1)
        for r, t in enumerate(temps):
            alone = [int(s.token[0]) for s in stream(tiny_model, idx[r:r + 1], 30, t, top_p=top_p,
                                                      generator=torch.Generator().manual_seed(21))]
            assert rows[r].tolist() == alone, f"row {r} (T = {t}, top-p {top_p})"


class TableModel(torch.nn.Module):
    """A model whose logits we write: after token t come the logits rows[t], whatever came before (a bigram model
    by hand), so every distribution a step draws from is known. It records each call: (tokens read, given a cache,
    asked to keep one, asked for the last position only)."""

    def __init__(self, rows, n_ctx):
        from core.nn.config import ModelConfig

        super().__init__()
        self.rows = torch.as_tensor(rows, dtype=torch.float32)  # (m, m)
        m = self.rows.shape[0]
        self.config = ModelConfig(vocab_size=m, n_ctx=n_ctx, d_model=4, n_heads=1, n_layers=1)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # the decoder reads the device off a parameter
        self.calls = []

    def forward(self, idx, past=None, use_cache=False, last_only=False):
        from types import SimpleNamespace

        from core.nn.model import ModelOutput

        self.calls.append((idx.shape[1], past is not None, use_cache, last_only))
        logits = self.rows[idx]  # (B, n, m)
        length = (past.length if past is not None else 0) + idx.shape[1]
        return ModelOutput(logits=logits[:, -1:] if last_only else logits,
                           present=SimpleNamespace(length=length) if use_cache else None)


def softmax_by_hand(z, t=1.0):
    e = [math.exp(v / t) if v != -INF else 0.0 for v in z]
    return [v / sum(e) for v in e]


@pytest.mark.parametrize("how", ["stream", "generate"])
def test_decoding_reads_one_new_token_a_step_until_the_window_slides(how):
    """n_ctx = 8, a prompt of 3: the first step reads the prompt and keeps its keys and values, the next five read
    one token each after the cache (up to 8 positions), then the text outgrows the window and every step re-reads
    the last 8 tokens, keeping no cache; always asking for the last position's logits only."""
    model = TableModel(torch.zeros(5, 5), n_ctx=8)
    run = (lambda **kw: list(stream(model, [0, 1, 2], 10, 0.0, **kw))) if how == "stream" else (
        lambda **kw: generate(model, [0, 1, 2], 10, 0.0, **kw))
    run()
    assert model.calls == [(3, False, True, True)] + [(1, True, True, True)] * 5 + [(8, False, False, True)] * 4
    model.calls.clear()
    run(use_cache=False)  # the textbook loop: the whole window, every step
    assert model.calls == [(n, False, False, True) for n in (3, 4, 5, 6, 7, 8, 8, 8, 8, 8)]


def test_each_step_reports_the_probabilities_of_the_logits_it_was_given():
    """Logits by hand: the model's probabilities at T = 1, the distribution drawn from (T = 2, then top-2), the
    five best alternatives and the window, checked against softmaxes computed here."""
    rows = [[((3 * i + 5 * j) % 8) / 2 - 1 for j in range(8)] for i in range(8)]  # each row: 8 distinct logits
    model = TableModel(rows, n_ctx=4)
    steps = list(stream(model, [0], 6, 2.0, top_k=2, generator=torch.Generator().manual_seed(0)))
    prev = 0
    for n, s in enumerate(steps):
        z = rows[prev]
        model_p = softmax_by_hand(z)
        best2 = sorted(range(8), key=lambda j: -z[j])[:2]
        sample_p = softmax_by_hand([z[j] if j in best2 else -INF for j in range(8)], t=2.0)
        token = int(s.token)
        assert token in best2
        assert float(s.prob) == pytest.approx(model_p[token], rel=1e-6)
        assert float(s.sample_prob) == pytest.approx(sample_p[token], rel=1e-6)
        top = sorted(range(8), key=lambda j: -model_p[j])[:5]  # five alternatives by default
        assert s.top_ids[0].tolist() == top and s.top_probs[0].tolist() == pytest.approx([model_p[j] for j in top])
        assert (s.window, s.slid) == (min(1 + n, 4), 1 + n > 4)
        prev = token
    # no alternatives asked for: tokens, window and slide only
    bare = list(stream(model, [0], 6, 0.0, n_alternatives=0))
    assert all(s.prob is None and s.top_ids is None for s in bare)
    assert [(s.window, s.slid) for s in bare] == [(min(1 + n, 4), 1 + n > 4) for n in range(6)]


def test_a_decoder_by_default_caches_and_reports_five_alternatives():
    """What a scheduler that builds Decoders itself (bench.batching) gets without asking: the key/value cache and
    the five most likely tokens at every step."""
    from core.analysis.sampling import Decoder

    model = TableModel([[((3 * i + 5 * j) % 8) / 2 - 1 for j in range(8)] for i in range(8)], n_ctx=16)
    decoder, steps = Decoder(model, [0, 1], 4, 0.0), []
    while not decoder.done:
        steps.append(decoder.advance(decoder.read(model)))
    assert model.calls == [(2, False, True, True)] + [(1, True, True, True)] * 3
    assert [s.top_ids.shape for s in steps] == [(1, 5)] * 4


def test_greedy_takes_the_first_of_tied_maxima_whatever_the_generator():
    model = TableModel([[0.0, 3.0, 3.0, 1.0]] * 4, n_ctx=16)
    for seed in range(20):
        steps = list(stream(model, [0], 3, 0.0, generator=torch.Generator().manual_seed(seed)))
        assert [int(s.token) for s in steps] == [1, 1, 1]
        assert [float(s.sample_prob) for s in steps] == [0.5] * 3  # T = 0 is uniform over the tied maxima


def test_rows_with_generators_of_their_own_draw_their_own_noise(tiny_model):
    temps = [1.0, 1.0, 1.0]
    idx = torch.tensor([[1, 2, 3]] * 3)
    rows = torch.stack([s.token for s in stream(tiny_model, idx, 20, temps, generator=[
        torch.Generator().manual_seed(seed) for seed in (4, 5, 6)])], 1)
    for r, seed in enumerate((4, 5, 6)):
        alone = generate(tiny_model, idx[r:r + 1], 20, 1.0, generator=torch.Generator().manual_seed(seed))
        assert rows[r].tolist() == alone[0, 3:].tolist()
    assert len({tuple(r) for r in rows.tolist()}) == 3


def test_temperature_softmax_at_every_kind_of_t_and_row():
    z = torch.tensor([1.0, 2.0, 4.0])
    for t in (0.5, 1.0, 2.0, 3.0):
        assert temperature_softmax(z, t).tolist() == pytest.approx(softmax_by_hand(z.tolist(), t), rel=1e-6)
    # integer logits are logits too
    assert temperature_softmax(torch.tensor([1, 2, 4]), 1.0).tolist() == pytest.approx(softmax_by_hand([1, 2, 4]))
    # the limits keep the logits' dtype, as every other T does
    for t in (0.0, 0.5, 1.0, INF):
        assert temperature_softmax(z.double(), t).dtype == torch.float64
    # T = inf: uniform over the finite entries of each row; a row with one finite entry is one-hot, none: uniform
    rows = torch.tensor([[0.0, -INF, -INF], [-INF, -INF, -INF], [5.0, 1.0, -INF]])
    assert temperature_softmax(rows, INF).tolist() == [[1.0, 0.0, 0.0], [pytest.approx(1 / 3)] * 3, [0.5, 0.5, 0.0]]
    thirds = temperature_softmax(torch.tensor([[0.0, 1.0, 2.0], [-INF, -INF, -INF]], dtype=torch.float64), INF)
    assert thirds.tolist() == [[1 / 3] * 3] * 2  # float64 thirds, not float32 ones widened
    # a row with nothing allowed beside ordinary rows, at T = 1 and T = 0.5: the ordinary rows are plain softmaxes,
    # large logits included
    rows = torch.tensor([[-INF, -INF], [1e3, 0.0], [1.0, 3.0]], dtype=torch.float64)
    for t in (1.0, 0.5):
        p = temperature_softmax(rows, t)
        assert p[0].tolist() == [0.5, 0.5] and p[1].tolist() == [1.0, 0.0]
        assert p[2].tolist() == pytest.approx(softmax_by_hand([1.0, 3.0], t), rel=1e-12)


def test_entropy_in_nats_with_zero_log_zero_zero():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0 log 0 is 0, not a log(0) warning
        h = entropy([0.5, 0.5, 0.0])
    assert type(h) is float and h == pytest.approx(math.log(2), rel=1e-15)  # a Python float, not a numpy scalar
    p = np.float32([0.1, 0.2, 0.7])  # float32 in, float64 arithmetic
    assert entropy(p) == pytest.approx(-sum(float(v) * math.log(float(v)) for v in p), rel=1e-14)
    stack = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.25, 0.75], [0.0, 1.0]]])  # (2, 2, 2): over the last axis
    want = [[0.0, math.log(2)], [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 0.0]]
    np.testing.assert_allclose(entropy(stack), want, rtol=1e-15, atol=0)


def test_top_p_refuses_negative_p_and_at_one_keeps_even_the_least_likely():
    z = torch.tensor([0.0, 0.0, -25.0])  # the last token: about 1e-11
    with pytest.raises(ValueError, match=r"top-p must be a number in \[0, 1\], got -0\.1"):
        top_p_filter(z, -0.1)
    for p in (1.0, 1.5):
        assert torch.isfinite(top_p_filter(z, p)).tolist() == [True, True, True]
    # within TOP_P_TOLERANCE of p counts as reaching it: 0.5 reaches 0.5 + 1e-6
    from core.analysis.sampling import TOP_P_TOLERANCE
    assert torch.isfinite(top_p_filter(torch.zeros(2), 0.5 + TOP_P_TOLERANCE)).tolist() == [True, False]


def test_next_token_distribution_keeps_float64_and_handles_the_extremes():
    z = torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)
    p = next_token_distribution(z, 0.7)
    assert p.dtype == torch.float64 and p.tolist() == pytest.approx(softmax_by_hand(z.tolist(), 0.7), rel=1e-12)
    # T = inf: uniform over the allowed tokens, -inf stays impossible
    assert next_token_distribution(torch.tensor([0.0, 1.0, -INF]), INF).tolist() == [0.5, 0.5, 0.0]
    # tiny T on huge logits: the shift comes before the division, so nothing overflows into a tie
    assert next_token_distribution(torch.tensor([1e30, 0.0]), 1e-9).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("temps", [[0.3, 0.7, 2.0], [0.3, INF, 0.0]], ids=["all-plain", "with-limits"])
def test_row_distributions_in_float64_with_filters_equal_one_row_at_a_time(temps):
    from core.analysis.sampling import _row_distributions

    g = torch.Generator().manual_seed(4)
    z = torch.randn(3, 9, generator=g, dtype=torch.float64) * 2
    z[:, 0] = -INF  # a token a previous filter removed
    for top_k, top_p in ((None, None), (3, None), (None, 0.6), (4, 0.9)):
        want = torch.cat([next_token_distribution(z[r:r + 1], t, top_k, top_p) for r, t in enumerate(temps)])
        got = _row_distributions(z, temps, top_k, top_p)
        assert got.dtype == torch.float64 and torch.equal(got, want), (top_k, top_p)


def test_a_float64_draw_is_what_torch_multinomial_draws():
    from core.analysis.sampling import _draw, _draw_rows

    for trial in range(50):
        p = torch.softmax(torch.randn(3, 23, dtype=torch.float64) * 3, dim=-1)
        ours, theirs = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        assert _draw(p, 1.0, ours).tolist() == torch.multinomial(p, 1, generator=theirs)[:, 0].tolist()
        # one row, one generator: the row's draw is the same one-row multinomial draw
        ours, theirs = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        assert _draw_rows(p[:1], [1.0], [ours]).tolist() == torch.multinomial(p[:1], 1, generator=theirs)[:, 0].tolist()


def test_bad_lengths_are_refused_in_words(tiny_model):
    with pytest.raises(ValueError, match=r"^max_new_tokens must be >= 0, got -1$"):
        generate(tiny_model, [1], -1, 0.0)
    with pytest.raises(ValueError, match=r"^generation needs at least one token to start from$"):
        generate(tiny_model, [], 3, 0.0)
    with pytest.raises(ValueError, match=r"^give one temperature \(and one generator\) per row of idx$"):
        next(stream(tiny_model, torch.tensor([[1], [2]]), 1, [1.0]))
