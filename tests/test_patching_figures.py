"""The Cause and effect page's figures: every cell clickable with its own (row, column), the changed position framed,
values and tokens where a reader looks for them."""
import numpy as np
import pytest

from core.figures.patching_figures import head_table_figure, patch_heatmap, sources_figure


def test_every_cell_of_the_patch_heatmap_carries_its_row_and_position():
    values = np.array([[0.0, 1.0, 0.2], [0.5, -0.3, np.nan]])
    fig = patch_heatmap(values, ["a", "b", "c"], ["enters L1", "leaves L1"], "t", changed=1)
    targets = fig.data[1]
    assert [list(c) for c in targets.customdata] == [[r, p] for r in range(2) for p in range(3)]
    assert list(targets.y) == ["enters L1"] * 3 + ["leaves L1"] * 3 and list(targets.x) == [0, 1, 2] * 2
    assert "position 2 'b'" in targets.text[1] and "restored 1.000" in targets.text[1]
    (frame,) = fig.layout.shapes
    assert (frame.x0, frame.x1) == (0.5, 1.5)
    assert fig.data[0].zmax == 1.0 and fig.data[0].zmin == -1.0   # a symmetric range, 0 in the middle
    wide = patch_heatmap(np.array([[2.5, 0.0]]), ["a", "b"], ["r"], "t")
    assert wide.data[0].zmax == 2.5                                 # an overshoot widens the range
    with pytest.raises(ValueError):
        patch_heatmap(values, ["a", "b"], ["r1", "r2"], "t")


def test_the_head_table_frames_the_picked_head_and_names_each_cell():
    values = np.arange(8.0).reshape(2, 4) / 8
    fig = head_table_figure(values, "t", selected=(1, 2))
    targets = fig.data[1]
    i = [list(c) for c in targets.customdata].index([1, 2])
    assert targets.x[i] == "H3" and targets.y[i] == "L2" and targets.text[i].startswith("L2 H3")
    (frame,) = fig.layout.shapes
    assert (frame.x0, frame.y0) == (1.5, 0.5)


def test_the_sources_table_shows_its_entries():
    table = np.array([[1.0, -2.0], [0.5, 0.0]])
    fig = sources_figure(table, ["q1", "q2"], ["k1", "k2"], "t")
    assert fig.data[0].zmax == 2.0 and list(fig.data[0].x) == ["k1", "k2"] and list(fig.data[0].y) == ["q1", "q2"]


def test_cells_that_round_to_zero_never_read_minus_zero():
    from core.figures.patching_figures import cell_text, head_table_figure

    values = np.array([[-0.001, 0.004, -0.3], [np.nan, 1.0, -0.0049]])
    assert cell_text(values) == [["0.00", "0.00", "-0.30"], ["", "1.00", "0.00"]]
    fig = head_table_figure(values, "t")
    assert fig.data[0].texttemplate == "%{text}" and "-0.00" not in str(fig.data[0].text)
