"""A scaling study: a grid of small models (several sizes N) trained on several amounts of text (token budgets D),
each once, with the project's own training loop; the runs go into ``runs.csv`` and Hoffmann et al.'s L(N, D) is
fitted to them. N is the non-embedding parameter count, D the characters seen, the loss the held-out loss in nats
per character (core.training.study_grid says why each).

- core.training.study_grid: the grids, ``RunSpec`` and ``train_one(spec) -> row``, a plain function: one model, one
  budget, one seed, one torch thread.
- core.training.study_engines: ``LocalEngine`` (a process pool on this machine, the default) or ``RayEngine`` (Ray tasks)
  only schedule it; the same specs give the same rows on either.
- core.training.study_run: ``run_study``, one session: the runs runs.csv lacks, each written in as it finishes.
- core.training.study_files: runs.csv, study.json, fit.json and progress.json, written atomically and read with checks.
- here: the fit of a finished study, its card (README.md) and the command line. Each name is imported from the
  module that defines it.

Command line: ``python -m core.study --corpus FILE --grid tiny|small|full --engine local|ray --out DIR``. The other
studies are definitions on the same pieces (core.training.study_table's session, study_run.each_row's loop,
cli_args.study_parser's flags) and run from here too: ``python -m core.study variants|bpe-induction|forecast ...``
takes what ``python -m core.variants ...`` (and so on) takes.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from core.analysis import scaling_runs  # as a module: MIN_RUNS read at each fit (tests lower it)
from core.analysis.scaling import CHINCHILLA, EPOCH_2024, FitError, ScalingLaw, bootstrap_fit, fit_scaling_law
from core.training.cli_args import Outputs, json_with, out_problem, study_parser, study_problem
from core.data.corpus import TRAIN_FRACTION, read_text_file
from core.training.study_engines import StudyStopped, make_engine
from core.training.study_files import (CARD, FIT_JSON, PROGRESS_JSON, RUNS_CSV, STUDY_JSON, read_meta, read_progress,
                                       read_rows, rows_to_arrays, usable_rows)
from core.serve.folder_files import write_atomic
from core.training.study_grid import GRIDS, MAX_EPOCHS, N_CONVENTION, StudyError, resolve_grid
from core.training.study_run import Progress, run_study

PARENT_ENV = "TE_STUDY_PARENT"  # set by core.training.study_job: the study stops when the app that started it is gone


# ---------------------------------------------------------------- the fit of a finished study

MAX_BOOTSTRAP = 2000  # refits: about half a second to a second each, so up to half an hour
REFIT_SHARE = 0.7  # a bootstrap refit (300 starts) against the full fit (4,500): measured 0.5-1.2 s against 1.0-1.2 s


def fit_study(rows: list[dict], resamples: int = 200, seed: int = 0, on_fit=None) -> dict:
    """The Hoffmann et al. fit of L(N, D) to the rows, with bootstrap intervals over runs (core.analysis.scaling).
    ``on_fit(seconds)``: called once the full fit is done, with the seconds the refits should take (from its own
    time), before they start."""
    good, bad = usable_rows(rows)  # a diverged run is left out, and named in "dropped"
    N, D, loss = rows_to_arrays(good)  # (R,) each, R = the usable runs
    t0 = time.perf_counter()
    law = fit_scaling_law(N, D, loss)
    if on_fit is not None:
        on_fit(resamples * REFIT_SHARE * (time.perf_counter() - t0))
    # resampled by run, since a run is one measurement; a fixed seed gives the same rows the same intervals
    boot = bootstrap_fit(N, D, loss, law, resamples=resamples, seed=seed)
    return {"runs": len(good), "law": asdict(law), "r2_log": law.r2_log(N, D, loss),
            "rms_log": law.rms_log_error(N, D, loss), "bootstrap": boot, "N_convention": N_CONVENTION,
            "dropped": [{"run_id": r.get("run_id"), "reason": why} for r, why in bad]}


COMPARED = (("alpha", "α (capacity exponent)"), ("beta", "β (data exponent)"),
            ("a", "β/(α+β): N_opt ∝ C to this power"), ("E", "E (the floor)"), ("A", "A"), ("B", "B"))


def comparison_rows(law, intervals: dict | None = None) -> list[dict]:
    """The fitted constants (a ScalingLaw or its dict) with their intervals beside Chinchilla's and Epoch's."""
    law = law if isinstance(law, ScalingLaw) else ScalingLaw(**law)  # fit.json holds the law as a dict

    def value(l: ScalingLaw, key: str) -> float:
        return l.N_exponent if key == "a" else getattr(l, key)  # a is derived from α and β, not a field

    rows = []
    for key, name in COMPARED:
        lo, hi = (intervals or {}).get(key, (math.nan, math.nan))  # no interval given: NaN, the columns stay
        rows.append({"constant": name, "key": key, "this study": value(law, key), "95% low": lo, "95% high": hi,
                     "Chinchilla 2022": value(CHINCHILLA, key), "Epoch 2024": value(EPOCH_2024, key)})
    return rows


def precision_words(session: dict) -> str:
    """What a session's record says of its runs' matrix products (core.nn.precision); "" for a session recorded
    before runs chose one (they were all float32)."""
    if "precision" not in session:
        return ""
    bf16 = [r for r in session.get("bfloat16_runs") or [] if isinstance(r, str)]
    if not bf16:
        auto = session["precision"] == "auto"
        return "; float32 matrix products" + (" (auto: no probe measured bfloat16 faster)" if auto else "")
    return (f"; bfloat16 matrix products (attention float32, measured faster by a probe at their shape) in "
            f"{', '.join(bf16)}, float32 in the others")


def write_card(folder, meta: dict, rows: list[dict], fit: dict | None) -> str:
    """The study's card (README.md): what was trained, how, on what, how long it took, and the fit."""
    g = meta["grid"]
    sessions = meta.get("sessions", [])
    # seconds: the sessions' wall time against the runs' summed CPU time shows how many cores the study had
    wall = sum(s.get("wall_s", 0) for s in sessions)
    cpu = sum(r["cpu_s"] for r in rows)
    lines = [f"# Scaling study: {meta['corpus']}, grid {g['name']}", "",
             f"{len(rows)} runs: widths d = {', '.join(map(str, g['widths']))} at depth L = {g['n_layers']} "
             f"(heads of {g['head_width']} dimensions), each trained on D = "
             f"{', '.join(f'{t:,}' for t in sorted({r['D'] for r in rows}))} characters "
             f"(batch {g['batch_size']} x n_ctx {g['n_ctx']}, recipe {g['recipe']}, seed {g['seed']}, one torch thread "
             f"per run), on {meta['corpus']} ({meta['corpus_chars']:,} characters, {meta['split']}; the corpus is not "
             "in the repository).", "",
             f"- N: {meta['N_convention']}.",
             "- D: training characters seen (steps x batch x n_ctx); one character is one token.",
             f"- loss: {meta['loss']}.", "- flops: 6ND.", ""]
    lines += ["## How it was made", ""]
    for s in sessions:  # the exact command of each session: how to make the study again
        lines.append(f"- `{s['command']}`: engine {s['engine']}, runs {s['runs_before']} to {s['runs_after']}, "
                     f"wall time {s['wall_s'] / 60:.1f} min, started {s['started']}, on {s['machine']}; load average "
                     f"{s.get('load_start')} at the start, {s.get('load_end')} at the end" + precision_words(s)
                     + (f". {s['note']}" if s.get("note") else ""))
    lines += ["", f"Wall time {wall / 60:.1f} min in all; the runs' CPU time adds up to {cpu / 60:.1f} min.", ""]
    if fit is None and meta.get("fit_error"):
        lines += ["## The fit", "", f"No law was fitted: {meta['fit_error']}", ""]
    if g.get("max_epochs", MAX_EPOCHS) > MAX_EPOCHS:  # the epochs grid: runs that read the corpus many times over
        passes = max(r["D"] for r in rows) / (meta["corpus_chars"] * TRAIN_FRACTION) if rows else 0
        lines += [f"A study of repetition: its largest runs read the training part {passes:.0f} times. The law fitted "
                  "to it alone says little; `python -m core.forecast_study` fits it together with a study of at most "
                  f"{MAX_EPOCHS} passes (plain L(N, D) against Muennighoff et al.'s L(N, D')).", ""]
    if fit is not None:  # no fit (too few usable runs, or no law of this form): the card describes the runs alone
        law, b = fit["law"], fit["bootstrap"]
        ci = b["intervals"]
        have_ci = b["resamples"] > b["failed"]  # --bootstrap 0, or every resample failed: no intervals to print

        def span(key, fmt):
            lo, hi = ci[key]
            return f"{lo:{fmt}} to {hi:{fmt}}" if have_ci else "none"
        lines += ["## The fit", "",
                  "Hoffmann et al.'s L(N, D) = A/N^α + B/D^β + E, fitted as they did (Huber loss on log L, L-BFGS from "
                  "their grid of 4,500 starts). "
                  + (f"Intervals: the 2.5th and 97.5th percentiles over {b['resamples'] - b['failed']} bootstrap refits "
                     f"on runs drawn with replacement ({b['failed']} of {b['resamples']} resamples gave no law of this "
                     "form)." if have_ci else f"No intervals: {b['resamples']} bootstrap refits were asked for"
                     + (f" and all {b['failed']} failed." if b["failed"] else ".")), "",
                  "| constant | this study | 95% interval | Chinchilla (2022) | Epoch (2024) |", "|---|---|---|---|---|"]
        # E's unit differs: nats per character here, per (sub-word) token in the papers
        for key, name in (("alpha", "α"), ("beta", "β"), ("E", "E (nats/char here, nats/token there)"),
                          ("A", "A"), ("B", "B")):
            lines.append(f"| {name} | {law[key]:.4g} | {span(key, '.4g')} | {getattr(CHINCHILLA, key):.4g} | "
                         f"{getattr(EPOCH_2024, key):.4g} |")
        # N_opt ∝ C^a: of 10x the compute, a factor 10^a goes to N and the rest to D
        a = law["beta"] / (law["alpha"] + law["beta"])
        # an RMS error of log loss r is a typical relative error of exp(r) - 1
        lines += ["", f"R² of log loss: {fit['r2_log']:.4f}; RMS error of log loss: {fit['rms_log']:.4f} "
                  f"(about {100 * (math.exp(fit['rms_log']) - 1):.1f} % of the loss).",
                  f"Compute-optimal N grows as C^{a:.2f} (95% interval {span('a', '.2f')}); Chinchilla's constants "
                  f"say C^{CHINCHILLA.beta / (CHINCHILLA.alpha + CHINCHILLA.beta):.2f}, Epoch's "
                  f"C^{EPOCH_2024.beta / (EPOCH_2024.alpha + EPOCH_2024.beta):.2f}.", "",
                  "Files: `runs.csv` (one row per run), `study.json` (grid, corpus checksum, sessions), `fit.json` "
                  "(the fit, the bootstrap intervals)."]
    text = "\n".join(lines) + "\n"
    write_atomic(Path(folder) / CARD, text)
    return text


def finish_study(folder, resamples: int = 200) -> dict | None:
    """Once every run is in: fit.json and the card. Returns the fit (None when the runs pin down no law)."""
    folder = Path(folder)
    meta = json.loads((folder / STUDY_JSON).read_text())
    rows = read_rows(folder / RUNS_CSV)
    fit, error = None, None
    # fewer runs cannot pin down the law's five constants: no fit
    if len(usable_rows(rows)[0]) >= scaling_runs.MIN_RUNS:
        _fitting(folder, None)  # the page says so, rather than "starting" while the refits run for a minute
        try:
            fit = fit_study(rows, resamples=resamples, on_fit=lambda seconds: _fitting(folder, seconds))
        except FitError as e:
            error = str(e)
    if fit is not None:
        write_atomic(folder / FIT_JSON, json.dumps(fit, indent=1) + "\n")
    elif error is not None:
        # no law for these runs: an earlier session's fit.json (of fewer runs) would contradict them
        (folder / FIT_JSON).unlink(missing_ok=True)
    if error is not None or "fit_error" in meta:
        # why there is no fit, kept with the study's other records (study.json) and said on its card; a later
        # session whose fit succeeds removes it
        if error is None:
            del meta["fit_error"]
        else:
            meta["fit_error"] = error
        write_atomic(folder / STUDY_JSON, json.dumps(meta, indent=1) + "\n")
    write_card(folder, meta, rows, fit)
    return fit


def _fitting(folder: Path, eta_s: float | None):
    """progress.json says the study is fitting the law (``eta_s``: the seconds its refits should take, None while
    the full fit runs); best effort: the fit goes on even where the file cannot be written."""
    progress = read_progress(folder) or {}
    progress.update(state="fitting", message="fitting the law and its intervals", eta_s=eta_s, time=time.time())
    try:
        write_atomic(folder / PROGRESS_JSON, json.dumps(progress))
    except OSError:
        pass


# ---------------------------------------------------------------- command line

PROG = "python -m core.study"
# python -m core.study <study> ...: every study behind one command (None: this one, the scaling study); each
# module's main takes the same arguments under its own name (python -m core.variants ...)
STUDIES = {"scaling": None, "variants": "core.training.variants", "bpe-induction": "core.training.bpe_induction",
           "forecast": "core.training.forecast_study"}


def _in_a_study(path: Path) -> bool:
    return json_with(path.parent / STUDY_JSON, "grid")  # a README.md or runs.csv is a study's when study.json is


# what a study writes into its folder: its files, the scratch of its runs under way (core.training.study_live), the
# probe prepare_folder writes and removes, and the log the app's StudyJob keeps there; a runs.csv or README.md beside
# no study.json is someone else's
STUDY_OUT = Outputs(PROG, "a study", files=(
    (STUDY_JSON, lambda p: json_with(p, "grid")), (RUNS_CSV, _in_a_study), (CARD, _in_a_study), (FIT_JSON, None),
    (PROGRESS_JSON, None), (".live-*.json", None), (".write-test-*", None), ("study.log", None)), merges=True)
MAX_NOTE = 300  # characters: a sentence on the card, on one line


def _bar(p: Progress):
    width = 28  # characters: the bar and the text after it fit on one terminal line
    filled = int(width * p.done / max(1, p.total))
    eta = "" if p.eta is None else f", ETA {p.eta / 60:.1f} min"
    last = "" if p.row is None else f" | {p.row['run_id']}: loss {p.row['loss']:.4f}"
    # \r on stderr: the bar redraws its own line, and stdout keeps only the summary lines
    sys.stderr.write(f"\r[{'#' * filled}{'-' * (width - filled)}] {p.done}/{p.total} runs{last} | "
                     f"{p.elapsed / 60:.1f} min{eta} ")
    sys.stderr.flush()


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in STUDIES:  # python -m core.study variants ...: another study's command line, as its own
        if STUDIES[argv[0]] is None:
            return main(argv[1:])
        return importlib.import_module(STUDIES[argv[0]]).main(argv[1:])
    p = study_parser(PROG, "Train a grid of small models (sizes x token budgets) and fit L(N, D).",
                     out_help="study folder: runs.csv, study.json, fit.json, README.md; a folder holding part of the "
                     "same study is continued; one holding other files is refused unless --overwrite",
                     overwrite_help="write the study into a folder that also holds files core.study did not write "
                     "(they stay as they are); a study already there is still continued, never replaced",
                     corpus_required=True, corpus_help="UTF-8 text file (Tiny Shakespeare for the shipped study)")
    p.add_argument("--grid", default="tiny", help=f"{' | '.join(GRIDS)} | a .json file with widths and tokens "
                                                  "(default tiny)")
    p.add_argument("--bootstrap", type=int, default=200, help=f"bootstrap refits for the intervals, 0 to "
                                                              f"{MAX_BOOTSTRAP:,} (default 200)")
    p.add_argument("--nice", type=int, default=0, help="lower this study's CPU priority by 0 to 19 (what the app "
                                                       "does)")
    p.add_argument("--note", default="", help=f"a sentence for the card, at most {MAX_NOTE} characters (the "
                                                 "machine was shared, say)")
    args = p.parse_args(argv)
    # each checked before any work: a refit takes about a second, and a process may only lower its priority
    if study_problem(args):
        p.error(study_problem(args))
    if not 0 <= args.bootstrap <= MAX_BOOTSTRAP:
        p.error(f"--bootstrap must be from 0 to {MAX_BOOTSTRAP:,} refits (got {args.bootstrap:,})")
    if not 0 <= args.nice <= 19:
        p.error(f"--nice must be from 0 to 19 (got {args.nice})")
    if len(args.note) > MAX_NOTE or not args.note.isprintable():  # a line break would split the card's list
        p.error(f"--note must be one line of at most {MAX_NOTE} printable characters (got {len(args.note):,})")
    # the grid file and the corpus may lie in the folder (the app writes them there): read, never written
    problem = out_problem(args.out, STUDY_OUT, args.overwrite, inputs=[args.corpus, args.grid])
    if problem:
        p.error(problem)
    command = "python -m core.study " + shlex.join(str(a) for a in argv)  # for the card: how to run it again

    drawn = []

    def bar(progress: Progress):
        drawn.append(True)
        _bar(progress)

    stop = threading.Event()
    parent = os.environ.get(PARENT_ENV)

    def should_stop() -> bool:
        # started by the app: stop when the app's process is gone (this process is then adopted by another)
        return stop.is_set() or (parent is not None and str(os.getppid()) != parent)

    def on_signal(signum, frame):
        # the engine sees it at its next check (twice a second): finished runs stay, the ones under way end
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)  # the app's Stop (core.training.study_job) sends SIGTERM to this process
    signal.signal(signal.SIGINT, on_signal)
    if args.nice:
        os.nice(args.nice)
    try:
        grid = resolve_grid(args.grid)
        try:
            text = read_text_file(args.corpus)
        except ValueError as e:
            raise StudyError(f"--corpus: {e}") from None
        engine = make_engine(args.engine or "local", args.workers)
        specs = grid.specs()  # no text: only to count and name the runs for the line below
        print(f"study: grid {grid.name}, {len(specs)} runs (d = {', '.join(map(str, grid.widths))}; D = "
              f"{', '.join(f'{grid.steps(t) * grid.tokens_per_step:,}' for t in grid.tokens)}), engine {engine.name}, "
              f"out {args.out}")
        print(f"N: {N_CONVENTION}")  # up front: this N is not the N of Hoffmann et al.
        rows = run_study(grid, text, Path(args.corpus).name, args.out, engine, command=command, progress=bar,
                         should_stop=should_stop, note=args.note)
        sys.stderr.write("\n")  # end the progress bar's line
        print(f"{len(rows)} runs in {Path(args.out) / RUNS_CSV}")
        fit = finish_study(args.out, resamples=args.bootstrap)
        if fit is None and (error := read_meta(args.out).get("fit_error")):
            print(f"no fit: {error}")
        if fit is not None:
            law, ci = fit["law"], fit["bootstrap"]["intervals"]
            print("fit: " + ", ".join(f"{k} = {law[k]:.4g} [{ci[k][0]:.4g}, {ci[k][1]:.4g}]"
                                      for k in ("alpha", "beta", "E", "A", "B")) + f"; R² (log loss) {fit['r2_log']:.4f}")
        print(f"card: {Path(args.out) / CARD}")
        return 0
    except StudyError as e:  # a fresh line only after the progress bar's: refused before any run, one line
        sys.stderr.write(("\n" if drawn else "") + f"error: {e}\n")
        return 2  # bad input, as argparse's own errors
    except StudyStopped:
        done = len(read_rows(Path(args.out) / RUNS_CSV))  # from the file: this session's runs and earlier ones
        sys.stderr.write(f"\nstopped: {done} runs are in {Path(args.out) / RUNS_CSV}; run the same command again to "
                         "continue\n")
        return 130  # what a shell reports for Ctrl-C (128 + SIGINT): study_job reads it as stopped


if __name__ == "__main__":
    sys.exit(main())
