"""What the two scaling pages compute about a law, so that they keep only widgets, prose and figures: the sliders'
ranges and clipping and the law the session has chosen (pages/scaling.py sets it, pages/scaling_fit.py reads it), the
compute-optimal split and its tokens per parameter, the famous-models table, the lecture's budget problem, and the
example runs and fit of "Fit the law to your own runs". The study part of the fit page (tiny models trained here) has
its rules in core.views.scaling_study."""
from __future__ import annotations

import math
from dataclasses import dataclass

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.serve.fmt import human, sci
from core.nn.params import count_parameters
from core.analysis.scaling import BUDGET_DEFAULTS, FAMOUS_MODELS, LAW_PRESETS, ScalingLaw, budget_flops, famous_table, \
    fit_scaling_law
from core.analysis.scaling_runs import Runs, parse_runs, synthetic_runs
from core.analysis.forecast import bootstrap_laws, holdout
from core.training.forecast_study import FIT_SHARE, compare_forms

# ---------------------------------------------------------------- the constants' sliders

CUSTOM = "Custom (your sliders)"  # the preset box's entry once a slider has moved
# slider key -> (label, low, high, step, format); A and B move on a log scale, the exponents and E directly
SLIDERS = {
    "scal_logA": ("log₁₀ A", 0.0, 8.0, 0.001, "%.3f"),
    "scal_logB": ("log₁₀ B", 0.0, 8.0, 0.001, "%.3f"),
    "scal_alpha": ("α", 0.01, 1.5, 0.0001, "%.4f"),
    "scal_beta": ("β", 0.01, 1.5, 0.0001, "%.4f"),
    "scal_E": ("L∞ (E)", 0.0, 5.0, 0.0001, "%.4f"),
}


def slider_values(law: ScalingLaw) -> dict:
    """The slider positions showing ``law``, clipped to the slider ranges."""
    raw = {"scal_logA": math.log10(law.A), "scal_logB": math.log10(law.B), "scal_alpha": law.alpha,
           "scal_beta": law.beta, "scal_E": law.E}
    # a slider refuses a value off its range, and shows its step's decimals: clip, then round to them
    return {k: round(min(max(v, SLIDERS[k][1]), SLIDERS[k][2]), 4 if SLIDERS[k][3] < 0.001 else 3)
            for k, v in raw.items()}


def sliders_clip(law: ScalingLaw) -> bool:
    """True when the sliders cannot show ``law``: A or B more than 1 % off, an exponent or E more than 1e-3."""
    shown = slider_values(law)
    # A and B are compared as ratios (they span decades), the others as differences
    return (abs(10 ** shown["scal_logA"] / law.A - 1) > 0.01 or abs(10 ** shown["scal_logB"] / law.B - 1) > 0.01
            or any(abs(shown[k] - v) > 1e-3 for k, v in (("scal_alpha", law.alpha), ("scal_beta", law.beta),
                                                          ("scal_E", law.E))))


def shown_law(preset: str, state) -> ScalingLaw:
    """The law the page shows: the preset's own constants (not their rounded slider positions), or the sliders'."""
    if preset in LAW_PRESETS:
        return LAW_PRESETS[preset]
    return ScalingLaw(10 ** state["scal_logA"], 10 ** state["scal_logB"], state["scal_alpha"], state["scal_beta"],
                      state["scal_E"])


DEFAULT_PRESET = next(iter(LAW_PRESETS))  # what both pages show until the learner picks a law: Chinchilla's


def chosen_preset(state) -> str:
    """The preset box's entry in ``state`` (the session's), as both pages resolve it: DEFAULT_PRESET until the
    learner picks one. The law page starts its sliders from it; the fit page, which has no box, names it."""
    preset = state.get("scal_preset", DEFAULT_PRESET)
    # "Custom" means the sliders' values: without all of them there is no custom law to show
    if preset not in LAW_PRESETS and not all(k in state for k in SLIDERS):
        return DEFAULT_PRESET
    return preset


def chosen_law(state) -> tuple[str, ScalingLaw]:
    """(the preset box's entry, the law the law page shows) for this session's ``state``."""
    preset = chosen_preset(state)
    return preset, shown_law(preset, state)


def custom_state(law: ScalingLaw) -> dict:
    """The session state that makes the law page show ``law`` (as nearly as its sliders can): what the fit page's
    "Use the fitted constants" button writes, and chosen_law reads back."""
    return {**slider_values(law), "scal_preset": CUSTOM}


# ---------------------------------------------------------------- optima, famous models, a budget

# the page measures every law against Chinchilla's own compute, the budget the 2022 paper was about
CHINCHILLA_MODEL = next(m for m in FAMOUS_MODELS if m.name == "Chinchilla")


def split(law: ScalingLaw, C: float) -> tuple[float, float, float]:
    """(N_opt, D_opt, tokens per parameter D_opt / N_opt) of the compute-optimal split of C FLOPs."""
    n, d = law.compute_optimal(C)  # numpy scalars for a float C
    return float(n), float(d), float(d / n)


def preset_ratios(C: float) -> dict[str, float]:
    """Tokens per parameter at the optimum for C, by each published law."""
    return {name: split(law, C)[2] for name, law in LAW_PRESETS.items()}


def size_note(config) -> str:
    """How much larger than the shipped model (``config``) the largest famous model is, as a parenthesis for the
    page's opening paragraph; '' without a shipped model."""
    if config is None:
        return ""
    # every parameter, as the famous models' counts are (embeddings included)
    largest, ours = max(m.N for m in FAMOUS_MODELS), count_parameters(config)["total"]
    return (f" (the largest in the table below, {human(largest)} parameters, has {largest / ours:,.0f} times the "
            f"{ours:,} of this app's shipped model)")


# column -> number format of the famous-models table; the other columns are text already
FAMOUS_FORMATS = {"tokens / parameter": "%.1f", "optimal tokens / parameter": "%.1f", "loss": "%.4f",
                  "loss at the optimum": "%.4f", "lower by": "%.4f"}


def famous_rows(law: ScalingLaw) -> tuple[list[dict], dict]:
    """(the famous models judged by ``law``, as the table shows them; the row of the worst-proportioned one, the
    one that the same compute spent optimally would improve most)."""
    rows = famous_table(law)
    shown = [{"model": r["model"], "parameters": human(r["N"]), "tokens": human(r["D"]),
              "tokens / parameter": r["tokens_per_param"], "compute (FLOPs)": sci(r["compute"]),
              "optimal N": human(r["N_opt"]), "optimal D": human(r["D_opt"]),
              "optimal tokens / parameter": r["opt_tokens_per_param"], "loss": r["loss"],
              "loss at the optimum": r["optimal_loss"], "lower by": r["excess_loss"], "source": r["source"]}
             for r in rows]
    return shown, max(rows, key=lambda r: r["excess_loss"])  # the most loss left on the table for its compute


PEAK_TFLOPS = BUDGET_DEFAULTS["peak_flops"] / 1e12  # the form's default, in the TFLOP/s a datasheet gives


@dataclass(frozen=True)
class Budget:
    C: float                 # training FLOPs the money buys
    gpu_hours: float         # dollars / price per GPU-hour: what the money rents
    N: float                 # the compute-optimal split of C
    D: float
    tokens_per_param: float
    loss: float              # the law's loss at that split

    @property
    def ND(self) -> float:
        """C / 6: the product N D that the budget allows."""
        return self.C / FLOPS_PER_PARAM_TOKEN


def spend(law: ScalingLaw, dollars: float, dollars_per_gpu_hour: float, peak_tflops: float,
          utilisation: float) -> Budget:
    """The lecture's budget problem: what the money buys in FLOPs, and the best model for them."""
    C = budget_flops(dollars, dollars_per_gpu_hour, peak_tflops * 1e12, utilisation)  # the form asks for TFLOP/s
    n, d, ratio = split(law, C)
    return Budget(C, dollars / dollars_per_gpu_hour, n, d, ratio, float(law.loss(n, d)))


def tenfold(law: ScalingLaw) -> tuple[float, float]:
    """(how many times N_opt, how many times D_opt) a ten times bigger budget buys."""
    return 10 ** law.N_exponent, 10 ** law.D_exponent  # N_opt ∝ C^a, D_opt ∝ C^b: ten times C, 10^a and 10^b


# ---------------------------------------------------------------- fitting your runs

EXAMPLE_LAW = "Epoch replication (Besiroglu et al. 2024)"  # the example's runs are drawn from this law
EXAMPLE_RUNS = 250
EXAMPLE_NOISE = 0.01  # relative, log-normal, on each loss


def example_runs() -> tuple[ScalingLaw, Runs]:
    """(the true law, the example's runs drawn from it); the same runs every time (seed 0), so the fit is cached."""
    truth = LAW_PRESETS[EXAMPLE_LAW]
    return truth, synthetic_runs(truth, n=EXAMPLE_RUNS, noise=EXAMPLE_NOISE, seed=0)


def fit_csv(csv_text: str) -> ScalingLaw:
    """The Hoffmann et al. fit of the runs in a CSV. The page caches it keyed on the text, so it takes text; runs
    it with the page run's own thread count (core.serve.threads)."""
    runs = parse_runs(csv_text)
    return fit_scaling_law(runs.N, runs.D, runs.loss, threads=None)


def bootstrap_csv(csv_text: str):
    """(the law, its bootstrap) of the runs in a CSV: core.analysis.forecast.bootstrap_laws from the full fit."""
    runs = parse_runs(csv_text)
    law = fit_scaling_law(runs.N, runs.D, runs.loss, threads=None)
    return law, bootstrap_laws(runs.N, runs.D, runs.loss, law, threads=None)


def forms_csv(csv_text: str, unique_tokens: int) -> dict:
    """Plain L(N, D) and L(N, D') fitted to the smaller runs of a CSV (core.analysis.forecast.holdout), both judged
    on the larger ones: core.training.forecast_study.compare_forms on rows without names."""
    runs = parse_runs(csv_text)
    fit = holdout(runs.N, runs.D, runs.loss, FIT_SHARE)
    rows = [{"run_id": f"N {human(n)}, D {human(d)}", "N": n, "D": d, "loss": l}
            for n, d, l in zip(runs.N, runs.D, runs.loss)]
    return compare_forms([r for r, f in zip(rows, fit) if f], [r for r, f in zip(rows, fit) if not f], unique_tokens)


def fit_table(fit: ScalingLaw, truth: ScalingLaw | None) -> list[dict]:
    """The fitted constants, with the true ones beside them when the runs were drawn from a known law."""
    true = truth.constants() if truth else None  # uploaded or pasted runs have no true law to show
    return [{"constant": name, "fitted": value, **({"true": true[name]} if true else {})}
            for name, value in fit.constants().items()]
