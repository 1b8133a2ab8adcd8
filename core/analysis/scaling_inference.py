"""Sized for use, not only for training (Sardana et al. 2024, "Beyond Chinchilla-Optimal: Accounting for Inference
in Language Model Scaling Laws", arXiv:2401.00448): a model that will read D_inf tokens in service costs
6ND + 2N D_inf FLOPs over its life, training and serving; the (N, D) of least total cost that reaches a target loss
is smaller and trained longer than Chinchilla's, the more so the more it serves. Plain numpy.
"""
from __future__ import annotations

import math

import numpy as np

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.analysis.scaling import FAMOUS_MODELS, ScalingLaw
from core.analysis.scaling_repeat import _golden

# a forward pass costs about 2N FLOPs per token (one multiply and one add per weight); training adds the backward
INFERENCE_FLOPS_PER_PARAM_TOKEN = 2
# The page's default serving volume: two trillion tokens, a billion requests of 2,000 tokens, the scale of demand at
# which Sardana et al. find the optimum moves well away from Chinchilla's; the learner changes it
DEFAULT_INFERENCE_TOKENS = 2e12


def data_for_loss(law: ScalingLaw, N, target: float):
    """The tokens D at which N parameters reach ``target``: (B / (target - E - A/N^alpha))^(1/beta); inf where N
    alone cannot get there (its capacity term plus the floor is already at or above the target)."""
    room = target - law.E - law.capacity_term(N)  # what the data term may still cost
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(room > 0, (law.B / np.where(room > 0, room, 1.0)) ** (1.0 / law.beta), np.inf)
    return float(out) if np.ndim(out) == 0 else out


def smallest_model(law: ScalingLaw, target: float) -> float:
    """The N below which no amount of data reaches ``target``: A/N^alpha = target - E."""
    if target <= law.E:
        return math.inf
    return (law.A / (target - law.E)) ** (1.0 / law.alpha)


def lifetime_flops(N, D, inference_tokens: float):
    """6ND to train plus 2N per token served."""
    return FLOPS_PER_PARAM_TOKEN * np.asarray(N, float) * np.asarray(D, float) \
        + INFERENCE_FLOPS_PER_PARAM_TOKEN * np.asarray(N, float) * inference_tokens


def inference_optimal(law: ScalingLaw, target: float, inference_tokens: float) -> dict:
    """The (N, D) of least lifetime FLOPs whose loss is ``target``: a scan of 1,200 values of ln N, from just above
    the smallest model that can reach it to e^32 (about 14 decades) above it, spaced geometrically so that most lie
    near the small end where the cost turns fastest, then a golden-section search in the best cell. With
    inference_tokens = 0 this is the compute-optimal model for that loss. Raises ValueError for a target at or below
    the floor E."""
    n_min = smallest_model(law, target)
    if not math.isfinite(n_min):
        raise ValueError(f"a loss of {target:.4g} is at or below the floor L∞ = {law.E:.4g}: no model reaches it")

    def cost(logn):
        n = np.exp(logn)
        return lifetime_flops(n, data_for_loss(law, n, target), inference_tokens)

    # ln N from 1e-6 above the smallest model's (where D runs off to infinity) to 32 above it: 14 decades of N
    logs = math.log(n_min) + np.geomspace(1e-6, 32.0, 1200)
    costs = cost(logs)
    i = int(np.argmin(costs))
    lo, hi = logs[max(i - 1, 0)], logs[min(i + 1, len(logs) - 1)]
    n = math.exp(_golden(lambda x: float(cost(x)), lo, hi))
    d = float(data_for_loss(law, n, target))
    train = FLOPS_PER_PARAM_TOKEN * n * d
    serve = INFERENCE_FLOPS_PER_PARAM_TOKEN * n * inference_tokens
    return {"N": n, "D": d, "tokens_per_param": d / n, "train_flops": train, "inference_flops": serve,
            "total_flops": train + serve}


def famous_inference_table(law: ScalingLaw, inference_tokens: float, models=FAMOUS_MODELS) -> list[dict]:
    """Each famous model against the two models that reach its predicted loss: Chinchilla's (least training FLOPs)
    and the inference-aware one (least lifetime FLOPs for ``inference_tokens`` served)."""
    rows = []
    for m in models:
        target = float(law.loss(m.N, m.D))
        chin = inference_optimal(law, target, 0.0)
        best = inference_optimal(law, target, inference_tokens)
        own = float(lifetime_flops(m.N, m.D, inference_tokens))
        chin_total = float(lifetime_flops(chin["N"], chin["D"], inference_tokens))
        rows.append(dict(model=m.name, N=m.N, D=m.D, tokens_per_param=m.D / m.N, loss=target,
                         chinchilla_N=chin["N"], chinchilla_tokens_per_param=chin["tokens_per_param"],
                         best_N=best["N"], best_D=best["D"], best_tokens_per_param=best["tokens_per_param"],
                         own_total=own, chinchilla_total=chin_total, best_total=best["total_flops"],
                         own_over_best=own / best["total_flops"], chinchilla_over_best=chin_total / best["total_flops"]))
    return rows
