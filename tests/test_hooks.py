"""The one forward's hook points (core.nn.hooks; Transformer.run_with_cache / run_with_hooks): every hook's value
against a float64 forward written out here from the weights alone, for the lecture's shape, a GPT-2-like model (biases,
GELU, tied output map) and every variant of the block; hooks that replace or add; only the names asked for are kept."""
import math

import pytest
import torch
import torch.nn.functional as F

from core.analysis.interventions import ablate_heads
from core.nn.hooks import ActivationCache, HookRun
from core.nn.config import ModelConfig
from core.nn.model import Transformer

BASE = dict(vocab_size=11, n_ctx=12, d_model=16, n_heads=4, n_layers=2)
CONFIGS = {
    "lecture": {},
    "gpt2-like": dict(bias=True, activation="gelu_tanh", tie_weights=True),
    "no-mlp": dict(mlp=False),
    "post-norm": dict(norm="post"),
    "no-ln": dict(norm="none"),
    "no-residual": dict(residual=False),
    "no-w_o": dict(w_o=False),
    "no-positions": dict(positions=False),
    "mask-after-softmax": dict(mask="after_softmax"),
    "no-mask": dict(mask="none"),
}


def _model(extra, seed=0):
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**BASE, **extra)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") and "ln" not in name:
                p.normal_(0, 0.1)  # biases of zero would hide a bias left out
            elif "ln" in name:
                p.add_(torch.randn_like(p) * 0.2)  # LayerNorm's gamma and beta away from 1 and 0
            else:
                p.mul_(4.0)  # a stream that grows, attention that is not flat
    return model


def _lin(x, lin):
    w = lin.weight.double()
    return x @ w.T + (lin.bias.double() if lin.bias is not None else 0.0)


def _act(c, h):
    if c.activation == "relu":
        return torch.relu(h)
    return F.gelu(h, approximate="tanh" if c.activation == "gelu_tanh" else "none")


def hand_hooks(model, idx) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(logits, {hook name: value}) in float64, from the weights, for any variant: written out here, not core's code."""
    c = model.config
    B, n = idx.shape
    d, h, dh = c.d_model, c.n_heads, c.d_head
    out = {}

    def ln(mod, x, name):
        if c.norm == "none":
            return x
        mu = x.mean(-1, keepdim=True)
        sigma = ((x - mu) ** 2).mean(-1, keepdim=True).add(mod.eps).sqrt()
        out[name] = sigma
        return (x - mu) / sigma * mod.weight.double() + mod.bias.double()

    tok = model.tok_emb.weight.double()[idx]
    out["hook_embed"] = tok
    x = tok
    if c.positions:
        out["hook_pos_embed"] = model.pos_emb.weight.double()[:n].expand(B, n, d)
        x = tok + out["hook_pos_embed"]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    for l, block in enumerate(model.blocks):
        p = f"blocks.{l}."
        out[p + "hook_resid_pre"] = x
        u = x if c.norm == "post" else ln(block.ln1, x, p + "ln1.hook_scale")
        qkv = _lin(u, block.attn.qkv)
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(B, n, h, dh) for i in range(3))
        out[p + "attn.hook_q"], out[p + "attn.hook_k"], out[p + "attn.hook_v"] = q, k, v
        s = torch.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(dh)
        out[p + "attn.hook_attn_scores"] = s
        if c.mask == "scores":
            a = torch.softmax(s.masked_fill(future, -math.inf), -1)
        elif c.mask == "after_softmax":
            a = torch.softmax(s, -1).masked_fill(future, 0.0)
        else:
            a = torch.softmax(s, -1)
        out[p + "attn.hook_pattern"] = a
        z = torch.einsum("bhqs,bshk->bqhk", a, v)
        out[p + "attn.hook_z"] = z
        w_o = block.attn.out.weight.double() if c.w_o else torch.eye(d, dtype=torch.float64)
        result = torch.einsum("bqhk,dhk->bqhd", z, w_o.view(d, h, dh))
        out[p + "attn.hook_result"] = result
        attn_out = result.sum(2) + (block.attn.out.bias.double() if c.w_o and c.bias else 0.0)
        out[p + "hook_attn_out"] = attn_out
        x = x + attn_out if c.residual else attn_out
        if c.norm == "post":
            x = ln(block.ln1, x, p + "ln1.hook_scale")
        if c.mlp:
            out[p + "hook_resid_mid"] = x
            u = x if c.norm == "post" else ln(block.ln2, x, p + "ln2.hook_scale")
            out[p + "hook_mlp_in"] = u
            pre = _lin(u, block.mlp.w1)
            out[p + "mlp.hook_pre"] = pre
            out[p + "mlp.hook_post"] = _act(c, pre)
            m = _lin(out[p + "mlp.hook_post"], block.mlp.w2)
            out[p + "hook_mlp_out"] = m
            x = x + m if c.residual else m
            if c.norm == "post":
                x = ln(block.ln2, x, p + "ln2.hook_scale")
        out[p + "hook_resid_post"] = x
    if c.norm == "pre":
        x = ln(model.ln_f, x, "ln_final.hook_scale")
    return x @ model.head.weight.double().T, out


@pytest.fixture(params=list(CONFIGS), scope="module")
def case(request):
    model = _model(CONFIGS[request.param])
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(3))
    return request.param, model, idx


def test_every_hook_equals_the_float64_forward_written_out(case):
    _, model, idx = case
    want_logits, want = hand_hooks(model, idx)
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx)
    assert isinstance(cache, ActivationCache)
    assert sorted(cache) == sorted(want) == sorted(model.hook_names())  # the hooks its block has, no more
    for name, value in want.items():
        torch.testing.assert_close(cache[name].double(), value, atol=2e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(logits.double(), want_logits, atol=2e-4, rtol=1e-4)
    with torch.no_grad():  # and the plain (fused) forward gives the same logits
        torch.testing.assert_close(model(idx).logits, logits, atol=1e-5, rtol=0)


def test_the_names_a_variant_has():
    names = {k: set(_model(v).hook_names()) for k, v in CONFIGS.items()}
    assert "blocks.0.mlp.hook_post" in names["lecture"] and not any(".mlp." in n for n in names["no-mlp"])
    assert "blocks.0.hook_resid_mid" not in names["no-mlp"]
    assert not any("hook_scale" in n for n in names["no-ln"])
    assert "ln_final.hook_scale" in names["lecture"] and "ln_final.hook_scale" not in names["post-norm"]
    assert "hook_pos_embed" not in names["no-positions"]
    order = _model({}).hook_names()  # the order the forward meets them
    assert order.index("blocks.0.ln1.hook_scale") < order.index("blocks.0.attn.hook_q") < order.index(
        "blocks.0.attn.hook_pattern") < order.index("blocks.0.hook_attn_out") < order.index("blocks.0.mlp.hook_pre")
    post = _model(CONFIGS["post-norm"]).hook_names()
    assert post.index("blocks.0.hook_attn_out") < post.index("blocks.0.ln1.hook_scale")  # after the sum


def test_names_keeps_only_what_was_asked_and_a_predicate_works():
    model = _model({})
    idx = torch.randint(0, 11, (1, 7))
    with torch.no_grad():
        _, cache = model.run_with_cache(idx, names=["blocks.1.attn.hook_pattern", "hook_embed"])
        assert sorted(cache) == ["blocks.1.attn.hook_pattern", "hook_embed"]
        with pytest.raises(KeyError, match="not recorded"):
            cache["blocks.0.attn.hook_pattern"]
        with pytest.raises(KeyError, match="no hook"):
            cache["blocks.0.attn.hook_typo"]
        _, cache = model.run_with_cache(idx, names=lambda name: name.endswith("hook_resid_post"))
        assert sorted(cache) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
        with pytest.raises(ValueError, match="no hook 'blocks.0.hook_typo'"):
            model.run_with_cache(idx, names=["blocks.0.hook_typo"])
        with pytest.raises(ValueError, match="no hook"):
            model.run_with_hooks(idx, hooks=[("blocks.9.attn.hook_z", lambda t, name: t)])


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_zeroing_one_heads_z_is_switching_that_head_off(mode):
    model = _model(CONFIGS["gpt2-like"])
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, cache = model.run_with_cache(idx, names=["blocks.1.attn.hook_z"])
        mean = cache["blocks.1.attn.hook_z"][:, :, 2].mean(dim=(0, 1))  # (d_h,) over batch and positions

        def off(z, name):
            z = z.clone()
            z[:, :, 2] = 0.0 if mode == "zero" else mean
            return z
        got = model.run_with_hooks(idx, hooks=[("blocks.1.attn.hook_z", off)])
        torch.testing.assert_close(got, ablate_heads(model, idx, [(1, 2)], mode).logits)
        # and by hand: head 2's write through its columns of W_O taken out of the attention's output
        _, full = model.run_with_cache(idx, names=["blocks.1.hook_attn_out", "blocks.1.attn.hook_result"])
        keep = full["blocks.1.attn.hook_result"][:, :, 2]  # (B, n, d) head 2's write
        w_o = model.blocks[1].attn.w_o_heads()[:, 2]      # (d, d_h)
        new = (mean @ w_o.T) if mode == "mean" else 0.0
        want = model.run_with_hooks(idx, hooks=[("blocks.1.hook_attn_out", lambda t, name: t - keep + new)])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_adding_to_the_stream_equals_running_the_blocks_on_the_sum():
    model = _model({})
    idx = torch.randint(0, 11, (1, 8))
    vec = torch.randn(16)
    with torch.no_grad():
        got = model.run_with_hooks(idx, hooks=[("blocks.1.hook_resid_pre", lambda t, name: t + vec)])
        x = model.blocks_from(model.embed(idx), 0, 1)
        want = model.readout(model.blocks_from(x + vec, 1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_hook_that_returns_none_reads_only_and_a_wrong_shape_is_refused():
    model = _model({})
    idx = torch.randint(0, 11, (1, 6))
    seen = []
    with torch.no_grad():
        logits = model.run_with_hooks(idx, hooks=[("blocks.0.mlp.hook_post", lambda t, name: seen.append(name))])
        torch.testing.assert_close(logits, model(idx).logits, atol=1e-5, rtol=0)
        assert seen == ["blocks.0.mlp.hook_post"]
        with pytest.raises(ValueError, match="must return a tensor of the shape"):
            model.run_with_hooks(idx, hooks=[("blocks.0.hook_attn_out", lambda t, name: t[:, :1])])
        with pytest.raises(TypeError):
            HookRun([("blocks.0.hook_attn_out", "not a function")])


def test_freezing_a_layernorm_scale_changes_the_run_as_the_formula_says():
    """A hook may replace hook_scale; the LayerNorm then divides by the replaced sigma (what a frozen-LayerNorm
    attribution does). Replacing it by itself changes nothing; doubling it halves the normalised stream."""
    model = _model({})
    idx = torch.randint(0, 11, (1, 6))
    with torch.no_grad():
        same = model.run_with_hooks(idx, hooks=[("ln_final.hook_scale", lambda s, name: s.clone())])
        torch.testing.assert_close(same, model(idx).logits, atol=1e-5, rtol=0)
        _, cache = model.run_with_cache(idx, names=["blocks.1.hook_resid_post", "ln_final.hook_scale"])
        x = cache["blocks.1.hook_resid_post"]
        ln = model.ln_f
        want = model.head(((x - x.mean(-1, keepdim=True)) / (2 * cache["ln_final.hook_scale"])) * ln.weight + ln.bias)
        got = model.run_with_hooks(idx, hooks=[("ln_final.hook_scale", lambda s, name: 2 * s)])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_hooks_run_with_the_kv_cache_as_without():
    """Generation with a head switched off through its hook: cached decoding equals the whole prompt run again."""
    model = _model({})
    ids = torch.randint(0, 11, (1, 8))
    off = [("blocks.0.attn.hook_z", lambda z, name: torch.cat([z[:, :, :1] * 0, z[:, :, 1:]], 2))]
    with torch.no_grad():
        full = model(ids, hooks=off).logits[:, -1]
        first = model(ids[:, :5], hooks=off, use_cache=True)
        out = model(ids[:, 5:], hooks=off, past=first.present, use_cache=True, last_only=True)
    torch.testing.assert_close(out.logits[:, -1], full, atol=1e-5, rtol=1e-5)
