"""The Class page's parts (issue 44): the shared store, the question a round asks (a Lesson step on the teacher's model
and prompt, or the teacher's own), and the three views: teacher, student, projector. The store
(core.serve.classroom) is the only state shared between sessions; each session keeps its own role in session state."""
from __future__ import annotations

import os
import secrets

import streamlit as st

from core import lesson as LS
from core.figures.class_figures import vote_bars
from ui.charts import shared_chart
from ui.class_forecast import show_forecast_question
from ui.lesson_context import lesson_context
from ui.models import model_key
from core.serve.classroom import (STORE_ENV, ClassError, default_sqlite_path, MAX_CHOICES as MAX_STEP_CHOICES, MIN_CHOICES, normalize_code,
                                  round_summary, rounds_csv, shift_rows, store_from_env)

MAX_OWN_CHOICES = 6          # the teacher's own question: 2 to 6 choices (a Lesson step may offer up to MAX_STEP_CHOICES)

TEACHER = "class_teacher"    # session state: (code, secret) of the class this session runs
JOINED = "class_joined"      # codes this session joined as a student (at most MAX_JOINED)
VOTER = "class_voter"        # this session's anonymous voter id (random, never shown)
MAX_JOINED = 3
REFRESH_S = 2                # students and the projector see a new round within this many seconds


def class_store():
    """The store every session of this server shares (TE_CLASS_STORE; SQLite beside the models folder by default)."""
    # the place, resolved now: the default follows TE_MODELS_DIR, and one cached store must not outlive a change of it
    return _store(os.environ.get(STORE_ENV, "").strip() or str(default_sqlite_path()))


@st.cache_resource(show_spinner=False)
def _store(setting: str):
    # keyed by the setting: one store object per place, opened once for the server
    return store_from_env({STORE_ENV: setting})


def voter_id() -> str:
    return st.session_state.setdefault(VOTER, secrets.token_hex(8))


def lesson_round(step, ctx, model_name: str, prompt: str, model_id: str = "") -> tuple[str, tuple, dict] | str:
    """(question, choice labels, meta) of Lesson ``step`` asked of ``ctx``, or why it cannot be a class question.
    ``model_id``: the weights' key (ui.model_key), so that the answer is measured on the same weights."""
    q = LS.question(step, ctx)
    if q.blocked:
        return q.blocked
    if not q.choices or not MIN_CHOICES <= len(q.choices) <= MAX_STEP_CHOICES:
        return (f"this step asks for {'a number' if not q.choices else f'one of {len(q.choices)} choices'}; a class "
                f"votes on {MIN_CHOICES} to {MAX_STEP_CHOICES} named choices. Pick another step, or ask it as your own "
                "question")
    labels = tuple(str(x) for x in q.labels)
    meta = {"kind": "lesson", "step": step.key, "title": step.title, "text": q.text, "latex": q.latex or "",
            "shows": [list(x) for x in q.shows], "model": model_name, "model_id": model_id, "prompt": prompt,
            "ids": list(ctx.ids)}
    return q.ask, labels, meta


def lesson_answer(step, ctx, labels) -> tuple[str | None, str]:
    """The live model's answer to ``step`` on ``ctx``: (the label of the one choice the Lesson marks right, or None
    when it marks none or several, as on a close call; its numbers in words). Measured once, every choice graded."""
    q = LS.question(step, ctx)
    if tuple(str(x) for x in q.labels) != tuple(labels):
        raise ClassError("the question asked of the model is no longer the one the class voted on")
    m = step.measure(ctx, q)
    right = [c for c in q.choices if step.grade(q, m, c).correct is True]
    pick = right[0] if len(right) == 1 else q.choices[0]
    grade, shown = LS.answer(step, q, m, pick)
    words = " ".join(x for x in (shown.words, f"({grade.why})" if grade.why else "") if x)
    if len(right) != 1:
        return None, words or "The model gives no single answer here."
    return labels[list(q.choices).index(right[0])], words


def current_round(code: str, header) -> dict | None:
    """The class's latest round as any participant may see it, after ``header()``; None (with the reason shown) when
    the class is gone or has no round yet."""
    try:
        info = class_store().round_info(code)
    except ClassError as e:
        st.info(f"{e}.")
        return None
    header()
    if info["round"] is None:
        st.info("Waiting for the teacher's first question ...")
        return None
    return info


def show_question(info: dict, large: bool = False):
    """A round's question as every participant sees it: a Lesson step's text, formula and prompt, then the ask."""
    meta = info.get("meta") or {}
    if meta.get("kind") == "forecast":
        show_forecast_question(meta)
    elif meta.get("kind") == "lesson":
        st.caption(f"Lesson step: {meta.get('title', '')} · model {meta.get('model', '?')}")
        if meta.get("prompt"):
            st.markdown("**The teacher's prompt**")
            st.code(meta["prompt"], language=None, wrap_lines=True)
        st.markdown(meta.get("text", ""))
        if meta.get("latex"):
            st.latex(meta["latex"])
        for name, text in meta.get("shows", []):
            if name:
                st.markdown(f"**{name}**")
            st.code(text, language=None, wrap_lines=True)
    (st.header if large else st.subheader)(info["question"])


def preview(made: tuple, expanded: bool):
    """The teacher's look at a question before it opens: what students will see, then its choices."""
    with st.expander("What students will see", expanded=expanded):
        show_question({"question": made[0], "meta": made[2]})
        st.markdown("  ·  ".join(made[1]))


def vote_figure(counts: dict, choices, answer=None, large=False, title="How the class voted"):
    """The bars of ``counts`` ({phase: {choice: n}}); vote 2's only once someone has cast it."""
    return vote_bars(choices, counts.get(1, {}), counts.get(2) if any(counts.get(2, {}).values()) else None,
                     answer, title=title, font=22 if large else 14)


def show_counts(info: dict, key: str, large: bool = False):
    """What a round's counts say once the teacher has shown them (round_info's "counts", None before): the bars, and
    once the model has answered, the share right in each vote and the model's numbers."""
    if info["counts"] is None:
        return
    answer = info["answer"] if info["revealed"] else None
    shared_chart(vote_figure(info["counts"], info["choices"], answer, large=large), width="stretch", theme=None,
                 key=key)
    if info["revealed"]:
        st.markdown(summary_words(info["choices"], info["counts"], info["answer"]))
        if info["words"]:
            st.caption(info["words"])


def act(fn, *args) -> bool:
    """A store call of the teacher's, its refusal said in words (a class gone, a secret that is not this class's)."""
    try:
        fn(*args)
        return True
    except (ClassError, PermissionError) as e:
        st.error(f"Not done: {e}.")
        return False


def reveal_round(code: str, secret: str, info: dict, entry, model, tok) -> bool:
    """*Run the model*: the live answer to a Lesson step, on the weights and prompt ids the round was opened with, then
    revealed; a question of the teacher's own has no model answer to compute, so only the votes are revealed."""
    meta = info["meta"] or {}
    answer, words = None, "Your own question: the class's votes, with no model answer."
    if meta.get("kind") == "lesson":
        if model is None or model_key(entry) != meta.get("model_id"):
            st.error(f"This round was asked of {meta.get('model')} as it was then; pick that model (and training step) "
                     "in the sidebar to run it.")
            return False
        try:
            with st.spinner("The model answers ..."):
                answer, words = lesson_answer(LS.STEP[meta["step"]], lesson_context(entry, model, tok, meta["ids"]),
                                              info["choices"])
        except ClassError as e:
            st.error(f"{e}.")
            return False
    return act(class_store().reveal, code, secret, info["round"], answer, words)


def teacher_counts(code: str, round_id: int):
    """The teacher's live count (every REFRESH_S): how many voted in each vote; what they chose once shown."""
    @st.fragment(run_every=REFRESH_S)
    def live():
        try:
            info = class_store().round_info(code, round_id)
        except ClassError as e:
            st.error(f"{e}.")
            return
        st.markdown(f"**{info['votes'][1]}** voted the first time, **{info['votes'][2]}** the second. "
                    + ("" if info["shown"] else "What they chose stays hidden, here and on the projector, until "
                       "*Show votes*."))
        show_counts(info, "class_teacher_votes")
    live()


def summary_words(choices, counts: dict, answer) -> str:
    s = round_summary(choices, counts.get(1, {}), counts.get(2, {}), answer)
    if answer is None:
        return f"{s['n1']} voted the first time, {s['n2']} the second; the model gave no single answer."
    parts = [f"right the first time: {s['right1']:.0%} of {s['n1']}" if s["right1"] is not None else "no first votes",
             f"the second time: {s['right2']:.0%} of {s['n2']}" if s["right2"] is not None else "no second votes"]
    return f"The model's answer: **{answer}**. Share of the class " + ", ".join(parts) + "."


def admit(code: str) -> str | None:
    """Count ``code`` among this session's classes: None when it may join, else why not (MAX_JOINED a session)."""
    joined = st.session_state.setdefault(JOINED, [])
    if code not in joined:
        if len(joined) >= MAX_JOINED:
            return f"This browser has joined {MAX_JOINED} classes already; close the tab and open a new one."
        joined.append(code)
    return None


def join_code_box(key: str):
    """The student's way in: a code typed into the box ``key``, checked, then opened as the page's class= link."""
    with st.form("class_join"):
        code = st.text_input("Class code", key=key, max_chars=20, placeholder="e.g. K7M2 QX9P")
        go = st.form_submit_button("Join")
    if go:
        try:
            c = normalize_code(code)
            class_store().round_info(c)  # the class exists and runs
        except ClassError as e:
            st.error(f"Cannot join: {e}.")
            return
        refused = admit(c)
        if refused:
            st.error(refused)
            return
        st.query_params["class"] = c
        st.rerun()


def csv_download(code: str, secret: str):
    """The rounds as CSV, built only when asked for (a class may hold 100 rounds)."""
    if not st.button("Prepare the rounds as CSV", key="class_csv_make"):
        return
    rows = class_store().rounds(code, secret)
    st.download_button("Download the rounds (CSV)", rounds_csv(rows), file_name=f"class-{code}.csv", mime="text/csv",
                       key="class_csv", disabled=not rows)


def shift_table(code: str, secret: str, round_id: int, choices):
    """How answers moved between the two votes, as a table (vote 1 down the rows, vote 2 across)."""
    try:
        rows = shift_rows(choices, class_store().shift(code, secret, round_id))
    except (ClassError, PermissionError) as e:
        st.error(f"{e}.")
        return
    st.caption("How answers moved between the votes: a row per first vote, a column per second vote "
               "(students who voted both times).")
    st.dataframe(rows, hide_index=True, width="stretch", key=f"class_shift_{round_id}")
