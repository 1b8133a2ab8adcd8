"""The shipped scaling study (assets/studies/shakespeare-char): four sizes by three budgets or more, rows that add up,
a fit.json that is a minimum of Hoffmann et al.'s objective on runs.csv, and a card that states it."""
import csv
import hashlib
import json
import math

import numpy as np
import pytest

from core.data.corpus import shakespeare_path
from core.training.study_files import SHIPPED_STUDY, read_study

META, ROWS, FIT = read_study(SHIPPED_STUDY)


def test_the_grid_is_at_least_four_sizes_by_three_budgets_spanning_ten_times():
    sizes, budgets = {r["N"] for r in ROWS}, {r["D"] for r in ROWS}
    assert len(ROWS) >= 12 and len(sizes) >= 4 and len(budgets) >= 3
    assert len(ROWS) == len(sizes) * len(budgets)  # every size on every budget
    assert max(budgets) / min(budgets) >= 9.5


def test_every_row_adds_up():
    for r in ROWS:
        d, L = r["d_model"], r["n_layers"]
        assert r["N"] == L * (12 * d * d + 4 * d) + 2 * d  # non-embedding: the blocks and the final LayerNorm
        assert r["N_total"] == r["N"] + 65 * d + r["n_ctx"] * d + d * 65  # Tiny Shakespeare has 65 characters
        assert r["D"] == r["steps"] * r["batch_size"] * r["n_ctx"] and r["flops"] == 6 * r["N"] * r["D"]
        assert 1.0 < r["loss"] < math.log(65)


def test_loss_falls_with_size_at_every_budget_and_with_data_at_every_size():
    by = {(r["N"], r["D"]): r["loss"] for r in ROWS}
    Ns, Ds = sorted({n for n, _ in by}), sorted({d for _, d in by})
    for D in Ds:
        assert all(by[a, D] > by[b, D] for a, b in zip(Ns, Ns[1:]))
    for N in Ns:
        assert all(by[N, a] > by[N, b] for a, b in zip(Ds, Ds[1:]))


# runs.csv read with the csv module and fit.json with json, not through core.training.study: the fit is judged here
# against the runs by formulas written out in this file
RUNS = list(csv.DictReader((SHIPPED_STUDY / "runs.csv").read_text().splitlines()))
LAW = json.loads((SHIPPED_STUDY / "fit.json").read_text())["law"]


def huber_objective(logA, logB, logE, alpha, beta) -> float:
    """Hoffmann et al.'s objective (App. D.2): the Huber loss, delta = 1e-3, of log predicted - log measured."""
    N, D, L = (np.array([float(r[k]) for r in RUNS]) for k in ("N", "D", "loss"))
    r = np.log(np.exp(logA) / N**alpha + np.exp(logB) / D**beta + np.exp(logE)) - np.log(L)
    return float(np.where(abs(r) <= 1e-3, r**2 / 2, 1e-3 * (abs(r) - 1e-3 / 2)).sum())


def test_fit_json_is_a_minimum_of_the_papers_objective_on_runs_csv():
    x = np.array([math.log(LAW["A"]), math.log(LAW["B"]), math.log(LAW["E"]), LAW["alpha"], LAW["beta"]])
    best = huber_objective(*x)
    for i in range(5):  # a step of 1e-3 either way along each constant only makes the fit worse
        for step in (-1e-3, 1e-3):
            assert huber_objective(*(x + step * np.eye(5)[i])) > best, (i, step)


def test_fit_json_states_how_well_the_law_predicts_the_runs():
    logL = np.log([float(r["loss"]) for r in RUNS])
    pred = np.log([LAW["A"] / float(r["N"]) ** LAW["alpha"] + LAW["B"] / float(r["D"]) ** LAW["beta"] + LAW["E"]
                   for r in RUNS])
    assert FIT["rms_log"] == pytest.approx(np.sqrt(np.mean((logL - pred) ** 2)), rel=1e-9) and FIT["rms_log"] < 0.02
    r2 = 1 - np.sum((logL - pred) ** 2) / np.sum((logL - logL.mean()) ** 2)
    assert FIT["r2_log"] == pytest.approx(r2, rel=1e-9) and r2 > 0.95
    assert FIT["runs"] == len(RUNS) and FIT["bootstrap"]["resamples"] >= 200
    for key in ("alpha", "beta", "E"):
        lo, hi = FIT["bootstrap"]["intervals"][key]
        assert lo <= LAW[key] <= hi


def test_the_card_states_the_command_machine_wall_time_and_fit():
    card = (SHIPPED_STUDY / "README.md").read_text()
    s = META["sessions"][-1]
    assert s["command"].startswith("python -m core.study") and "--grid full" in s["command"]
    assert s["command"] in card and s["machine"] in card and "Wall time" in card
    law, ci = FIT["law"], FIT["bootstrap"]["intervals"]
    for key, name in (("alpha", "α"), ("beta", "β")):
        assert f"| {name} | {law[key]:.4g} | {ci[key][0]:.4g} to {ci[key][1]:.4g} |" in card
    assert f"R² of log loss: {FIT['r2_log']:.4f}" in card


def test_the_study_was_made_from_the_corpus_found_here():
    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare not found (set TE_CORPUS)")
    assert META["corpus_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert json.loads(json.dumps(META["grid"]))["name"] == "full"


# Retrained on another machine, a run's losses differ by the floating-point reductions of that CPU's kernels: the
# cheapest shipped run (train_loss 2.354611, loss 2.372113) gave 2.335509 / 2.354476 here with torch's kernels
# forced to ATEN_CPU_CAPABILITY=default, 2.344782 with avx2 and 2.357333 with avx512 on an EPYC (issue 33): up to
# 0.8 % apart. The tolerance leaves 2.5 times that; every other field must match exactly.
LOSS_RTOL = 0.02


@pytest.mark.slow  # a training process or a full fit: seconds; the whole suite runs it
def test_a_shipped_run_trained_again_gives_the_same_row_up_to_the_cpus_rounding():
    """The cheapest run of the shipped grid, retrained here from its spec: every field but the timings as shipped,
    the two losses within LOSS_RTOL (the engines, the day and the other work on the machine change nothing; the
    CPU's kernels change the last digits of a few thousand optimiser steps)."""
    from core.training.study_grid import FLOAT_FIELDS, GRIDS, TIMING_FIELDS, train_one

    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare not found (set TE_CORPUS)")
    row = min(ROWS, key=lambda r: r["cpu_s"])
    spec = next(s for s in GRIDS["full"].specs(path.read_text(encoding="utf-8")) if s.run_id == row["run_id"])
    again = train_one(spec)
    exact = {k for k in row if k not in TIMING_FIELDS and k not in ("loss", "train_loss")}
    assert {k: again[k] for k in exact} == {k: row[k] for k in exact}
    assert FLOAT_FIELDS - set(TIMING_FIELDS) == {"loss", "train_loss", "flops"}  # flops is a product of integers
    for k in ("loss", "train_loss"):
        assert again[k] == pytest.approx(row[k], rel=LOSS_RTOL), k


def test_the_same_run_trained_twice_on_one_machine_is_bit_identical():
    """Where both sides run on the same machine in the same test, determinism is exact: two trainings of one spec
    (a short one: 40 steps of the cheapest shipped run's shape) give the same row but for the timings."""
    import dataclasses

    from core.data.corpus import pydoc_text
    from core.training.study_grid import GRIDS, TIMING_FIELDS, train_one

    row = min(ROWS, key=lambda r: r["cpu_s"])
    spec = next(s for s in GRIDS["full"].specs(pydoc_text()) if s.run_id == row["run_id"])
    spec = dataclasses.replace(spec, steps=40)
    first, second = train_one(spec), train_one(spec)
    assert {k: v for k, v in first.items() if k not in TIMING_FIELDS} == \
        {k: v for k, v in second.items() if k not in TIMING_FIELDS}
