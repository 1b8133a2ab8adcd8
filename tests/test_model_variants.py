"""The switches that take a piece of the lecture's block away (core.nn.model: mlp, residual, norm, w_o, positions,
mask): each forward against a forward written out by hand from the weights, the parameter counts, what a model
without positions cannot see, and old checkpoints."""
import itertools
import json
import math

import pytest
import torch
import torch.nn.functional as F

from core.nn.checkpoint import load_checkpoint
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig, config_problems
from core.nn.model import Transformer
from attention_hooks import attention, attention_and_logits
from core.nn.params import count_parameters, measured_counts, per_block_latex
from core.nn.tokenizer import CharTokenizer

SMALL = dict(vocab_size=11, n_ctx=12, d_model=12, n_heads=3, n_layers=2, d_ff=20)


def hand_forward(w: dict, c: ModelConfig, idx: torch.Tensor) -> torch.Tensor:
    """Logits (B, n, m) from the state dict ``w`` alone, every switch written out in float64."""
    w = {k: v.double() for k, v in w.items()}
    B, n = idx.shape
    d, h = c.d_model, c.n_heads
    dh = d // h

    def ln(x, name):
        if c.norm == "none":
            return x
        mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(var + c.ln_eps) * w[name + ".weight"] + w[name + ".bias"]

    x = w["tok_emb.weight"][idx]                                          # (B, n, d)
    if c.positions:
        x = x + w["pos_emb.weight"][:n]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for l in range(c.n_layers):
        p = f"blocks.{l}."
        u = x if c.norm == "post" else ln(x, p + "ln1")
        qkv = u @ w[p + "attn.qkv.weight"].T                             # (B, n, 3d)
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(B, n, h, dh).transpose(1, 2) for i in range(3))
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)                      # (B, h, n, n)
        if c.mask == "scores":
            a = torch.softmax(s.masked_fill(future, -math.inf), -1)
        elif c.mask == "after_softmax":
            a = torch.softmax(s, -1).masked_fill(future, 0.0)
        else:
            a = torch.softmax(s, -1)
        z = (a @ v).transpose(1, 2).reshape(B, n, d)                     # heads side by side
        out = z @ w[p + "attn.out.weight"].T if c.w_o else z
        x = (x + out) if c.residual else out
        if c.norm == "post":
            x = ln(x, p + "ln1")
        if c.mlp:
            u = x if c.norm == "post" else ln(x, p + "ln2")
            m = F.relu(u @ w[p + "mlp.w1.weight"].T) @ w[p + "mlp.w2.weight"].T
            x = (x + m) if c.residual else m
            if c.norm == "post":
                x = ln(x, p + "ln2")
    if c.norm == "pre":
        x = ln(x, "ln_f")
    return x @ w["head.weight"].T


VARIANTS = [dict(), dict(mlp=False), dict(residual=False), dict(norm="post"), dict(norm="none"), dict(w_o=False),
            dict(positions=False), dict(mask="after_softmax"), dict(mask="none"),
            dict(mlp=False, w_o=False, positions=False, mask="none", norm="none", residual=False)]


@pytest.mark.parametrize("switches", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "lecture")
def test_each_variant_computes_what_its_switches_say(switches):
    torch.manual_seed(3)
    c = ModelConfig(**SMALL, **switches)
    model = Transformer(c).eval().double()  # float64: a disagreement is the code's, not float32 rounding
    with torch.no_grad():  # larger weights than the init, so that each piece visibly matters
        for p in model.parameters():
            p.mul_(8)
    idx = torch.randint(11, (2, 9))
    want = hand_forward(model.state_dict(), c, idx)
    with torch.no_grad():
        for written in (False, True):  # the fused kernels and the written-out weights alike
            got = attention_and_logits(model, idx)[1] if written else model(idx).logits
            assert torch.allclose(got, want, atol=1e-5), (switches, written, (got - want).abs().max())


def test_the_mask_variants_weights():
    torch.manual_seed(0)
    idx = torch.randint(11, (1, 6))
    after = Transformer(ModelConfig(**SMALL, mask="after_softmax")).eval()
    pat = attention(after, idx)[0].pattern[0]       # (h, n, n)
    assert (pat.triu(1) == 0).all()
    # row i keeps only the weight the softmax gave keys 0..i: about (i + 1) / n of it at this near-uniform init
    assert torch.allclose(pat.sum(-1), torch.arange(1, 7).float().div(6).expand(3, 6), atol=0.01)
    assert torch.allclose(pat.sum(-1)[:, -1], torch.ones(3))    # the last row has no future
    none = Transformer(ModelConfig(**SMALL, mask="none")).eval()
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    assert (attention(none, idx)[0].pattern[0][:, future] > 0).all()  # the future is read


def test_parameter_counts_follow_every_combination_of_switches():
    d, ff, n_ctx = 64, 256, 128
    lecture = count_parameters(ModelConfig())["per_block"]
    assert lecture == 49_408
    # each switch alone, by hand: W_O is d², the MLP 2·d·d_ff plus its LayerNorm's 2d, the LayerNorms 4d
    assert count_parameters(ModelConfig(w_o=False))["per_block"] == lecture - d * d
    assert count_parameters(ModelConfig(mlp=False))["per_block"] == lecture - 2 * d * ff - 2 * d
    assert count_parameters(ModelConfig(norm="none"))["per_block"] == lecture - 4 * d
    assert count_parameters(ModelConfig(positions=False))["total"] == count_parameters(ModelConfig())["total"] - n_ctx * d
    assert count_parameters(ModelConfig(norm="post"))["total"] == count_parameters(ModelConfig())["total"] - 2 * d
    # heads at equal width: the attention count has no h in it
    assert {count_parameters(ModelConfig(n_heads=h))["attention"] for h in (1, 2, 4, 8, 16)} == {4 * d * d}
    for mlp, res, norm, w_o, pos, mask, bias in itertools.product(
            (True, False), (True, False), ("pre", "post", "none"), (True, False), (True, False),
            ("scores", "none"), (False, True)):
        if norm == "post" and not res:
            continue
        c = ModelConfig(**SMALL, mlp=mlp, residual=res, norm=norm, w_o=w_o, positions=pos, mask=mask, bias=bias)
        by_formula, counted = count_parameters(c), measured_counts(Transformer(c))
        assert by_formula == {k: counted[k] for k in by_formula}, c.removed()
    assert per_block_latex(ModelConfig(mlp=False)).endswith("= 16{,}512")


def test_without_positions_the_order_before_the_last_token_is_invisible():
    """One layer without positions: the last query reads the earlier tokens as a set, so shuffling them changes
    nothing. Two layers: the first layer's outputs at earlier positions depend on their own prefixes, so order
    leaks in through the mask; without the mask too, the whole output permutes with the input."""
    torch.manual_seed(1)
    idx = torch.randint(11, (1, 10))
    perm = torch.cat([torch.randperm(9), torch.tensor([9])])  # shuffle everything before the last token

    def scaled(**switches):
        model = Transformer(ModelConfig(**{**SMALL, **switches})).eval().double()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(8)
        return model

    with torch.no_grad():
        last = lambda m, x: m(x).logits[0, -1]  # noqa: E731
        bag = scaled(positions=False, n_layers=1)
        assert (last(bag, idx) - last(bag, idx[:, perm])).abs().max() <= 1e-5
        lecture = scaled(n_layers=1)
        assert (last(lecture, idx) - last(lecture, idx[:, perm])).abs().max() > 1e-3
        deep_bag = scaled(positions=False)
        assert (last(deep_bag, idx) - last(deep_bag, idx[:, perm])).abs().max() > 1e-3  # through the prefixes
        free = scaled(positions=False, mask="none")
        full = torch.randperm(10)
        assert torch.allclose(free(idx[:, full]).logits, free(idx).logits[:, full], atol=1e-5)


def test_impossible_combinations_are_refused_in_words():
    problems = config_problems({**SMALL, "norm": "post", "residual": False})
    assert "without the residual" in problems["norm"]
    assert "norm must be one of" in config_problems({**SMALL, "norm": "middle"})["norm"]
    assert "mask must be one of" in config_problems({**SMALL, "mask": "later"})["mask"]
    assert "must be true or false" in config_problems({**SMALL, "mlp": "no"})["mlp"]
    with pytest.raises(ValueError, match="without the residual"):
        ModelConfig(norm="post", residual=False)


def test_a_checkpoint_saved_before_the_switches_loads_as_the_lecture_model(tmp_path):
    tok = CharTokenizer.from_text("abcdefghijk")
    model = Transformer(ModelConfig(**SMALL))
    save_checkpoint(tmp_path / "old", model, tok)
    path = tmp_path / "old" / "config.json"
    data = json.loads(path.read_text())
    for key in ("mlp", "residual", "norm", "w_o", "positions", "mask"):
        del data["model"][key]  # as every folder written before the switches existed
    path.write_text(json.dumps(data))
    loaded, _ = load_checkpoint(tmp_path / "old")
    assert loaded.config.lecture_block and loaded.config == model.config
    idx = torch.randint(11, (1, 8))
    assert torch.allclose(loaded(idx).logits, model.eval()(idx).logits)


def test_a_variant_saves_and_loads_with_only_its_own_tensors(tmp_path):
    tok = CharTokenizer.from_text("abcdefghijk")
    model = Transformer(ModelConfig(**SMALL, mlp=False, w_o=False, positions=False, norm="none"))
    save_checkpoint(tmp_path / "v", model, tok)
    loaded, _ = load_checkpoint(tmp_path / "v")
    assert set(loaded.state_dict()) == set(model.state_dict())
    assert not any(k.startswith("pos_emb") or ".mlp." in k or "attn.out" in k or "ln" in k for k in model.state_dict())
    idx = torch.randint(11, (1, 8))
    assert torch.allclose(loaded(idx).logits, model.eval()(idx).logits)
