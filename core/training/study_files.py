"""The files of a study folder, written and read: ``runs.csv`` (one row per finished run), ``study.json`` (what the
study is and how its sessions went), ``fit.json`` (the law and its bootstrap intervals), ``progress.json`` (the
session under way). Every write replaces the whole file atomically, so a reader (the page, a study continued after
a kill) never meets half a file. Readers check what they return and raise StudyError naming the file.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import fields
from pathlib import Path

import numpy as np

from core.analysis.scaling import ScalingLaw
from core.serve.paths import REPO_ROOT
from core.training.study_grid import FLOAT_FIELDS, INT_FIELDS, ROW_FIELDS, StudyError

RUNS_CSV = "runs.csv"
STUDY_JSON = "study.json"       # what the study is (grid, corpus, convention) and how long its sessions took
PROGRESS_JSON = "progress.json"  # how far the session under way is; read by the page
FIT_JSON = "fit.json"           # the fit and its bootstrap intervals, once every run is in
CARD = "README.md"
SHIPPED_STUDY = REPO_ROOT / "assets" / "studies" / "shakespeare-char"  # the study the "Your scaling law" page opens with


# ---------------------------------------------------------------- runs.csv

def format_rows(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        # flops as a float even when given an int: the column reads back with one type (FLOAT_FIELDS)
        w.writerow({k: (repr(float(r[k])) if k == "flops" else r[k]) for k in ROW_FIELDS})
    return buf.getvalue()


def read_rows(path) -> list[dict]:
    """runs.csv's rows with their types; [] when there is no file. StudyError for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        return []  # a study that has not finished a run yet
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StudyError(f"{path} cannot be read: {e}") from None
    reader = csv.DictReader(io.StringIO(text))
    # exactly these columns in this order: any other csv (another tool's, or an older layout) is not continued
    if tuple(reader.fieldnames or ()) != ROW_FIELDS:
        raise StudyError(f"{path} is not a study's runs.csv (its columns are {reader.fieldnames}); choose another "
                         "--out folder")
    rows = []
    for i, raw in enumerate(reader, start=2):  # line 1 is the header
        try:
            rows.append({k: int(v) if k in INT_FIELDS else float(v) if k in FLOAT_FIELDS else v
                         for k, v in raw.items()})
        except (TypeError, ValueError):  # TypeError: a short row's missing cells are None; ValueError: "" or text
            raise StudyError(f"{path}, line {i}: not a complete run ({raw})") from None
    return rows


def rows_to_arrays(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, D, loss) of the rows as float arrays."""
    return tuple(np.array([float(r[k]) for r in rows], dtype=float) for k in ("N", "D", "loss"))  # (R,) each


def _row_problem(row: dict) -> str | None:
    """Why the fit cannot use this run (None if it can): the law takes the logarithm of N, D and the loss."""
    loss = float(row["loss"])
    if math.isnan(loss):
        return "its loss is NaN (the run diverged)"
    if math.isinf(loss):
        return "its loss is infinite (the run diverged)"
    if loss <= 0:  # an edited or corrupted row: no cross-entropy reaches 0
        return f"its loss is {loss:g}, and a cross-entropy is positive"
    for key in ("N", "D"):
        v = float(row[key])
        if not (math.isfinite(v) and v > 0):
            return f"its {key} is {v:g}, not a positive count"
    return None


def usable_rows(rows: list[dict]) -> tuple[list[dict], list[tuple[dict, str]]]:
    """(the rows the fit can use, [(row, why not)] for the others): a run that diverged (a loss of NaN or
    infinity) or one with a loss, N or D that is not positive is set aside, and the rest are fitted."""
    # one such row would make every log-space residual NaN and lose the whole fit: it is named instead
    good, bad = [], []
    for r in rows:
        why = _row_problem(r)
        if why is None:
            good.append(r)
        else:
            bad.append((r, why))
    return good, bad


def dropped_note(bad: list[tuple[dict, str]]) -> str:
    """One sentence naming each run that usable_rows set aside, with its N and D and why ('' for none)."""
    def count(v) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{float(v):g}"  # a row not from read_rows may hold a float

    if not bad:
        return ""
    each = "; ".join(f"run {r.get('run_id', '?')} (N = {count(r['N'])}, D = {count(r['D'])}): {why}" for r, why in bad)
    return f"{len(bad)} run{'s are' if len(bad) > 1 else ' is'} left out of the fit: {each}."


# ---------------------------------------------------------------- study.json, fit.json, progress.json

def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise StudyError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):  # a list or a number is JSON too, but no study file
        raise StudyError(f"{path} is not a study's {path.name}: it holds a {type(data).__name__}, not an object")
    return data


def _positive(v) -> bool:
    # bool is an int in Python: true must not pass for a width of 1; NaN and infinity are no count either
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def read_meta(folder) -> dict:
    """study.json of a study folder, with the grid and corpus the page and the card describe it by. StudyError
    naming the file when it cannot be read or lacks them."""
    path = Path(folder) / STUDY_JSON
    meta = _read_json(path)
    g = meta.get("grid")
    # checked here once, so that the page and the card can read every one of these without a guard
    if not (isinstance(g, dict) and all(isinstance(g.get(k), list) and g[k] and all(map(_positive, g[k]))
                                        for k in ("widths", "tokens")) and _positive(g.get("n_layers"))):
        raise StudyError(f"{path} is not a study's study.json: it has no grid with widths, tokens and n_layers")
    # sessions may be missing (the card then lists none), but when there it is a list of objects
    if not (isinstance(meta.get("corpus"), str) and _positive(meta.get("corpus_chars"))
            and isinstance(meta.get("sessions", []), list)
            and all(isinstance(x, dict) for x in meta.get("sessions", []))):
        raise StudyError(f"{path} is not a study's study.json: it has no corpus, corpus_chars or list of sessions")
    return meta


def read_fit(folder) -> dict | None:
    """fit.json of a study folder; None when there is none (the study has not finished). StudyError naming the
    file when it cannot be read or lacks the law and its bootstrap intervals."""
    path = Path(folder) / FIT_JSON
    if not path.is_file():
        return None
    fit = _read_json(path)
    law, boot = fit.get("law"), fit.get("bootstrap")
    constants = [f.name for f in fields(ScalingLaw)]
    # exactly the law's constants, each positive: a reader builds ScalingLaw(**law) and takes powers of it
    if not (isinstance(law, dict) and set(law) == set(constants) and all(_positive(law[k]) for k in constants)):
        raise StudyError(f"{path} is not a study's fit.json: it has no law with positive {', '.join(constants)}")
    ci = boot.get("intervals") if isinstance(boot, dict) else None
    # [low, high] of finite numbers for every constant and for a (the exponent of C in N_opt)
    if not (isinstance(ci, dict) and all(isinstance(boot.get(k), int) for k in ("resamples", "failed"))
            and all(isinstance(ci.get(k), list) and len(ci[k]) == 2
                    and all(isinstance(v, (int, float)) and math.isfinite(v) for v in ci[k])
                    for k in (*constants, "a"))):
        raise StudyError(f"{path} is not a study's fit.json: it has no bootstrap with resamples, failed and the "
                         "intervals of every constant")
    return fit


def read_study(folder) -> tuple[dict, list[dict], dict | None]:
    """(study.json, rows, fit.json or None) of a study folder. StudyError naming the file that cannot be read."""
    folder = Path(folder)
    return read_meta(folder), read_rows(folder / RUNS_CSV), read_fit(folder)


def open_study(folder) -> tuple[dict | None, list[dict], list[tuple[dict, str]], dict | None, list[str]]:
    """What a page can show of a study folder: (study.json, the rows the fit can use, [(row, why not)] for the
    others (usable_rows), fit.json, problems). A study.json or runs.csv that cannot be read loses the study,
    (None, [], [], None, [why]); a fit.json that cannot be read, or that was fitted to other runs than the usable
    ones, loses only the fit. Each problem names its file and says why."""
    folder = Path(folder)
    try:
        meta, rows = read_meta(folder), read_rows(folder / RUNS_CSV)
    except StudyError as e:
        return None, [], [], None, [str(e)]
    good, bad = usable_rows(rows)
    try:
        fit = read_fit(folder)
    except StudyError as e:
        return meta, good, bad, None, [str(e)]
    # runs.csv changed since the fit (edited, or grown by a later session): the law would not be of these runs
    if fit is not None and fit.get("runs") != len(good):
        return meta, good, bad, None, [f"{folder / FIT_JSON} was fitted to {fit.get('runs')} runs, not to the "
                                       f"{len(good)} usable ones in {RUNS_CSV}"]
    return meta, good, bad, fit, []


def read_progress(folder) -> dict | None:
    # only a hint for the page (runs.csv is the record): a missing or unreadable file is None, not an error
    try:
        return json.loads((Path(folder) / PROGRESS_JSON).read_text())
    except (OSError, ValueError):
        return None
