"""core.training.study: the grids, one run, the engines (local processes and Ray give the same rows for the same seeds),
a resumable runs.csv that never holds a partial row, and bad input refused before the first run."""
import csv
import errno
import io
import json
import math
import os
import signal
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from tests.polling import wait_until
from core.training import study, study_files
from core.data.corpus import pydoc_text
from core.analysis.scaling import ScalingLaw, bootstrap_fit, fit_scaling_law
from core.training.study_grid import (GRIDS, MAX_EPOCHS, ROW_FIELDS, TIMING_FIELDS, Grid, StudyError, corpus_problem,
                                      train_one)
from core.training.study_engines import LocalEngine, RayEngine, StudyStopped, make_engine
from core.training.study import main
from core.training.study_files import read_rows
from core.training.study_run import run_study

ROOT = Path(__file__).resolve().parent.parent
# four runs of a second or two each: two widths x two budgets on Python's own documentation (always there)
MICRO = Grid("micro", widths=(8, 16), tokens=(2048, 4096), n_ctx=32, batch_size=8)
SHAKESPEARE_CHARS = 1_115_394  # the length of Tiny Shakespeare (Karpathy's char-rnn copy)
shutil_usage = namedtuple("usage", "total used free")  # what shutil.disk_usage returns


@pytest.fixture(scope="module")
def text():
    return pydoc_text()


class InlineEngine:
    """Runs the specs one after another in this process: run_study's bookkeeping without a pool."""
    name = "inline"

    def __init__(self, stop_after=None):
        self.trained, self.stop_after = [], stop_after

    def check(self):
        pass

    def run(self, specs, should_stop):
        for s in specs:
            if self.stop_after is not None and len(self.trained) >= self.stop_after:
                raise StudyStopped()
            self.trained.append(s.run_id)
            yield train_one(s)


def same_runs(rows):
    """The rows without their timings, by run: what must not depend on the engine."""
    return {r["run_id"]: {k: r[k] for k in ROW_FIELDS if k not in TIMING_FIELDS} for r in rows}


# ---------------------------------------------------------------- the grids

def test_grids_fit_a_class_and_span_ten_times_the_budget():
    tiny, full = GRIDS["tiny"], GRIDS["full"]
    assert len(tiny.specs()) <= 6
    assert len(full.widths) >= 4 and len(full.tokens) >= 3 and len(full.specs()) >= 12
    assert max(full.tokens) / min(full.tokens) >= 9.5  # budgets spanning about 10x
    for g in GRIDS.values():
        specs = g.specs()
        assert len({s.run_id for s in specs}) == len(specs)
        for s in specs:
            assert s.d_model % s.n_heads == 0 and s.d_model // s.n_heads >= min(g.head_width, s.d_model)
            assert s.tokens == s.steps * g.batch_size * g.n_ctx
            assert abs(s.tokens - min(g.tokens, key=lambda t: abs(t - s.tokens))) <= g.tokens_per_step
    # Tiny Shakespeare feeds every grid; Python's documentation (465K characters) not the full one
    assert all(corpus_problem(g, "x" * SHAKESPEARE_CHARS) is None for g in GRIDS.values())
    assert corpus_problem(GRIDS["small"], pydoc_text()) is None
    message = corpus_problem(full, pydoc_text(), "pydoc")
    assert "pydoc is too small for the full grid" in message and f"at most {MAX_EPOCHS} times" in message


def test_N_is_the_non_embedding_count_by_hand(text):
    spec = Grid("g", widths=(16,), tokens=(256,), n_ctx=32, batch_size=8).specs(text)[0]
    row = train_one(spec)
    d, L, m, n_ctx = 16, 2, len(set(text)), 32
    assert row["N"] == L * (12 * d * d + 4 * d) + 2 * d  # blocks and the final LayerNorm
    assert row["N_total"] == row["N"] + m * d + n_ctx * d + d * m  # + embedding, positions, output map
    assert row["D"] == spec.steps * 8 * 32 and row["flops"] == 6 * row["N"] * row["D"]


def test_train_one_is_a_plain_deterministic_function(text):
    spec = MICRO.specs(text)[1]
    a, b = train_one(spec), train_one(spec)
    assert same_runs([a]) == same_runs([b])
    # the runs.csv columns, then the products' precision (TE_PRECISION: fp32 in the suite), which run_study moves
    # from the row into the session's record
    assert tuple(a) == ROW_FIELDS + ("precision",) and a["precision"] == "float32"
    assert a["loss"] < math.log(len(set(text)))  # it learned something: below guessing uniformly


# ---------------------------------------------------------------- runs.csv: complete rows, resumable

def test_a_stopped_study_continues_without_redoing_runs(tmp_path, text):
    first = InlineEngine(stop_after=2)
    with pytest.raises(StudyStopped):
        run_study(MICRO, text, "pydoc", tmp_path, first)
    kept = read_rows(tmp_path / "runs.csv")
    assert [r["run_id"] for r in kept] == first.trained and len(kept) == 2
    again = InlineEngine()
    rows = run_study(MICRO, text, "pydoc", tmp_path, again)
    assert len(again.trained) == 2 and not set(again.trained) & set(first.trained)
    assert rows[:2] == kept  # the finished runs were kept as they were, timings included
    assert {r["run_id"] for r in read_rows(tmp_path / "runs.csv")} == {s.run_id for s in MICRO.specs()}
    meta = json.loads((tmp_path / "study.json").read_text())
    assert [(s["runs_before"], s["runs_after"]) for s in meta["sessions"]] == [(0, 2), (2, 4)]
    # done: nothing is trained a third time
    third = InlineEngine()
    run_study(MICRO, text, "pydoc", tmp_path, third)
    assert third.trained == []


def test_write_atomic_leaves_the_old_file_whole_when_the_disk_fails(tmp_path, monkeypatch):
    path = tmp_path / "runs.csv"
    path.write_text("old\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(study.os, "fsync", full)
    with pytest.raises(OSError):
        study.write_atomic(path, "new, longer contents\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]  # no temporary file left behind


def test_a_full_disk_mid_study_keeps_the_finished_rows(tmp_path, text, monkeypatch):
    real, writes = study.write_atomic, []

    def failing(path, data):
        if Path(path).name == "runs.csv":
            writes.append(path)
            if len(writes) > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr("core.training.study_run.write_atomic", failing)  # run_study looks it up in its own module
    with pytest.raises(StudyError, match="No space left on device.*keeps the 1 run finished"):
        run_study(MICRO, text, "pydoc", tmp_path, InlineEngine())
    rows = read_rows(tmp_path / "runs.csv")
    assert len(rows) == 1 and all(rows[0][k] != "" for k in ROW_FIELDS)
    monkeypatch.setattr("core.training.study_run.shutil.disk_usage", lambda p: shutil_usage(total=100, used=90, free=10))
    with pytest.raises(StudyError, match="is full"):
        run_study(MICRO, text, "pydoc", tmp_path / "other", InlineEngine())


def test_a_folder_of_another_study_is_refused(tmp_path, text):
    run_study(Grid("one", widths=(8,), tokens=(1024,), n_ctx=32, batch_size=8), text, "pydoc", tmp_path,
              InlineEngine())
    before = (tmp_path / "runs.csv").read_text()
    with pytest.raises(StudyError, match="another grid"):
        run_study(MICRO, text, "pydoc", tmp_path, InlineEngine())
    with pytest.raises(StudyError, match="another corpus"):
        run_study(Grid("one", widths=(8,), tokens=(1024,), n_ctx=32, batch_size=8), text + "!", "pydoc2",
                  tmp_path, InlineEngine())
    assert (tmp_path / "runs.csv").read_text() == before


# ---------------------------------------------------------------- bad input on the command line

def run_cli(args, tmp_path, env=None):
    return subprocess.run([sys.executable, "-m", "core.study", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("case", ["engine", "corpus", "grid", "unreadable"])
def test_bad_input_gets_a_message_and_no_rows(case, tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("To be or not to be. " * 500)
    out = tmp_path / "out"
    args = {"engine": ["--corpus", str(small), "--grid", "tiny", "--engine", "spark"],
            "corpus": ["--corpus", str(small), "--grid", "full"],
            "grid": ["--corpus", str(small), "--grid", "huge"],
            "unreadable": ["--corpus", str(tmp_path / "missing.txt")]}[case]
    try:
        code = main([*args, "--out", str(out)])
    except SystemExit as e:  # argparse's own refusal (--engine's choices), as every study's command line
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    words = {"engine": "invalid choice: 'spark' (choose from",
             "corpus": "small.txt is too small for the full grid", "grid": "unknown grid 'huge'",
             "unreadable": "cannot read"}[case]
    assert words in err, err
    assert not (out / "runs.csv").exists()
    with pytest.raises(StudyError, match="unknown engine"):
        make_engine("spark")


def test_an_unreachable_ray_address_is_named(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray", reason="ray is not installed (pip install -r requirements-dev.txt)")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # the discard port: nothing listens there
    corpus = tmp_path / "c.txt"
    corpus.write_text(pydoc_text())
    code = main(["--corpus", str(corpus), "--grid", "tiny", "--engine", "ray", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach the Ray cluster at 127.0.0.1:9 (RAY_ADDRESS)" in err, err
    assert not (tmp_path / "out" / "runs.csv").exists()


# ---------------------------------------------------------------- engines

@pytest.mark.slow
def test_local_and_ray_give_the_same_rows(tmp_path, text, ray_local):
    local = run_study(MICRO, text, "pydoc", tmp_path / "local", LocalEngine(2))
    ray_rows = run_study(MICRO, text, "pydoc", tmp_path / "ray", RayEngine())
    assert len(local) == len(ray_rows) == 4
    assert same_runs(local) == same_runs(ray_rows)
    assert ray_local.is_initialized()  # the session's instance was used and left running for other tests


@pytest.mark.slow
def test_a_killed_study_restarts_where_it_stopped(tmp_path, text):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"widths": [8, 16, 24], "tokens": [4096, 8192], "n_ctx": 32, "batch_size": 8}))
    corpus = tmp_path / "c.txt"
    corpus.write_text(text)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "core.study", "--corpus", str(corpus), "--grid", str(grid), "--out", str(out),
            "--workers", "1", "--bootstrap", "0"]
    proc = subprocess.Popen(args, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(read_rows(out / "runs.csv")) >= 2, timeout=180)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the study and its worker, without warning
        proc.wait()
    killed = read_rows(out / "runs.csv")
    assert 2 <= len(killed) < 6
    text_after_kill = (out / "runs.csv").read_text()
    assert text_after_kill.endswith("\n") and len(list(csv.reader(io.StringIO(text_after_kill)))) == len(killed) + 1
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_rows(out / "runs.csv")
    assert len(rows) == 6 and rows[:len(killed)] == killed  # nothing finished was trained again


# ---------------------------------------------------------------- the fit of a study

@pytest.mark.slow  # 24 refits: half a minute on a busy machine
def test_bootstrap_intervals_cover_the_truth_and_r2_is_by_hand():
    law = ScalingLaw(A=30.0, B=60.0, alpha=0.3, beta=0.3, E=1.3)
    N = np.repeat([6e3, 1.5e4, 4e4, 1e5, 2.5e5], 4)
    D = np.tile([3e5, 6e5, 1.2e6, 3e6], 5)
    loss = law.loss(N, D) * np.exp(0.003 * np.random.default_rng(1).standard_normal(20))
    fit = fit_scaling_law(N, D, loss)
    boot = bootstrap_fit(N, D, loss, fit, resamples=24, seed=0, grid_step=45)
    assert boot["resamples"] == 24 and boot["failed"] < 6
    for key in ("alpha", "beta"):
        lo, hi = boot["intervals"][key]
        assert lo <= getattr(fit, key) <= hi and lo < getattr(law, key) < hi
    logL, pred = np.log(loss), np.log(fit.loss(N, D))
    by_hand = 1 - ((logL - pred) ** 2).sum() / ((logL - logL.mean()) ** 2).sum()
    assert fit.r2_log(N, D, loss) == pytest.approx(by_hand) and by_hand > 0.99


# ---------------------------------------------------------------- a study with a bad run or a bad file

def _shipped_copy(folder: Path, losses: dict | None = None, files=("runs.csv", "study.json", "fit.json")) -> list[dict]:
    """The shipped study's files in ``folder``, with the loss of the runs named in ``losses`` ({run_id: text})
    replaced; its rows as csv reads them (plain strings)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copy(study_files.SHIPPED_STUDY / name, folder / name)
    text = (study_files.SHIPPED_STUDY / "runs.csv").read_text()
    raw = list(csv.DictReader(io.StringIO(text)))
    for r in raw:
        r["loss"] = (losses or {}).get(r["run_id"], r["loss"])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(raw[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(raw)
    (folder / "runs.csv").write_text(buf.getvalue())
    return raw


def test_diverged_and_non_positive_runs_are_set_aside_with_the_reason(tmp_path):
    raw = _shipped_copy(tmp_path, {"d16-D300032": "nan", "d96-D3000320": "-1", "d32-D600064": "inf"})
    good, bad = study_files.usable_rows(read_rows(tmp_path / "runs.csv"))
    assert [r["run_id"] for r in good] == [r["run_id"] for r in raw
                                           if r["run_id"] not in ("d16-D300032", "d96-D3000320", "d32-D600064")]
    why = {row["run_id"]: reason for row, reason in bad}
    assert set(why) == {"d16-D300032", "d96-D3000320", "d32-D600064"}
    assert "NaN" in why["d16-D300032"] and "diverged" in why["d16-D300032"]
    assert "infinite" in why["d32-D600064"]
    assert "-1" in why["d96-D3000320"] and "positive" in why["d96-D3000320"]
    note = study_files.dropped_note(bad)
    n16 = next(int(r["N"]) for r in raw if r["run_id"] == "d16-D300032")
    assert "3 runs are left out of the fit" in note and f"N = {n16:,}, D = 300,032" in note
    assert study_files.usable_rows([]) == ([], [])


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_the_fit_of_a_study_leaves_out_a_diverged_run_and_recovers_the_law():
    """Runs made from a known law, one of them diverged: the fit names that run and finds the law's constants
    from the 19 others (exact losses, so to 1e-6; a NaN left in would make every start's objective NaN)."""
    law = ScalingLaw(A=30.0, B=60.0, alpha=0.3, beta=0.3, E=1.3)
    rows = [{"run_id": f"N{n:.0f}-D{d:.0f}", "N": n, "D": d, "loss": float(law.loss(n, d))}
            for n in (6e3, 1.5e4, 4e4, 1e5, 2.5e5) for d in (3e5, 6e5, 1.2e6, 3e6)]  # 5 sizes x 4 budgets
    rows[3]["loss"] = float("nan")
    fit = study.fit_study(rows, resamples=2)
    assert fit["runs"] == 19
    assert [d["run_id"] for d in fit["dropped"]] == ["N6000-D3000000"] and "diverged" in fit["dropped"][0]["reason"]
    for key in ("A", "B", "alpha", "beta", "E"):
        assert fit["law"][key] == pytest.approx(getattr(law, key), rel=1e-6), key
    assert fit["r2_log"] == pytest.approx(1.0) and fit["rms_log"] < 1e-6


@pytest.mark.parametrize("name, content, words", [
    ("fit.json", "{not json", "fit.json cannot be read"),
    ("fit.json", '{"runs": 24}', "fit.json is not a study's fit"),
    ("study.json", "", "study.json cannot be read"),
    ("study.json", '{"grid": {}}', "study.json is not a study's"),
    ("runs.csv", "\x00\x01", "runs.csv"),
])
def test_an_unreadable_study_file_is_named(tmp_path, name, content, words):
    _shipped_copy(tmp_path)
    (tmp_path / name).write_text(content)
    with pytest.raises(StudyError, match=words.replace("'", ".")) as e:
        study_files.read_study(tmp_path)
    assert str(tmp_path / name) in str(e.value)
    meta, rows, bad, fit, problems = study_files.open_study(tmp_path)
    assert len(problems) == 1 and str(tmp_path / name) in problems[0]
    if name == "fit.json":  # only the fit is lost: the runs and what they are still stand
        assert meta["grid"]["name"] == "full" and len(rows) == 24 and fit is None
    else:
        assert (meta, rows, bad, fit) == (None, [], [], None)


def test_a_study_opened_for_the_page_sets_aside_bad_runs_and_a_fit_of_other_runs(tmp_path):
    raw = _shipped_copy(tmp_path)
    meta, rows, bad, fit, problems = study_files.open_study(tmp_path)
    assert len(rows) == len(raw) == fit["runs"] and bad == [] and problems == []
    _shipped_copy(tmp_path, {"d48-D600064": "nan"})
    meta, rows, bad, fit, problems = study_files.open_study(tmp_path)
    assert [r["run_id"] for r in rows] == [r["run_id"] for r in raw if r["run_id"] != "d48-D600064"]
    assert [r["run_id"] for r, _ in bad] == ["d48-D600064"]
    assert fit is None and problems == [f"{tmp_path / 'fit.json'} was fitted to 24 runs, not to the 23 usable ones "
                                        "in runs.csv"]


def test_a_fit_that_fails_is_recorded_with_the_study(tmp_path, text, monkeypatch):
    import core.analysis.scaling_runs as scaling_runs
    from core.analysis.scaling import FitError
    from core.training import study
    from core.training.study_files import read_meta

    run_study(MICRO, text, "pydoc", tmp_path, InlineEngine())
    (tmp_path / study_files.FIT_JSON).write_text('{"law": "of an earlier session, with fewer runs"}')
    monkeypatch.setattr(scaling_runs, "MIN_RUNS", 2)  # the four runs are enough to try

    def no_law(rows, resamples, on_fit=None):
        raise FitError("these runs show no law of this form")

    monkeypatch.setattr(study, "fit_study", no_law)
    assert study.finish_study(tmp_path, resamples=5) is None
    # on disk, where the study's other records are: study.json and the card (the error was only in memory)
    assert read_meta(tmp_path)["fit_error"] == "these runs show no law of this form"
    assert "No law was fitted: these runs show no law of this form" in (tmp_path / study_files.CARD).read_text()
    assert not (tmp_path / study_files.FIT_JSON).exists()  # the earlier fit does not stand for these runs
