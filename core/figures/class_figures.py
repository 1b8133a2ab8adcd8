"""The Class page's figure: how the room voted, before and after discussing (core.serve.classroom's counts)."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from core.figures.common import dict_figure

VOTE_COLOURS = ("#9aa5b1", "#3b5bdb")  # vote 1 grey, vote 2 blue
ANSWER_COLOUR = "#2b8a3e"


def _label(choice: str) -> str:
    """A teacher's choice as Plotly draws plain text: its tags (<a href>, <b>) and entities escaped, and a leading $
    kept from reading as LaTeX."""
    text = html.escape(str(choice), quote=False)
    return "\u200b" + text if text.startswith("$") else text


def vote_bars(choices, vote1: dict, vote2: dict | None = None, answer=None, title: str = "How the class voted",
              font: int = 14) -> go.Figure:
    """Bars per choice: vote 1, and vote 2 beside it when given; the model's answer, when there is one, is marked
    under its bar in green. ``font``: the projector draws larger."""
    labels = [f"<b>{_label(c)}</b> ✓" if c == answer else _label(c) for c in choices]
    data = [dict(type="bar", name="vote 1", x=labels, y=[vote1.get(c, 0) for c in choices],
                 marker=dict(color=VOTE_COLOURS[0]), text=[vote1.get(c, 0) for c in choices], textposition="outside")]
    if vote2 is not None:
        data.append(dict(type="bar", name="vote 2", x=labels, y=[vote2.get(c, 0) for c in choices],
                         marker=dict(color=VOTE_COLOURS[1]), text=[vote2.get(c, 0) for c in choices],
                         textposition="outside"))
    top = max([1, *vote1.values(), *((vote2 or {}).values())])
    layout = dict(title=dict(text=title), barmode="group", height=320 + 6 * font, font=dict(size=font),
                  yaxis=dict(title=dict(text="students"), range=[0, top * 1.25], dtick=max(1, round(top / 5))),
                  # category, always: choices "1", "01" and "1.0" would otherwise be read as one number and share a bar
                  xaxis=dict(type="category", categoryorder="array", categoryarray=labels,
                             title=dict(text="choice" + (" (✓ the answer)" if answer is not None else ""))),
                  legend=dict(orientation="h", y=1.12), margin=dict(l=60, r=20, t=80, b=60))
    return dict_figure(data, layout)


def plain_html(text: str, size: float = 1.0, weight: int = 400, colour: str = "inherit", cls: str = "") -> str:
    """A block of ``text`` exactly as typed, at ``size`` rem, for st.html: HTML-escaped, so no Markdown, LaTeX, image,
    link or tag in a teacher's question or choice draws anything but its own characters (issue 54). ``cls``: a class
    name of the project's own (the browser tests find the question, the answer by it)."""
    return (f'<div class="te-plain {html.escape(cls)}" style="font-size:{float(size)}rem;font-weight:{int(weight)};'
            f"line-height:1.25;color:{html.escape(colour)};overflow-wrap:anywhere;white-space:pre-wrap\">"
            f"{html.escape(str(text))}</div>")


def projector_css() -> str:
    """The projector's page: Streamlit's sidebar, header and toolbar hidden, the top margin small (the round within
    720 px)."""
    return """<style>
section[data-testid="stSidebar"], div[data-testid="stSidebarCollapsedControl"], header[data-testid="stHeader"],
div[data-testid="stToolbar"], div[data-testid="stDecoration"] {display: none !important;}
div[data-testid="stMainBlockContainer"], .block-container {padding-top: 0.8rem !important; max-width: 100% !important;}
</style>"""
