"""The precision probe (core.nn.precision) and the SAE's sparse training step (core.features.sparse_code), each
against an independent computation: the dense TopK step's gradients in float64, an fp32 run's loss, a counted
probe."""
import json

import pytest
import torch

from core.analysis.sae import SAE
from core.features import train as T
from core.features.sparse_code import sparse_code
from core.nn import precision as P

SITE = "blocks.0.hook_resid_post"


def test_the_sparse_step_has_the_dense_topk_steps_values_and_gradients():
    g = torch.Generator().manual_seed(0)
    B, d, m, k = 64, 16, 96, 5
    x = torch.randn(B, d, generator=g, dtype=torch.float64)
    ps = [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in ((m, d), (m,), (m, d), (d,))]
    w_enc_t, b_enc, w_dec, b_dec = ps

    def dense():  # the SAE's own TopK forward, every latent computed
        pre = (x - b_dec) @ w_enc_t.t() + b_enc  # (B, m)
        top = pre.topk(k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values)) @ w_dec + b_dec

    def sparse():
        xc = x - b_dec
        with torch.no_grad():
            top = (xc @ w_enc_t.t() + b_enc).topk(k, dim=-1, sorted=False)
        return sparse_code(xc, w_enc_t, b_enc, w_dec, top.indices, top.values)[0] + b_dec

    got = []
    for fn in (dense, sparse):
        for p in ps:
            p.grad = None
        y = fn()
        (y.pow(3).sum() + y.sum()).backward()  # a loss whose gradient differs per element
        got.append([y.detach()] + [p.grad.clone() for p in ps])
    for a, b in zip(*got):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10)


def test_the_sae_starts_with_the_encoder_the_decoders_transpose_and_unit_rows():
    s = T.SAESettings(d_sae=64, k=4, steps=1, batch_size=32)
    sae = SAE(s.config(SITE, 8), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(64))
    torch.testing.assert_close(sae.W_enc, sae.W_dec.t())


def _few_steps(precision: str, steps: int = 30) -> float:
    g = torch.Generator().manual_seed(3)
    acts = torch.randn(4096, 32, generator=g) @ torch.randn(32, 32, generator=g)
    s = T.SAESettings(d_sae=256, k=8, steps=steps, batch_size=512)
    sae = SAE(s.config(SITE, 32), generator=torch.Generator().manual_seed(0))
    w = T._work_tensors(sae)
    opt = torch.optim.Adam(list(w), lr=2e-3)
    var = (acts - acts.mean(0)).pow(2).sum(-1).mean()
    no_dead = torch.zeros(256, dtype=torch.bool)
    for i in range(steps):
        x = acts[i * 128 % 3584:][:512]
        rec, loss, _ = T._topk_losses(sae, w, x, x, var, no_dead, 1, precision)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return rec.item()


def test_bf16_and_fp32_sae_runs_of_a_few_steps_agree_within_one_percent():
    l32, l16 = _few_steps(P.FP32), _few_steps(P.BF16)
    assert l32 < 0.9  # it trained: the loss's unit is the variance
    assert abs(l16 - l32) <= 0.01 * l32, (l32, l16)  # stated tolerance: 1 % of the loss after 30 steps


def test_the_probes_choice_is_recorded_and_reused(tmp_path):
    calls = []

    def probe(precision):
        calls.append(precision)
        return (1.0, 0.5) if precision == P.FP32 else (0.5, 0.501)  # bf16 twice as fast, the same loss

    first = P.choose("shape A", probe, cache_dir=tmp_path, bf16_units=True)
    assert first["precision"] == P.BF16 and first["probed"] and calls == [P.FP32, P.BF16]
    again = P.choose("shape A", probe, cache_dir=tmp_path, bf16_units=True)
    assert again["precision"] == P.BF16 and not again["probed"] and len(calls) == 2  # read, not probed again
    saved = json.loads((tmp_path / P.CACHE_NAME).read_text())
    assert [v["precision"] for k, v in saved.items() if k.endswith("|shape A")] == [P.BF16]
    P.choose("shape B", probe, cache_dir=tmp_path, bf16_units=True)
    assert len(calls) == 4  # another shape is probed on its own


@pytest.mark.parametrize("times, losses, want", [
    ((1.0, 0.5), (0.5, 0.6), P.FP32),    # faster, but the loss moved 20 %
    ((1.0, 0.95), (0.5, 0.5), P.FP32),   # the same loss, not faster enough
    ((1.0, 0.5), (0.5, 0.5), P.BF16),
])
def test_bf16_is_chosen_only_faster_and_at_the_same_loss(times, losses, want):
    def probe(precision):
        i = 0 if precision == P.FP32 else 1
        return times[i], losses[i]
    assert P.choose("s", probe, bf16_units=True)["precision"] == want


def test_a_cpu_without_bf16_units_never_chooses_it_nor_probes(tmp_path, monkeypatch):
    calls = []

    def probe(precision):
        calls.append(precision)
        return (10.0, 0.5) if precision == P.FP32 else (0.1, 0.5)  # bf16 would look 100x faster

    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx2", "fma"})  # the flag check forced off
    assert not P.has_bf16_units()
    out = P.choose("shape", probe, cache_dir=tmp_path)
    assert out["precision"] == P.FP32 and calls == []
    # a choice recorded on a CPU with the units is not read by one without them
    assert P.choose("shape", probe, cache_dir=tmp_path)["precision"] == P.FP32


def test_an_auto_sae_run_records_its_precision_and_probes_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(T, "PROBE_STEPS", 1)
    monkeypatch.setattr(P, "PROBE_SHARE", 100.0)  # a 3-step run may probe (tests/test_precision_runs.py: the rule)
    calls = []
    real = P.choose

    def counted(shape, probe, **kw):
        out = real(shape, probe, **kw)
        calls.append(out["probed"])
        return out
    monkeypatch.setattr(T, "choose", counted)
    acts = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
    s = T.SAESettings(d_sae=64, k=4, steps=3, batch_size=256, precision="auto")
    for _ in range(2):
        sae = SAE(s.config(SITE, 16), generator=torch.Generator().manual_seed(0))
        T.train_on(sae, acts, s)
        assert sae.trained_precision in (P.FP32, P.BF16)
    if P.has_bf16_units():
        assert calls == [True, False]  # probed once, then read from models/precision.json
    else:
        assert calls == [False, False]
    with pytest.raises(ValueError):
        T.SAESettings(precision="bfloat16")  # never bf16 by the setting alone


def _lm_losses(precision: str, steps: int = 6) -> list[float]:
    from core.nn.config import LECTURE
    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer

    g = torch.Generator().manual_seed(0)
    text = "".join(chr(97 + i) for i in torch.randint(20, (6_000,), generator=g).tolist())
    shape = {**LECTURE.to_dict(), "d_model": 32, "n_ctx": 32, "d_ff": 64}
    shape.pop("vocab_size")
    tc = TrainConfig(batch_size=8, steps=steps, seed=0, warmup=1, heads_interval=0, snapshots=0, eval_batches=2)
    tr = Trainer(text, shape, tc)
    tr.precision = precision  # imposed for the comparison (a run's own comes from the probe)
    return [tr.step()["loss"] for _ in range(steps)]


def test_bf16_and_fp32_training_steps_agree_within_one_percent():
    l32, l16 = _lm_losses(P.FP32), _lm_losses(P.BF16)
    assert l32[-1] < l32[0]  # it trained
    assert l16 != l32  # bf16 really ran (its rounding shows)
    for a, b in zip(l32, l16):
        assert abs(a - b) <= 0.01 * a, (l32, l16)  # stated tolerance: 1 % of each step's loss


def test_attention_stays_fp32_under_a_bf16_autocast():
    from core.nn.model import sdpa

    q = torch.randn(1, 2, 5, 4)
    with P.autocast(P.BF16):
        assert torch.nn.functional.linear(q, torch.randn(4, 4)).dtype == torch.bfloat16  # autocast is on
        y = sdpa(q.bfloat16(), q.bfloat16(), q.bfloat16(), is_causal=True)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.nn.functional.scaled_dot_product_attention(
        q.bfloat16().float(), q.bfloat16().float(), q.bfloat16().float(), is_causal=True))


def test_a_trainer_with_auto_records_the_probes_choice(tmp_path, monkeypatch):
    from core.training.trainer import Trainer, training_record

    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(P, "PROBE_SHARE", 100.0)  # a 2-step run may probe (tests/test_precision_runs.py: the rule)
    from core.training.recipes import TrainConfig
    text = "".join(chr(97 + i % 7) for i in range(3_000))
    tc = TrainConfig(batch_size=4, steps=2, seed=0, heads_interval=0, snapshots=0, eval_batches=1)
    shape = {"n_ctx": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}
    tr = Trainer(text, shape, tc, precision="auto")
    assert tr.precision in (P.FP32, P.BF16) and tr.precision_probe["probed"] == P.has_bf16_units()
    tr.step()
    assert training_record(tr, "t", len(text), 1.0)["precision"] == tr.precision
    assert Trainer(text, shape, tc).precision == P.FP32  # the default: fp32, nothing probed
    if P.has_bf16_units():
        assert not Trainer(text, shape, tc, precision="auto").precision_probe["probed"]  # read from the cache
