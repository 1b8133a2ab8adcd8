"""How a Class round is drawn (issue 54): the teacher's text as plain text everywhere, the counts and the answer, and
the projector's own screen (no sidebar, no prose, large type, the join address and a QR code)."""
from __future__ import annotations

import functools
import io

import streamlit as st

from core.figures.class_figures import plain_html, vote_bars
from core.serve.class_rules import round_summary
from core.serve.fmt import md_escape
from ui.charts import shared_chart
from pages.classroom.forecast import show_forecast_question
from pages.classroom.identity import server_address, student_link

def plain(text: str, size: float = 1.0, weight: int = 400, colour: str = "inherit", key: str = ""):
    """``text`` exactly as typed (core.figures.class_figures.plain_html escapes it)."""
    st.html(plain_html(text, size, weight, colour, key))


def choice_label(choice: str) -> str:
    """A choice as a radio button's label (Streamlit reads labels as Markdown): every syntax character escaped."""
    return md_escape(str(choice))


def show_question(info: dict, large: bool = False, context: bool = True):
    """A round's question as every participant sees it: a Lesson step's text, formula and prompt (the project's own
    words), then the teacher's question as plain text. ``context=False``: the question alone (the projector)."""
    meta = info.get("meta") or {}
    if context and meta.get("kind") == "forecast":
        show_forecast_question(meta)
    elif context and meta.get("kind") == "lesson":
        st.caption(f"Lesson step: {md_escape(meta.get('title', ''))} · model {md_escape(meta.get('model', '?'))}")
        if meta.get("prompt"):
            st.markdown("**The teacher's prompt**")
            st.code(meta["prompt"], language=None, wrap_lines=True)
        st.markdown(meta.get("text", ""))
        if meta.get("latex"):
            st.latex(meta["latex"])
        for name, text in meta.get("shows", []):
            if name:
                st.markdown(f"**{md_escape(name)}**")
            st.code(text, language=None, wrap_lines=True)
    plain(info["question"], 2.6 if large else 1.35, 650, key="te-question")


def vote_figure(counts: dict, choices, answer=None, large=False, title="How the class voted"):
    """The bars of ``counts`` ({phase: {choice: n}}); vote 2's only once someone has cast it."""
    return vote_bars(choices, counts.get(1, {}), counts.get(2) if any(counts.get(2, {}).values()) else None,
                     answer, title=title, font=22 if large else 14)


def answer_words(info: dict) -> str:
    """The answer's headline, in the words its kind calls for: a forecast's run *landed*; the model *answers*."""
    kind = (info.get("meta") or {}).get("kind", "free")
    if info["answer"] is None:
        return "No single answer: " + {"forecast": "the run landed on no bin", "lesson": "the model gave none here"}.get(
            kind, "none was marked")
    return f"{ {'forecast': 'The run landed', 'lesson': 'The model' + chr(39) + 's answer'}.get(kind, 'The answer')}: " \
           f"{info['answer']}"


def summary_line(info: dict) -> str:
    s = round_summary(info["choices"], info["counts"].get(1, {}), info["counts"].get(2, {}), info["answer"])
    if info["answer"] is None:
        return f"{s['n1']} voted the first time, {s['n2']} the second."
    first = f"{s['right1']:.0%} of {s['n1']}" if s["right1"] is not None else "nobody voted"
    second = f"{s['right2']:.0%} of {s['n2']}" if s["right2"] is not None else "nobody voted"
    return f"Right the first time: {first}; the second time: {second}."


def show_counts(info: dict, key: str, large: bool = False):
    """What a round's counts say once the teacher has shown them (None before): once answered, the answer, the share
    right in each vote and the measured numbers first (in large type on the projector), then the bars."""
    if info["counts"] is None:
        return
    answer = info["answer"] if info["revealed"] else None
    if info["revealed"]:
        plain(answer_words(info), 2.4 if large else 1.3, 700, "#2b8a3e", key="te-answer")
        plain(summary_line(info), 1.7 if large else 1.0, 500, key="te-summary")
        if info["words"]:
            plain(info["words"], 1.4 if large else 0.95, 400, key="te-words")
    fig = vote_figure(info["counts"], info["choices"], answer, large=large)
    if large and info["revealed"]:  # the answer's lines above it: the chart a little shorter, still on one screen
        fig.update_layout(height=380)
    shared_chart(fig, width="stretch", theme=None, key=key)


@functools.lru_cache(maxsize=256)  # the projector's waiting screen reruns every 2 s: one encoding per link
def qr_png(link: str, scale: int = 8) -> bytes:
    import segno  # local: loaded only when a QR code is drawn; pinned in requirements.txt: a pure-Python QR encoder

    buf = io.BytesIO()
    segno.make(link, error="m").save(buf, kind="png", scale=scale, border=4)
    return buf.getvalue()


def waiting_screen(code: str, large: bool = True):
    """Before the first question: where to go, the code in large type, and a QR code of the student link."""
    left, right = st.columns([3, 2], vertical_alignment="center")
    with left:
        where = server_address()
        plain("Open the Class page and type this code:", 1.9 if large else 1.2, 500)
        if where:
            plain(f"{where}/classroom", 1.6 if large else 1.0, 600, "#3b5bdb", key="te-join-address")
        plain(f"{code[:4]} {code[4:]}", 5.0 if large else 2.4, 800, key="te-code")
        plain("or scan the code with your phone's camera", 1.2 if large else 0.9, 400, "#555")
    with right:
        st.image(qr_png(student_link(code)), width=330 if large else 200, caption=None)
