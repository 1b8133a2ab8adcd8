"""core.analysis.trace: every field of one traced forward pass checked against the model's own forward pass (its fused
fast path, its hook_attn_scores, its modules called one by one) or hand-written math, on random models of
several shapes, to 1e-4."""
import math

import numpy as np
import pytest
import torch

from core.nn.hooks import HookRun
import torch.nn.functional as F

from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.analysis.trace import (direct_logit_attribution, lens_logits, lens_stage_names, lens_top, max_trace_tokens, stream_steps,
                        trace, trace_bytes)
from attention_hooks import attention

TOL = dict(atol=1e-4, rtol=0)
SHAPES = [  # (vocab_size, n_ctx, d_model, n_heads, n_layers, d_ff), B, n
    ((11, 16, 24, 3, 2, None), 2, 9),
    ((7, 8, 8, 1, 1, None), 1, 8),      # one head, one block, a full context
    ((13, 20, 32, 8, 3, 40), 3, 5),     # many narrow heads, an unusual d_ff
    ((65, 12, 16, 2, 4, 16), 1, 1),     # a single position
    ((17, 16, 24, 4, 2, None, dict(bias=True, activation="gelu_tanh", tie_weights=True)), 2, 7),  # GPT-2's kind
]


def random_model(shape, seed=0):
    """A model whose every parameter is random, the LayerNorms' scales and shifts included (the default init
    leaves them at 1 and 0, which would hide a forgotten shift)."""
    torch.manual_seed(seed)
    m, n_ctx, d, h, L, d_ff, *extra = shape
    model = Transformer(ModelConfig(vocab_size=m, n_ctx=n_ctx, d_model=d, n_heads=h, n_layers=L, d_ff=d_ff,
                                    **(extra[0] if extra else {}))).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") and "ln" not in name:  # biases of the linear maps (GPT-2): never zero here
                p.copy_(0.5 * torch.randn_like(p))
            elif "ln" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.5 * torch.randn_like(p))
            else:
                p.mul_(5.0)  # larger weights than at init, so the stream grows and the attention is not flat
    return model


@pytest.fixture(params=SHAPES, ids=lambda s: "x".join(map(str, s[0][2:5])) + f"-B{s[1]}-n{s[2]}")
def case(request):
    shape, B, n = request.param
    model = random_model(shape)
    idx = torch.randint(0, shape[0], (B, n), generator=torch.Generator().manual_seed(1))
    return model, idx, trace(model, idx)


def close(a, b):
    torch.testing.assert_close(a, b, **TOL)


def test_shapes(case):
    model, idx, tr = case
    c, (B, n) = model.config, idx.shape
    h, d, dh, L = c.n_heads, c.d_model, c.d_head, c.n_layers
    assert tr.embed.shape == tr.resid_final.shape == (B, n, d)
    assert len(tr.attn_out) == len(tr.mlp_out) == len(tr.head_out) == len(tr.q) == L
    for l in range(L):
        assert tr.attn_out[l].shape == tr.mlp_out[l].shape == tr.resid_mid[l].shape == (B, n, d)
        assert tr.head_out[l].shape == (B, h, n, d)
        assert tr.q[l].shape == tr.k[l].shape == tr.v[l].shape == tr.z[l].shape == (B, h, n, dh)
        assert tr.mlp_hidden[l].shape == (B, n, c.d_ff)
    assert tr.resid.shape == (L + 1, B, n, d)
    assert lens_logits(model, tr, L).shape == (B, n, c.vocab_size) and tr.logits.shape == (B, n, c.vocab_size)
    assert tr.ln_scale.shape == (B, n)


def test_logits_are_the_models_own(case):
    model, idx, tr = case
    with torch.no_grad():
        close(tr.logits, model(idx).logits)  # the fused fast path


def test_scores_and_pattern_are_the_models_own_and_q_dot_k(case):
    model, idx, tr = case
    with torch.no_grad():
        records = attention(model, idx)
    for l, rec in enumerate(records):
        by_hand = torch.einsum("bhic,bhjc->bhij", tr.q[l], tr.k[l]) / math.sqrt(model.config.d_head)
        close(by_hand, rec.scores)
        close(tr.scores[l], rec.scores)
        close(tr.pattern[l], rec.pattern)
        close(tr.z[l], rec.pattern @ tr.v[l])


def test_q_k_v_are_the_blocks_maps_of_the_normalised_stream(case):
    model, idx, tr = case
    c = model.config
    for l, block in enumerate(model.blocks):
        stream = tr.resid[l]  # what block l reads
        normed = F.layer_norm(stream, (c.d_model,), block.ln1.weight, block.ln1.bias, block.ln1.eps)
        w_q, w_k, w_v = block.attn.qkv.weight.detach().split(c.d_model, dim=0)  # (d, d) each, rows = outputs
        bias = block.attn.qkv.bias
        b_q, b_k, b_v = bias.detach().split(c.d_model) if bias is not None else (0.0, 0.0, 0.0)
        for got, w, b in ((tr.q[l], w_q, b_q), (tr.k[l], w_k, b_k), (tr.v[l], w_v, b_v)):
            flat = normed @ w.T + b  # (B, n, d)
            heads = flat.view(*flat.shape[:2], c.n_heads, c.d_head).transpose(1, 2)
            close(got, heads)


def test_each_head_is_what_the_attention_adds_with_the_other_heads_off(case):
    """head_out[l][:, h] is the attention module's own output when every other head is zeroed before W_O;
    and the heads add up to attn_out, itself the module's output with every head on."""
    model, idx, tr = case
    c = model.config
    with torch.no_grad():
        for l, block in enumerate(model.blocks):
            x = block.ln1(tr.resid[l])
            whole = block.attn(x)
            close(tr.attn_out[l], whole)
            close(tr.head_out[l].sum(1) + tr.attn_bias[l], tr.attn_out[l])
            for h in range(c.n_heads):
                only = torch.zeros(c.n_heads, 1)  # hook_z is (B, n, h, d_h): every head but h zeroed
                only[h] = 1.0
                alone = block.attn(x, hooks=HookRun([("blocks.0.attn.hook_z", lambda z, name: z * only)]))
                close(tr.head_out[l][:, h] + tr.attn_bias[l], alone)  # W_O's bias is added with every head off too


def test_mlp_by_hand(case):
    model, idx, tr = case
    c = model.config
    with torch.no_grad():
        for l, block in enumerate(model.blocks):
            close(tr.resid_mid[l], tr.resid[l] + tr.attn_out[l])
            u = F.layer_norm(tr.resid_mid[l], (c.d_model,), block.ln2.weight, block.ln2.bias, block.ln2.eps)
            b1 = block.mlp.w1.bias if block.mlp.w1.bias is not None else 0.0
            b2 = block.mlp.w2.bias if block.mlp.w2.bias is not None else 0.0
            pre = u @ block.mlp.w1.weight.T + b1
            if c.activation == "relu":
                hidden = torch.clamp(pre, min=0.0)
            else:  # GPT-2's GELU, tanh approximation, written out
                hidden = 0.5 * pre * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre ** 3)))
            close(tr.mlp_hidden[l], hidden)
            close(tr.mlp_out[l], hidden @ block.mlp.w2.weight.T + b2)
            close(tr.mlp_out[l], block.mlp(block.ln2(tr.resid_mid[l])))  # the module itself


def test_stream_is_the_embedding_plus_every_sublayer(case):
    model, idx, tr = case
    n = idx.shape[1]
    with torch.no_grad():
        embed = model.tok_emb.weight[idx] + model.pos_emb.weight[:n]
        close(tr.embed, embed)
        total = embed + sum(tr.attn_out) + sum(tr.mlp_out)
        close(tr.resid_final, total)
        close(tr.resid_final, tr.resid[-1])
        # and that is what the model reads out: its final LayerNorm and output map on it give its logits
        close(model.head(model.ln_f(total)), model(idx).logits)
        x = embed  # block by block, through the model's own Block.forward
        for l, block in enumerate(model.blocks):
            x = block(x)
            close(tr.resid[l + 1], x)


def test_logit_lens_by_hand(case):
    model, idx, tr = case
    c = model.config
    ln = model.ln_f
    with torch.no_grad():
        for stage in range(c.n_layers + 1):
            x = tr.resid[stage]
            mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
            by_hand = ((x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias) @ model.head.weight.T
            close(lens_logits(model, tr, stage), by_hand)
        close(lens_logits(model, tr, c.n_layers), model(idx).logits)
        sigma = torch.sqrt(tr.resid_final.var(-1, unbiased=False) + ln.eps)
        close(tr.ln_scale, 1 / sigma)


def test_attribution_sums_to_the_logit_for_every_position_and_token(case):
    model, idx, tr = case
    c = model.config
    B, n = idx.shape
    with torch.no_grad():
        logits = model(idx).logits.double()
    w_u, beta = model.head.weight.detach().double(), model.ln_f.bias.detach().double()
    constants = []
    for b in range(B):
        for pos in range(n):
            for token in range(c.vocab_size):
                att = direct_logit_attribution(model, tr, token, pos, b)
                # the embedding, every head and MLP, and W_O's bias of each layer when the model has one
                assert len(att.values) == 1 + c.n_layers * (c.n_heads + 1 + int(c.bias))
                assert att.constant == pytest.approx(float(w_u[token] @ beta), abs=1e-6)
                assert att.values.sum() + att.constant == pytest.approx(float(logits[b, pos, token]), abs=1e-4)
                assert att.logit == pytest.approx(float(logits[b, pos, token]), abs=1e-4)
                constants.append(abs(att.constant))
    assert max(constants) > 1e-3  # the shift is random here, so a forgotten constant would be caught


def test_attribution_of_one_writer_by_hand():
    """A writer's bar: the logit's change when that writer's vector is removed from the stream while the
    LayerNorm keeps dividing by the sigma of the whole stream (the frozen scale)."""
    model = random_model((9, 10, 12, 3, 2, None), seed=3)
    idx = torch.tensor([[1, 4, 2, 8, 5, 7]])
    tr = trace(model, idx)
    ln, pos, token = model.ln_f, 5, 2
    with torch.no_grad():
        x = tr.resid_final[0, pos].double()
        sigma = torch.sqrt(x.var(unbiased=False) + ln.eps)

        def logit_with_frozen_sigma(y):
            normed = (y - y.mean()) / sigma * ln.weight.double() + ln.bias.double()
            return float(normed @ model.head.weight[token].double())

        att = direct_logit_attribution(model, tr, token, pos)
        parts = {"embedding": tr.embed[0, pos], "L2 H3": tr.head_out[1][0, 2, pos], "L1 MLP": tr.mlp_out[0][0, pos]}
        for name, part in parts.items():
            expected = logit_with_frozen_sigma(x) - logit_with_frozen_sigma(x - part.double())
            assert att.values[att.names.index(name)] == pytest.approx(expected, abs=1e-6)
    assert att.names == ["embedding", "L1 H1", "L1 H2", "L1 H3", "L1 MLP", "L2 H1", "L2 H2", "L2 H3", "L2 MLP"]


def test_stream_steps_follow_the_stream(case):
    model, idx, tr = case
    pos = idx.shape[1] - 1
    steps = stream_steps(tr, pos)
    assert [s.name for s in steps][:3] == ["embedding", "L1 attention", "L1 MLP"]
    assert len(steps) == 1 + 2 * model.config.n_layers
    stream = np.zeros(model.config.d_model)
    for s in steps:
        stream = stream + s.added
        np.testing.assert_allclose(s.after, stream, atol=1e-4)
    np.testing.assert_allclose(steps[-1].after, tr.resid_final[0, pos].numpy(), atol=1e-4)


def test_lens_top_is_sorted_and_ends_with_the_models_prediction(case):
    model, idx, tr = case
    lens = lens_top(model, tr, k=5)
    L, n = model.config.n_layers, idx.shape[1]
    k = min(5, model.config.vocab_size)
    assert lens.top_ids.shape == lens.top_probs.shape == (L + 1, n, k)
    assert np.all(np.diff(lens.top_probs, axis=-1) <= 0)
    with torch.no_grad():
        p = F.softmax(model(idx).logits[0].double(), -1).numpy()
    np.testing.assert_array_equal(lens.top_ids[-1, :, 0], p.argmax(-1))
    np.testing.assert_allclose(lens.top_probs[-1, :, 0], p.max(-1), atol=1e-6)
    assert lens_stage_names(2) == ["after the embedding", "after block 1", "after block 2"]


def test_trace_leaves_the_model_alone_and_refuses_bad_input():
    model = random_model((11, 16, 24, 3, 2, None))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tr = trace(model, [3, 1, 4, 1, 5])  # a flat list is one sequence
    assert tr.logits.shape == (1, 5, 11)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="empty"):
        trace(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="n_ctx=16"):
        trace(model, torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="vocabulary"):
        direct_logit_attribution(model, tr, 11, 0)
    with pytest.raises(ValueError, match="position"):
        direct_logit_attribution(model, tr, 0, 5)


def test_lens_top_in_small_blocks_equals_one_softmax_over_everything(case, monkeypatch):
    import core.analysis.trace as T

    model, idx, tr = case
    c = model.config
    b = idx.shape[0] - 1
    monkeypatch.setattr(T, "LENS_CHUNK", 2 * c.vocab_size)  # two positions at a time
    lens = lens_top(model, tr, k=3, b=b)
    with torch.no_grad():
        for stage in range(c.n_layers + 1):
            p = F.softmax(model.readout(tr.resid[stage, b]).double(), -1)  # (n, m), all at once
            top = torch.topk(p, min(3, c.vocab_size), -1)
            np.testing.assert_allclose(lens.top_probs[stage], top.values.numpy(), atol=1e-6)
            np.testing.assert_allclose(np.take_along_axis(p.numpy(), lens.top_ids[stage], -1), top.values.numpy(),
                                       atol=1e-6)  # ids of tied probabilities may differ in order, never in value


def test_trace_bytes_counts_every_tensor_a_trace_holds(case):
    model, idx, tr = case
    seen = {}
    for value in vars(tr).values():
        for t in value if isinstance(value, list) else [value]:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()  # views share a storage: once
    B, n = idx.shape
    assert trace_bytes(model.config, n, B) == sum(seen.values())


def test_max_trace_tokens_is_the_longest_that_fits():
    from core.nn.config import MODEL_PRESETS

    small = MODEL_PRESETS["GPT-2 small"]
    n = max_trace_tokens(small, 384 * 2**20)
    assert n % 64 == 0 and trace_bytes(small, n) <= 384 * 2**20 < trace_bytes(small, n + 64)
    assert 128 <= n <= 512  # GPT-2 small: about 1.4 MB a token at a few hundred tokens
    tiny = ModelConfig(vocab_size=65, n_ctx=128, d_model=64, n_heads=4, n_layers=2)
    assert max_trace_tokens(tiny, 384 * 2**20) == 128  # the shipped shape: its whole context
    assert max_trace_tokens(small, 1) == 1


def test_trace_bytes_counts_one_sequence_unless_told():
    model = random_model((11, 16, 24, 3, 2, None))
    tr = trace(model, [3, 1, 4, 1, 5, 9])
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for value in vars(tr).values() for t in (value if isinstance(value, list) else [value])}
    assert trace_bytes(model.config, 6) == sum(held.values())


@pytest.mark.parametrize("shape", [(65, 128, 64, 4, 2, None), (50257, 1024, 768, 12, 12, None), (7, 100, 8, 1, 1, 4)])
def test_max_trace_tokens_is_the_longest_n_within_the_budget_by_brute_force(shape):
    """Against a plain search over every n: the largest n <= n_ctx whose trace fits (at least 1), rounded down to a
    multiple of 64 once it is 64 or more, unless it is the whole context. Budgets right at a trace's size included."""
    m, n_ctx, d, h, L, d_ff = shape
    config = ModelConfig(vocab_size=m, n_ctx=n_ctx, d_model=d, n_heads=h, n_layers=L, d_ff=d_ff)
    sizes = [trace_bytes(config, n) for n in range(1, n_ctx + 1)]
    budgets = {1, sizes[-1], sizes[-1] + 1}
    for n in (1, 2, 7, 63, 64, 65, 100, 127, 128, 129, 500):
        if n <= n_ctx:
            budgets |= {sizes[n - 1] - 1, sizes[n - 1], sizes[n - 1] + 1}
    for budget in sorted(budgets):
        fits = max([n for n in range(1, n_ctx + 1) if sizes[n - 1] <= budget], default=1)
        want = fits if fits < 64 or fits == n_ctx else fits - fits % 64
        got = max_trace_tokens(config, budget)
        assert type(got) is int and got == want, budget


def test_stream_steps_name_each_step_with_its_layer_and_kind():
    model = random_model((11, 16, 24, 3, 2, None))
    tr = trace(model, torch.tensor([[1, 2, 3], [4, 5, 6]]))
    steps = stream_steps(tr, 2, b=1)
    assert [(s.name, s.layer, s.kind) for s in steps] == [
        ("embedding", None, "embed"), ("L1 attention", 0, "attn"), ("L1 MLP", 0, "mlp"),
        ("L2 attention", 1, "attn"), ("L2 MLP", 1, "mlp")]
    np.testing.assert_allclose(steps[0].added, tr.embed[1, 2].numpy(), atol=1e-7)
    np.testing.assert_allclose(steps[3].added, tr.attn_out[1][1, 2].numpy(), atol=1e-7)


def test_lens_accuracy_is_the_share_of_positions_whose_favourite_comes_next():
    from core.analysis.trace import Lens, lens_accuracy

    ids = [4, 2, 7, 2, 9]  # the tokens that come next: 2, 7, 2, 9 (the last position has none)
    top = np.array([[[2, 0], [7, 1], [3, 2], [1, 0], [5, 5]],   # stage 0: right at 0 and 1 of 4 -> 0.5
                    [[2, 0], [7, 1], [2, 2], [9, 0], [0, 0]],   # stage 1: all four right -> 1.0
                    [[0, 2], [0, 7], [0, 2], [0, 9], [9, 9]]])  # stage 2: only second choices right -> 0.0
    lens = Lens(top_ids=top, top_probs=np.zeros(top.shape))
    assert lens_accuracy(lens, ids).tolist() == [0.5, 1.0, 0.0]
