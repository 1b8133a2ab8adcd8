import math

import pytest
import torch

from core.nn.hooks import HookRun
import torch.nn.functional as F

from core.nn.config import ModelConfig
from core.nn.model import Transformer, future_mask
from attention_hooks import attention, attention_and_logits


def test_config_defaults_and_validation():
    cfg = ModelConfig(vocab_size=65, d_model=64)
    assert cfg.d_ff == 256 and cfg.d_head == 16
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        ModelConfig(d_model=64, n_heads=5)
    with pytest.raises(ValueError, match="at least 1"):
        ModelConfig(n_layers=0)
    with pytest.raises(ValueError, match="whole number"):
        ModelConfig(d_model=64.0)


def test_output_names_and_shapes(tiny_model):
    idx = torch.randint(0, 11, (2, 9))
    records, logits = attention_and_logits(tiny_model, idx)
    assert logits.shape == tiny_model(idx).logits.shape == (2, 9, 11)
    assert len(records) == 2
    for rec in records:
        assert rec.scores.shape == (2, 3, 9, 9)
        assert rec.pattern.shape == (2, 3, 9, 9)


def test_every_linear_map_is_bias_free(tiny_model):
    for module in tiny_model.modules():
        if isinstance(module, torch.nn.Linear):
            assert module.bias is None
        if isinstance(module, torch.nn.LayerNorm):
            assert module.weight is not None and module.bias is not None  # scale and shift


def test_causality(tiny_model):
    torch.manual_seed(1)
    idx = torch.randint(0, 11, (1, 12))
    base = tiny_model(idx).logits
    for i in range(11):
        changed = idx.clone()
        changed[0, i + 1:] = torch.randint(0, 11, (11 - i,))
        logits = tiny_model(changed).logits
        assert torch.allclose(logits[0, : i + 1], base[0, : i + 1], atol=1e-5)


def test_pattern_rows_sum_to_one_and_zero_above_diagonal(tiny_model):
    future = future_mask(16)
    for rec in attention(tiny_model, torch.randint(0, 11, (3, 16))):
        assert torch.allclose(rec.pattern.sum(-1), torch.ones(3, 3, 16), atol=1e-6)
        assert (rec.pattern[..., future] == 0).all()
        assert (rec.pattern[..., ~future] > 0).all()


def test_pattern_is_softmax_of_masked_scores(tiny_model):
    for rec in attention(tiny_model, torch.randint(0, 11, (2, 10))):
        expected = F.softmax(rec.scores.masked_fill(future_mask(10), float("-inf")), dim=-1)
        assert torch.allclose(rec.pattern, expected, atol=1e-7)
        # the scores are unmasked: future entries are ordinary finite numbers
        assert torch.isfinite(rec.scores).all()


def test_scores_are_scaled_dot_products(tiny_model):
    idx = torch.randint(0, 11, (1, 7))
    records = attention(tiny_model, idx)
    block = tiny_model.blocks[0]
    x = tiny_model.tok_emb(idx) + tiny_model.pos_emb(torch.arange(7))
    q, k, _ = block.attn.qkv(block.ln1(x)).split(24, dim=2)
    q0, k0 = q[0, :, :8], k[0, :, :8]  # head 0 is the first d/h = 8 columns
    assert torch.allclose(records[0].scores[0, 0], q0 @ k0.T / math.sqrt(8), atol=1e-5)


def test_reading_the_pattern_does_not_change_logits_and_fused_path_agrees(tiny_model):
    idx = torch.randint(0, 11, (4, 16))
    fused = tiny_model(idx).logits                 # scaled_dot_product_attention path
    explicit = attention_and_logits(tiny_model, idx)[1]  # written-out path
    assert torch.allclose(fused, explicit, atol=1e-5)


def test_loss_matches_cross_entropy(tiny_model):
    idx = torch.randint(0, 11, (2, 8))
    tgt = torch.randint(0, 11, (2, 8))
    out = tiny_model(idx, targets=tgt)
    assert torch.isclose(out.loss, F.cross_entropy(out.logits.reshape(-1, 11), tgt.reshape(-1)))
    assert abs(Transformer(tiny_model.config)(idx, targets=tgt).loss.item() - math.log(11)) < 0.2


def test_kv_cache_matches_full_forward(tiny_model):
    idx = torch.randint(0, 11, (1, 12))
    full = tiny_model(idx).logits
    out = tiny_model(idx[:, :5], use_cache=True)
    steps = [out.logits]
    past = out.present
    for t in range(5, 12):
        out = tiny_model(idx[:, t:t + 1], past=past, use_cache=True)
        past = out.present
        steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_too_long_sequence_is_refused(tiny_model):
    with pytest.raises(ValueError, match="longer than the model's context"):
        tiny_model(torch.zeros(1, 17, dtype=torch.long))


def test_kv_cache_is_preallocated_and_grows_in_place(tiny_model):
    from core.nn.model import KVCache

    idx = torch.randint(0, 11, (2, 6))
    out = tiny_model(idx[:, :4], use_cache=True)
    cache = out.present
    assert isinstance(cache, KVCache) and cache.length == 4 and cache.k.shape == (2, 2, 3, 16, 8)
    out2 = tiny_model(idx[:, 4:], past=cache, use_cache=True)
    assert out2.present is cache and cache.length == 6
    k0, v0 = cache[0]
    assert k0.shape == (2, 3, 6, 8)
    full = attention_and_logits(tiny_model, idx)[1]  # the written-out attention
    assert torch.allclose(out2.logits, full[:, 4:], atol=1e-5)
    with pytest.raises(ValueError, match="longer than the model's context"):
        tiny_model(torch.zeros(2, 11, dtype=torch.long), past=cache, use_cache=True)


# ------------------------------------------------------------------ what GPT-2 adds, behind config fields

def test_lecture_defaults_are_unchanged():
    cfg = ModelConfig()
    assert (cfg.bias, cfg.activation, cfg.tie_weights, cfg.ln_eps) == (False, "relu", False, 1e-5)
    model = Transformer(cfg)
    assert model.head.weight is not model.tok_emb.weight
    assert all(m.eps == 1e-5 for m in model.modules() if isinstance(m, torch.nn.LayerNorm))


def test_new_fields_are_validated():
    from core.nn.config import config_problems

    base = ModelConfig().to_dict()
    for field, bad in [("bias", 1), ("tie_weights", "yes"), ("activation", "swish"), ("ln_eps", 0), ("ln_eps", True),
                       ("ln_eps", "1e-5")]:
        assert field in config_problems({**base, field: bad}), (field, bad)
        with pytest.raises(ValueError, match=field):
            ModelConfig(**{**base, field: bad})
    assert config_problems({k: v for k, v in base.items() if k not in ("bias", "activation")}) == {}  # old configs


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_gpt2_style_model_biases_tied_output_and_activation(activation):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=13, n_ctx=10, d_model=16, n_heads=2, n_layers=2, bias=True, activation=activation,
                      tie_weights=True, ln_eps=1e-6)
    model = Transformer(cfg).eval()
    assert model.head.weight is model.tok_emb.weight
    assert model.blocks[0].attn.qkv.bias.shape == (48,) and model.blocks[0].mlp.w2.bias.shape == (16,)
    with torch.no_grad():
        for p in model.parameters():  # non-zero biases and LayerNorm parameters everywhere
            p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, 13, (2, 10))
    fused, explicit = model(idx).logits, attention_and_logits(model, idx)[1]
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)
    # the MLP by hand
    mlp, u = model.blocks[1].mlp, torch.randn(3, 16)
    f = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[activation]
    torch.testing.assert_close(mlp(u), f(u @ mlp.w1.weight.T + mlp.w1.bias) @ mlp.w2.weight.T + mlp.w2.bias)
    # the cache and the full pass agree with biases too
    out = model(idx[:, :4], use_cache=True)
    step = model(idx[:, 4:], past=out.present, use_cache=True)
    torch.testing.assert_close(step.logits, fused[:, 4:], atol=1e-5, rtol=0)


def test_forward_in_steps_matches_the_modules_called_by_hand():
    """embed, blocks_from and readout: the forward pass cut at any block gives what the modules give when called
    one by one (token table + position table, each Block, final LayerNorm, output map), GPT-2's kind included."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=13, n_ctx=10, d_model=16, n_heads=2, n_layers=3, bias=True, activation="gelu_tanh",
                      tie_weights=True)
    model = Transformer(cfg).eval()
    idx = torch.randint(0, 13, (2, 7))
    with torch.no_grad():
        x = model.tok_emb.weight[idx] + model.pos_emb.weight[:7]
        torch.testing.assert_close(model.embed(idx), x)
        torch.testing.assert_close(model.embed(idx[:, 3:], offset=3), x[:, 3:])
        streams = [x]
        for block in model.blocks:
            x = block(x)
            streams.append(x)
        logits = F.layer_norm(x, (16,), model.ln_f.weight, model.ln_f.bias) @ model.tok_emb.weight.T
        torch.testing.assert_close(model.readout(x), logits)
        torch.testing.assert_close(model(idx).logits, logits, atol=1e-5, rtol=0)
        for start in range(4):
            for stop in range(start, 4):
                torch.testing.assert_close(model.blocks_from(streams[start], start, stop), streams[stop])
        full = attention(model, idx)[1]
        run = HookRun(names=["blocks.1.attn.hook_pattern"], record=True)  # block 1 alone, from the stream entering it
        model.blocks_from(streams[1], 1, 2, hooks=run)
        torch.testing.assert_close(run.store["blocks.1.attn.hook_pattern"], full.pattern)


def test_last_only_gives_the_last_rows_of_the_logits(tiny_model):
    idx = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        full = tiny_model(idx).logits
        last = tiny_model(idx, last_only=True).logits
        assert last.shape == (2, 1, 11)
        torch.testing.assert_close(last, full[:, -1:], atol=1e-6, rtol=0)
        out = tiny_model(idx[:, :5], use_cache=True, last_only=True)
        step = tiny_model(idx[:, 5:], past=out.present, use_cache=True, last_only=True)
        torch.testing.assert_close(step.logits, full[:, -1:], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="loss"):
        tiny_model(idx, targets=idx, last_only=True)


@pytest.mark.parametrize("layers", [1, 3])
def test_last_only_skips_work_but_not_the_answer_in_a_gpt2_style_model(layers):
    """last_only computes the last block at the last position only; the logits and the cached keys and values
    must be those of the full pass (biases, GELU, tied output map, one layer and several)."""
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=13, n_ctx=12, d_model=16, n_heads=2, n_layers=layers, bias=True,
                      activation="gelu_tanh", tie_weights=True)
    model = Transformer(cfg).eval()
    for p in model.parameters():  # biases start at zero: give them values, or a bias bug would not show
        p.data.normal_(0, 0.3)
    idx = torch.randint(0, 13, (3, 12))
    with torch.no_grad():
        full = model(idx).logits[:, -1:]
        ref = model(idx[:, :7], use_cache=True).present
        last = model(idx[:, :7], use_cache=True, last_only=True)
        torch.testing.assert_close(last.present[0][0], ref[0][0])  # every position's keys, last layer included
        torch.testing.assert_close(last.present[layers - 1][1], ref[layers - 1][1])
        step = model(idx[:, 7:], past=last.present, use_cache=True, last_only=True)
        torch.testing.assert_close(step.logits, full, atol=1e-5, rtol=0)
        torch.testing.assert_close(model(idx, last_only=True).logits, full, atol=1e-5, rtol=0)


def test_silent_units_count_inputs_of_zero_or_below_for_each_nonlinearity():
    import torch.nn.functional as F

    from core.nn.config import silent_units

    x = torch.tensor([-3.0, -0.5, 0.0, 0.25, 2.0])  # three inputs of 0 or below
    assert silent_units(F.relu(x), "relu") == 3
    assert silent_units(F.gelu(x), "gelu") == 3 and int((F.gelu(x) == 0).sum()) == 1
    assert silent_units(F.gelu(x, approximate="tanh"), "gelu_tanh") == 3


def test_the_mlp_formula_names_the_models_nonlinearity_and_its_biases():
    from core.nn.params import mlp_latex

    relu = ModelConfig()
    gpt2 = ModelConfig(bias=True, activation="gelu_tanh")
    assert "ReLU" in mlp_latex(relu) and "b_1" not in mlp_latex(relu)
    assert r"\operatorname{GELU}_{\tanh}" in mlp_latex(gpt2) and "+ b_1" in mlp_latex(gpt2) and "+ b_2" in mlp_latex(gpt2)
    assert mlp_latex(gpt2, hidden=True).startswith(r"h = \operatorname{GELU}_{\tanh}")
