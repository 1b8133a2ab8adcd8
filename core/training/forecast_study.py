"""What the shipped studies say about forecasting and about repetition (issue 45): ``python -m core.forecast_study``
prints the report (``bench/results/scaling-forecast.md``) and, with ``--out FOLDER``, writes ``forecast.json`` there
(the shipped one is ``assets/studies/shakespeare-char/forecast.json``).

- **Calibration.** The law and its bootstrap are fitted on the shipped study's runs of least compute (FIT_SHARE of
  them); every larger run is forecast, and each of the two 80 % intervals (the law's, and the law's with the runs'
  scatter) is scored against the run's loss.
- **Two forms.** Plain L(N, D) and L(N, D') with Muennighoff et al.'s effective data (R* = 15.4, D counted against
  the corpus's training part) are fitted to the full study (at most three passes) and forecast the epochs study's
  runs (6 to 24 passes) held out.
- **Our R*.** L(N, D'(R*)) fitted to both studies' runs for R* on a grid: the R* of the least objective.
- **Epochs.** Each width of the epochs study with its loss at every number of passes, from both studies.

The page reads forecast.json (read_forecast checks it); the rows can be recounted from it, and a slow test
recomputes it from runs.csv.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from core.analysis import forecast as F
from core.analysis.scaling import R_STAR_D, FitError, ScalingLaw, effective_data, fit_scaling_law
from core.analysis.scaling_repeat import R_STAR_GRID, epochs_worth_it, fit_effective, profile_r_star
from core.serve.paths import REPO_ROOT
from core.data.corpus import TRAIN_FRACTION
from core.training.study_files import SHIPPED_STUDY, _read_json, read_meta, read_rows, usable_rows
from core.serve.folder_files import write_atomic
from core.training.cli_args import Outputs, json_with, out_problem, study_parser
from core.training.study_grid import StudyError

EPOCHS_STUDY = REPO_ROOT / "assets" / "studies" / "shakespeare-char-epochs"
FORECAST_JSON = "forecast.json"
FIT_SHARE = 0.7  # the smaller 70 % of runs by compute are fitted, the larger 30 % forecast
NEAR_BEST = 1.05  # R* values whose objective is within 5 % of the least: the ones the runs cannot tell apart


def unique_tokens(meta: dict) -> int:
    """The corpus's training part in tokens (characters): what a run's D is counted against."""
    return int(meta["corpus_chars"] * TRAIN_FRACTION)


def _rows(folder) -> tuple[dict, list[dict]]:
    meta = read_meta(folder)
    good, _ = usable_rows(read_rows(Path(folder) / "runs.csv"))
    return meta, good


def _arrays(rows):
    return (np.array([r[k] for r in rows], float) for k in ("N", "D", "loss"))


def calibrate(rows: list[dict], resamples: int = F.RESAMPLES, seed: int = 0) -> dict:
    N, D, L = _arrays(rows)
    fit = F.holdout(N, D, L, FIT_SHARE)
    cal = F.calibration(N, D, L, fit, resamples=resamples, seed=seed)
    ids = [r["run_id"] for r in rows]
    held = [ids[i] for i in np.flatnonzero(~fit)]
    for row, run_id in zip(cal["rows"], held):
        row["run_id"] = run_id
    return {"law": asdict(cal["law"]), "fitted": [ids[i] for i in np.flatnonzero(fit)], "rows": cal["rows"],
            "resamples": resamples, "failed": cal["boot"].failed, "seed": seed, "level": cal["level"],
            **F.summary(cal["rows"])}


def compare_forms(fit_rows: list[dict], held_rows: list[dict], unique: int, r_star: float = R_STAR_D) -> dict:
    """Both forms fitted to ``fit_rows``, their predictions and log residuals for every run (held ones marked)."""
    N, D, L = _arrays(fit_rows)
    plain = fit_scaling_law(N, D, L)
    eff = fit_effective(N, D, L, unique, r_star)
    out = []
    for r, held in [(r, False) for r in fit_rows] + [(r, True) for r in held_rows]:
        p = float(plain.loss(r["N"], r["D"]))
        e = float(eff.loss(r["N"], effective_data(unique, r["D"], r_star)))
        out.append({"run_id": r["run_id"], "N": r["N"], "D": r["D"], "epochs": r["D"] / unique, "loss": r["loss"],
                    "held_out": held, "plain": p, "effective": e, "plain_resid": math.log(r["loss"] / p),
                    "effective_resid": math.log(r["loss"] / e)})
    return {"unique_tokens": unique, "r_star": r_star, "plain_law": asdict(plain), "effective_law": asdict(eff),
            "rows": out, **form_summary(out)}


def form_summary(rows: list[dict]) -> dict:
    """RMS of each form's log residuals over the held-out runs and over the fitted ones (recomputed from rows)."""
    def rms(key, held):
        v = [r[key] for r in rows if r["held_out"] == held]
        return float(np.sqrt(np.mean(np.square(v)))) if v else math.nan
    return {"plain_rms_held": rms("plain_resid", True), "effective_rms_held": rms("effective_resid", True),
            "plain_rms_fit": rms("plain_resid", False), "effective_rms_fit": rms("effective_resid", False)}


def r_star_fit(rows: list[dict], unique: int) -> dict:
    N, D, L = _arrays(rows)
    prof = profile_r_star(N, D, L, unique)
    best = min(prof, key=lambda p: p["objective"])
    near = [p["r_star"] for p in prof if p["objective"] <= NEAR_BEST * best["objective"]]
    return {"profile": [{"r_star": p["r_star"], "objective": p["objective"], "rms_log": p["rms_log"],
                         "law": asdict(p["law"])} for p in prof],
            "best": best["r_star"], "half_worth_epoch": epochs_worth_it(best["r_star"]),
            "near_best": [min(near), max(near)], "grid": [min(R_STAR_GRID), max(R_STAR_GRID)]}


def epochs_table(full: list[dict], epochs: list[dict], unique: int) -> list[dict]:
    widths = sorted({r["d_model"] for r in epochs})
    rows = [r for r in full + epochs if r["d_model"] in widths]
    return sorted(({"d_model": r["d_model"], "N": r["N"], "D": r["D"], "epochs": r["D"] / unique, "loss": r["loss"],
                    "train_loss": r["train_loss"]} for r in rows), key=lambda r: (r["d_model"], r["D"]))


def analyse(full_folder=SHIPPED_STUDY, epochs_folder=EPOCHS_STUDY, resamples: int = F.RESAMPLES) -> dict:
    meta, full = _rows(full_folder)
    emeta, epochs = _rows(epochs_folder)
    if meta.get("corpus_sha256") != emeta.get("corpus_sha256"):
        raise StudyError(f"{epochs_folder} was trained on another corpus than {full_folder}")
    unique = unique_tokens(meta)
    return {"made_by": "python -m core.forecast_study", "corpus": meta.get("corpus"), "unique_tokens": unique,
            "fit_share": FIT_SHARE, "calibration": calibrate(full, resamples),
            "forms": compare_forms(full, epochs, unique), "r_star": r_star_fit(full + epochs, unique),
            "epochs": epochs_table(full, epochs, unique)}


def read_forecast(folder=SHIPPED_STUDY) -> dict | None:
    """forecast.json of the shipped study, or None where there is none; StudyError naming the file when it lacks
    what the page reads, or its rows do not add up to its own counts."""
    path = Path(folder) / FORECAST_JSON
    if not path.is_file():
        return None
    data = _read_json(path)
    try:
        cal, forms, rstar = data["calibration"], data["forms"], data["r_star"]
        ScalingLaw(**cal["law"]), ScalingLaw(**forms["plain_law"]), ScalingLaw(**forms["effective_law"])
        recount = F.summary(cal["rows"])
        ok = (recount["hits"] == cal["hits"] and recount["law_hits"] == cal["law_hits"]
              and all(np.isfinite(r[k]) for r in cal["rows"] for k in ("N", "D", "loss", "lower", "upper"))
              and isinstance(rstar["best"], (int, float)) and isinstance(data["epochs"], list))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise StudyError(f"{path} is not a forecast analysis: it lacks the calibration, the two forms or R*, or its "
                         "rows do not add up to its counts")
    return data


def doubling_gains(rows: list[dict]) -> dict[int, list[dict]]:
    """Per width, what each doubling of passes bought: the loss before and after and the train-held-out gap,
    from the epochs table (rows at 3, 6, 12 and 24 passes)."""
    out = {}
    for d in sorted({r["d_model"] for r in rows}):
        mine = sorted((r for r in rows if r["d_model"] == d and r["epochs"] > 2), key=lambda r: r["epochs"])
        out[d] = [{"from": a["epochs"], "to": b["epochs"], "gain": a["loss"] - b["loss"],
                   "gap": b["loss"] - b["train_loss"]} for a, b in zip(mine, mine[1:])]
    return out


def epochs_line(data: dict) -> str:
    """The runs' own answer, in a sentence per width."""
    parts = []
    for d, steps in doubling_gains(data["epochs"]).items():
        gains = ", ".join(f"{s['from']:.0f}→{s['to']:.0f}: {s['gain']:.3f}" for s in steps)
        parts.append(f"d = {d} gained {gains} nats per doubling of passes (train-held-out gap {steps[0]['gap']:.3f} "
                     f"→ {steps[-1]['gap']:.3f})")
    return "; ".join(parts) + "."


# ---------------------------------------------------------------- the report
def report(data: dict) -> str:
    cal, forms, rs = data["calibration"], data["forms"], data["r_star"]
    n = len(cal["rows"])
    lines = [
        "# Scaling laws that forecast (issue 45)", "",
        f"Made by `{data['made_by']}` from `assets/studies/shakespeare-char` (24 runs, at most 3 passes over the "
        f"corpus) and `assets/studies/shakespeare-char-epochs` (9 runs, 6 to 24 passes); the corpus's training part "
        f"is {data['unique_tokens']:,} characters.", "",
        "## 1. Calibration: fit the smaller runs, forecast the larger ones", "",
        f"The law and {cal['resamples']} bootstrap refits ({cal['failed']} failed) are fitted on the "
        f"{len(cal['fitted'])} runs of least compute; the {n} larger runs are forecast. 80 % intervals: *law* is the "
        "spread of the refitted laws' predictions (what papers publish), *forecast* adds each resample's run-to-run "
        "scatter.", "",
        "| run | N | D | loss | law's point | law's 80 % | in? | forecast 80 % | in? | log error |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in cal["rows"]:
        lines.append(f"| {r['run_id']} | {r['N']:,.0f} | {r['D']:,.0f} | {r['loss']:.4f} | {r['point']:.4f} | "
                     f"{r['law_lower']:.4f} to {r['law_upper']:.4f} | {'yes' if r['law_hit'] else 'no'} | "
                     f"{r['lower']:.4f} to {r['upper']:.4f} | {'yes' if r['hit'] else 'no'} | {r['log_error']:+.4f} |")
    lines += ["", f"**Held:** the law's interval {cal['law_hits']} of {n}, the forecast interval {cal['hits']} of {n} "
              f"(an honest 80 % interval holds about {0.8 * n:.1f}). Mean interval score (α = 0.2): law "
              f"{cal['law_mean_score']:.4f}, forecast {cal['mean_score']:.4f}. Mean |log error| of the point "
              f"{cal['mean_abs_log_error']:.4f}.", "",
              "## 2. Two forms on runs that repeat their data", "",
              f"Fitted to the 24 runs of the full study, forecasting the 9 runs of the epochs study (R* = "
              f"{forms['r_star']}):", "",
              "| form | RMS log residual, fitted runs | RMS log residual, held-out runs |", "|---|---|---|",
              f"| plain L(N, D) | {forms['plain_rms_fit']:.4f} | {forms['plain_rms_held']:.4f} |",
              f"| L(N, D') | {forms['effective_rms_fit']:.4f} | {forms['effective_rms_held']:.4f} |", "",
              "| run | passes | loss | plain | residual | L(N, D') | residual |", "|---|---|---|---|---|---|---|"]
    for r in forms["rows"]:
        if r["held_out"]:
            lines.append(f"| {r['run_id']} | {r['epochs']:.1f} | {r['loss']:.4f} | {r['plain']:.4f} | "
                         f"{r['plain_resid']:+.4f} | {r['effective']:.4f} | {r['effective_resid']:+.4f} |")
    lines += ["", "## 3. The R* of our own runs", "",
              f"L(N, D'(R*)) fitted to all 33 runs for {len(rs['profile'])} values of R* from {rs['grid'][0]:g} to "
              f"{rs['grid'][1]:g}: the least objective is at **R* = {rs['best']:.3g}** (Muennighoff et al.: 15.4); "
              f"every R* from {rs['near_best'][0]:.3g} to {rs['near_best'][1]:.3g} fits within "
              f"{100 * (NEAR_BEST - 1):.0f} % of that objective.", "", epochs_line(data), "",
              "| R* | Huber objective | RMS log error |", "|---|---|---|"]
    lines += [f"| {p['r_star']:.3g} | {p['objective']:.4g} | {p['rms_log']:.4f} |" for p in rs["profile"]]
    lines += ["", "## 4. Loss against passes, by width", "", "| d | passes | loss | train loss |", "|---|---|---|---|"]
    lines += [f"| {r['d_model']} | {r['epochs']:.2f} | {r['loss']:.4f} | {r['train_loss']:.4f} |"
              for r in data["epochs"]]
    return "\n".join(lines) + "\n"


PROG = "python -m core.forecast_study"
MIN_RESAMPLES = 10  # an 80 % interval's tails are a tenth of the resamples each: fewer than 10 leaves one empty
MAX_RESAMPLES = 2000  # refitted in one batch (core.analysis.forecast.bootstrap_laws): 10 x the default, minutes


def outputs():
    """What this command writes into --out (core.training.cli_args.Outputs): forecast.json, and only one it made
    (a forecast run's folder holds a grid file of that name)."""
    return Outputs(PROG, "a forecast analysis", files=((FORECAST_JSON, lambda p: json_with(p, "calibration", "forms",
                                                                                           "r_star")),))


def main(argv=None) -> int:
    p = study_parser(PROG, __doc__.split("\n\n")[0], engine=False, out_required=False,
                     out_help="the folder to write forecast.json in; without it nothing is written (no default: the "
                     "shipped study's forecast.json is a shipped result; to remake it, --out "
                     "assets/studies/shakespeare-char --overwrite > bench/results/scaling-forecast.md)",
                     overwrite_help="replace the forecast.json in --out, and write in a folder holding other files (a "
                     "study's: they stay as they are)")
    p.add_argument("--resamples", type=int, default=F.RESAMPLES, help=f"bootstrap refits, {MIN_RESAMPLES} to "
                   f"{MAX_RESAMPLES:,} (default {F.RESAMPLES})")
    p.add_argument("--check", action="store_true", help="print the report; write nothing (as without --out)")
    args = p.parse_args(argv)
    if not MIN_RESAMPLES <= args.resamples <= MAX_RESAMPLES:
        p.error(f"--resamples must be from {MIN_RESAMPLES} to {MAX_RESAMPLES:,} (each tail of an 80 % interval is a "
                f"tenth of them: fewer leave it empty), got {args.resamples:,}")
    if args.check and args.out is not None:
        p.error("--check writes nothing: leave out --out, or --check")
    if args.overwrite and args.out is None:
        p.error("--overwrite applies to --out FOLDER")
    if args.out is not None:
        problem = out_problem(args.out, outputs(), args.overwrite)  # before the minutes of refits
        if problem:
            p.error(problem)
    try:
        data = analyse(resamples=args.resamples)
    except (StudyError, FitError, OSError) as e:  # a shipped study's file damaged or missing: in words
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    text = report(data)
    if args.out is not None:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(args.out) / FORECAST_JSON, json.dumps(data, indent=1) + "\n")
    print(text, end="")  # the report: bench/results/scaling-forecast.md is this output
    return 0
