"""Scaling laws that forecast: the law's prediction for a run nobody has trained, with an interval, the run the page
proposes next, the score of a forecast once the run is in, and the calibration of the shipped study's intervals
(fit on the smaller runs, forecast the larger ones).

Intervals come from a bootstrap over runs (resampled with replacement, each resample refitted): the spread of the
refitted laws' predictions is the *law's* interval, the uncertainty of the curve. A new run also scatters about
the curve as the fitted runs do (its seed, a recipe that suits one size better), so the *forecast* interval adds
to each resample's prediction a residual drawn from that resample's own fit (the bootstrap prediction interval
of Davison and Hinkley 1997, Sec. 6.3.3). Published intervals are the first kind; Besiroglu et al. (2024) found
Chinchilla's implausibly narrow.

All resamples are refitted in one batch: a resample is a vector of counts (how often each run was drawn), the
Huber objective weighs each run by its count, and every start of every resample runs through core.analysis.scaling's
batched L-BFGS together.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.analysis.scaling import (HUBER_DELTA, FitError, ScalingLaw, _lbfgs, _objective, fit_scaling_law,
                                   interval_score, start_grid)
from core.serve.threads import torch_threads

LEVEL = 0.8            # the 80 % intervals
ALPHA = 1.0 - LEVEL    # interval_score's alpha for them
RESAMPLES = 200
GRID_STEP = 150        # every 150th of Hoffmann et al.'s 4,500 starts (30), beside the full fit's own point


@dataclass(frozen=True)
class Bootstrap:
    """Refitted laws, one row per resample that gave a law of this form, and each one's residuals on its runs."""
    params: np.ndarray       # (S, 5): A, B, alpha, beta, E
    residuals: np.ndarray    # (S, n): log L - log L_fit of every run under resample s's law
    counts: np.ndarray       # (S, n): how often each run was drawn in resample s
    failed: int              # resamples whose best fit had an exponent <= 0 or an infinite constant

    def laws(self) -> list[ScalingLaw]:
        return [ScalingLaw(*row) for row in self.params]

    def log_predictions(self, N, D) -> np.ndarray:
        """log L of each refitted law at (N, D): (S,) for scalars, (S, k) for k points."""
        A, B, al, be, E = (self.params[:, i:i + 1] for i in range(5))  # (S, 1) each
        N, D = np.atleast_1d(np.asarray(N, float))[None, :], np.atleast_1d(np.asarray(D, float))[None, :]
        out = np.log(A / N ** al + B / D ** be + E)  # (S, k)
        return out[:, 0] if out.shape[1] == 1 else out


def bootstrap_laws(N, D, loss, law: ScalingLaw, resamples: int = RESAMPLES, seed: int = 0,
                   grid_step: int = GRID_STEP, delta: float = HUBER_DELTA, threads: int | None = 1) -> Bootstrap:
    """``resamples`` refits of the law to runs drawn with replacement, all in one batch: each resample starts from
    ``law`` (the fit to every run) and from every ``grid_step``-th grid start, runs a float32 pass, and its best
    end point is polished in float64, as fit_scaling_law does for one set of runs."""
    N, D, loss = (np.asarray(v, dtype=float) for v in (N, D, loss))
    n = len(N)
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(resamples)])  # (S, n)
    best = torch.tensor([[math.log(law.A), math.log(law.B), math.log(law.E), law.alpha, law.beta]],
                        dtype=torch.float64)
    starts = torch.cat([best, start_grid()[::grid_step]])  # (k, 5)
    k = starts.shape[0]
    with torch_threads(threads):
        x = _refit(starts.repeat(resamples, 1), np.repeat(np.arange(resamples), k), counts, N, D, loss, delta,
                   torch.float32, dict(gtol=1e-7, ftol=1e-6, max_iter=100))
        f = _weighted_f(x, counts, N, D, loss, delta)  # (S k,) objective of each end point under its own weights
        # (S k,) -> (S, k): resample s's k starts in a row
        f = torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf)).view(resamples, k)
        pick = x.view(resamples, k, 5)[torch.arange(resamples), f.argmin(1)]  # (S, 5): the best start per resample
        x = _refit(pick, np.arange(resamples), counts, N, D, loss, delta, torch.float64,
                   dict(gtol=1e-11, ftol=1e-14, max_iter=1000))
    a, b, e, al, be = x.double().numpy().T  # (S, 5) -> five (S,) columns
    with np.errstate(over="ignore"):
        params = np.stack([np.exp(a), np.exp(b), al, be, np.exp(e)], 1)  # (S, 5): A, B, alpha, beta, E
    ok = np.all(np.isfinite(params), 1) & (params[:, :4] > 0).all(1)  # as fit_scaling_law's FitError rules
    params = params[ok]
    pred = np.log(params[:, 0:1] / N ** params[:, 2:3] + params[:, 1:2] / D ** params[:, 3:4] + params[:, 4:5])
    return Bootstrap(params=params, residuals=np.log(loss)[None, :] - pred, counts=counts[ok],
                     failed=int((~ok).sum()))


def _weighted_fun(which: np.ndarray, counts, N, D, loss, delta, dtype):
    """The batched objective for rows that belong to resamples ``which``: each row carries its resample's index in
    a sixth column whose gradient is zero, so L-BFGS never moves it and the rows it keeps or drops keep their
    weights (its line search calls the objective on any subset of rows)."""
    logN, logD, logL = (torch.as_tensor(np.log(v), dtype=dtype) for v in (N, D, loss))
    W = torch.as_tensor(counts, dtype=dtype)  # (S, n)

    def fun(z):  # z: (R, 6)
        f, g = _objective(z[:, :5], logN, logD, logL, delta, weight=W[z[:, 5].long()])
        return f, torch.cat([g, torch.zeros_like(g[:, :1])], 1)
    return fun


def _refit(starts: torch.Tensor, which, counts, N, D, loss, delta, dtype, tol) -> torch.Tensor:
    z = torch.cat([starts.to(dtype), torch.as_tensor(which, dtype=dtype)[:, None]], 1)  # (R, 6)
    out, _ = _lbfgs(z, _weighted_fun(which, counts, N, D, loss, delta, dtype), **tol)
    return out[:, :5]


def _weighted_f(x: torch.Tensor, counts, N, D, loss, delta) -> torch.Tensor:
    k = x.shape[0] // counts.shape[0]
    W = torch.as_tensor(np.repeat(counts, k, 0), dtype=torch.float64)
    logs = [torch.as_tensor(np.log(v), dtype=torch.float64) for v in (N, D, loss)]
    return _objective(x.double(), *logs, delta, weight=W)[0]


# ---------------------------------------------------------------- one forecast

@dataclass(frozen=True)
class Forecast:
    """The law's prediction of one run's held-out loss, with both intervals at ``level``."""
    N: float
    D: float
    point: float             # the law fitted to every run
    law_lower: float         # the refitted laws' predictions: the curve's uncertainty
    law_upper: float
    lower: float             # with each resample's run-to-run scatter added: where a new run should land
    upper: float
    level: float = LEVEL

    @property
    def compute(self) -> float:
        return FLOPS_PER_PARAM_TOKEN * self.N * self.D


def min_resamples(level: float = LEVEL) -> int:
    """The fewest refitted laws a central ``level`` interval is read from: enough that one law falls in each tail
    beyond it, S (1 - level) / 2 >= 1 (10 for 80 %). With fewer, both ends are the extreme laws or interpolate
    between them, and the interval is as wide as the few laws happen to be, whatever ``level`` it is labelled."""
    return math.ceil(2 / (1 - level) - 1e-9)  # 2 / 0.2 is 10.000000000000002 in floating point


def forecast(law: ScalingLaw, boot: Bootstrap, N: float, D: float, level: float = LEVEL, seed: int = 0) -> Forecast:
    """The point prediction and the two central ``level`` intervals at (N, D). Raises FitError when fewer than
    min_resamples(level) resamples gave a law (none at all is the extreme case)."""
    have, need = len(boot.params), min_resamples(level)
    if have < need:
        raise FitError(f"Only {have} of {have + boot.failed} bootstrap resamples of these runs gave a law of this form "
                       f"({boot.failed} did not): a {100 * level:g} % interval needs at least {need}, so that one "
                       "falls beyond each of its ends. These runs pin the law down too loosely to forecast with an "
                       "interval; more runs, spread wider over N and D, help.")
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    logp = boot.log_predictions(N, D)  # (S,)
    lo, hi = np.exp(np.percentile(logp, q))
    # each resample's prediction plus one residual drawn from the runs it was fitted to (counts > 0), re-centred on
    # its own mean so that the scatter widens the interval without shifting it
    rng = np.random.default_rng(seed)
    noisy = np.empty_like(logp)
    for s in range(len(logp)):
        used = boot.residuals[s][boot.counts[s] > 0]
        noisy[s] = logp[s] + rng.choice(used - used.mean())
    plo, phi = np.exp(np.percentile(noisy, q))
    return Forecast(N=float(N), D=float(D), point=float(law.loss(N, D)), law_lower=float(lo), law_upper=float(hi),
                    lower=float(min(plo, lo)), upper=float(max(phi, hi)), level=level)


def score(lower: float, upper: float, point: float, actual: float, alpha: float = ALPHA) -> dict:
    """A forecast against the run's loss: inside the interval or not, the interval score, the point's log error."""
    return {"hit": bool(lower <= actual <= upper), "interval_score": interval_score(lower, upper, actual, alpha),
            "log_error": math.log(actual) - math.log(point)}


# ---------------------------------------------------------------- the next run

def propose(law: ScalingLaw, runs_flops, factor: float = 2.0) -> tuple[float, float]:
    """The compute-optimal (N, D) at ``factor`` times the largest compute (FLOPs, 6ND) among the runs so far."""
    C = factor * float(np.max(runs_flops))
    n, d = law.compute_optimal(C)
    return float(n), float(d)


# ---------------------------------------------------------------- calibration on held-out runs

def holdout(N, D, loss, fit_share: float = 0.7) -> np.ndarray:
    """Which runs to fit (True) and which to forecast: the ``fit_share`` of runs with the least compute 6ND are
    fitted, the rest held out, as a forecaster would meet them (bigger runs come later)."""
    C = np.asarray(N, float) * np.asarray(D, float)
    order = np.argsort(C, kind="stable")
    mask = np.zeros(len(C), bool)
    mask[order[: int(round(fit_share * len(C)))]] = True
    return mask


def calibration(N, D, loss, fit: np.ndarray, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL,
                law: ScalingLaw | None = None, boot: Bootstrap | None = None) -> dict:
    """Fit the law (and its bootstrap) on the runs where ``fit`` is True, forecast every other run, score each:
    the rows, and how many of each kind of interval held. Raises FitError if the fitted runs pin down no law."""
    N, D, loss = (np.asarray(v, float) for v in (N, D, loss))
    if law is None:
        law = fit_scaling_law(N[fit], D[fit], loss[fit])
    if boot is None:
        boot = bootstrap_laws(N[fit], D[fit], loss[fit], law, resamples=resamples, seed=seed)
    rows = []
    for i in np.flatnonzero(~fit):
        fc = forecast(law, boot, N[i], D[i], level, seed)
        s_law = score(fc.law_lower, fc.law_upper, fc.point, loss[i], 1 - level)
        s_run = score(fc.lower, fc.upper, fc.point, loss[i], 1 - level)
        rows.append(dict(N=N[i], D=D[i], compute=FLOPS_PER_PARAM_TOKEN * N[i] * D[i], loss=loss[i], point=fc.point,
                         law_lower=fc.law_lower, law_upper=fc.law_upper, law_hit=s_law["hit"],
                         law_score=s_law["interval_score"], lower=fc.lower, upper=fc.upper, hit=s_run["hit"],
                         score=s_run["interval_score"], log_error=s_run["log_error"]))
    return {"law": law, "boot": boot, "rows": rows, "fitted": int(fit.sum()), "held_out": len(rows),
            "level": level, **summary(rows)}


def summary(rows: list[dict]) -> dict:
    """Hits and mean scores of forecast rows (recomputed from the rows alone)."""
    if not rows:
        return {"law_hits": 0, "hits": 0, "law_mean_score": math.nan, "mean_score": math.nan,
                "mean_abs_log_error": math.nan}
    return {"law_hits": sum(bool(r["law_hit"]) for r in rows), "hits": sum(bool(r["hit"]) for r in rows),
            "law_mean_score": float(np.mean([r["law_score"] for r in rows])),
            "mean_score": float(np.mean([r["score"] for r in rows])),
            "mean_abs_log_error": float(np.mean([abs(r["log_error"]) for r in rows]))}


def fit_or_none(N, D, loss) -> tuple[ScalingLaw | None, str | None]:
    try:
        return fit_scaling_law(N, D, loss), None
    except FitError as e:
        return None, str(e)
