"""Figures built from plain dicts skip Plotly's property-by-property validation (core.figures.common.dict_figure): it
cost more than building them. So every such figure the pages draw must encode to the same JSON as its validated
twin built from the very same dicts: validation spells out magic underscores and named colour scales, and it
rejects a misspelt property. The pages run in AppTest on prompts no cache holds, and every figure is caught."""
import json
import math
import secrets

import plotly.graph_objects as go
import plotly.io as pio
import plotly.tools
import pytest

import pages.attention.grid
import core.figures.attention_panels
import core.figures.trace_figures


def streamlit_json(fig) -> dict:
    """What st.plotly_chart sends for ``fig``, parsed."""
    return json.loads(pio.to_json(plotly.tools.return_figure_from_figure_or_data(fig, validate_figure=True),
                                  validate=False))


def same(a, b, path="") -> str:
    """"" when the two parsed specs are equal (floats to 1e-12), else where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k} only in {'the validated twin' if k in b else 'ours'}"
            d = same(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return ""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        return next((d for d in (same(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))) if d), "")
    if isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12):
        return ""
    return "" if a == b else f"{path}: {str(a)[:80]!r} vs {str(b)[:80]!r}"


@pytest.fixture
def built(monkeypatch):
    """Every (data, layout, figure) that dict_figure builds while the test runs."""
    caught = []
    for module in (core.figures.attention_panels, pages.attention.grid, core.figures.trace_figures):
        plain = module.dict_figure

        def recorder(data, layout, plain=plain):
            fig = plain(data, layout)
            caught.append((data, layout, fig))
            return fig
        monkeypatch.setattr(module, "dict_figure", recorder)
    return caught


def test_every_dict_figure_a_page_draws_encodes_as_its_validated_twin(built, open_page):
    tag = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))  # no cache holds these prompts
    at = open_page("pages/attention.py")
    at.text_area(key="attn_prompt").input(f"KING:\nThe moon is down, {tag}; what news?")
    at.toggle(key="attn_unmasked").set_value(True)
    at.run()
    assert not at.exception
    at = open_page("pages/generation.py")
    at.text_area(key="gen_prompt").input(f"QUEEN:\nWhat news, {tag}?")
    at.run()
    assert not at.exception
    at = open_page("pages/inside.py")
    at.text_area(key="inside_prompt").input(f"ROMEO:\nIs the day so young, {tag}?")
    at.run()
    assert not at.exception
    names = {fig.layout.title.text or "" for _, _, fig in built}
    assert len(built) >= 12, f"only {len(built)} figures were caught: {sorted(names)}"
    for data, layout, fig in built:
        twin = go.Figure(data=data, layout=layout)  # validated
        diff = same(streamlit_json(fig), streamlit_json(twin))
        assert not diff, f"{fig.layout.title.text!r}: {diff}"


def test_the_canonical_form_is_what_validation_gives():
    from core.figures.common import dict_figure
    data = [dict(type="bar", x=[1, 2], y=[3, 4], marker_color="#e6550d", marker=dict(line=dict(width=1)))]
    layout = dict(shapes=[dict(type="rect", x0=0, x1=1, y0=0, y1=1, line_width=0)], title_text="t",
                  coloraxis=dict(colorscale="RdBu_r"))
    ours, twin = streamlit_json(dict_figure(data, layout)), streamlit_json(go.Figure(data=data, layout=layout))
    assert not same(ours, twin)
    assert ours["data"][0]["marker"] == {"color": "#e6550d", "line": {"width": 1}}
    assert isinstance(ours["layout"]["coloraxis"]["colorscale"], list)
