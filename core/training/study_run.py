"""One session of a scaling study: ``run_study`` checks everything it can before the first run (corpus, folder,
engine), hands the runs that ``runs.csv`` lacks to an engine, and writes every finished run into runs.csv by
rewriting the whole file (core.training.study_files.write_atomic), so the file never holds a partial row; started again
on the same folder it trains only the runs that are missing. study.json records each session, progress.json
how far the one under way is.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from core.data.corpus import TRAIN_FRACTION, split_description
from core.nn.precision import BF16, run_precision
from core.training.study_engines import ShouldStop, StudyStopped
from core.training.study_files import PROGRESS_JSON, RUNS_CSV, STUDY_JSON, format_rows, read_rows
from core.serve.folder_files import write_atomic
from core.training.study_grid import N_CONVENTION, Grid, StudyError, corpus_problem, corpus_sha256, run_cost
from core.training.study_live import LiveSteps, live_path

MIN_FREE_BYTES = 1_000_000      # runs.csv, study.json, fit.json and a card: a few kilobytes


def machine_description() -> str:
    # platform.processor() is often empty on Linux; /proc/cpuinfo has the model's name
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:  # no /proc (macOS, Windows): the platform's word stands
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def study_meta(grid: Grid, text: str, corpus_name: str) -> dict:
    """What makes two sessions the same study: the grid and the corpus."""
    return {"grid": grid.to_dict(), "corpus": corpus_name, "corpus_chars": len(text),
            "corpus_sha256": corpus_sha256(text), "split": split_description(), "N_convention": N_CONVENTION,
            "loss": f"validation loss, nats per character, over every full {grid.n_ctx}-character window of the "
                    f"held-out {1 - TRAIN_FRACTION:.0%}"}


def _check_same_study(meta: dict, old: dict, folder: Path):
    # the checksum, not the file's name: the same text under another name continues; an edited one does not
    for key, what in (("corpus_sha256", "corpus"), ("grid", "grid")):
        if old.get(key) != json.loads(json.dumps(meta[key])):  # as study.json holds it: tuples become lists
            name = old.get("corpus") if what == "corpus" else old.get("grid", {}).get("name")
            raise StudyError(f"{folder} holds a study of another {what} ({name}); give a new --out folder, or the "
                             "same corpus and grid to continue it")


def prepare_folder(folder: Path):
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # mkdir succeeds on a folder that exists read-only: only a write proves the study can write
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        raise StudyError(f"cannot write in {folder}: {e.strerror or e}") from None
    free = shutil.disk_usage(folder).free  # bytes
    if free < MIN_FREE_BYTES:  # refused now, not after the first hour of training
        raise StudyError(f"the disk holding {folder} is full ({free:,} bytes free); free some space and run again")


@dataclass
class Progress:
    total: int               # runs in the grid
    done: int                # runs in runs.csv
    new: int                 # of those, finished in this session
    cost_total: float        # run_cost of the grid
    cost_done: float         # run_cost of the runs in runs.csv
    cost_at_start: float     # ... when this session started
    started: float           # time.time() at the start of this session
    row: dict | None = None  # the run that just finished

    @property
    def elapsed(self) -> float:
        return time.time() - self.started  # seconds

    @property
    def eta(self) -> float | None:
        """Seconds left, at this session's pace so far (None before its first run is in)."""
        # by run_cost, not by count: runs differ a thousandfold in cost, and the longest go first
        spent = self.cost_done - self.cost_at_start
        if self.new == 0 or spent <= 0:
            return None
        return round(self.elapsed * (self.cost_total - self.cost_done) / spent, 1)


def each_row(engine, specs: list, rows: list[dict], save: Callable[[list[dict]], None],
             should_stop: ShouldStop | None = None) -> Iterator[dict]:
    """The loop of every study (this one's, and core.training.study_table's): ``engine`` trains ``specs``; each row
    it yields is saved with every row before it (``save(rows + [row])`` rewrites the study's table whole, so a study
    cut short keeps each finished run) and then joins ``rows``; yielded for the caller's own records."""
    for row in engine.run(specs, should_stop or (lambda: False)):
        # the file first, then the list: if the write fails, rows holds what the file holds (the message counts it)
        save(rows + [row])
        rows.append(row)
        yield row


def run_study(grid: Grid, text: str, corpus_name: str, out_dir, engine, *, command: str = "",
              progress: Callable[[Progress], None] | None = None, should_stop: ShouldStop | None = None,
              note: str = "") -> list[dict]:
    """Train every run of ``grid`` that ``out_dir/runs.csv`` lacks with ``engine``; returns all rows. Checks
    everything it can before the first run (corpus, folder, engine), so bad input never leaves a row."""
    folder = Path(out_dir)
    problem = corpus_problem(grid, text, corpus_name)  # first: a corpus that cannot feed the grid makes no folder
    if problem:
        raise StudyError(problem)
    specs = grid.specs(text)
    prepare_folder(folder)
    meta = study_meta(grid, text, corpus_name)
    meta_path = folder / STUDY_JSON
    old = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    rows = read_rows(folder / RUNS_CSV)
    if old is not None:
        _check_same_study(meta, old, folder)
    elif rows:  # runs with no study.json: nothing says they are of this grid and this corpus
        raise StudyError(f"{folder / RUNS_CSV} has runs but no {STUDY_JSON}: choose another --out folder")
    ids = {s.run_id for s in specs}
    strangers = [r["run_id"] for r in rows if r["run_id"] not in ids]  # ids name sizes and budgets of another grid
    if strangers:
        raise StudyError(f"{folder / RUNS_CSV} holds runs of another grid ({', '.join(strangers[:3])}); give a new "
                         "--out folder")
    engine.check()  # last, and the slowest (Ray's address): nothing is written before it passes
    have = {r["run_id"] for r in rows}
    # longest first: the last runs to start are short, so no core idles at the end while one long run trains on
    todo = sorted((s for s in specs if s.run_id not in have), key=run_cost, reverse=True)
    # each run reports its step to a file of its own, gathered into progress.json below (core.training.study_live)
    todo = [replace(s, live_file=str(live_path(folder, s.run_id))) for s in todo]
    sessions = (old or {}).get("sessions", [])
    # one entry per session: the card says how each part of the study was made, on what and how busy it was
    session = {"engine": engine.name, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_description(),
               "command": command, "runs_before": len(rows), "runs_after": len(rows), "wall_s": 0.0,
               "load_start": _load(), "precision": run_precision(), "bfloat16_runs": []}
    if note:
        session["note"] = note
    sessions.append(session)
    t0 = time.time()

    def save_meta():
        # after every run, not only at the end: a study killed outright still says what it did and for how long
        session["wall_s"] = round(time.time() - t0, 1)
        session["runs_after"] = len(rows)
        session["load_end"] = _load()
        write_atomic(meta_path, json.dumps({**meta, "sessions": sessions}, indent=1) + "\n")

    live = LiveSteps(folder)

    def save_progress(state: str, message: str = ""):
        # "live": the runs under way, step by step, so that a page's bar moves within a run, not only between runs
        write_atomic(folder / PROGRESS_JSON, json.dumps(
            {"state": state, "total": len(specs), "done": len(rows), "message": message, "pid": os.getpid(),
             "engine": engine.name, "elapsed_s": round(time.time() - t0, 1), "eta_s": p.eta, "time": time.time(),
             "live": live.listed() if state == "running" else []}))

    def stop_or_report() -> bool:
        # the engines ask this twice a second while runs train: the moment to gather the runs' steps (at most once
        # a second, and only when they moved)
        if live.poll():
            save_progress("running")
        return bool(should_stop and should_stop())

    cost = {s.run_id: run_cost(s) for s in specs}
    done_cost = sum(cost[r["run_id"]] for r in rows)
    p = Progress(total=len(specs), done=len(rows), new=0, cost_total=sum(cost.values()), cost_done=done_cost,
                 cost_at_start=done_cost, started=t0)
    try:
        save_meta()
        save_progress("running")
        for row in each_row(engine, todo, rows, lambda all_rows: write_atomic(folder / RUNS_CSV,
                                                                            format_rows(all_rows)), stop_or_report):
            live.drop(row["run_id"])
            if row.pop("precision", None) == BF16:  # not a runs.csv column: the session says which runs used bf16
                session["bfloat16_runs"].append(row["run_id"])
            p.done, p.new, p.row = len(rows), p.new + 1, row
            p.cost_done += cost[row["run_id"]]
            save_meta()
            save_progress("running")
            if progress:
                progress(p)
    except StudyStopped:
        # best effort: the stop must reach the caller even when the disk is full
        _quietly(save_meta)
        _quietly(lambda: save_progress("stopped", f"stopped with {len(rows)} of {len(specs)} runs done"))
        raise
    except OSError as e:  # a write failed (a full disk, most often): say so in words, the rows so far are kept
        msg = (f"could not write in {folder}: {e.strerror or e}. runs.csv keeps the {len(rows)} "
               f"run{'' if len(rows) == 1 else 's'} finished before this; free some space and run the same command "
               "again to continue")
        _quietly(lambda: save_progress("failed", msg))
        raise StudyError(msg) from None
    except BaseException as e:  # anything else (a worker died, Ctrl-C): recorded for the page, then let through
        failure = f"{type(e).__name__}: {e}"
        _quietly(save_meta)
        _quietly(lambda: save_progress("failed", failure))
        raise
    finally:
        _quietly(live.clear)  # the files of runs ended mid-way (stopped, failed): nothing reads them any more
    _quietly(lambda: save_progress("trained", "every run is in"))
    return rows


def _load() -> float | None:
    """The machine's 1-minute load average: how shared it was (a study on 2 idle cores shows about 2)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # the system could not give one
        return None


def _quietly(fn):
    # OSError only: a full disk must not hide the error being reported, but a bug in fn still shows
    try:
        fn()
    except OSError:
        pass
