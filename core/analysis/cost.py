"""What a transformer costs: multiplications per layer, the n^2 crossover, attention memory, measured
timings of a real model's sublayers, and the 6ND / 2N rules for training and inference.

Costs are counted in multiplications (one multiply-add each), as the lecture counts them; a FLOP count is
twice that, which is where the 2 in "2N per token" comes from. All formulas take n as a number or a
numpy array, so the same function feeds the plot, the crossover and the tests.
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass

import numpy as np
import torch

from core.nn.config import LECTURE, SHAPE_FIELDS, ModelConfig, MODEL_PRESETS
from core.nn.params import count_parameters

# ---------------------------------------------------------------------------------------------- presets

def preset_label(name: str) -> str:
    """How the cost page names a preset of ``core.nn.model.MODEL_PRESETS``."""
    if name == "lecture":
        c = LECTURE
        return f"lecture demo (d={c.d_model}, h={c.n_heads}, L={c.n_layers})"
    return name


# label -> shape, from the one table beside ModelConfig (the shape fields only: biases and tying are set on the page)
SHAPE_LABELS = {preset_label(name): {k: v for k, v in config.to_dict().items() if k in SHAPE_FIELDS}
           for name, config in MODEL_PRESETS.items()}
GPT3 = "GPT-3 175B"
GPT3_TRAINING_TOKENS = 300_000_000_000  # the GPT-3 paper trains every model size on 300 billion tokens
LECTURE_LONG_CONTEXT = 100_000  # the lecture's "modern context window"


def preset_configs(shipped: ModelConfig | None = None, shipped_name: str = "shipped model") -> dict[str, ModelConfig]:
    """Name -> config, the shipped checkpoint's first when it could be read."""
    out = {f"{shipped_name} (shipped)": shipped} if shipped is not None else {}
    out.update({name: ModelConfig(**kw) for name, kw in SHAPE_LABELS.items()})
    return out


def tied_total(config: ModelConfig) -> int:
    """Total when the output map reuses the token embedding's matrix, as GPT-2 and GPT-3 do."""
    counts = count_parameters(config)
    return counts["total"] - counts["output"]


# ------------------------------------------------------------------------------------ FLOPs per layer

def layer_costs(n, d: int, d_ff: int, h: int = 1) -> dict:
    """Multiplications of one layer on an n-token sequence (batch 1), term by term.

    h appears only to show that it cancels: h heads each do n^2 inner products of length d/h.
    """
    d_head = d // h
    return {
        "scores": h * n * n * d_head,         # Q K^T per head: (n, d/h) x (d/h, n)
        "weighted_sum": h * n * n * d_head,   # A V per head: (n, n) x (n, d/h)
        "projections": 4 * n * d * d,         # W_Q, W_K, W_V, W_O, one d x d map each at every position
        "mlp": 2 * n * d * d_ff,              # W1 (d x d_ff) then W2 (d_ff x d) at every position
        "recurrent": 2 * n * d * d,           # h_t = tanh(W h_{t-1} + U x_t): two d x d products per step
    }


def quadratic_terms(n, d: int) -> float:
    """The n^2 part of attention: scores plus weighted sum, 2 n^2 d."""
    c = layer_costs(n, d, d)
    return c["scores"] + c["weighted_sum"]


def attention_sublayer(n, d: int) -> float:
    """Everything the attention sublayer multiplies: 2n^2 d + 4nd^2."""
    return quadratic_terms(n, d) + layer_costs(n, d, d)["projections"]


def linear_terms(n, d: int, d_ff: int) -> float:
    """The n d^2 part of a block: the four projections plus the MLP."""
    c = layer_costs(n, d, d_ff)
    return c["projections"] + c["mlp"]


# Where 2 n^2 d meets the linear terms; divide both sides by 2nd to solve for n.
def crossover_block(d: int, d_ff: int) -> int:
    """2n^2 d = 4nd^2 + 2n d d_ff  <=>  n = 2d + d_ff (6d when d_ff = 4d)."""
    return 2 * d + d_ff


def crossover_projections(d: int) -> int:
    """2n^2 d = 4nd^2  <=>  n = 2d: inside the attention sublayer alone."""
    return 2 * d


def crossover_recurrent(d: int) -> int:
    """2n^2 d = 2nd^2  <=>  n = d: attention's mixing is cheaper than a recurrent layer's exactly when n < d."""
    return d


def local_slope(cost, n_lo: float, n_hi: float) -> float:
    """Log-log slope of a cost formula between two lengths: what a timing should show if time ~ cost."""
    return math.log(cost(n_hi) / cost(n_lo)) / math.log(n_hi / n_lo)


# ------------------------------------------------------------------------------------ memory

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float8 (e4m3)": torch.float8_e4m3fn}


def bytes_per_value(dtype_name: str) -> int:
    if dtype_name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype_name!r}; choose one of {', '.join(DTYPES)}")
    return torch.empty(0, dtype=DTYPES[dtype_name]).element_size()


def attention_memory(n: int, d: int, h: int, L: int, dtype_name: str = "float32") -> dict:
    """The h n^2 attention weights of every layer, kept for the backward pass, for one sequence."""
    for name, value in (("n", n), ("d", d), ("h", h), ("L", L)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    size = bytes_per_value(dtype_name)
    weights = h * n * n * L
    stream = n * d * L  # the layer inputs (n x d each), for comparison: linear in n
    return {"per_head_layer": n * n, "weights": weights, "weight_bytes": weights * size,
            "stream": stream, "stream_bytes": stream * size, "bytes_per_value": size}


# ------------------------------------------------------------------------------------ 6ND and 2N

FLOPS_PER_PARAM_TOKEN = 6  # training: 2 forward (a multiply and an add), 4 backward


def training_flops(N: float, D: float) -> float:
    """About 6 FLOPs per parameter per token: 2 forward (a multiply and an add), 4 backward."""
    return FLOPS_PER_PARAM_TOKEN * N * D


def inference_flops_per_token(N: float) -> float:
    """About 2 FLOPs per parameter: the forward pass alone."""
    return 2 * N


def attention_flops_per_token(config: ModelConfig, n: int) -> int:
    """What 2N leaves out when one new token attends to n cached ones: n d for the scores and n d for
    the weighted sum in each of L layers, two FLOPs per multiplication."""
    return 2 * 2 * n * config.d_model * config.n_layers


def gpt3_example() -> dict:
    """The lecture's GPT-3 count, with the output map tied to the embedding as in GPT-3, times 300B tokens."""
    config = ModelConfig(**SHAPE_LABELS[GPT3])
    N = tied_total(config)
    return {"config": config, "N": N, "D": GPT3_TRAINING_TOKENS, "C": training_flops(N, GPT3_TRAINING_TOKENS),
            "per_token": inference_flops_per_token(N)}


# ------------------------------------------------------------------------------------ measured timings

@dataclass
class Timing:
    ns: list[int]                 # sequence lengths measured, doubling
    attention_s: list[float]      # best-of-repeats seconds for one call of the attention sublayer
    mlp_s: list[float]            # the same for the MLP
    fit_from: int                 # slopes are fitted over n >= fit_from
    attention_slope: float        # log-log slope of time against n over the fitted range
    mlp_slope: float
    total_s: float                # wall time of the whole measurement
    threads: int                  # torch intra-op threads during the measurement: the caller's own

    def last_doubling(self) -> tuple[float, float]:
        """How much longer attention and the MLP took for the largest n than for half of it: near 4 and 2
        once the n^2 and the n terms dominate."""
        return self.attention_s[-1] / self.attention_s[-2], self.mlp_s[-1] / self.mlp_s[-2]


def loglog_slope(ns, ts) -> float:
    """Least-squares slope of log t against log n: 1 for linear growth, 2 for quadratic."""
    if len(ns) < 2:
        raise ValueError("need at least two points to fit a slope")
    slope, _ = np.polyfit(np.log(np.asarray(ns, dtype=float)), np.log(np.asarray(ts, dtype=float)), 1)
    return float(slope)


def _best_time(fn, x, repeats: int, min_s: float = 0.005) -> float:
    """Fastest of at least `repeats` calls, more while they take under min_s in all: the minimum is the
    time least disturbed by other work on the machine."""
    best, spent, calls = math.inf, 0.0, 0
    while calls < repeats or (spent < min_s and calls < 50):
        t0 = time.perf_counter()
        fn(x)
        dt = time.perf_counter() - t0
        best, spent, calls = min(best, dt), spent + dt, calls + 1
    return best


def time_sublayers(attn, mlp, d: int, n_start: int = 32, n_max: int = 8192, repeats: int = 3, rounds: int = 3,
                   slow_call_s: float = 0.1, budget_s: float = 3.0, seed: int = 0) -> Timing:
    """Time a model's attention and MLP sublayers on random (1, n, d) inputs for doubling n.

    The sublayers never look at positions, so n may exceed the model's n_ctx. The first round doubles n
    until n_max, a call slower than slow_call_s, or half of budget_s; later rounds revisit the same lengths
    and keep the fastest time, so a burst of other work on the machine spoils one round, not the fit.
    Slopes are fitted over the upper half of the lengths, where attention's n^2 terms have had room to
    dominate.

    It times on the calling thread's own torch thread count (a page run's ``page_threads``) and never sets
    one: torch.set_num_threads also sets the default every thread started later inherits, in the server
    another session's next script run, and restoring "the previous" count could write back a value some
    other session had set. The count is what every page run computes with, so the numbers describe the
    pages; a different count would need a process of its own, for a figure no page runs at.
    """
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    used = torch.get_num_threads()  # read, never set: see the docstring
    with torch.inference_mode():
        attn(torch.randn(1, n_start, d, generator=gen))  # first calls pay one-off allocation costs
        ns, ta, tm, n = [], [], [], n_start
        while n <= n_max:
            x = torch.randn(1, n, d, generator=gen)
            ns.append(n)
            ta.append(_best_time(attn, x, repeats))
            tm.append(_best_time(mlp, x, repeats))
            if ta[-1] > slow_call_s or time.perf_counter() - start > budget_s / 2:
                break
            n *= 2
        for _ in range(rounds - 1):
            if time.perf_counter() - start > budget_s:
                break
            for i, n in enumerate(ns):
                x = torch.randn(1, n, d, generator=gen)
                ta[i] = min(ta[i], _best_time(attn, x, repeats))
                tm[i] = min(tm[i], _best_time(mlp, x, repeats))
    if len(ns) < 2:
        raise ValueError(f"only {len(ns)} length measured; raise n_max or the budget")
    k = max(2, (len(ns) + 1) // 2)  # the upper half, at least two points
    return Timing(ns=ns, attention_s=ta, mlp_s=tm, fit_from=ns[-k],
                  attention_slope=loglog_slope(ns[-k:], ta[-k:]), mlp_slope=loglog_slope(ns[-k:], tm[-k:]),
                  total_s=time.perf_counter() - start, threads=used)


def machine_info() -> dict:
    """What the timings ran on: CPU model, physical cores, logical CPUs usable here, torch threads."""
    model, cores = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            phys = None
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and model is None:
                    model = value
                elif key == "physical id":
                    phys = value
                elif key == "core id":
                    cores.add((phys, value))
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {"cpu": model or platform.processor() or platform.machine() or "unknown CPU",
            "physical_cores": len(cores) or None, "logical_cpus": os.cpu_count(), "usable_cpus": usable,
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
