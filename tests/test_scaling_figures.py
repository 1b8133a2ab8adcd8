"""core.figures.scaling_figures: the figures carry the numbers the page claims."""
import numpy as np
import pytest

from core.serve.fmt import human, latex_sci, sci
from core.analysis.scaling import CHINCHILLA, EPOCH_2024, FAMOUS_MODELS
from core.figures.scaling_figures import fit_figure, isoflop_curves, loss_map, loss_vs_D, loss_vs_N
from core.analysis.scaling_runs import synthetic_runs


def test_number_formats():
    assert human(175e9) == "175B" and human(1.4e12) == "1.4T" and human(65e6) == "65M" and human(12) == "12"
    assert sci(5.88e23) == "5.88e23"
    assert latex_sci(5.88e23) == r"5.88 \times 10^{23}"


def test_loss_vs_N_curves_flatten_onto_labelled_dashed_plateaus():
    Ds = (1e9, 1e11, 1e13)
    fig = loss_vs_N(CHINCHILLA, Ds=Ds)
    curves = [t for t in fig.data if t.line.dash is None and t.name.startswith("D =")]
    plateaus = [t for t in fig.data if t.line.dash == "dash"]
    assert [t.name.split(":")[0] for t in curves] == ["D = 1B", "D = 100B", "D = 10T"]
    assert len(plateaus) == 3
    for D, curve, plateau in zip(Ds, curves, plateaus):
        p = CHINCHILLA.E + CHINCHILLA.B / D**CHINCHILLA.beta
        assert plateau.y == pytest.approx((p, p))
        assert f"plateau {p:.3f}" in curve.name
        y = np.asarray(curve.y)
        assert np.all(np.diff(y) < 0) and y[-1] == pytest.approx(p, abs=0.02)  # flat by N = 1e14
    labels = [a.text for a in fig.layout.annotations]
    assert "2.930" in labels and "plateau L∞ + B/D^β" in labels  # the values in the right margin, under a header
    assert f"L∞ = {CHINCHILLA.E:.3f}" in labels
    assert fig.layout.xaxis.type == "log"


def test_mirror_plot_uses_the_capacity_plateau():
    fig = loss_vs_D(EPOCH_2024, Ns=(1e8,))
    plateau = next(t for t in fig.data if t.line.dash == "dash")
    assert plateau.y[0] == pytest.approx(EPOCH_2024.E + EPOCH_2024.A / 1e8**EPOCH_2024.alpha)
    assert fig.layout.xaxis.title.text == "training tokens D"


def test_loss_map_has_frontier_iso_compute_lines_and_famous_models():
    fig = loss_map(CHINCHILLA)
    contour = fig.data[0]
    assert contour.type == "contour"
    z = np.asarray(contour.z)
    assert z.shape == (len(contour.y), len(contour.x))
    frontier = next(t for t in fig.data if t.name == "compute-optimal frontier")
    C = np.asarray(frontier.customdata)[:, 0]
    n, d = CHINCHILLA.compute_optimal(C)
    np.testing.assert_allclose(frontier.x, np.log10(n))
    np.testing.assert_allclose(frontier.y, np.log10(d))
    iso = [t for t in fig.data if (t.name or "").startswith("C = ")]
    assert len(iso) >= 3
    for t in iso:  # log D + log N is constant along each line
        s = np.asarray(t.x) + np.asarray(t.y)
        assert s[0] == pytest.approx(s[-1])
    models = next(t for t in fig.data if t.name == "famous models")
    assert list(models.text) == [m.name for m in FAMOUS_MODELS]
    gpt3 = list(models.customdata[0])
    assert gpt3[:2] == ["175B", "300B"] and gpt3[2] == pytest.approx(300 / 175)
    assert gpt3[3] == sci(6 * 175e9 * 300e9)
    assert gpt3[9] > 0  # lower loss at the optimum
    for key in ("tokens per parameter", "compute 6ND", "optimum for that compute", "lower"):
        assert key in models.hovertemplate


def test_isoflop_minimum_lands_on_the_closed_form():
    budgets = (1e19, 1e23)
    fig = isoflop_curves(EPOCH_2024, budgets=budgets)
    minima = [t for t in fig.data if (t.name or "").startswith("grid minimum")]
    closed = [t for t in fig.data if t.name == "closed-form optimum"]
    assert len(minima) == len(closed) == 2
    for C, m, c in zip(budgets, minima, closed):
        n_opt, _ = EPOCH_2024.compute_optimal(C)
        assert c.x[0] == pytest.approx(n_opt)
        assert m.x[0] == pytest.approx(n_opt, rel=0.02)  # 301 points over 5 decades
        assert m.y[0] == pytest.approx(c.y[0], abs=1e-5)


def test_fit_figure_collapses_the_runs_onto_the_curves():
    runs = synthetic_runs(CHINCHILLA, n=30, noise=0.0, seed=0)
    fig = fit_figure(CHINCHILLA, runs.N, runs.D, runs.loss)
    pts = [t for t in fig.data if t.mode == "markers"]
    assert len(pts) == 2
    # with noise-free runs and the true law, every collapsed point sits exactly on its curve
    np.testing.assert_allclose(pts[0].y, CHINCHILLA.plateau_in_D(runs.N))
    np.testing.assert_allclose(pts[1].y, CHINCHILLA.plateau_in_N(runs.D))


def test_scientific_notation_rounds_up_across_a_power_of_ten():
    assert sci(9.9996e5) == "1e6" and latex_sci(9.999e23) == "10^{24}"
