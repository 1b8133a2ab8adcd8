import math
import random
import threading

import numpy as np
import pytest
import torch

from core.nn.hooks import HookRun
from torch.utils.flop_counter import FlopCounterMode

from core.serve import fmt
from core.analysis import cost
from core.nn.model import MLP, MultiHeadAttention, Transformer
from core.nn.config import ModelConfig
from core.serve.threads import torch_threads
from core.nn.params import (DETAILED_ROWS, build_on_meta, count_module_parameters, count_parameters, heads_sweep,
                         measured_counts, parameter_table)


# ---------------------------------------------------------------- parameters: formula against a real model

def test_every_preset_counts_the_same_on_the_meta_device():
    for name, cfg in cost.preset_configs(ModelConfig()).items():
        model = build_on_meta(cfg)
        assert next(model.parameters()).device.type == "meta", name
        assert measured_counts(model) == {k: v for k, v in count_parameters(cfg).items() if k in measured_counts(model)}
        assert all(row["agree"] for row in parameter_table(model, rows=DETAILED_ROWS)), name


def test_random_shapes_on_the_meta_device():
    rng = random.Random(7)
    for _ in range(30):
        h = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
        cfg = ModelConfig(vocab_size=rng.randint(1, 60_000), n_ctx=rng.randint(1, 4096), d_model=h * rng.randint(1, 256),
                          n_heads=h, n_layers=rng.randint(1, 12), d_ff=rng.randint(1, 8192))
        assert count_module_parameters(build_on_meta(cfg)) == count_parameters(cfg)["total"]


def test_lecture_numbers():
    demo = ModelConfig(**cost.SHAPE_LABELS["lecture demo (d=64, h=4, L=2)"])
    assert count_parameters(demo)["per_block"] == 49_408
    gpt3 = ModelConfig(**cost.SHAPE_LABELS[cost.GPT3])
    d, L = gpt3.d_model, gpt3.n_layers
    assert f"{12 * d * d * L:.2e}" == "1.74e+11"
    assert abs(count_parameters(gpt3)["blocks"] / 1.74e11 - 1) < 0.005
    # counted tensor by tensor, with no memory spent
    assert count_module_parameters(build_on_meta(gpt3)) == count_parameters(gpt3)["total"]


def test_tied_totals_match_the_advertised_sizes():
    # GPT-2 small is advertised at 124M and GPT-3 at 175B; both tie the output map to the embedding
    assert abs(cost.tied_total(ModelConfig(**cost.SHAPE_LABELS["GPT-2 small"])) / 124e6 - 1) < 0.01
    assert abs(cost.tied_total(ModelConfig(**cost.SHAPE_LABELS[cost.GPT3])) / 175e9 - 1) < 0.01


def test_detailed_rows_cover_every_matrix():
    keys = [row[0] for row in DETAILED_ROWS]
    assert keys[:5] == ["W_Q", "W_K", "W_V", "W_O", "attention"] and keys[-1] == "total"
    assert {"W1", "W2", "mlp", "norms", "token_embedding", "position_embedding", "output"} <= set(keys)


def test_heads_change_nothing():
    rows = heads_sweep(ModelConfig(d_model=96, n_heads=4))
    assert len({r["heads h"] for r in rows}) == len(rows) >= 4 and 4 in {r["heads h"] for r in rows}
    assert {r["attention counted"] for r in rows} == {r["attention by formula"] for r in rows} == {4 * 96 * 96}
    assert len({r["block counted"] for r in rows}) == 1


def test_bad_shapes_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="not divisible by n_heads=7"):
        ModelConfig(d_model=64, n_heads=7)
    with pytest.raises(ValueError, match="at least 1"):
        ModelConfig(n_layers=0)
    with pytest.raises(ValueError, match="whole number"):
        cost.attention_memory(0, 64, 4, 2)
    with pytest.raises(ValueError, match="unknown dtype"):
        cost.attention_memory(10, 64, 4, 2, "float13")


# ---------------------------------------------------------------- FLOPs: formulas against brute-force counts

class Counter:
    """Multiplications done by hand in Python loops: the brute-force count."""

    def __init__(self):
        self.mults = 0

    def matmul(self, a, b):  # lists of rows
        out = [[0.0] * len(b[0]) for _ in a]
        for i, row in enumerate(a):
            for j in range(len(b[0])):
                for k in range(len(b)):
                    out[i][j] += row[k] * b[k][j]
                    self.mults += 1
        return out


def brute_force_layer(n, d, h, d_ff):
    rng = random.Random(0)
    rand = lambda r, c: [[rng.random() for _ in range(c)] for _ in range(r)]  # noqa: E731
    x = rand(n, d)
    counts = {}
    c = Counter()
    q, k, v = (c.matmul(x, rand(d, d)) for _ in range(3))
    dh = d // h
    heads = []
    for i in range(h):  # each head sees its own slice of width d/h
        cols = slice(i * dh, (i + 1) * dh)
        qi, ki, vi = ([row[cols] for row in m] for m in (q, k, v))
        heads.append((qi, ki, vi))
    proj = c.mults
    s = Counter()
    scores = [s.matmul(qi, [list(col) for col in zip(*ki)]) for qi, ki, _ in heads]  # (n, d/h) x (d/h, n)
    counts["scores"] = s.mults
    w = Counter()
    outs = [w.matmul(a, vi) for a, (_, _, vi) in zip(scores, heads)]  # (n, n) x (n, d/h)
    counts["weighted_sum"] = w.mults
    concat = [sum((o[r] for o in outs), []) for r in range(n)]
    c.matmul(concat, rand(d, d))  # W_O
    counts["projections"] = c.mults
    assert proj == 3 * n * d * d
    m = Counter()
    m.matmul(m.matmul(x, rand(d, d_ff)), rand(d_ff, d))
    counts["mlp"] = m.mults
    r = Counter()
    hidden = [[0.0] * d]
    W, U = rand(d, d), rand(d, d)
    for t in range(n):  # h_t = tanh(W h_{t-1} + U x_t), one step at a time
        a, b = r.matmul(hidden, W), r.matmul([x[t]], U)
        hidden = [[math.tanh(p + q) for p, q in zip(a[0], b[0])]]
    counts["recurrent"] = r.mults
    return counts


@pytest.mark.parametrize("n,d,h,d_ff", [(1, 2, 1, 3), (5, 6, 2, 10), (7, 8, 4, 32), (4, 9, 3, 5)])
def test_layer_costs_match_a_brute_force_count(n, d, h, d_ff):
    assert cost.layer_costs(n, d, d_ff, h) == brute_force_layer(n, d, h, d_ff)
    # h only divides the work: the same totals with one head
    assert cost.layer_costs(n, d, d_ff, h) == cost.layer_costs(n, d, d_ff)


@pytest.mark.parametrize("n,d,h,d_ff", [(7, 12, 3, 20), (16, 8, 2, 32)])
def test_layer_costs_match_pytorchs_flop_counter_on_the_real_sublayers(n, d, h, d_ff):
    cfg = ModelConfig(d_model=d, n_heads=h, d_ff=d_ff)
    x = torch.randn(1, n, d)
    c = cost.layer_costs(n, d, d_ff, h)
    with FlopCounterMode(display=False) as fc:
        MultiHeadAttention(cfg)(x, hooks=HookRun(names=["blocks.0.attn.hook_pattern"], record=True))  # Q K^T and A V as matmuls
    assert fc.get_total_flops() == 2 * (c["scores"] + c["weighted_sum"] + c["projections"])  # FLOPs = 2 x mults
    with FlopCounterMode(display=False) as fc:
        MLP(cfg)(x)
    assert fc.get_total_flops() == 2 * c["mlp"]


def test_crossover_formulas_against_a_search():
    for d, d_ff in [(64, 256), (8, 32), (12, 7), (768, 3072)]:
        first = lambda cheaper: next(n for n in range(1, 100 * d) if cheaper(n))  # noqa: E731
        assert first(lambda n: cost.quadratic_terms(n, d) >= cost.linear_terms(n, d, d_ff)) == cost.crossover_block(d, d_ff)
        assert first(lambda n: cost.quadratic_terms(n, d) >= cost.layer_costs(n, d, d_ff)["projections"]) \
            == cost.crossover_projections(d)
        assert first(lambda n: cost.quadratic_terms(n, d) >= cost.layer_costs(n, d, d_ff)["recurrent"]) \
            == cost.crossover_recurrent(d)
    assert cost.crossover_block(64, 256) == 6 * 64  # 6d when d_ff = 4d


def test_formulas_take_arrays():
    n = np.array([1.0, 10.0, 100.0])
    assert np.allclose(cost.quadratic_terms(n, 4), 2 * n**2 * 4)
    assert np.allclose(cost.linear_terms(n, 4, 16), 4 * n * 16 + 2 * n * 4 * 16)
    assert cost.local_slope(lambda n: n**2, 10, 1000) == pytest.approx(2)
    assert cost.attention_sublayer(3, 4) == 2 * 9 * 4 + 4 * 3 * 16
    # the sublayer's own slope climbs from 1 towards 2 as n passes 2d
    assert 1.4 < cost.local_slope(lambda n: cost.attention_sublayer(n, 64), 64, 256) < 1.7
    assert cost.local_slope(lambda n: cost.attention_sublayer(n, 64), 4096, 8192) > 1.95


# ---------------------------------------------------------------- memory, 6ND, formatting

def test_lecture_long_context_memory():
    mem = cost.attention_memory(cost.LECTURE_LONG_CONTEXT, 64, 1, 1, "float32")
    assert mem["per_head_layer"] == 10**10 and fmt.latex_sci(mem["per_head_layer"]) == "10^{10}"
    assert mem["weight_bytes"] == 4 * 10**10
    big = cost.attention_memory(1000, 64, 8, 3, "bfloat16")
    assert big["weights"] == 8 * 1000**2 * 3 and big["weight_bytes"] == 2 * big["weights"]
    assert big["stream"] == 1000 * 64 * 3
    assert cost.bytes_per_value("float8 (e4m3)") == 1


def test_gpt3_training_cost_is_3_14e23():
    g = cost.gpt3_example()
    assert f"{g['C']:.2e}" == "3.14e+23"
    assert fmt.latex_sci(g["C"]) == r"3.14 \times 10^{23}"
    assert g["per_token"] == 2 * g["N"]
    assert cost.training_flops(10, 3) == 180 and cost.inference_flops_per_token(5) == 10
    assert cost.attention_flops_per_token(ModelConfig(d_model=8, n_heads=2, n_layers=3), 10) == 4 * 10 * 8 * 3


def test_number_formatting():
    assert fmt.latex_int(49408) == "49{,}408"
    assert fmt.latex_sci(49408) == "49{,}408"
    assert fmt.latex_sci(1.7394e11) == r"1.74 \times 10^{11}"
    assert fmt.latex_sci(9.9999e12) == "10^{13}"
    assert fmt.pretty_sci(3.4e13) == "3.4 × 10¹³" and fmt.pretty_sci(230_912) == "230,912"
    assert fmt.human_bytes(999) == "999 bytes" and fmt.human_bytes(3.2e11) == "320.0 GB"


# ---------------------------------------------------------------- measured timings (no timed assertions)

def test_loglog_slope_recovers_exponents():
    ns = [64, 128, 256, 512]
    assert cost.loglog_slope(ns, [3e-9 * n**2 for n in ns]) == pytest.approx(2)
    assert cost.loglog_slope(ns, [5e-7 * n for n in ns]) == pytest.approx(1)
    with pytest.raises(ValueError):
        cost.loglog_slope([1], [1.0])


def test_time_sublayers_returns_a_sane_measurement():
    torch.manual_seed(0)
    block = Transformer(ModelConfig(d_model=32, n_heads=4, n_layers=1)).eval().blocks[0]
    threads = torch.get_num_threads()
    t = cost.time_sublayers(block.attn, block.mlp, 32, n_start=16, n_max=256, repeats=2, rounds=2)
    assert torch.get_num_threads() == threads  # the measurement leaves the thread count alone
    assert t.ns == [16 * 2**i for i in range(len(t.ns))] and len(t.ns) >= 2
    assert len(t.attention_s) == len(t.mlp_s) == len(t.ns)
    assert all(s > 0 and math.isfinite(s) for s in t.attention_s + t.mlp_s)
    assert math.isfinite(t.attention_slope) and math.isfinite(t.mlp_slope)
    assert t.fit_from in t.ns and t.threads == threads and t.total_s > 0


def test_time_sublayers_leaves_every_threads_count_alone(monkeypatch):
    # torch.set_num_threads sets the calling thread's count and the default every thread started afterwards
    # inherits: in the server, another session's next script run. So the timing must never call it.
    torch.manual_seed(0)
    block = Transformer(ModelConfig(d_model=32, n_heads=4, n_layers=1)).eval().blocks[0]
    started_meanwhile = []

    def attn(x):  # a thread started while the timing runs, as another session's next run would be
        if not started_meanwhile:
            other = threading.Thread(target=lambda: started_meanwhile.append(torch.get_num_threads()))
            other.start()
            other.join()
        return block.attn(x)

    with torch_threads(2):  # the caller's own count, unlike the old default of 1
        calls = []
        set_num_threads = torch.set_num_threads
        monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n) or set_num_threads(n))
        t = cost.time_sublayers(attn, block.mlp, 32, n_start=16, n_max=64, repeats=1, rounds=1)
        monkeypatch.undo()
    assert calls == []
    assert started_meanwhile == [2]
    assert t.threads == 2  # timed with the count the caller already had, and says so


def test_machine_info_names_cores_and_threads():
    info = cost.machine_info()
    assert info["logical_cpus"] >= 1 and info["usable_cpus"] >= 1 and info["torch_threads"] >= 1
    assert isinstance(info["cpu"], str) and info["cpu"]
