"""The rules behind the study part of the Your scaling law page (pages/scaling_fit.py: tiny models trained here,
core.training.study): which law a study shows (fit.json's, or one fitted on the page), when a study you run is fitted while it
trains, which corpora one can train on, starting one, and the sentences that report a study's numbers, as
core.training.study's card does for its README.

The page passes in ``fit``, its cached csv -> ScalingLaw function (core.views.scaling_view.fit_csv behind st.cache_data
and the compute line): the rules here decide *when* to fit, the page how a fit is cached and queued."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from core.data.corpus import TRAIN_FRACTION, pydoc_text, read_text_file
from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.serve.fmt import g3, human, rough_time, sci
from core.serve.folder_files import lstamp
from core.analysis.scaling import CHINCHILLA_RUNS, LAW_PRESETS, FitError, ScalingLaw
from core.analysis.scaling_runs import MIN_RUNS, Runs, RunsError
from core.views.scaling_view import split
from core.figures.study_figures import UNFITTED
from core.training.study_grid import StudyError
from core.training.study import comparison_rows
from core.training.study_files import dropped_note, read_fit, rows_to_arrays
from core.training.speed import study_estimate
from core.training.study_grid import estimate_seconds
from core.training.study_job import BOOTSTRAP, StudyJob

Fit = Callable[[str], ScalingLaw]  # the page's cached fit of a CSV of runs



def study_stamp(folder) -> tuple:
    """What changes when a study's files are rewritten (core.serve.folder_files.lstamp), so a cache keyed on it rereads
    them; () for a folder that cannot be listed (gone meanwhile), which open_study then reports."""
    try:
        return lstamp(folder)
    except OSError:  # missing or unreadable: the page still opens, and open_study says what is wrong
        return ()


# ---------------------------------------------------------------- the law a study shows

def refit(rows: list[dict], fit: Fit) -> tuple[ScalingLaw | None, str | None]:
    """(the law fitted to the rows, None), (None, why it failed), or (None, None) for fewer than MIN_RUNS rows."""
    if len(rows) < MIN_RUNS:
        return None, None
    N, D, loss = rows_to_arrays(rows)
    try:
        # through CSV text: the fit is cached on the text, and parse_runs checks the rows as it checks an upload
        return fit(Runs(N, D, loss).to_csv()), None
    except (FitError, RunsError) as e:
        return None, str(e)


@dataclass
class StudyFit:
    """A study's law and what the page says about it."""
    law: ScalingLaw | None = None
    intervals: dict | None = None   # 95 % bootstrap intervals, from fit.json
    boot: dict | None = None        # fit.json's whole bootstrap record (resamples, failures)
    warnings: list[str] = field(default_factory=list)
    fit_error: str | None = None    # why the page's own fit failed
    unfitted: str = UNFITTED        # the figure's title while there is no law
    waiting: str = ""               # a caption while too few runs are in to fit


def _from_json(fit_json: dict | None, out: StudyFit) -> StudyFit:
    if fit_json:  # fit.json holds the law and the intervals, which only the study's own bootstrap makes
        out.law = ScalingLaw(**fit_json["law"])
        out.intervals, out.boot = fit_json["bootstrap"]["intervals"], fit_json["bootstrap"]
    return out


def shipped_fit(rows: list[dict], bad: list, fit_json: dict | None, problems: list[str], fit: Fit) -> StudyFit:
    """The shipped study's law: fit.json's, or else fitted here to its usable runs (no intervals then); warnings
    name what could not be read or used: open_study's problems, the runs left out, a failed fit."""
    out = StudyFit()
    if rows:  # with no usable runs there is nothing to fit or to show, only the warnings
        if not fit_json:  # no fit.json, or one open_study refused (it named why in problems)
            out.law, out.fit_error = refit(rows, fit)
        _from_json(fit_json, out)
        if problems and out.law is not None and fit_json is None:  # the fit made here stands in for the file's
            problems = [f"{problems[0]}; the fit shown is made here from its runs, without intervals"]
    # in the order a reader needs them: the files first, then the runs left out, then the fit
    out.warnings = problems + ([dropped_note(bad)] if bad else []) + ([out.fit_error] if out.fit_error else [])
    return out


def live_fit(status, rows: list[dict], folder, fit: Fit) -> StudyFit:
    """The live-fit rule of a study you run: its usable runs are fitted on the page from MIN_RUNS on while it
    trains; once it has finished, fit.json (with the intervals) replaces that fit, unless it cannot be read."""
    out = StudyFit()
    # fitted even when fit.json will replace it: the page's fit of a finished study is then in its cache already
    out.law, out.fit_error = refit(rows, fit)
    fit_json = None
    if status.state == "finished":
        try:
            fit_json = read_fit(folder)
        except StudyError as e:  # a broken fit.json costs the intervals, not the fit
            out.warnings.append(f"{e}; the fit shown is made here from the runs, without intervals.")
    _from_json(fit_json, out)
    if status.total < MIN_RUNS and status.done == status.total:  # a whole grid too small ever to be fitted
        out.unfitted = f"its {len(rows)} runs (too few to fit five constants: the fit needs {MIN_RUNS})"
    # still short of MIN_RUNS in a grid that has enough: say when the fit will come (a failed fit says why instead)
    if out.law is None and not out.fit_error and status.total >= MIN_RUNS:
        out.waiting = f"{len(rows)} runs so far; the fit starts at {MIN_RUNS}."
    return out


def comparison_table(law: ScalingLaw, intervals: dict | None) -> list[dict]:
    """core.training.study.comparison_rows as the page shows them: each interval as 'low to high', '–' without one."""
    return [{"constant": r["constant"], "this study": r["this study"],
             "95% interval": "–" if intervals is None else f"{g3(r['95% low'])} to {g3(r['95% high'])}",
             "Chinchilla 2022": r["Chinchilla 2022"], "Epoch 2024": r["Epoch 2024"]}
            for r in comparison_rows(law, intervals)]


def fit_quality(rows: list[dict], law: ScalingLaw) -> tuple[float, float]:
    """(R² of log loss, RMS error of log loss in percent) of the law over the rows."""
    N, D, loss = rows_to_arrays(rows)
    return law.r2_log(N, D, loss), 100 * law.rms_log_error(N, D, loss)


# ---------------------------------------------------------------- what the page says about a study

def intervals_note(boot: dict | None, intervals: dict | None) -> str:
    """The caption under the constants: which ones compare with the papers', and where the intervals come from."""
    note = ("E is in nats per character here and in nats per token in the papers, so it cannot be compared with "
            "theirs; nor can A and B, which carry the units of N and D. ")
    if boot is not None:
        note += (f"Intervals: 2.5th to 97.5th percentile of {boot['resamples'] - boot['failed']} refits to runs drawn "
                 f"with replacement (a bootstrap over runs; {boot['failed']} of {boot['resamples']} resamples pinned "
                 "down no law). Wide intervals on the constants go with a narrow band of predictions: a larger α "
                 "with a lower E fits these runs almost as well as a smaller α with a higher E.")
    elif intervals is None:
        note += "The intervals come when the study has finished: it then refits resampled runs."
    return note


def scale_note(law: ScalingLaw, rows: list[dict]) -> str:
    """Tokens per parameter at the median run's compute by this fit and by the published constants, and how many
    decades below Hoffmann et al.'s smallest run that compute lies."""
    N, D, _ = rows_to_arrays(rows)
    C = float(np.median(FLOPS_PER_PARAM_TOKEN * N * D))  # the median run stands for the study's scale
    laws = (("this fit", law), ("Chinchilla's constants", LAW_PRESETS["Chinchilla (Hoffmann et al. 2022)"]),
            ("Epoch's", LAW_PRESETS["Epoch replication (Besiroglu et al. 2024)"]))
    # whole numbers from 10 on; below, one decimal tells 5.7 from 6
    said = ", ".join(f"{r:.0f} by {name}" if r >= 10 else f"{r:.1f} by {name}"
                     for name, r in ((name, split(l, C)[2]) for name, l in laws))
    # Hoffmann et al.'s smallest model on their smallest budget: the low corner of the range the laws were fitted on
    smallest = FLOPS_PER_PARAM_TOKEN * CHINCHILLA_RUNS["N"][0] * CHINCHILLA_RUNS["D"][0]
    return (f"At C = {sci(C)} FLOPs (the median run's compute) the compute-optimal number of tokens per parameter "
            f"is {said}. Hoffmann et al.'s smallest runs used about {sci(smallest)} FLOPs, with N counting every "
            "parameter and D counting BPE tokens: on this map the published frontiers are extrapolated "
            f"{math.log10(smallest / C):.0f} decades down, to another unit of D.")


def shipped_summary(meta: dict | None, rows: list[dict]) -> str:
    """What the shipped study trained, for the section's opening paragraph ('' when its study.json is unread)."""
    if not meta:
        return ""
    g = meta["grid"]  # the grid as study.json records it; the budgets are the runs' own D, whole steps of characters
    return (f"The study below did that on this project's machine: {len(rows)} character-level models, widths "
            f"d = {', '.join(map(str, g['widths']))} at depth {g['n_layers']}, each trained on "
            f"{', '.join(human(t) for t in sorted({r['D'] for r in rows}))} characters of {meta['corpus']}, with the "
            "training loop of the Training page. Below it you can run a grid yourself and watch the points arrive.")


def wall_note(meta: dict, cores: int | None) -> str:
    """'The shipped study took about 19 minutes of wall time on <machine>', and the load it shared the machine
    with when that was over 1.5 times the cores (its times are then longer than an idle machine's)."""
    sessions = meta.get("sessions", [])
    wall = sum(x.get("wall_s", 0) for x in sessions)  # a study resumed after a stop has several sessions
    loads = [v for x in sessions for v in (x.get("load_start"), x.get("load_end")) if v is not None]
    busy = (f", shared with other work (load average {min(loads):.1f} to {max(loads):.1f} on {cores} cores)"
            if loads and max(loads) > 1.5 * (cores or 1) else "")
    # the latest session's machine, its model name only (machine_description adds the cores after a comma)
    machine = f" on {sessions[-1]['machine'].split(',')[0]}" if sessions and sessions[-1].get("machine") else ""
    return f"The shipped study took {rough_time(wall)} of wall time{machine}{busy}"


def exponent_notes(meta: dict, rows: list[dict]) -> dict[str, str]:
    """The study's own numbers in 'Why your exponents need not be Chinchilla's', one piece per bullet: ``here``
    (the corpus, read how many times over), ``lever`` (the span of N and D), ``shape`` (the smallest model) and
    ``short`` (a bullet of its own: the fewest optimisation steps of any run). All '' without runs."""
    if not rows:
        return dict(here="", lever="", shape="", short="")
    Ns, Ds = [r["N"] for r in rows], [r["D"] for r in rows]
    passes = max(Ds) / (TRAIN_FRACTION * meta["corpus_chars"])  # the largest budget over the training part
    m = min(rows, key=lambda r: r["N"])  # the smallest model: its shape, not only its count, limits it
    return dict(
        here=(f"Tiny Shakespeare is one author's plays, {human(meta['corpus_chars'])} characters, and the largest "
              f"budget here reads its training part {passes:.1f} times over. "),
        lever=(f"Here N spans {max(Ns) / min(Ns):.0f}× ({human(min(Ns))} to {human(max(Ns))} parameters) and D "
               f"{max(Ds) / min(Ds):.0f}×; "),
        shape=(f" The smallest model (d = {m['d_model']}, {m['n_layers']} blocks, {m['n_heads']} "
               f"head{'s' if m['n_heads'] > 1 else ''}) is limited by its shape as much as by its count."),
        short=(f"\n- **Short runs.** On the smallest budget a run takes only {min(r['steps'] for r in rows):,} "
               "optimisation steps, so its loss says how far the optimiser got as much as how much text it saw. The "
               "loss then falls steeply as D grows, which makes β large, and a large β against a small α sends "
               "the compute-optimal frontier towards bigger models."))


def grid_estimate(grid, text: str, shipped_rows: list[dict]):
    """How long ``grid`` takes on ``text`` here: core.training.speed.study_estimate (each width timed on a few steps,
    a refit of the law timed, on this server), or where nothing can be timed, the seconds the shipped study's runs
    suggest (core.training.study.estimate_seconds, no fit), or None."""
    try:
        return study_estimate(grid, len(text), len(set(text)), None, BOOTSTRAP)
    except Exception:  # noqa: BLE001 - no timing possible here: the shipped study's runs still give an idea
        return estimate_seconds(grid, shipped_rows)


def grid_note(grid, estimate, cores: int | None) -> str:
    """What a grid trains, how long it takes, and whether its runs are enough to fit. ``estimate``: a
    core.training.speed.StudyEstimate (its phases, timed on this machine), seconds (from the shipped study's
    runs), or None."""
    budgets = ", ".join(human(grid.steps(t) * grid.tokens_per_step) for t in grid.tokens)  # D as trained: whole steps
    runs = len(grid.widths) * len(grid.tokens)
    if estimate is None:
        took = ""
    elif hasattr(estimate, "seconds"):  # in phases, each named as the progress bar will name it
        took = (f" It takes {rough_time(estimate.seconds)} here ({cores} cores, as busy as they are now): "
                f"{rough_time(estimate.start)} starting the workers, {rough_time(estimate.runs)} training (each width timed on a few steps on this server)"
                + (f" and {rough_time(estimate.fit)} fitting the law and its intervals (a fit and its bootstrap "
                   "refits, timed here too)" if estimate.fit else "") + "; longer if others start training.")
    else:
        took = (f" It takes {rough_time(estimate)} on {cores} idle cores (from the shipped study's runs), longer "
                "while others train.")
    return (f"Widths d = {', '.join(map(str, grid.widths))} at depth {grid.n_layers}; budgets D = {budgets} characters."
            + took
            + (f" {runs} runs are too few to fit five constants: this grid only shows the trend (the fit needs "
               f"{MIN_RUNS})." if runs < MIN_RUNS else ""))


# ---------------------------------------------------------------- your study: start it, say where it is

def study_corpora(shakespeare: Path | None) -> dict[str, str]:
    """key -> label of the corpora a grid can train on: Tiny Shakespeare where it was found (``shakespeare``, from
    core.data.corpus.shakespeare_path), Python's reference documentation always."""
    corpora = {"shakespeare": f"Tiny Shakespeare ({shakespeare.name})"} if shakespeare is not None else {}
    corpora["pydoc"] = "Python's reference documentation (ships with Python)"
    return corpora


def study_corpus(key: str, shakespeare: Path | None) -> tuple[str, str, Path | None]:
    """(name, text, path) of corpus ``key`` as start_study takes them; path None: pydoc's text exists only in memory,
    so start_study writes it into the study's folder."""
    name = study_corpora(shakespeare)[key].split(" (")[0]  # the label without its parenthesis: the card's name
    if key == "shakespeare":
        return name, read_text_file(shakespeare), shakespeare
    return name, pydoc_text(), None


def start_study(grid_name: str, corpus_name: str, text: str, path: Path | None = None,
                old: StudyJob | None = None) -> StudyJob:
    """A new study of ``grid_name``, started; the session's ``old`` study is stopped only once the new one runs.
    ``path``: the corpus file, or None to write ``text`` into the study's folder (the child process reads a file).
    Raises core.training.study_job.BusyError or StudyError when refused, and the old study goes on."""
    folder = StudyJob.new_folder()  # a fresh temporary folder per start: a replaced study's files are never reused
    if path is None:
        path = folder / "corpus.txt"
        path.write_text(text, encoding="utf-8")
    new = StudyJob(path, grid_name, folder=folder, temporary=True, corpus_name=corpus_name)
    new.start()  # raises before anything changes for the old study
    if old is not None:
        old.stop(wait=None)  # not waited for: its processes end on their own, the page goes on
    return new


# one label per core.training.study_job.STATES, for the progress bar
STATE_LABELS = {"new": "Not started", "queued": "Waiting for the server's cores", "starting": "Starting the workers",
                "running": "Training",
                "fitting": "Fitting the law and its intervals", "paused": "Paused",
                "stopping": "Stopping", "stopped": "Stopped", "finished": "Finished", "failed": "Failed"}


def progress(status, grid_name: str, corpus_name: str) -> tuple[float, str]:
    """(the share of runs done, the progress bar's text)."""
    eta = f", {rough_time(status.eta_s)} left" if status.eta_s else ""
    return (status.done / max(1, status.total),  # a grid of 0 runs reads as 0, not a ZeroDivisionError
            f"{STATE_LABELS[status.state]}: {status.done} of {status.total} runs done{eta} "
            f"({grid_name} grid on {corpus_name})")
