"""The all-heads views for a model with many heads (GPT-2 small: 12 layers x 12 heads) and for the shipped 2 x 4:
panels, their sizes, what a click on each carries, and the overview table's numbers."""
import numpy as np
import pytest

from core.analysis.attention import future_mask
from pages.attention.grid import GRID_MAX_COLS, all_heads_figure, head_overview_figure

L, H, T = 12, 12, 48


def thumbs(L=L, H=H, t=T, seed=0):
    """Random causal patterns (L, h, t, t): rows sum to 1, nothing above the diagonal."""
    raw = np.tril(np.random.default_rng(seed).random((L, H, t, t)))
    return raw / raw.sum(-1, keepdims=True)


def panels(fig):
    """(layer, head) -> (x domain, y domain) of each drawn head, read from the click targets' axes."""
    out = {}
    for trace in fig.data:
        if trace.type == "scatter":
            xa = fig.layout["xaxis" + trace.xaxis[1:]]
            ya = fig.layout["yaxis" + trace.yaxis[1:]]
            out[tuple(int(v) for v in trace.customdata[0])] = (xa.domain, ya.domain)
    return out


def test_gpt2_small_grid_draws_the_chosen_layers_in_rows_of_six_readable_panels():
    pats = thumbs()
    fig = all_heads_figure(pats, selected=(4, 7), layers=[4, 9])
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 2 * H  # the two chosen layers only, not 144 heads
    found = panels(fig)
    assert sorted(found) == [(l, k) for l in (4, 9) for k in range(H)]
    # each heatmap is the head's own pattern, future grey (NaN)
    order = [(l, k) for l in (4, 9) for k in range(H)]
    for (l, k), tr in zip(order, heat):
        z = np.array(tr.z, dtype=float)
        assert np.isnan(z[future_mask(T)]).all()
        np.testing.assert_allclose(z[~future_mask(T)], pats[l, k][~future_mask(T)], atol=1e-6)
    # rows of GRID_MAX_COLS: four rows of six panels, every panel at least 1/7 of the width and about 210 px tall
    xs = sorted({round(x[0], 4) for x, _ in found.values()})
    ys = sorted({round(y[0], 4) for _, y in found.values()})
    assert len(xs) == GRID_MAX_COLS == 6 and len(ys) == 4
    for x, y in found.values():
        assert x[1] - x[0] > 1 / 7
        assert (y[1] - y[0]) * (fig.layout.height - 60) == pytest.approx(210, abs=1)
    # titles count from 1; the red frame sits on layer 5, head 8
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0] == "layer 5 · head 1" and "layer 10 · head 12" in titles
    (frame,) = fig.layout.shapes
    x, y = found[4, 7]
    assert frame.x0 < x[0] < x[1] < frame.x1 and frame.y0 < y[0] < y[1] < frame.y1
    # a click anywhere on a square lands near one of 64 points that carry (layer, head), counted from 0
    targets = [t for t in fig.data if t.type == "scatter"]
    assert all(len(t.x) == 64 and 0 <= min(t.x) and max(t.x) <= T - 1 for t in targets)
    assert [list(t.customdata[0]) for t in targets[:2]] == [[4, 0], [4, 1]]


def test_shipped_shape_grid_is_every_head_in_one_row_per_layer():
    fig = all_heads_figure(thumbs(2, 4, 20), selected=(1, 2))
    found = panels(fig)
    assert sorted(found) == [(l, k) for l in range(2) for k in range(4)]
    assert len({round(x[0], 4) for x, _ in found.values()}) == 4 and len({round(y[0], 4) for _, y in found.values()}) == 2
    assert len(fig.layout.shapes) == 1


def test_block_size_is_named_on_the_colour_bar():
    assert fig_title(all_heads_figure(thumbs(1, 2, 8), block=1)) == "weight"
    assert "3×3" in fig_title(all_heads_figure(thumbs(1, 2, 8), block=3))


def fig_title(fig):
    return fig.layout.coloraxis.colorbar.title.text


def test_overview_has_one_clickable_cell_per_head_with_its_numbers():
    rng = np.random.default_rng(1)
    roles = {"previous_token": rng.random((L, H)), "first_token": rng.random((L, H)),
             "entropy": 3 * rng.random((L, H)), "induction": rng.random((L, H))}
    fig = head_overview_figure(roles, "previous_token", selected=(2, 10))
    heat, cells = fig.data
    np.testing.assert_allclose(np.array(heat.z, dtype=float), roles["previous_token"])
    assert len(cells.x) == L * H
    assert not isinstance(cells.customdata, np.ndarray)  # a list: a binary array reaches a click callback as an object
    custom = np.array(cells.customdata, dtype=float)
    for i in (0, 37, 143):
        l, k = int(custom[i, 0]), int(custom[i, 1])
        assert (cells.x[i], cells.y[i]) == (k, l)  # the point sits on its own cell
        np.testing.assert_allclose(custom[i, 2:], [roles[key][l, k] for key in
                                                   ("previous_token", "first_token", "entropy", "induction")])
        assert cells.text[i] == f"layer {l + 1} · head {k + 1}"
    assert list(fig.layout.xaxis.ticktext)[:2] == ["H1", "H2"] and fig.layout.yaxis.ticktext[-1] == "L12"
    assert fig.layout.yaxis.range == (11.5, -0.5)  # layer 1 on top
    (frame,) = fig.layout.shapes
    assert (frame.x0, frame.x1, frame.y0, frame.y1) == (9.5, 10.5, 1.5, 2.5)
    assert 400 <= fig.layout.height <= 600  # about 34 px a layer: the printed values fit
    ent = head_overview_figure(roles, "entropy")
    assert ent.data[0].zmax == pytest.approx(roles["entropy"].max())


@pytest.mark.parametrize("n", range(1, 13))
def test_panel_layouts_stay_inside_the_figure_for_any_count(n):
    """Domains add up by floating point: the last panel must not end past 1, which Plotly refuses."""
    import plotly.graph_objects as go

    from core.figures.common import grid_of_panels, row_of_panels
    for layout in (row_of_panels([1.0] * n, 0.05, [str(i) for i in range(n)]),
                   row_of_panels([0.3, 0.1] * n, 0.02, [str(i) for i in range(2 * n)], shared_y=True),
                   grid_of_panels(n, 7, 0.02, 0.03, [str(i) for i in range(7 * n)])):
        go.Figure(layout=layout)  # validates every domain
        for key, axis in layout.items():
            if key.startswith(("xaxis", "yaxis")):
                assert 0 <= axis["domain"][0] <= axis["domain"][1] <= 1
