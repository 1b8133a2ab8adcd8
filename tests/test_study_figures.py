"""core.figures.study_figures: the points are the runs, the lines are the fitted law, the residuals and the frontier are
what the law says."""
import numpy as np
import pytest

from core.analysis.scaling import CHINCHILLA, EPOCH_2024, LAW_PRESETS, ScalingLaw
from core.training.study_grid import STARTUP_S, Grid, estimate_seconds
from core.training.study import comparison_rows
from core.figures.study_figures import frontier_figure, residual_figure, study_figure

LAW = ScalingLaw(A=30.0, B=60.0, alpha=0.3, beta=0.3, E=1.3)


def rows(noise=0.01):
    rng = np.random.default_rng(0)
    out = []
    for n in (6e3, 2.5e4, 1e5):
        for d in (3e5, 1.2e6, 3e6):
            out.append({"run_id": f"{n}-{d}", "N": n, "D": d,
                        "loss": float(LAW.loss(n, d) * np.exp(noise * rng.standard_normal()))})
    return out


def test_study_figure_points_are_the_runs_and_lines_the_law():
    r = rows()
    fig = study_figure(r, LAW)
    points = [t for t in fig.data if t.mode == "markers"]
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(points) == 6 and len(lines) == 6  # three budgets on the left, three sizes on the right
    shown = sorted((x, y) for t in points if t.xaxis == "x" for x, y in zip(t.x, t.y))
    assert shown == sorted((row["N"], row["loss"]) for row in r)
    left = next(t for t in lines if t.name == "fit, D = 1.2M")
    np.testing.assert_allclose(left.y, LAW.loss(np.asarray(left.x), 1.2e6))
    right = next(t for t in lines if t.name == "fit, N = 25k")
    np.testing.assert_allclose(right.y, LAW.loss(2.5e4, np.asarray(right.x)))
    labels = {a.text for a in fig.layout.annotations}
    assert {"D = 300k", "D = 1.2M", "D = 3M", "N = 6k", "N = 25k", "N = 100k"} <= labels  # each group named
    assert not [t for t in study_figure(r[:3]).data if t.mode == "lines"]  # no law yet: points only


def test_residuals_are_log_ratios_in_percent():
    r = rows()
    fig = residual_figure(r, LAW)
    got = {(x, round(y, 9)) for t in fig.data if t.mode == "markers" for x, y in zip(t.x, t.y)}
    want = {(row["N"], round(100 * (np.log(row["loss"]) - np.log(float(LAW.loss(row["N"], row["D"])))), 9))
            for row in r}
    assert got == want


def loss_by_hand(law, N, D):
    return law.A / N**law.alpha + law.B / D**law.beta + law.E


def check_on_the_frontier(law, C, log_n, log_d):
    """Each point (N, D) costs its compute (6 N D = C) and no other split of that compute has a lower loss: a
    model 2 % larger or smaller, trained on what the budget then leaves, does worse (the law written out here)."""
    N, D = 10 ** np.asarray(log_n), 10 ** np.asarray(log_d)
    np.testing.assert_allclose(6 * N * D, C, rtol=1e-9)
    best = loss_by_hand(law, N, D)
    for k in (1.02, 1 / 1.02):
        assert np.all(loss_by_hand(law, k * N, D / k) > best)


def test_frontiers_are_the_laws_optima_over_the_runs_compute():
    r = rows()
    fig = frontier_figure(LAW, r, LAW_PRESETS)
    ours = next(t for t in fig.data if t.name == "this study's frontier")
    C = np.asarray(ours.customdata)[:, 0]
    assert C.min() < 6 * 6e3 * 3e5 and C.max() > 6 * 1e5 * 3e6  # spans every run's compute
    check_on_the_frontier(LAW, C, ours.x, ours.y)
    chin = next(t for t in fig.data if t.name == "Chinchilla's frontier")
    check_on_the_frontier(CHINCHILLA, np.asarray(chin.customdata)[:, 0], chin.x, chin.y)
    assert any(t.name == "Epoch replication's frontier" for t in fig.data)
    runs = next(t for t in fig.data if t.name == "the runs")
    np.testing.assert_allclose(runs.marker.color, [row["loss"] for row in r])


def test_comparison_rows_put_the_published_constants_beside_ours():
    table = {row["key"]: row for row in comparison_rows(LAW, {"alpha": (0.2, 0.4)})}
    assert table["alpha"]["this study"] == 0.3 and table["alpha"]["95% low"] == 0.2
    assert table["alpha"]["Chinchilla 2022"] == CHINCHILLA.alpha and table["beta"]["Epoch 2024"] == EPOCH_2024.beta
    assert table["a"]["this study"] == pytest.approx(0.5) and np.isnan(table["beta"]["95% low"])


def test_estimate_spreads_the_runs_over_the_workers():
    g = Grid("g", widths=(16, 32), tokens=(1000, 2000), n_ctx=10, batch_size=10)
    ref = [{**vars(s), "cpu_s": 1.0} for s in g.specs()]
    ref = [{k: v for k, v in row.items() if k != "text"} for row in ref]
    one, two = estimate_seconds(g, ref, workers=1), estimate_seconds(g, ref, workers=2)
    assert one == pytest.approx(STARTUP_S + 4.0) and STARTUP_S + 2.0 <= two < one
    assert estimate_seconds(g, [], workers=2) is None
