import math

import numpy as np
import pytest

from core.analysis import cost
from pages.parameters.figures import flops_figure, parameter_bar, timing_figure
from core.nn.config import ModelConfig
from core.nn.params import count_parameters


def test_parameter_bar_splits_block_and_model():
    cfg = ModelConfig(vocab_size=65, n_ctx=128, d_model=64, n_heads=4, n_layers=2)
    counts = count_parameters(cfg)
    fig = parameter_bar(counts, cfg.n_layers)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name)[:4] == ["W_Q", "W_K", "W_V", "W_O"]
    assert by_name["W_Q"].x == (64 * 64, 2 * 64 * 64)
    assert by_name["token embedding"].x == (None, 65 * 64)
    # the whole-model bar adds up to the total, the block bar to one block
    assert sum(t.x[1] for t in fig.data) == counts["total"]
    assert sum(t.x[0] or 0 for t in fig.data) == counts["per_block"]
    assert by_name["MLP W1"].text[0] == "33%" and fig.layout.barnorm == "percent"


def test_flops_figure_marks_both_crossovers():
    fig = flops_figure(64, 256, n_ctx=128)
    names = [t.name for t in fig.data]
    assert any(n.startswith("attention's n² terms") for n in names)
    assert any(n.startswith("recurrent layer") for n in names)
    cross = next(t for t in fig.data if t.name == "crossovers")
    assert list(cross.x) == [cost.crossover_block(64, 256), cost.crossover_recurrent(64)] == [384, 64]
    quad = next(t for t in fig.data if t.name.startswith("attention's n²"))
    lin = next(t for t in fig.data if t.name.startswith("block's nd²"))
    n = np.asarray(quad.x)
    # left of the crossover the per-token terms are larger, right of it the n^2 terms
    assert np.all((np.asarray(quad.y) > np.asarray(lin.y)) == (n > 384))
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert any(t.name == "model context n_ctx = 128" for t in fig.data)
    assert len(fig.layout.annotations) == 2 and "384" in fig.layout.annotations[0].text


def test_timing_figure_shows_measurements_and_fits():
    ns = [64, 128, 256, 512]
    t = cost.Timing(ns=ns, attention_s=[1e-8 * n**2 for n in ns], mlp_s=[1e-6 * n for n in ns], fit_from=128,
                    attention_slope=2.0, mlp_slope=1.0, total_s=0.1, threads=1)
    assert t.last_doubling() == (pytest.approx(4), pytest.approx(2))
    fig = timing_figure(t, "m")
    names = [tr.name for tr in fig.data]
    assert names == ["attention (measured)", "attention fit: slope 2.00", "MLP (measured)", "MLP fit: slope 1.00"]
    fit = fig.data[1]
    assert list(fit.x) == [128, 256, 512]
    assert np.allclose(fit.y, [1e-8 * n**2 * 1e3 for n in (128, 256, 512)])  # milliseconds


def test_parameter_bar_shows_gpt2_biases_and_still_adds_up():
    cfg = ModelConfig(vocab_size=50, n_ctx=16, d_model=32, n_heads=4, n_layers=3, bias=True, tie_weights=True)
    counts = count_parameters(cfg)
    fig = parameter_bar(counts, cfg.n_layers)
    by_name = {t.name: t for t in fig.data}
    assert by_name["biases"].x == (4 * 32 + 128 + 32, 3 * (4 * 32 + 128 + 32))
    assert sum(t.x[1] or 0 for t in fig.data) == counts["total"]
    assert sum(t.x[0] or 0 for t in fig.data) == counts["per_block"]
    assert "biases" not in {t.name for t in parameter_bar(count_parameters(ModelConfig()), 2).data}


@pytest.mark.parametrize("d, d_ff", [(2_000_000, 8_000_000), (2_000_000, 2_000_000), (635_130, 4 * 635_130)])
def test_flops_figure_at_the_widest_form_values(d, d_ff):
    """The page's widest shape (d = 2,000,000; d_ff = 4d or the form's maximum): 2n²d at the crossover passes
    2^63, which numpy cannot take the log of as a Python int. The figure is built, with its marks where the
    formulas put them (logs taken here with math.log10, exact on Python ints)."""
    fig = flops_figure(d, d_ff, n_ctx=2_000_000)
    n_block = 2 * d + d_ff
    cross = next(t for t in fig.data if t.name == "crossovers")
    assert list(cross.x) == [n_block, d]
    assert np.allclose(cross.y, [float(2 * n_block**2 * d), float(2 * d**3)], rtol=1e-12)
    marks = [(a.x, a.y) for a in fig.layout.annotations]
    assert np.allclose(marks, [(math.log10(n_block), math.log10(2 * n_block**2 * d)),
                               (math.log10(d), math.log10(2 * d**3))], rtol=1e-12)
    quad = next(t for t in fig.data if t.name.startswith("attention's n²"))
    assert np.all(np.isfinite(np.asarray(quad.y, dtype=float)))
