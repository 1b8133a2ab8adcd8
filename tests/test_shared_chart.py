"""ui.chart sends a figure's encoded form (ui.encoded: no deep copy of its arrays) and ui.shared_chart keeps that
form with a cached figure. What reaches the browser must be the very text st.plotly_chart sends for the figure
itself (Plotly's own path: to_dict, then plotly.io.to_json), and the element (its id, hence a selection's widget
identity) must stay the same."""

import plotly.io as pio
import plotly.tools
import pytest
import torch

from core.analysis.attention import attention_overview, head_attention, head_window
from pages.attention.grid import all_heads_figure
from core.figures.attention_panels import head_panels, mask_order_figure
from core.figures.generation_figures import sweep_bars
from core.nn.config import ModelConfig
from core.nn.model import Transformer


def streamlit_json(fig) -> str:
    """What st.plotly_chart 1.67 puts in its proto for ``fig`` (streamlit/elements/plotly_chart.py)."""
    return pio.to_json(plotly.tools.return_figure_from_figure_or_data(fig, validate_figure=True), validate=False)


@pytest.fixture(scope="module")
def figures():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)).eval()
    ids = [1, 2, 3, 4, 1, 2, 3, 9, 10]
    tokens = list("abcdabcjk")
    s, p = head_attention(model, ids, 1, 2)
    view = head_window(s, p, 0, len(ids) - 1)  # masked cells are NaN: the encoder's slow path, exercised
    overview = attention_overview(model, ids, 0, len(ids) - 1)
    return [head_panels(view.scores, view.pattern, tokens, offset=0), mask_order_figure(s, tokens, offset=0),
            all_heads_figure(overview.thumbs, selected=(1, 2), block=overview.block),
            sweep_bars(list("abcdefghijk"), torch.randn(11).double(), [0.0, 0.5, 1.0, 4.0])]


def test_the_encoded_form_is_sent_as_the_same_json(figures):
    import plotly.graph_objects as go

    from ui import encoded
    figures = figures + [go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), frames=[go.Frame(data=[go.Scatter(y=[5, 6])])])]
    for fig in figures:
        before = pio.to_json(fig, validate=False)
        plain = streamlit_json(fig)
        assert streamlit_json(encoded(fig)) == plain
        assert pio.to_json(fig, validate=False) == before  # the figure itself is left as it was


def test_a_page_draws_the_same_charts_on_every_visit(open_page, monkeypatch):
    """The Attention page three times in new sessions: every visit sends the encoded form its cached figures keep
    (counted). Same ids, same specs."""
    import ui
    sent = []
    plain_to_dict = ui._Encoded.to_dict
    monkeypatch.setattr(ui._Encoded, "to_dict", lambda self: sent.append(1) or plain_to_dict(self))
    seen = []
    for _ in range(3):
        at = open_page("pages/attention.py")
        assert not at.exception
        seen.append([(c.proto.id, c.proto.spec) for c in at.get("plotly_chart")])
    assert len(seen[0]) == 5 and seen[0] == seen[1] == seen[2]
    assert len(sent) >= 12  # every chart of every visit
