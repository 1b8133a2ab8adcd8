"""core.analysis.interventions: switching heads off, checked against forward passes built independently."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.analysis.interventions import (ablate_heads, check_heads, greedy_continuation, rank_heads, repeat_ids,
                                         repeat_period, token_losses)
from core.analysis.induction import copy_slices
from core.nn.config import ModelConfig
from core.nn.model import Transformer


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=24, d_model=16, n_heads=4, n_layers=2))
    # larger weights than the init so that every head matters visibly
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return m.eval()


@pytest.fixture(scope="module")
def idx():
    return torch.randint(11, (3, 20), generator=torch.Generator().manual_seed(1))


def manual_forward(model, idx, edit):
    """The model's forward written out again from its weights; ``edit(layer, y)`` on (B, h, n, d/h)."""
    c = model.config
    B, n = idx.shape
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:n]
    for layer, block in enumerate(model.blocks):
        u = F.layer_norm(x, (c.d_model,), block.ln1.weight, block.ln1.bias)
        q, k, v = (u @ block.attn.qkv.weight.T).split(c.d_model, dim=2)
        q, k, v = (t.view(B, n, c.n_heads, c.d_head).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / math.sqrt(c.d_head)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        y = edit(layer, s.softmax(-1) @ v)
        x = x + y.transpose(1, 2).reshape(B, n, c.d_model) @ block.attn.out.weight.T
        u = F.layer_norm(x, (c.d_model,), block.ln2.weight, block.ln2.bias)
        x = x + torch.relu(u @ block.mlp.w1.weight.T) @ block.mlp.w2.weight.T
    return F.layer_norm(x, (c.d_model,), model.ln_f.weight, model.ln_f.bias) @ model.head.weight.T


def test_no_heads_is_exactly_the_normal_output(model, idx):
    assert torch.equal(ablate_heads(model, idx, []).logits, model(idx).logits)
    assert torch.equal(ablate_heads(model, idx, [], mode="mean").logits, model(idx).logits)


def test_zeroing_a_whole_layer_equals_a_model_whose_wo_input_is_zero(model, idx):
    heads = [(0, h) for h in range(4)]
    got = ablate_heads(model, idx, heads).logits
    # independent construction: the same weights with W_O of layer 0 set to zero
    other = Transformer(model.config)
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        other.blocks[0].attn.out.weight.zero_()
    torch.testing.assert_close(got, other.eval()(idx).logits)
    assert not torch.allclose(got, model(idx).logits, atol=1e-3)


def test_zeroing_one_head_matches_a_hand_written_forward(model, idx):
    def edit(layer, y):
        if layer == 1:
            y = y.clone()
            y[:, 2] = 0
        return y
    torch.testing.assert_close(ablate_heads(model, idx, [(1, 2)]).logits, manual_forward(model, idx, edit),
                               atol=1e-5, rtol=1e-4)


def test_mean_mode_uses_the_mean_over_batch_and_positions(model, idx):
    means = {}

    def record(layer, y):
        means[layer] = y.mean(dim=(0, 2))
        return y
    manual_forward(model, idx, record)  # the intact run's per-head means

    def edit(layer, y):
        if layer == 0:
            y = y.clone()
            y[:, 1] = means[0][1]
        return y
    got = ablate_heads(model, idx, [(0, 1)], mode="mean").logits
    torch.testing.assert_close(got, manual_forward(model, idx, edit), atol=1e-5, rtol=1e-4)
    zero = ablate_heads(model, idx, [(0, 1)], mode="zero").logits
    assert not torch.allclose(got, zero, atol=1e-4)


def test_bad_heads_and_modes_are_refused(model, idx):
    with pytest.raises(ValueError, match="no head"):
        ablate_heads(model, idx, [(2, 0)])
    with pytest.raises(ValueError, match="no head"):
        ablate_heads(model, idx, [(0, 4)])
    with pytest.raises(ValueError, match="mode"):
        ablate_heads(model, idx, [(0, 0)], mode="half")
    assert check_heads(model.config, [(1, 0), (0, 3), (1, 0)]) == [(0, 3), (1, 0)]


def test_token_losses_and_ranking(model, idx):
    ids = idx[0].tolist()
    base = token_losses(model, ids)
    logits = model(idx[:1]).logits[0, :-1]
    expected = F.cross_entropy(logits, idx[0, 1:], reduction="none")
    torch.testing.assert_close(torch.from_numpy(base).float(), expected, atol=1e-5, rtol=1e-5)
    ranking = rank_heads(model, ids)
    assert len(ranking) == 8 and {(e.layer, e.head) for e in ranking} == {(l, h) for l in range(2) for h in range(4)}
    assert [e.increase for e in ranking] == sorted((e.increase for e in ranking), reverse=True)
    top = ranking[0]
    assert top.loss == pytest.approx(token_losses(model, ids, [(top.layer, top.head)]).mean())
    assert top.increase == pytest.approx(top.loss - base.mean())


def head_means_by_hand(model, idx):
    """Per layer, (h, d/h): each head's output averaged over the batch and positions of the intact hand-written
    forward pass."""
    means = {}

    def record(layer, y):
        means[layer] = y.mean(dim=(0, 2))
        return y
    with torch.no_grad():
        manual_forward(model, idx, record)
    return means


def zero_head(layer_off, head_off):
    """An ``edit`` for manual_forward: head ``head_off`` of layer ``layer_off`` outputs 0 before W_O."""
    def edit(layer, y):
        if layer == layer_off:
            y = y.clone()
            y[:, head_off] = 0
        return y
    return edit


def test_greedy_continuation_with_and_without_heads(model):
    """Each new token is the argmax of the hand-written forward pass over the text so far, with the same heads off;
    a mean ablation keeps the means taken over the prompt for every new token."""
    ids = [1, 2, 3, 4, 5]

    def greedy_by_hand(edit, steps=6):
        seq = list(ids)
        with torch.no_grad():
            for _ in range(steps):
                seq.append(int(manual_forward(model, torch.tensor([seq]), edit)[0, -1].argmax()))
        return seq[len(ids):]

    plain = greedy_continuation(model, ids, 6)
    assert plain == greedy_by_hand(lambda layer, y: y)
    assert greedy_continuation(model, ids, 6, heads=[(1, 2)]) == greedy_by_hand(zero_head(1, 2))
    every = [(l, h) for l in range(2) for h in range(4)]
    off = greedy_continuation(model, ids, 6, heads=every)
    assert off == greedy_by_hand(lambda layer, y: torch.zeros_like(y)) and off != plain
    means = head_means_by_hand(model, torch.tensor([ids]))

    def mean_0_3(layer, y):
        if layer == 0:
            y = y.clone()
            y[:, 3] = means[0][3]  # the prompt's mean, whatever the text has grown to
        return y
    assert greedy_continuation(model, ids, 6, heads=[(0, 3)], mode="mean") == greedy_by_hand(mean_0_3)


def test_repeat_ids():
    assert repeat_ids([1, 2, 3], 24) == ([1, 2, 3, 1, 2, 3], False)
    ids, cut = repeat_ids(list(range(20)), 24)
    assert cut and ids == list(range(8, 20)) * 2 and len(ids) <= 24


def test_repeat_period_finds_exact_repetitions_only():
    assert repeat_period([1, 2, 3, 1, 2, 3]) == 3
    assert repeat_period([1, 2, 1, 2]) == 2
    assert repeat_period([1, 2, 3, 1, 2, 4]) is None
    assert repeat_period([1, 2, 3, 1, 2]) is None  # odd length
    assert repeat_period([5, 5]) is None  # one token written twice: no copy to predict
    assert repeat_period([]) is None


def test_copy_slices_pick_the_predictions_of_each_copy():
    ids = [7, 8, 9, 7, 8, 9]  # T = 3; entry i of the losses predicts ids[i + 1]
    first, second = copy_slices(3)
    targets = list(range(1, len(ids)))  # the token each loss entry predicts
    assert targets[first] == [1, 2]  # first-copy tokens 1..T-1
    assert targets[second] == [4, 5]  # second-copy tokens T+1..2T-1, not token T


def random_model(seed=0, **shape):
    """A model with every parameter random and large enough that every head matters, LayerNorms included."""
    torch.manual_seed(seed)
    m = Transformer(ModelConfig(**shape)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_((1.0 if "ln" in name and name.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
    return m


FAST_SHAPES = [
    dict(vocab_size=11, n_ctx=24, d_model=16, n_heads=4, n_layers=2),
    dict(vocab_size=13, n_ctx=20, d_model=24, n_heads=3, n_layers=3, d_ff=40),
    dict(vocab_size=17, n_ctx=32, d_model=32, n_heads=8, n_layers=3, bias=True, activation="gelu_tanh",
         tie_weights=True),  # GPT-2's kind
    dict(vocab_size=7, n_ctx=8, d_model=8, n_heads=1, n_layers=1),
]


@pytest.mark.parametrize("shape", FAST_SHAPES, ids=lambda s: f"{s['n_layers']}x{s['n_heads']}")
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_batched_head_losses_equal_one_forward_per_head(shape, mode, monkeypatch):
    import core.analysis.interventions as I

    model = random_model(**shape)
    n = shape["n_ctx"] - 1
    ids = torch.randint(shape["vocab_size"], (n,), generator=torch.Generator().manual_seed(2)).tolist()
    monkeypatch.setattr(I, "LOSS_CHUNK", 3 * shape["vocab_size"] * shape["n_heads"])  # a few positions at a time
    base, per_head = I.head_losses(model, ids, mode)
    L, h = shape["n_layers"], shape["n_heads"]
    assert per_head.shape == (L, h, n - 1)
    for l in range(L):  # layer by layer (a page's progress) gives the same rows
        np.testing.assert_allclose(I.layer_head_losses(model, ids, l, mode), per_head[l], atol=1e-6, rtol=0)
    np.testing.assert_allclose(base, token_losses(model, ids), atol=1e-5, rtol=0)
    for l in range(L):
        for k in range(h):  # the old way: one whole forward pass per head
            np.testing.assert_allclose(per_head[l, k], token_losses(model, ids, [(l, k)], mode), atol=1e-5, rtol=0)
    assert np.abs(per_head - base).max() > 1e-2  # switching a head off does change the losses here
    # the ranking from them is the ranking of the one-forward-per-head losses
    second = slice(n // 2, None)
    for positions in (None, second):
        got = rank_heads(model, ids, mode, positions)
        sel = positions or slice(None)
        ref = token_losses(model, ids)[sel].mean()
        old = {(l, k): token_losses(model, ids, [(l, k)], mode)[sel].mean() for l in range(L) for k in range(h)}
        for e in got:
            assert e.loss == pytest.approx(old[e.layer, e.head], abs=1e-5)
            assert e.increase == pytest.approx(old[e.layer, e.head] - ref, abs=1e-5)
        assert [e.increase for e in got] == sorted((e.increase for e in got), reverse=True)


def test_head_losses_cost_matches_counted_flops():
    """The cost in forward passes, against the multiply-adds torch itself counts while the work runs."""
    from torch.utils.flop_counter import FlopCounterMode

    from core.analysis.interventions import head_losses, head_losses_cost

    model = random_model(vocab_size=50, n_ctx=16, d_model=64, n_heads=4, n_layers=3)
    ids = list(range(1, 13))
    with FlopCounterMode(display=False) as one:
        model(torch.tensor([ids]))
    with FlopCounterMode(display=False) as ranked:
        head_losses(model, ids)
    measured = ranked.get_total_flops() / one.get_total_flops()
    assert head_losses_cost(model.config, len(ids)) == pytest.approx(measured, rel=0.05)
    assert 1 + 4 < measured < 1 + 4 * 3  # less than a forward pass per head, more than one per layer


@pytest.mark.parametrize("heads, mode", [((), "zero"), (((0, 1), (1, 3)), "zero"), (((1, 0),), "mean")])
def test_cached_greedy_continuation_equals_the_plain_loop_even_when_the_window_slides(model, heads, mode):
    from core.analysis.interventions import ablation_hooks, head_means

    n_ctx = model.config.n_ctx  # 24
    for ids in ([1, 2, 3, 4, 5], list(range(11)) * 2):  # 5 tokens: fits; 22 tokens: slides after 2 new ones
        prompt = torch.tensor([ids[-n_ctx:]])
        hooks = ablation_hooks(model.config, heads, mode, head_means(model, prompt) if mode == "mean" else None)
        seq = list(ids)
        for _ in range(8):
            with torch.no_grad():
                seq.append(int(model(torch.tensor([seq[-n_ctx:]]), hooks=hooks).logits[0, -1].argmax()))
        assert greedy_continuation(model, ids, 8, heads, mode) == seq[len(ids):]


def test_next_token_probs_are_the_softmax_of_a_forward_with_the_heads_off(model):
    """Against the hand-written forward pass with the head's output zeroed (or set to its mean over the prompt),
    every position, and only the rows asked for, in the order asked."""
    from core.analysis.interventions import next_token_probs

    ids = [1, 4, 2, 8, 5, 7, 3]
    idx = torch.tensor([ids])
    with torch.no_grad():
        want = F.softmax(manual_forward(model, idx, zero_head(0, 2))[0].double(), dim=-1).numpy()  # (7, 11)
        means = head_means_by_hand(model, idx)

        def mean_1_1(layer, y):
            if layer == 1:
                y = y.clone()
                y[:, 1] = means[1][1]
            return y
        want_mean = F.softmax(manual_forward(model, idx, mean_1_1)[0].double(), dim=-1).numpy()
    full = next_token_probs(model, ids, [(0, 2)])
    assert full.shape == (7, 11) and full.dtype == np.float64
    np.testing.assert_allclose(full, want, atol=1e-6, rtol=0)
    np.testing.assert_allclose(next_token_probs(model, ids, [(0, 2)], positions=[6, 2]), want[[6, 2]], atol=1e-6,
                               rtol=0)
    np.testing.assert_allclose(next_token_probs(model, ids, [(1, 1)], "mean", positions=[0, 5]), want_mean[[0, 5]],
                               atol=1e-6, rtol=0)
    assert np.abs(full - next_token_probs(model, ids)).max() > 1e-3  # the head off does change them


def test_head_losses_cost_counts_multiply_adds_by_hand():
    """d = 4, d_ff = 16, m = 10, two layers of two heads, n = 3 tokens. One block on one sequence: at each of the
    3 positions W_Q, W_K, W_V, W_O (4 x 4 each) and W1, W2 (4 x 16): 3 * (64 + 128) = 576; causal attention, query i
    scoring and mixing i + 1 keys of width 4: (1 + 2 + 3) * 2 * 4 = 48; so 624. The output map: 3 * 4 * 10 = 120.
    One forward: 2 * 624 + 120 = 1,368. The ranking: that pass, then layer 0's 2 heads each through both blocks and
    the output map (2 * 1,368), then layer 1's 2 heads through one block and the output map (2 * 744)."""
    from core.analysis.interventions import head_losses_cost

    config = ModelConfig(vocab_size=10, n_ctx=8, d_model=4, n_heads=2, n_layers=2, d_ff=16)
    assert head_losses_cost(config, 3) == pytest.approx((1368 + 2 * 1368 + 2 * 744) / 1368, rel=1e-15)


def test_refusals_say_what_is_wrong(model):
    from core.analysis.interventions import ablation_hooks, head_losses, layer_head_losses

    with pytest.raises(ValueError, match=r"^the model has no head \(2, 0\): layers 0\.\.1, heads 0\.\.3$"):
        check_heads(model.config, [(2, 0)])
    with pytest.raises(ValueError, match=r"^mode must be one of zero, mean \(got 'half'\)$"):
        head_losses(model, [1, 2, 3], "half")
    with pytest.raises(ValueError, match=r"^mode must be one of zero, mean \(got 'half'\)$"):
        ablation_hooks(model.config, [(0, 0)], "half")
    with pytest.raises(ValueError, match=r"^need at least two tokens: one to read and one to predict$"):
        layer_head_losses(model, [1], 0)
    with pytest.raises(ValueError, match=r"^mean ablation needs the heads' mean outputs \(head_means\)$"):
        ablation_hooks(model.config, [(0, 0)], "mean")
    # zero is the default mode, and two tokens are enough: one loss
    [(name, fn)] = ablation_hooks(model.config, [(0, 1)])  # layer 0 alone: layer 1 is left without a hook
    z = torch.ones(1, 3, 4, 4)  # hook_z: (B, n, h, d/h)
    assert name == "blocks.0.attn.hook_z"
    assert fn(z, name)[:, :, 1].abs().sum() == 0 and torch.equal(fn(z, name)[:, :, [0, 2, 3]], z[:, :, [0, 2, 3]])
    assert ablation_hooks(model.config, []) == ablation_hooks(model.config, [], "mean") == []
    base, per_head = head_losses(model, [1, 2])
    assert base.shape == (1,) and per_head.shape == (2, 4, 1)


def test_repeat_ids_for_the_smallest_contexts_and_at_the_boundary():
    assert repeat_ids([1, 2, 3], 2) == ([3, 3], True)  # n_ctx 2: one token written twice
    assert repeat_ids([1, 2, 3], 3) == ([3, 3], True)
    assert repeat_ids([1, 2, 3], 6) == ([1, 2, 3, 1, 2, 3], False)  # exactly half the context: not cut
    assert repeat_ids([1, 2, 3, 4], 6) == ([2, 3, 4, 2, 3, 4], True)


def test_mean_logprob_scores_every_token_from_start_by_hand(model):
    """Against the hand-written forward: the log-softmax of the logits at position t - 1 at token t, averaged over
    t = max(start, 1) .. n-1 (token 0 is predicted from nothing). start=0 used to score the last token alone."""
    from core.analysis.interventions import mean_logprob

    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    with torch.no_grad():
        logp = torch.log_softmax(manual_forward(model, torch.tensor([ids]), lambda l, y: y)[0].double(), -1)  # (n, m)

    def by_hand(start):
        got = [float(logp[t - 1, ids[t]]) for t in range(max(start, 1), len(ids))]
        return sum(got) / len(got)
    for start in (0, 1, 4, len(ids) - 1):
        assert mean_logprob(model, ids, start) == pytest.approx(by_hand(start), abs=1e-5), start
    assert mean_logprob(model, ids, 0) != pytest.approx(by_hand(len(ids) - 1), abs=1e-3)  # not the last token alone
    for bad in (len(ids), -1):
        with pytest.raises(ValueError, match="no token"):
            mean_logprob(model, ids, bad)
