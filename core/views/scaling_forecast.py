"""The rules behind the forecast and repetition parts of the Your scaling law page (pages/scaling_fit.py): a forecast
record (what the law and the learner said before the run), its settling once the run is in, the session's table,
and the sentences that report the shipped calibration and the shipped repetition study. No Streamlit here."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.analysis import forecast as F
from core.analysis.scaling import R_STAR_D, ScalingLaw
from core.serve.fmt import human, pretty_sci, rough_time
from core.data.corpus import TRAIN_FRACTION
from core.training.forecast_run import WIDTHS, PlannedRun, plan_run
from core.training.forecast_study import NEAR_BEST, doubling_gains
from core.views.scaling_study import STATE_LABELS

WIDTH_CHOICES = list(WIDTHS)
FACTOR = 2.0  # the proposal: the compute-optimal run at twice the largest compute so far


@dataclass(frozen=True)
class Proposal:
    N: float          # the law's compute-optimal N and D at FACTOR x the largest compute
    D: float
    plan: PlannedRun  # the nearest run that can train
    note: str


def proposal(law: ScalingLaw, base, rows: list[dict]) -> Proposal:
    """The law's next run for ``base`` (a ui.forecast.Base) and the trainable run nearest to it."""
    flops = [6.0 * r["N"] * r["D"] for r in rows]
    n, d = F.propose(law, flops, FACTOR)
    plan = plan_run(base.meta, n, d, base.rows)
    note = (f"Twice the largest compute so far ({pretty_sci(max(flops))} FLOPs) is best spent, by this law, on "
            f"N = {human(n)} parameters and D = {human(d)} characters; the nearest model that trains here is d = "
            f"{plan.d_model} (N = {human(plan.N)}).")
    return Proposal(n, d, plan, note)


def plan(base, rows: list[dict], d_model: int, tokens: int) -> PlannedRun:
    return plan_run(base.meta, 1.0, float(tokens), base.rows, d_model=int(d_model))


def forecast_for(law: ScalingLaw, boot: F.Bootstrap, p: PlannedRun) -> F.Forecast:
    return F.forecast(law, boot, p.N, p.D)


def plan_note(p: PlannedRun, prop: Proposal) -> str:
    what = "the proposed run" if (p.d_model, p.D) == (prop.plan.d_model, prop.plan.D) else "your choice"
    t = f", {rough_time(p.seconds)} on one core" if p.seconds else ""
    return (f"This is {what}: N = {p.N:,} parameters, D = {p.D:,} characters ({p.steps:,} steps), C = "
            f"{pretty_sci(p.compute)} FLOPs{t}.")


def run_progress(s, d_model: int, D: int) -> tuple[float, str]:
    """(the bar's share, its text) of a forecast run under way, from its core.training.study_job.StudyStatus: the
    step of its steps, its last training loss and the time left at its own pace once it reports them (issue 54:
    before, the bar stood at 0 % through the whole run)."""
    what = f"Training d = {d_model} on {D:,} characters"
    if s.state == "finished" or (s.state == "running" and getattr(s, "total", 0) and s.done >= s.total):
        return 1.0, f"{what}: done"  # running yet done: the run is in, its process is ending (the bar stays full)
    if not getattr(s, "steps", None):  # starting, or no report yet (or a status of before issue 54): the state alone
        return 0.0, f"{what}: {STATE_LABELS[s.state]}" + (f", {rough_time(s.eta_s)} left" if s.eta_s else "")
    share = min(1.0, s.step / s.steps)
    words = f"{what}: step {s.step:,} of {s.steps:,}, training loss {s.loss:.3f}"
    if s.state != "running":
        words += f" ({STATE_LABELS[s.state].lower()})"
    elif s.step >= s.steps:  # every step made: the held-out loss is being measured (seconds)
        words += ", measuring the held-out loss"
    elif s.eta_s is not None:
        words += f", {rough_time(s.eta_s)} left"
    return share, words


def reset_widgets(state, prop: Proposal, base_key: str, runs: int):
    """Put the proposed width and characters in the boxes when the proposal is new (another base, or a run joined)."""
    key = (base_key, runs)
    if state.get("scal_fc_for") != key:
        state["scal_fc_for"] = key
        state["scal_fc_width"] = prop.plan.d_model
        state["scal_fc_tokens"] = int(prop.plan.D)


def reset_bet(state, fc: F.Forecast, base_key: str, p: PlannedRun):
    """The learner's boxes start at the law's point and interval for each new run asked about."""
    key = (base_key, p.d_model, p.D, round(fc.point, 6))
    if state.get("scal_fc_bet_for") != key:
        state["scal_fc_bet_for"] = key
        state["scal_fc_point"] = round(fc.point, 4)
        state["scal_fc_lower"] = round(fc.lower, 4)
        state["scal_fc_upper"] = round(fc.upper, 4)


def unique_of(meta: dict | None) -> int | None:
    """The training part of a study's corpus in characters (the study's D counts them), from its study.json."""
    if not meta or not meta.get("corpus_chars"):
        return None
    return int(meta["corpus_chars"] * TRAIN_FRACTION)


def calibration_table(cal: dict) -> list[dict]:
    return [{"run": r.get("run_id", ""), "loss": f"{r['loss']:.4f}", "law": f"{r['point']:.4f}",
             "80 % (with scatter)": f"{r['lower']:.4f} to {r['upper']:.4f}", "in?": "yes" if r["hit"] else "no",
             "law alone in?": "yes" if r["law_hit"] else "no"} for r in cal["rows"]]


def bet_problem(point: float, lower: float, upper: float) -> str | None:
    """Why a learner's forecast cannot be scored (None when it can)."""
    if not all(math.isfinite(v) and v > 0 for v in (point, lower, upper)):
        return "Each number must be a loss above zero."
    if not lower <= point <= upper:
        return (f"The interval must hold the point: lower {lower:.4f} ≤ point {point:.4f} ≤ upper {upper:.4f} "
                "does not hold.")
    return None


def new_record(base: str, plan, fc: F.Forecast, yours: tuple[float, float, float]) -> dict:
    """What was said before the run: the run, the law's point and intervals, the learner's point and interval."""
    return {"base": base, "d_model": plan.d_model, "steps": plan.steps, "N": plan.N, "D": plan.D,
            "compute": plan.compute, "epochs": plan.epochs, "point": fc.point, "law_lower": fc.law_lower,
            "law_upper": fc.law_upper, "lower": fc.lower, "upper": fc.upper, "level": fc.level,
            "your_point": yours[0], "your_lower": yours[1], "your_upper": yours[2], "actual": None, "row": None}


def settle(record: dict, row: dict) -> dict:
    """The record with the run's loss and every score: the law's interval (with the runs' scatter, the one the page
    offered), the law's narrow interval, and the learner's; alpha = 1 - level."""
    y = float(row["loss"])
    alpha = 1.0 - record["level"]
    law = F.score(record["lower"], record["upper"], record["point"], y, alpha)
    narrow = F.score(record["law_lower"], record["law_upper"], record["point"], y, alpha)
    mine = F.score(record["your_lower"], record["your_upper"], record["your_point"], y, alpha)
    return {**record, "actual": y, "row": row, "law_hit": law["hit"], "law_score": law["interval_score"],
            "law_log_error": law["log_error"], "narrow_hit": narrow["hit"], "your_hit": mine["hit"],
            "your_score": mine["interval_score"], "your_log_error": mine["log_error"]}


def joined_rows(records: list[dict], base: str) -> list[dict]:
    """The runs.csv rows of the settled forecasts made from ``base``: they join its fit."""
    return [r["row"] for r in records if r["base"] == base and r.get("row") is not None]


def record_table(records: list[dict]) -> list[dict]:
    """One line per settled forecast, as the page shows it."""
    out = []
    for r in records:
        if r.get("actual") is None:
            continue
        out.append({"run": f"d{r['d_model']}, D {human(r['D'])}", "loss": r["actual"],
                    "law": r["point"], "law's 80 %": f"{r['lower']:.4f} to {r['upper']:.4f}",
                    "law in?": "yes" if r["law_hit"] else "no", "law's score": r["law_score"],
                    "yours": r["your_point"], "your 80 %": f"{r['your_lower']:.4f} to {r['your_upper']:.4f}",
                    "yours in?": "yes" if r["your_hit"] else "no", "your score": r["your_score"],
                    "law's log error": r["law_log_error"], "your log error": r["your_log_error"]})
    return out


def record_summary(records: list[dict]) -> dict | None:
    """Hits and mean scores of the settled forecasts, recounted from them; None before the first."""
    done = [r for r in records if r.get("actual") is not None]
    if not done:
        return None
    return {"n": len(done), "law_hits": sum(r["law_hit"] for r in done), "your_hits": sum(r["your_hit"] for r in done),
            "law_score": float(np.mean([r["law_score"] for r in done])),
            "your_score": float(np.mean([r["your_score"] for r in done]))}


def winner(summary: dict) -> str:
    """Who forecast better by the mean interval score (lower is better)."""
    if abs(summary["law_score"] - summary["your_score"]) < 1e-12:
        return "The law and you score the same so far."
    better = "You forecast" if summary["your_score"] < summary["law_score"] else "The law forecasts"
    return f"{better} better so far (mean interval score {min(summary['law_score'], summary['your_score']):.4f} " \
           f"against {max(summary['law_score'], summary['your_score']):.4f}; lower is better)."


# ---------------------------------------------------------------- the shipped calibration, in words
def calibration_verdict(cal: dict) -> str:
    n = len(cal["rows"])
    expect = cal["level"] * n
    law, hits = cal["law_hits"], cal["hits"]
    if hits < expect - 1:
        tone = "**too narrow**"
    elif hits > expect + 1:
        tone = "wider than they need be"
    else:
        tone = "about right"
    return (f"Of the {n} larger runs, the law's own {cal['level']:.0%} intervals held {law} and the intervals with "
            f"the runs' scatter {hits}; an honest {cal['level']:.0%} interval holds about {expect:.1f} of {n}. Our "
            f"intervals are {tone}, as Besiroglu et al. (2024) found Chinchilla's: a bootstrap over runs measures how "
            "well the small runs pin the curve, not how far the curve bends beyond them.")


def hint(cal: dict) -> str:
    """A hint for the learner's forecast from the shipped calibration (below on the page)."""
    mean = float(np.mean([r["log_error"] for r in cal["rows"]]))
    way = "lower" if mean < 0 else "higher"
    return (f"A hint from the shipped study (below): fitted to its smaller runs, the law's forecasts of its larger "
            f"ones came out {abs(mean) * 100:.1f} % too {'high' if mean < 0 else 'low'} (the runs were {way}), and "
            f"only {cal['hits']} of its {len(cal['rows'])} 80 % intervals held.")


def bias_sentence(cal: dict) -> str:
    errs = [r["log_error"] for r in cal["rows"]]
    mean = float(np.mean(errs))
    way = "lower" if mean < 0 else "higher"
    return (f"The larger runs came out {abs(mean) * 100:.1f} % {way} than the law predicted, on average (mean |log "
            f"error| {cal['mean_abs_log_error'] * 100:.1f} %).")


def forms_verdict(forms: dict) -> str:
    p, e = forms["plain_rms_held"], forms["effective_rms_held"]
    said = (f"On the held-out runs the RMS log residual is {100 * p:.3f} % for plain L(N, D) and {100 * e:.3f} % for "
            f"L(N, D′) with R* = {forms.get('r_star', R_STAR_D):g}: ")
    if abs(p - e) <= 0.02 * max(p, e):  # within 2 % of each other: no form to prefer
        return said + "**the two forms forecast them equally well**."
    better = "L(N, D′)" if e < p else "plain L(N, D)"
    return said + f"**{better} forecasts them better**."


def epochs_answer(data: dict) -> str:
    """How many passes over the corpus are worth it, from our own runs: what each doubling of passes bought each
    width, and what the fitted R* can and cannot say."""
    rs = data["r_star"]
    lo, hi = rs["near_best"]
    parts, worth = [], []
    for d, steps in doubling_gains(data["epochs"]).items():
        last, before = steps[-1], steps[-2] if len(steps) > 1 else None
        tail = ""
        if before is not None and before["gain"] > 0 and last["gain"] < 0.5 * before["gain"]:
            tail = f", under half of the doubling before ({before['gain']:.3f})"
            worth.append(f"about {last['from']:.0f} passes for d = {d}")
        elif last["gain"] > 0:
            worth.append(f"{last['to']:.0f} passes or more for d = {d}")
        else:
            worth.append(f"no more than {last['from']:.0f} passes for d = {d}")
        parts.append(f"- **d = {d}** gained {last['gain']:.3f} nats from {last['from']:.0f} to {last['to']:.0f} "
                     f"passes{tail}; its gap between training and held-out loss went from {steps[0]['gap']:.3f} at "
                     f"{steps[0]['from']:.0f} passes to {last['gap']:.3f}.")
    grid_top = rs["grid"][1]
    rstar = (f"Fitted to all 33 runs, L(N, D′) is best at R* = {rs['best']:.3g}"
             + (" (the top of the range searched, that is, no decay at all)" if rs["best"] >= grid_top else "")
             + f", and every R* from {lo:.3g} to {hi:.3g} fits within {100 * (NEAR_BEST - 1):.0f} % of that: the runs "
             f"rule out repetition that loses its worth much faster than Muennighoff et al.'s R* = {R_STAR_D:g}, but "
             "cannot tell their value from no decay at all.")
    return ("**From our own runs**, what the last doubling of passes bought:\n\n" + "\n".join(parts)
            + "\n\n**So a pass over Tiny Shakespeare is worth it up to " + ", ".join(worth) + ".** Models this small "
            "cannot learn a million characters by heart, so for them a repeated character is almost as good as a "
            "fresh one; the largest is the first to tire of it. " + rstar)


def law_of(d: dict) -> ScalingLaw:
    return ScalingLaw(**d)


# ---------------------------------------------------------------- a forecast as a class round (the Class page)
def class_round(base_key: str, p: PlannedRun, fc: F.Forecast) -> tuple[str, tuple[str, ...], dict]:
    """(question, four choices, meta) of a class round on the run ``p``: the four bins the law's point and its 80 %
    interval cut the losses into, so a vote says whether the run lands inside the law's interval and on which side."""
    edges = [fc.lower, fc.point, fc.upper]
    choices = (f"below {fc.lower:.3f}", f"{fc.lower:.3f} to {fc.point:.3f}", f"{fc.point:.3f} to {fc.upper:.3f}",
               f"above {fc.upper:.3f}")
    question = f"Where will the held-out loss of d = {p.d_model} trained on {human(p.D)} characters land?"
    meta = {"kind": "forecast", "base": base_key, "d_model": p.d_model, "steps": p.steps, "N": p.N, "D": p.D,
            "epochs": p.epochs, "point": fc.point, "lower": fc.lower, "upper": fc.upper, "law_lower": fc.law_lower,
            "law_upper": fc.law_upper, "level": fc.level, "edges": edges}
    return question, choices, meta


def class_answer(meta: dict, choices, loss: float) -> tuple[str, str]:
    """The bin the run's ``loss`` fell in (one of ``choices``) and the law's score in words."""
    lo, mid, hi = meta["edges"]
    i = 0 if loss < lo else 1 if loss <= mid else 2 if loss <= hi else 3
    s = F.score(meta["lower"], meta["upper"], meta["point"], loss, 1.0 - meta["level"])
    words = (f"The run's held-out loss: {loss:.4f}. The law said {meta['point']:.4f} ({meta['lower']:.4f} to "
             f"{meta['upper']:.4f}, 80 %): {'inside' if s['hit'] else 'outside'} its interval, an interval score of "
             f"{s['interval_score']:.4f} and a log error of {s['log_error']:+.4f}.")
    return choices[i], words


def class_record(meta: dict) -> dict:
    """A session forecast record of a class round (the class's choices are not one interval: the law's stand in)."""
    return {"base": meta["base"], "d_model": meta["d_model"], "steps": meta["steps"], "N": meta["N"], "D": meta["D"],
            "compute": 6.0 * meta["N"] * meta["D"], "epochs": meta["epochs"], "point": meta["point"],
            "law_lower": meta["law_lower"], "law_upper": meta["law_upper"], "lower": meta["lower"],
            "upper": meta["upper"], "level": meta["level"], "your_point": meta["point"],
            "your_lower": meta["lower"], "your_upper": meta["upper"], "actual": None, "row": None}
