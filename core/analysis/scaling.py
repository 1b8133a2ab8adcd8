"""Scaling laws: L(N, D) = A/N^alpha + B/D^beta + E, the compute-optimal split of C = 6ND, famous models,
and the Hoffmann et al. (2022) fit of the five constants to your own runs.

N is the parameter count, D the number of training tokens, E (the lecture's L-infinity) the irreducible loss
in nats per token. Everything here is plain numpy except the fit, which runs its thousands of L-BFGS starts
as one batch in torch float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.serve.threads import torch_threads


@dataclass(frozen=True)
class ScalingLaw:
    A: float
    B: float
    alpha: float
    beta: float
    E: float

    def loss(self, N, D):
        """Predicted loss (nats per token); N and D broadcast like numpy arrays."""
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        return self.A / N**self.alpha + self.B / D**self.beta + self.E

    def capacity_term(self, N):
        return self.A / np.asarray(N, dtype=float) ** self.alpha

    def data_term(self, D):
        return self.B / np.asarray(D, dtype=float) ** self.beta

    def plateau_in_N(self, D):
        """Where L flattens as N grows at fixed D: E + B/D^beta."""
        return self.E + self.data_term(D)

    def plateau_in_D(self, N):
        """Where L flattens as D grows at fixed N: E + A/N^alpha."""
        return self.E + self.capacity_term(N)

    @property
    def G(self) -> float:
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    def compute_optimal(self, C):
        """(N_opt, D_opt) minimising L subject to 6ND = C, by the Lagrange closed form:
        N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = G^-1 (C/6)^(alpha/(alpha+beta))."""
        nd = np.asarray(C, dtype=float) / FLOPS_PER_PARAM_TOKEN
        s = self.alpha + self.beta
        return self.G * nd ** (self.beta / s), nd ** (self.alpha / s) / self.G

    def optimal_loss(self, C):
        return self.loss(*self.compute_optimal(C))

    def rms_log_error(self, N, D, loss) -> float:
        """Root mean square of log(loss) - log(predicted loss) over runs: how well the law fits them."""
        resid = np.log(np.asarray(loss, dtype=float)) - np.log(self.loss(N, D))
        return float(np.sqrt(np.mean(resid ** 2)))

    def r2_log(self, N, D, loss) -> float:
        """R² of log(loss): the share of the runs' variance in log loss that the law explains."""
        logL = np.log(np.asarray(loss, dtype=float))
        resid = logL - np.log(self.loss(N, D))
        return float(1.0 - np.sum(resid ** 2) / np.sum((logL - logL.mean()) ** 2))

    @property
    def N_exponent(self) -> float:
        """a in N_opt ∝ C^a: beta / (alpha + beta); D_opt grows as C^(1 - a)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def D_exponent(self) -> float:
        """b in D_opt ∝ C^b: alpha / (alpha + beta), so that a + b = 1 (N_opt D_opt is C / 6)."""
        return self.alpha / (self.alpha + self.beta)

    def constants(self) -> dict[str, float]:
        """The five constants under the names a page shows."""
        return {"A": self.A, "B": self.B, "α": self.alpha, "β": self.beta, "L∞ (E)": self.E}


# Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", arXiv:2203.15556,
# Appendix D.2 (approach 3, parametric fit): A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69.
CHINCHILLA = ScalingLaw(A=406.4, B=410.7, alpha=0.34, beta=0.28, E=1.69)
# Besiroglu, Erdil, Barnett, You 2024, "Chinchilla Scaling: A replication attempt", arXiv:2404.10102,
# Eq. (3) / Table 1: the fit redone on data reconstructed from Hoffmann et al.'s Figure 4.
EPOCH_2024 = ScalingLaw(A=482.01, B=2085.43, alpha=0.3478, beta=0.3658, E=1.8172)
# The range of Hoffmann et al.'s runs, from their abstract: "over 400 language models ranging from 70 million to over
# 16 billion parameters on 5 to 500 billion tokens".
CHINCHILLA_RUNS = dict(count=400, N=(70e6, 16e9), D=(5e9, 500e9))
LAW_PRESETS = {
    "Chinchilla (Hoffmann et al. 2022)": CHINCHILLA,
    "Epoch replication (Besiroglu et al. 2024)": EPOCH_2024,
}


@dataclass(frozen=True)
class FamousModel:
    name: str
    N: float  # parameters
    D: float  # training tokens
    source: str

    @property
    def compute(self) -> float:
        return FLOPS_PER_PARAM_TOKEN * self.N * self.D

    @property
    def tokens_per_param(self) -> float:
        return self.D / self.N


FAMOUS_MODELS = (
    FamousModel("GPT-3", 175e9, 300e9, "Brown et al. 2020, arXiv:2005.14165, Sec. 2.2 and Table D.1"),
    FamousModel("Gopher", 280e9, 300e9, "Rae et al. 2021, arXiv:2112.11446, Table 1 and Sec. 3; Hoffmann et al. Table 1"),
    FamousModel("Chinchilla", 70e9, 1.4e12, "Hoffmann et al. 2022, arXiv:2203.15556, Table 1"),
    FamousModel("MT-NLG 530B", 530e9, 270e9, "Smith et al. 2022, arXiv:2201.11990, Sec. 3; Hoffmann et al. Table 1"),
    FamousModel("PaLM", 540e9, 780e9, "Chowdhery et al. 2022, arXiv:2204.02311, Table 1 and Sec. 3"),
    FamousModel("LLaMA 65B", 65e9, 1.4e12, "Touvron et al. 2023, arXiv:2302.13971, Table 2"),
    FamousModel("Llama 2 70B", 70e9, 2e12, "Touvron et al. 2023, arXiv:2307.09288, Table 1"),
    FamousModel("Llama 3 8B", 8e9, 15e12, "Meta 2024, Llama 3 model card; Dubey et al. arXiv:2407.21783, Sec. 3"),
    FamousModel("Llama 3 70B", 70e9, 15e12, "Meta 2024, Llama 3 model card; Dubey et al. arXiv:2407.21783, Sec. 3"),
)


def famous_table(law: ScalingLaw, models=FAMOUS_MODELS) -> list[dict]:
    """Each model judged by ``law``: its split against the compute-optimal one for the same compute."""
    rows = []
    for m in models:
        n_opt, d_opt = law.compute_optimal(m.compute)
        loss, best = float(law.loss(m.N, m.D)), float(law.loss(n_opt, d_opt))
        rows.append(dict(model=m.name, N=m.N, D=m.D, tokens_per_param=m.D / m.N, compute=m.compute,
                         N_opt=float(n_opt), D_opt=float(d_opt), opt_tokens_per_param=float(d_opt / n_opt),
                         loss=loss, optimal_loss=best, excess_loss=loss - best, source=m.source))
    return rows


# ---------------------------------------------------------------- scoring a forecast
def interval_score(lower, upper, y, alpha: float = 0.2):
    """Gneiting and Raftery's (2007, JASA 102:359, Sec. 6.2) interval score of the central (1 - alpha) interval
    [lower, upper] for the outcome y: its width, plus 2/alpha times how far y fell outside. Lower is better; a
    forecaster minimises its expectation by quoting the true alpha/2 and 1 - alpha/2 quantiles, so an interval too
    narrow pays for its misses and one too wide for its width. Arrays broadcast."""
    lo, hi, y = (np.asarray(v, dtype=float) for v in (lower, upper, y))
    if np.any(hi < lo):
        raise ValueError("interval_score: an upper bound lies below its lower bound")
    out = (hi - lo) + (2.0 / alpha) * (lo - y) * (y < lo) + (2.0 / alpha) * (y - hi) * (y > hi)
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------------- repeated data (Muennighoff et al. 2023)
# "Scaling Data-Constrained Language Models", arXiv:2305.16264, Sec. 3.1 and App. A (their fitted values, also in
# the huggingface/datablations README): the worth of the R-th repetition decays as exp(-R/R*), with R*_D = 15.388
# for data and R*_N = 5.310 for parameters beyond what the unique data can use.
R_STAR_D = 15.4
R_STAR_N = 5.3


def _effective(unique, total, r_star: float):
    """U + U R* (1 - exp(-R/R*)) with R = total/U - 1 repetitions; nothing is repeated while total <= U."""
    unique, total = np.asarray(unique, dtype=float), np.asarray(total, dtype=float)
    u = np.minimum(unique, total)  # fewer than U tokens seen: every one was fresh
    reps = total / u - 1.0  # (R,) repetitions beyond the first pass
    out = u + u * r_star * (-np.expm1(-reps / r_star))  # -expm1: 1 - e^-x, exact for tiny x
    return float(out) if out.ndim == 0 else out


def effective_data(unique, total, r_star: float = R_STAR_D):
    """Muennighoff et al.'s effective data D' of ``total`` tokens drawn from ``unique`` distinct ones: each further
    pass is worth exp(-R/R*) of fresh text, so D' never exceeds U (1 + R*)."""
    return _effective(unique, total, r_star)


def effective_params(unique, total, r_star: float = R_STAR_N):
    """The same form for parameters: ``total`` parameters beyond the ``unique`` ones the data can use (U_N, the
    compute-optimal size for the unique tokens; core.analysis.scaling_repeat.unique_params) count for N'."""
    return _effective(unique, total, r_star)


# ---------------------------------------------------------------- budget (the lecture's Problem 21)
# Page defaults: the lecture's $10M, a rented H100 (SXM, dense BF16 peak 989 TFLOP/s, NVIDIA datasheet) at
# about $2 per GPU-hour, and 40 % model-FLOPs utilisation, typical of large runs (PaLM reports 46 %).
BUDGET_DEFAULTS = dict(dollars=10e6, dollars_per_gpu_hour=2.0, peak_flops=989e12, utilisation=0.40)


def budget_flops(dollars: float, dollars_per_gpu_hour: float, peak_flops: float, utilisation: float) -> float:
    """Training FLOPs a budget buys: GPU-hours x 3600 s x peak FLOP/s x utilisation."""
    return dollars / dollars_per_gpu_hour * 3600.0 * peak_flops * utilisation


# ---------------------------------------------------------------- the Hoffmann et al. fit
HUBER_DELTA = 1e-3
# Hoffmann et al. App. D.2: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}
# (with A = exp a, B = exp b, E = exp e): 5 * 5 * 5 * 6 * 6 = 4,500 starting points.
GRID = dict(a=np.arange(0, 26, 5.0), b=np.arange(0, 26, 5.0), e=np.arange(-1, 1.01, 0.5),
            alpha=np.arange(0, 2.01, 0.5), beta=np.arange(0, 2.01, 0.5))
N_STARTS = math.prod(len(v) for v in GRID.values())  # the 4,500 above, for the page's prose


def start_grid() -> torch.Tensor:
    """All grid starts as one (S, 5) float64 tensor; columns a, b, e, alpha, beta."""
    axes = [torch.tensor(GRID[k], dtype=torch.float64) for k in ("a", "b", "e", "alpha", "beta")]
    return torch.cartesian_prod(*axes)  # (S, 5)


def _objective(x: torch.Tensor, logN: torch.Tensor, logD: torch.Tensor, logL: torch.Tensor, delta: float,
               weight: torch.Tensor | None = None):
    """Per-start Huber objective and its gradient, written out (no autograd: the batch is large).
    x: (S, 5) rows a, b, e, alpha, beta -> f: (S,), g: (S, 5). The prediction is the log-sum-exp
    log L_hat = LSE(a - alpha log N, b - beta log D, e) = e + log(1 + w1 + w2), w1 = exp(a - e - alpha log N),
    w2 = exp(b - e - beta log D); an overflow gives inf, which the line search rejects.
    ``weight``: (S, n), how many times each start counts each run (a bootstrap resample as counts); None: once."""
    a, b, e, al, be = x.unbind(1)  # each (S,)
    w1 = torch.addcmul((a - e)[:, None], al[:, None], logN[None, :], value=-1).exp_()  # (S, n)
    w2 = torch.addcmul((b - e)[:, None], be[:, None], logD[None, :], value=-1).exp_()  # (S, n)
    s = w1 + w2
    r = torch.log1p(s).add_(e[:, None]).sub_(logL)  # (S, n) residual in log loss
    ar = r.abs()
    c = ar.clamp(max=delta)
    h = c * ar.sub_(c, alpha=0.5)  # Huber: r^2/2 within delta, delta (|r| - delta/2) beyond
    psi = r.clamp_(-delta, delta).div_(s.add_(1))  # Huber'(r) / (1 + w1 + w2): d log L_hat / d(a, b, e) = w / (1 + w1 + w2)
    if weight is not None:
        h, psi = h * weight, psi * weight
    f = h.sum(1)
    p1, p2 = psi * w1, psi * w2
    ones = torch.ones_like(logN)
    g = torch.stack([p1 @ ones, p2 @ ones, psi @ ones, -(p1 @ logN), -(p2 @ logD)], 1)
    return f, g


def _lbfgs(x, fun, max_iter=500, history=10, gtol=1e-10, ftol=1e-13):
    """L-BFGS on a batch of independent problems. Each row of x (S, k) has its own curvature history, its own
    backtracking (Armijo) line search and its own stopping test; ``fun`` maps (R, k) rows to f (R,), g (R, k).
    Finished rows leave the batch, and the state is compacted then, so later iterations cost only the rows
    still running. Returns the end points (S, k) and their objectives (S,)."""
    x_out = x.clone()
    f_out = torch.full((x.shape[0],), math.inf, dtype=x.dtype)
    rows = torch.arange(x.shape[0])  # which output row each active row is
    x = x.clone()
    f, g = fun(x)
    R, k = x.shape
    s_hist = x.new_zeros(history, R, k)  # newest pair at index 0
    y_hist = x.new_zeros(history, R, k)
    rho = x.new_zeros(history, R)  # 0 marks a pair to skip (empty, or no positive curvature)
    gamma = x.new_ones(R)
    for it in range(max_iter):
        # two-loop recursion over the stored pairs, vectorised over rows
        q = -g
        alphas = []
        for j in range(min(it, history)):
            a = rho[j] * (s_hist[j] * q).sum(1)
            q = q - a[:, None] * y_hist[j]
            alphas.append(a)
        q = q * gamma[:, None]
        for j in reversed(range(len(alphas))):
            q = q + (alphas[j] - rho[j] * (y_hist[j] * q).sum(1))[:, None] * s_hist[j]
        d, slope = q, (g * q).sum(1)
        bad = ~(slope < 0)  # not a descent direction: steepest descent instead
        d[bad], slope[bad] = -g[bad], -(g[bad] ** 2).sum(1)
        # the first step is scaled to unit length, as in scipy and torch.optim.LBFGS
        t = x.new_ones(R) if it else torch.clamp(1.0 / g.abs().sum(1), max=1.0)
        x_new, f_new, g_new = x.clone(), f.clone(), g.clone()
        todo = torch.arange(R)
        for _ in range(40):  # backtracking, halving the step of each row until its Armijo test holds
            xt = x[todo] + t[todo, None] * d[todo]
            ft, gt = fun(xt)
            ok = (ft <= f[todo] + 1e-4 * t[todo] * slope[todo]) & torch.isfinite(ft)
            x_new[todo[ok]], f_new[todo[ok]], g_new[todo[ok]] = xt[ok], ft[ok], gt[ok]
            todo = todo[~ok]
            if todo.numel() == 0:
                break
            t[todo] *= 0.5
        s, y = x_new - x, g_new - g
        sy = (s * y).sum(1)
        curved = sy > 1e-20
        s_hist, y_hist, rho = s_hist.roll(1, 0), y_hist.roll(1, 0), rho.roll(1, 0)
        s_hist[0], y_hist[0] = s, y
        rho[0] = torch.where(curved, 1.0 / sy.clamp(min=1e-300), torch.zeros_like(sy))
        gamma = torch.where(curved, sy / (y * y).sum(1).clamp(min=1e-300), gamma)
        done = (g_new.abs().amax(1) < gtol) | (f - f_new <= ftol * torch.maximum(f.abs(), f_new.abs()))
        done[todo] = True  # the line search found no decrease: this row is as far as it gets
        x, f, g = x_new, f_new, g_new
        if it == max_iter - 1:
            done[:] = True
        if done.any():
            x_out[rows[done]], f_out[rows[done]] = x[done], f[done]
            keep = ~done
            rows, x, f, g, gamma = rows[keep], x[keep], f[keep], g[keep], gamma[keep]
            s_hist, y_hist, rho = s_hist[:, keep], y_hist[:, keep], rho[:, keep]
            R = rows.numel()
            if R == 0:
                break
    return x_out, f_out


def _distinct_best(x: torch.Tensor, f: torch.Tensor, k: int, decimals: int = 2) -> list[int]:
    """Indices of the k lowest objectives, one per distinct end point (many starts reach the same minimum)."""
    order = torch.argsort(torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf))).tolist()
    keys, picked = set(), []
    for i in order:
        if not math.isfinite(float(f[i])):
            break
        key = tuple(np.round(x[i].tolist(), decimals))
        if key not in keys:
            keys.add(key)
            picked.append(i)
            if len(picked) == k:
                break
    return picked


def huber_objective(law: ScalingLaw, N, D, loss, delta: float = HUBER_DELTA) -> float:
    """The fit's objective at ``law``, in plain numpy: the sum over runs of Huber_delta(log L_hat - log L)."""
    r = np.abs(np.log(law.loss(N, D)) - np.log(np.asarray(loss, float)))
    return float(np.sum(np.where(r <= delta, 0.5 * r ** 2, delta * (r - 0.5 * delta))))


class FitError(ValueError):
    """The runs do not pin down a law of this form; the message says why, in words for the user."""


def fit_scaling_law(N, D, loss, delta: float = HUBER_DELTA, starts: torch.Tensor | None = None,
                    polish: int = 32, threads: int | None = 1) -> ScalingLaw:
    """Hoffmann et al. (2022, App. D.2): minimise sum_i Huber_delta(LSE(a - alpha log N_i, b - beta log D_i, e)
    - log L_i) by L-BFGS from every point of their grid of starts, keep the best, return A=e^a, B=e^b, E=e^e.

    All 4,500 starts run as one batch. A first pass in float32 (1.6 times cheaper than float64) takes each start to
    its local minimum at float32 precision; the ``polish`` best distinct minima then continue in float64 with
    tight tolerances, since Besiroglu et al. (2024) traced the original fit's problems to stopping too early.

    One thread by default: the batch is memory-bound, so a second thread gains ~5 % on an idle machine, while on
    a busy one OpenMP's spinning threads made the same fit 10-20 times slower (measured on the 2-core dev box)."""
    with torch_threads(threads):
        law = _fit(N, D, loss, delta, starts, polish)
    if not all(math.isfinite(v) for v in (law.A, law.B, law.alpha, law.beta, law.E)):
        raise FitError("The fit ran off to infinite constants: these runs do not pin down a law of this form. "
                       "Runs that vary both N and D over a wider range help.")
    if min(law.A, law.B, law.alpha, law.beta) <= 0:
        # flat or rising losses give exponents <= 0, for which there is no compute-optimal split (the
        # closed form would take a root of a negative number)
        raise FitError(f"The best fit has α = {law.alpha:.3g} and β = {law.beta:.3g}: these runs show no loss that "
                       "falls as a power law in N and in D, so there is no law of this form to fit. Runs whose "
                       "loss drops as models and data grow are needed.")
    return law


def _fit(N, D, loss, delta, starts, polish) -> ScalingLaw:
    logs = [np.log(np.asarray(v, dtype=float)) for v in (N, D, loss)]
    x0 = start_grid() if starts is None else torch.as_tensor(starts, dtype=torch.float64)
    x, f = None, None
    for dtype, tol in ((torch.float32, dict(gtol=1e-7, ftol=1e-6, max_iter=100)),
                       (torch.float64, dict(gtol=1e-11, ftol=1e-14, max_iter=1000))):
        logN, logD, logL = (torch.as_tensor(v, dtype=dtype) for v in logs)
        start = x0 if x is None else x[_distinct_best(x, f, polish)]
        x, f = _lbfgs(start.to(dtype), lambda z: _objective(z, logN, logD, logL, delta), **tol)
    best = _distinct_best(x, f, 1)
    if not best:
        raise FitError("The fit found no finite objective from any starting point: these runs do not pin down "
                       "a law of this form.")
    a, b, e, alpha, beta = x[best[0]].tolist()
    with np.errstate(over="ignore"):  # an unbounded direction shows up as an infinite constant, not a crash
        A, B, E = (float(np.exp(v)) for v in (a, b, e))
    return ScalingLaw(A=A, B=B, alpha=alpha, beta=beta, E=E)


BOOTSTRAP_KEYS = ("A", "B", "alpha", "beta", "E", "a")  # "a": the exponent of N_opt in C, beta / (alpha + beta)


def bootstrap_fit(N, D, loss, law: ScalingLaw, resamples: int = 200, seed: int = 0, level: float = 0.95,
                  grid_step: int = 15) -> dict:
    """Percentile intervals of the constants over fits to runs drawn with replacement (a bootstrap over runs).

    Each refit starts from ``law`` (the fit to every run) and from every ``grid_step``-th point of Hoffmann et al.'s
    grid, so a resample whose best fit lies in another basin can still reach it; 300 starts instead of 4,500 make
    200 refits cost about as much as a few full fits. A resample that pins down no law of this form (a FitError:
    exponents <= 0, infinite constants) is counted in ``failed`` and left out of the intervals."""
    N, D, loss = (np.asarray(v, dtype=float) for v in (N, D, loss))
    rng = np.random.default_rng(seed)
    best = torch.tensor([[math.log(law.A), math.log(law.B), math.log(law.E), law.alpha, law.beta]], dtype=torch.float64)
    starts = torch.cat([best, start_grid()[::grid_step]])
    samples, failed = [], 0
    for _ in range(resamples):
        idx = rng.integers(0, len(N), len(N))
        try:
            f = fit_scaling_law(N[idx], D[idx], loss[idx], starts=starts, polish=8)
        except FitError:
            failed += 1
            continue
        samples.append([f.A, f.B, f.alpha, f.beta, f.E, f.N_exponent])
    tail = 100 * (1 - level) / 2
    if samples:
        arr = np.array(samples)
        lo, hi = np.percentile(arr, tail, axis=0), np.percentile(arr, 100 - tail, axis=0)
        intervals = {k: [float(lo[i]), float(hi[i])] for i, k in enumerate(BOOTSTRAP_KEYS)}
    else:
        intervals = {k: [math.nan, math.nan] for k in BOOTSTRAP_KEYS}
    return {"resamples": resamples, "failed": failed, "seed": seed, "level": level, "intervals": intervals}
