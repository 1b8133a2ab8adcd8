"""Numbers on the scaling pages as a reader reads them (issue 55): one formatter (core.serve.fmt.pretty_sci, and human
for counts) that never writes "e+05" or "20190.5"; a split whose passes run off the chart says so; every log axis of
the scaling figures labels its ticks with whole numbers, not the single digits ("9 10 2 3") Plotly writes between
decades. The numbers are read back from the text and compared with the values they stand for."""
import math
import re

import pytest

from core.analysis.scaling import CHINCHILLA
from core.figures import forecast_figures as FF
from core.figures import scaling_figures as SF
from core.serve import fmt
from core.views import scaling_use as su

SUPER = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
SCALE = {"k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def read(text: str) -> float:
    """A number as the formatter writes it, read back: '20,200', '3.25 × 10¹⁷', '10⁹', '2.5k', '1.4T'."""
    text = text.strip()
    m = re.fullmatch(r"(?:(-?[\d,.]+) × )?10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text)
    if m:
        return float((m.group(1) or "1").replace(",", "")) * 10 ** int(m.group(2).translate(SUPER))
    if text[-1] in SCALE:
        return float(text[:-1]) * SCALE[text[-1]]
    return float(text.replace(",", ""))


@pytest.mark.parametrize("x", [0.663212, 6.92736e12, 20190.5, 230_912, 3.25e17, 1e9, 999_999.7, 0.000123, 12.0, 1.5])
def test_pretty_sci_writes_every_number_whole(x):
    s = fmt.pretty_sci(x)
    assert "e+" not in s and "e-" not in s
    assert read(s) == pytest.approx(x, rel=5e-3)
    if 1e-3 <= x < 1e6:
        assert "×" not in s  # a number a reader says in digits stays in digits


@pytest.mark.parametrize("x", [3.25e17, 1.4e12, 175e9, 999_950, 65e6, 12])
def test_human_counts_never_carry_an_exponent(x):
    s = fmt.human(x)
    assert "e+" not in s and not s.endswith("kk")
    assert read(s) == pytest.approx(x, rel=5e-3)


def test_a_split_whose_passes_run_off_the_chart_says_so():
    unique, budget = 1e9, 1e26  # a small stock and a large budget: far more passes than the chart shows
    cons = su.constrained(CHINCHILLA, budget, unique)
    fig = FF.unique_data_figure(CHINCHILLA, cons.N, unique)
    chart_end = max(max(t.x) for t in fig.data if (t.xaxis or "x") == "x")  # the left chart's passes
    assert cons.passes > chart_end
    note = su.constrained_note(cons)
    passes = re.search(r"on ([\d,.]+(?: × 10[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?) passes", note).group(1)
    assert read(passes) == pytest.approx(cons.D / unique, rel=5e-3)
    end = re.search(r"stops at ([\d,.]+) passes", note)
    assert end and read(end.group(1)) == pytest.approx(chart_end, rel=1e-6), note
    inside = su.constrained_note(su.constrained(CHINCHILLA, 1e22, 1e11))
    assert "stops at" not in inside


def _log_axes(fig):
    layout = fig.layout.to_plotly_json()
    return {k: v for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and v.get("type") == "log"}


@pytest.mark.parametrize("make", [
    lambda: FF.unique_data_figure(CHINCHILLA, 1e9, 1e11),
    lambda: FF.constrained_split_figure(CHINCHILLA, 1e11),
    lambda: FF.stock_figure(su.STOCKS),
    lambda: SF.loss_vs_N(CHINCHILLA),
    lambda: SF.isoflop_curves(CHINCHILLA),
])
def test_every_log_axis_labels_its_ticks_with_whole_numbers(make):
    axes = _log_axes(make())
    assert axes
    for name, axis in axes.items():
        vals, text = axis.get("tickvals"), axis.get("ticktext")
        assert vals is not None and text is not None and len(vals) == len(text) >= 2, name
        for v, t in zip(vals, text):
            assert read(t) == pytest.approx(v, rel=5e-3), (name, v, t)
        if axis.get("range"):
            lo, hi = (10 ** r for r in axis["range"])
            assert all(lo * (1 - 1e-6) <= v <= hi * (1 + 1e-6) for v in vals), name
        assert len(set(text)) == len(text), name  # no "2" standing for both 2 and 20
    assert not any(math.isnan(v) for axis in axes.values() for v in axis["tickvals"])
