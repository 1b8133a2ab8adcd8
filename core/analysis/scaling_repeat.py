"""When the data runs out: Muennighoff et al.'s (2023) data-constrained law, L(N', D') with the effective data D' and
effective parameters N' of core.analysis.scaling, its compute-optimal split for a fixed stock of unique text, and
the worth of each further epoch.

"Scaling Data-Constrained Language Models", arXiv:2305.16264: 400 runs up to 9B parameters and 900B tokens. A
repeated token is worth exp(-R/R*_D) of a fresh one on its R-th repetition, and parameters beyond the size the
unique data can use (U_N) decay the same way with R*_N. Plain numpy.
"""
from __future__ import annotations

import math

import numpy as np

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.analysis.scaling import (HUBER_DELTA, R_STAR_D, R_STAR_N, ScalingLaw, effective_data, effective_params,
                                   fit_scaling_law, huber_objective)

# Their own fit of the five constants together with R*_D and R*_N (App. A; the datablations README prints
# a = 6.255414, b = 7.3049974, e = 0.6254804, alpha = beta = 0.3526596): A = e^a, B = e^b, E = e^e
MUENNIGHOFF_2023 = ScalingLaw(A=math.exp(6.255414), B=math.exp(7.3049974), alpha=0.3526596, beta=0.3526596,
                              E=math.exp(0.6254804))
# Their worked example (Sec. 3.2 and Fig. 1): the compute of 8.67B parameters on 178B tokens, with only 25B unique
# tokens, is best spent on 6.8B parameters and 227B tokens, about 9 epochs
WORKED_EXAMPLE = dict(N=8.67e9, D=178e9, unique=25e9, N_opt=6.8e9, D_opt=227e9)


def unique_params(law: ScalingLaw, unique_tokens):
    """U_N: the compute-optimal model size for a single pass over ``unique_tokens`` (D_opt = U_D), from the law's
    closed form D_opt = G^-1 (C/6)^(alpha/(alpha+beta)) solved for C/6 = N D."""
    u = np.asarray(unique_tokens, dtype=float)
    nd = (law.G * u) ** ((law.alpha + law.beta) / law.alpha)  # C/6 at which D_opt = U
    return nd / u


def repeated_loss(law: ScalingLaw, N, D, unique_tokens, r_star_d: float = R_STAR_D, r_star_n: float = R_STAR_N):
    """L(N', D'): the loss of N parameters trained on D tokens drawn from ``unique_tokens`` distinct ones."""
    N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
    u_d = np.minimum(unique_tokens, D)  # a run shorter than the stock saw only fresh tokens
    d_eff = effective_data(u_d, D, r_star_d)
    u_n = np.minimum(unique_params(law, u_d), N)  # parameters up to U_N count in full
    n_eff = effective_params(u_n, N, r_star_n)
    return law.loss(n_eff, d_eff)


def _golden(f, lo: float, hi: float, iters: int = 80) -> float:
    """The minimum of a unimodal f on [lo, hi] by golden-section search (to ~1e-16 of the bracket)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def repeated_optimum(law: ScalingLaw, C: float, unique_tokens: float, r_star_d: float = R_STAR_D,
                     r_star_n: float = R_STAR_N) -> tuple[float, float]:
    """(N, D) with 6ND = C of least L(N', D') for a stock of ``unique_tokens``: a scan of log N over eight decades
    around the unconstrained optimum, then a golden-section search in the best cell."""
    nd = C / FLOPS_PER_PARAM_TOKEN
    n0, _ = law.compute_optimal(C)
    logs = np.linspace(math.log(n0) - 9.2, math.log(n0) + 9.2, 801)  # e^9.2 ~ 1e4 either side
    logs = logs[(logs > 0) & (logs < math.log(nd))]  # at least one parameter and one token
    losses = repeated_loss(law, np.exp(logs), nd / np.exp(logs), unique_tokens, r_star_d, r_star_n)
    i = int(np.argmin(losses))
    lo, hi = logs[max(i - 1, 0)], logs[min(i + 1, len(logs) - 1)]
    best = _golden(lambda x: float(repeated_loss(law, math.exp(x), nd / math.exp(x), unique_tokens, r_star_d,
                                                 r_star_n)), lo, hi)
    return math.exp(best), nd / math.exp(best)


def repeated_optima(law: ScalingLaw, Cs, unique_tokens: float, r_star_d: float = R_STAR_D,
                    r_star_n: float = R_STAR_N) -> tuple[np.ndarray, np.ndarray]:
    """repeated_optimum for many budgets at once, for a curve: one (budgets x 801) scan of log N and a parabola
    through the best point and its neighbours (to a small fraction of the scan's 2 % step)."""
    Cs = np.asarray(Cs, dtype=float)
    nd = Cs / FLOPS_PER_PARAM_TOKEN  # (k,)
    n0, _ = law.compute_optimal(Cs)
    off = np.linspace(-9.2, 9.2, 801)  # (m,) the same span around the unconstrained optimum as repeated_optimum
    logs = np.log(n0)[:, None] + off[None, :]  # (k, m)
    loss = repeated_loss(law, np.exp(logs), nd[:, None] / np.exp(logs), unique_tokens, r_star_d, r_star_n)
    loss = np.where((logs > 0) & (logs < np.log(nd)[:, None]), loss, np.inf)  # at least one parameter and token
    i = np.clip(np.argmin(loss, axis=1), 1, len(off) - 2)  # (k,)
    rows = np.arange(len(Cs))
    y0, y1, y2 = loss[rows, i - 1], loss[rows, i], loss[rows, i + 1]
    den = y0 - 2 * y1 + y2
    shift = np.where(np.isfinite(den) & (den > 0), 0.5 * (y0 - y2) / np.where(den > 0, den, 1.0), 0.0)
    best = logs[rows, i] + np.clip(shift, -1, 1) * (off[1] - off[0])  # the parabola's vertex, in log N
    return np.exp(best), nd / np.exp(best)


def epoch_worth(epoch, r_star: float = R_STAR_D):
    """What a token of the ``epoch``-th pass is worth against a fresh one: exp(-(epoch - 1)/R*), 1 on the first."""
    return np.exp(-(np.asarray(epoch, dtype=float) - 1.0) / r_star)


def epochs_worth_it(r_star: float = R_STAR_D, share: float = 0.5) -> float:
    """The pass whose tokens are worth ``share`` of fresh ones: 1 + R* ln(1/share)."""
    return 1.0 + r_star * math.log(1.0 / share)


def epochs_curve(law: ScalingLaw, N: float, unique_tokens: float, epochs, r_star_d: float = R_STAR_D,
                 r_star_n: float = R_STAR_N) -> dict:
    """Loss against passes over a fixed stock: with fresh text (the plain law at D = epochs x U) and with the stock
    repeated (L(N', D')). Arrays of the same length as ``epochs``."""
    ep = np.asarray(epochs, dtype=float)
    D = ep * unique_tokens
    return {"epochs": ep, "D": D, "fresh": law.loss(N, D),
            "repeated": repeated_loss(law, N, D, unique_tokens, r_star_d, r_star_n)}


# ---------------------------------------------------------------- our own runs: which form fits, and our R*

def fit_effective(N, D, loss, unique_tokens: float, r_star: float = R_STAR_D) -> ScalingLaw:
    """L(N, D') fitted as Hoffmann et al. fit L(N, D), with D replaced by the effective data of each run (D counted
    against ``unique_tokens``, the corpus's training part). Raises core.analysis.scaling.FitError."""
    return fit_scaling_law(N, effective_data(unique_tokens, np.asarray(D, float), r_star), loss)


def effective_loss(law: ScalingLaw, N, D, unique_tokens: float, r_star: float = R_STAR_D):
    """The loss a law fitted on effective data predicts for N parameters on D tokens."""
    return law.loss(N, effective_data(unique_tokens, np.asarray(D, float), r_star))


R_STAR_GRID = tuple(float(v) for v in np.geomspace(0.5, 200.0, 27))  # R* from half a pass to near no decay


def profile_r_star(N, D, loss, unique_tokens: float, r_stars=R_STAR_GRID, delta: float = HUBER_DELTA) -> list[dict]:
    """For each R*, the fit of L(N, D'(R*)) and its Huber objective: the R* of the least objective is the one these
    runs support (a profile over R*, since for fixed R* the fit is Hoffmann et al.'s)."""
    N, D, loss = (np.asarray(v, float) for v in (N, D, loss))
    out = []
    for r in r_stars:
        law = fit_effective(N, D, loss, unique_tokens, r)
        d_eff = effective_data(unique_tokens, D, r)
        out.append({"r_star": float(r), "objective": huber_objective(law, N, d_eff, loss, delta), "law": law,
                    "rms_log": law.rms_log_error(N, d_eff, loss)})
    return out
