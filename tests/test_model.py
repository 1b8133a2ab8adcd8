import math

import pytest
import torch
import torch.nn.functional as F

from core.model import ModelConfig, Transformer, future_mask


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
    out = tiny_model(idx, return_attn=True)
    assert out.logits.shape == (2, 9, 11)
    assert len(out.attn) == 2
    for rec in out.attn:
        assert rec.scores.shape == (2, 3, 9, 9)
        assert rec.pattern.shape == (2, 3, 9, 9)
    assert tiny_model(idx).attn is None


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
    out = tiny_model(torch.randint(0, 11, (3, 16)), return_attn=True)
    future = future_mask(16)
    for rec in out.attn:
        assert torch.allclose(rec.pattern.sum(-1), torch.ones(3, 3, 16), atol=1e-6)
        assert (rec.pattern[..., future] == 0).all()
        assert (rec.pattern[..., ~future] > 0).all()


def test_pattern_is_softmax_of_masked_scores(tiny_model):
    out = tiny_model(torch.randint(0, 11, (2, 10)), return_attn=True)
    for rec in out.attn:
        expected = F.softmax(rec.scores.masked_fill(future_mask(10), float("-inf")), dim=-1)
        assert torch.allclose(rec.pattern, expected, atol=1e-7)
        # the scores are unmasked: future entries are ordinary finite numbers
        assert torch.isfinite(rec.scores).all()


def test_scores_are_scaled_dot_products(tiny_model):
    idx = torch.randint(0, 11, (1, 7))
    out = tiny_model(idx, return_attn=True)
    block = tiny_model.blocks[0]
    x = tiny_model.tok_emb(idx) + tiny_model.pos_emb(torch.arange(7))
    q, k, _ = block.attn.qkv(block.ln1(x)).split(24, dim=2)
    q0, k0 = q[0, :, :8], k[0, :, :8]  # head 0 is the first d/h = 8 columns
    assert torch.allclose(out.attn[0].scores[0, 0], q0 @ k0.T / math.sqrt(8), atol=1e-5)


def test_return_attn_does_not_change_logits_and_fused_path_agrees(tiny_model):
    idx = torch.randint(0, 11, (4, 16))
    fused = tiny_model(idx).logits                 # scaled_dot_product_attention path
    explicit = tiny_model(idx, return_attn=True).logits  # written-out path
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
    from core.model import KVCache

    idx = torch.randint(0, 11, (2, 6))
    out = tiny_model(idx[:, :4], use_cache=True)
    cache = out.present
    assert isinstance(cache, KVCache) and cache.length == 4 and cache.k.shape == (2, 2, 3, 16, 8)
    out2 = tiny_model(idx[:, 4:], past=cache, use_cache=True)
    assert out2.present is cache and cache.length == 6
    k0, v0 = cache[0]
    assert k0.shape == (2, 3, 6, 8)
    full = tiny_model(idx, return_attn=True)
    assert torch.allclose(out2.logits, full.logits[:, 4:], atol=1e-5)
    with pytest.raises(ValueError, match="longer than the model's context"):
        tiny_model(torch.zeros(2, 11, dtype=torch.long), past=cache, use_cache=True)
