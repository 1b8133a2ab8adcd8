"""The shipped scaling study (assets/studies/shakespeare-char): the grid the issue asks for, rows that add up,
a fit.json that a refit of runs.csv reproduces, and a card that states it."""
import json
import math

import pytest

from core.corpus import shakespeare_path
from core.scaling import ScalingLaw, fit_scaling_law
from core.study import SHIPPED_STUDY, corpus_sha256, read_study, rows_to_arrays

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


def test_fit_json_is_what_a_refit_of_runs_csv_gives():
    N, D, loss = rows_to_arrays(ROWS)
    law = fit_scaling_law(N, D, loss)
    shipped = ScalingLaw(**FIT["law"])
    assert law.alpha == pytest.approx(shipped.alpha, abs=1e-3) and law.beta == pytest.approx(shipped.beta, abs=1e-3)
    assert law.E == pytest.approx(shipped.E, rel=1e-3)
    assert FIT["r2_log"] == pytest.approx(shipped.r2_log(N, D, loss), abs=1e-9) and FIT["r2_log"] > 0.95
    assert FIT["runs"] == len(ROWS) and FIT["bootstrap"]["resamples"] >= 200
    for key in ("alpha", "beta", "E"):
        lo, hi = FIT["bootstrap"]["intervals"][key]
        assert lo <= FIT["law"][key] <= hi


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
    assert META["corpus_sha256"] == corpus_sha256(path.read_text(encoding="utf-8"))
    assert json.loads(json.dumps(META["grid"]))["name"] == "full"


# Retrained on another machine, a run's losses differ by the floating-point reductions of that CPU's kernels: the
# cheapest shipped run (train_loss 2.354611, loss 2.372113) gave 2.335509 / 2.354476 here with torch's kernels
# forced to ATEN_CPU_CAPABILITY=default, 2.344782 with avx2 and 2.357333 with avx512 on an EPYC (issue 33): up to
# 0.8 % apart. The tolerance leaves 2.5 times that; every other field must match exactly.
LOSS_RTOL = 0.02


def test_a_shipped_run_trained_again_gives_the_same_row_up_to_the_cpus_rounding():
    """The cheapest run of the shipped grid, retrained here from its spec: every field but the timings as shipped,
    the two losses within LOSS_RTOL (the engines, the day and the other work on the machine change nothing; the
    CPU's kernels change the last digits of a few thousand optimiser steps)."""
    from core.study import FLOAT_FIELDS, GRIDS, TIMING_FIELDS, train_one

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

    from core.corpus import pydoc_text
    from core.study import GRIDS, TIMING_FIELDS, train_one

    row = min(ROWS, key=lambda r: r["cpu_s"])
    spec = next(s for s in GRIDS["full"].specs(pydoc_text()) if s.run_id == row["run_id"])
    spec = dataclasses.replace(spec, steps=40)
    first, second = train_one(spec), train_one(spec)
    assert {k: v for k, v in first.items() if k not in TIMING_FIELDS} == \
        {k: v for k, v in second.items() if k not in TIMING_FIELDS}