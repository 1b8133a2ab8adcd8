"""Contracts between the layers: core/ never needs Streamlit, and the model's output names stay what pages read."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.nn.config import ModelConfig
from core.nn.model import ModelOutput, Transformer

ROOT = Path(__file__).resolve().parent.parent

# Imports every core module in a fresh interpreter, checking after each one whether Streamlit came in with it.
PROBE = """
import importlib, json, sys
pulled = []
for name in sys.argv[1:]:
    importlib.import_module(name)
    if "streamlit" in sys.modules:
        pulled.append(name)
        for key in [k for k in sys.modules if k == "streamlit" or k.startswith("streamlit.")]:
            del sys.modules[key]  # so that the next module is judged on its own imports
print(json.dumps(pulled))
"""


def test_core_never_imports_streamlit():
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "core").rglob("*.py")
                     if p.stem != "__init__")
    assert len(modules) >= 10, modules  # discovered, so a new module is covered without editing this test
    out = subprocess.run([sys.executable, "-c", PROBE, "core", *modules], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    pulled = json.loads(out.stdout.strip().splitlines()[-1])
    assert not pulled, f"these core modules import streamlit (directly or through another module): {pulled}"


def test_each_output_field_holds_what_its_readers_take_it_for():
    """Not a list of names typed again: every field of ModelOutput is read by its name here and checked against a
    computation written out in this test (a field renamed, or one added without a check, fails); so are the two
    attention hook points the pages read, by their names."""
    import math

    import torch.nn.functional as F

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    model = Transformer(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 7))
    B, n, d, dh = 2, 7, cfg.d_model, cfg.d_head
    with torch.no_grad():
        out = model(idx, targets=idx, use_cache=True)
        _, cache = model.run_with_cache(idx, names=["blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern"])
        x = model.tok_emb.weight[idx] + model.pos_emb.weight[:n]         # the stream entering block 0
        u = F.layer_norm(x, (d,), model.blocks[0].ln1.weight, model.blocks[0].ln1.bias)
        q, k, _ = (u @ model.blocks[0].attn.qkv.weight.T).split(d, dim=2)
        q, k = (t.view(B, n, cfg.n_heads, dh).transpose(1, 2) for t in (q, k))  # (B, h, n, d_h)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        filled = out.present.length                     # before the step below, which updates it in place
        nxt = torch.randint(0, cfg.vocab_size, (2, 1))
        stepped = model(nxt, past=out.present, use_cache=True).logits[:, -1]   # one step on the returned cache
        whole = model(torch.cat([idx, nxt], 1)).logits[:, -1]

    def loss():
        assert out.loss == pytest.approx(float(F.cross_entropy(out.logits.reshape(B * n, -1), idx.reshape(-1))))

    def logits():
        torch.testing.assert_close(out.logits, model(idx).logits)
        assert out.logits.shape == (B, n, cfg.vocab_size)

    def present():
        assert filled == n
        torch.testing.assert_close(stepped, whole, atol=1e-5, rtol=1e-5)

    def rec_scores():
        torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"], scores, atol=1e-5, rtol=1e-5)

    def rec_pattern():
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        want = scores.masked_fill(future, float("-inf")).softmax(-1)
        torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], want, atol=1e-6, rtol=1e-5)
    checks = {"logits": logits, "loss": loss, "present": present}
    rec_checks = {"scores": rec_scores, "pattern": rec_pattern}
    assert {f.name for f in dataclasses.fields(ModelOutput)} == set(checks)        # each field has a check below
    for name in checks:
        assert getattr(out, name) is not None, name     # the call above asked for every field
        checks[name]()
    for check in rec_checks.values():
        check()


def test_a_forward_pass_fills_them_with_the_documented_shapes():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    model = Transformer(cfg).eval()
    B, n = 2, 7
    idx = torch.randint(0, cfg.vocab_size, (B, n))
    out = model(idx)
    assert isinstance(out, ModelOutput)
    assert out.logits.shape == (B, n, cfg.vocab_size)  # (B, n, m)
    assert out.loss is None and out.present is None  # no targets, no cache asked for
    _, cache = model.run_with_cache(idx)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    for layer in range(cfg.n_layers):
        scores, pattern = (cache[f"blocks.{layer}.attn.hook_{w}"] for w in ("attn_scores", "pattern"))
        assert scores.shape == pattern.shape == (B, cfg.n_heads, n, n)  # (B, h, n, n)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(B, cfg.n_heads, n))  # rows sum to 1
        assert torch.all(pattern[..., future] == 0)  # nothing on the future
        assert torch.all(scores[..., future] != 0)  # scores are kept before the mask, future included
    with_loss = model(idx, targets=idx, use_cache=True)
    assert with_loss.loss.shape == () and with_loss.present.length == n


def test_the_app_never_imports_transformers():
    """transformers is the reference in tests and benchmarks only; the app reads and writes GPT-2 folders itself."""
    import re

    files = [ROOT / "app.py", *(ROOT / "ui").glob("*.py"), *(ROOT / "pages").glob("*.py"), *(ROOT / "core").rglob("*.py")]
    for path in files:
        assert not re.search(r"^\s*(import|from)\s+transformers\b", path.read_text(), re.M), path
    assert not re.search(r"^transformers\b", (ROOT / "requirements.txt").read_text(), re.M)
