"""The Class page's parts (issue 44): the shared store, the question a round asks (a Lesson step on the teacher's model
and prompt, or the teacher's own), and the three views: teacher, student, projector. The store
(core.serve.classroom) is the only state shared between sessions; each session keeps its own role in session state."""
from __future__ import annotations

import os

import streamlit as st

from core import lesson as LS
from core.serve.class_rules import MAX_CHOICES as MAX_STEP_CHOICES
from core.serve.class_rules import MIN_CHOICES, STORE_ENV, ClassError, StoreUnavailable, normalize_code
from core.serve.classroom import default_sqlite_path, store_from_env
from pages.classroom.views import plain, show_question
from ui.lesson_context import lesson_context
from ui.models import model_key

MAX_OWN_CHOICES = 6          # the teacher's own question: 2 to 6 choices (a Lesson step may offer up to MAX_STEP_CHOICES)

TEACHER = "class_teacher"    # session state: (code, secret) of the class this session runs
JOINED = "class_joined"      # codes this session joined as a student (at most MAX_JOINED)
KEYS = "class_keys"          # the teacher's private answers: {(code, round): (answer, words)}, never in the store
MAX_JOINED = 3
REFRESH_S = 2                # students and the projector see a new round within this many seconds


def class_store():
    """The store every session of this server shares (TE_CLASS_STORE; SQLite beside the models folder by default)."""
    # the place, resolved now: the default follows TE_MODELS_DIR, and one cached store must not outlive a change of it
    return _store(os.environ.get(STORE_ENV, "").strip() or str(default_sqlite_path()))


@st.cache_resource(show_spinner=False)
def _store(setting: str):
    # keyed by the setting: one store object per place, opened once for the server. A store that cannot be opened
    # raises (StoreUnavailable, in words) and is not cached: the page says why, and a reload after the fix opens it
    return store_from_env({**os.environ, STORE_ENV: setting})


def open_store():
    """The store, or None after saying in words why it cannot be used (the rest of the app is unaffected)."""
    try:
        return class_store()
    except StoreUnavailable as e:
        st.error(f"The Class page cannot run: {e}.", icon=":material/database:")
        return None


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


def current_round(code: str, header, waiting=None) -> dict | None:
    """The class's latest round as any participant may see it, after ``header()``; None (with the reason shown) when
    the class is gone or has no round yet (``waiting()`` draws that screen; a line of text by default)."""
    try:
        info = class_store().round_info(code)
    except StoreUnavailable as e:  # down is said as down, never as a class that ended
        st.error(f"{e}.")
        return None
    except ClassError as e:
        st.info(f"{e}.")
        return None
    header()
    if info["round"] is None:
        (waiting or (lambda: st.info("Waiting for the teacher's first question ...")))()
        return None
    return info


def preview(made: tuple, expanded: bool):
    """The teacher's look at a question before it opens: what students will see, then its choices."""
    with st.expander("What students will see", expanded=expanded):
        show_question({"question": made[0], "meta": made[2]})
        plain("  ·  ".join(made[1]))


def offered(made: tuple | str, expanded: bool) -> tuple | None:
    """A question made for the next round (question, choices, meta), previewed, with no private answer: the Lesson's
    and the forecast's are measured at the reveal. None after saying why there is none (``made`` is the reason)."""
    if isinstance(made, str):
        st.info(f"Not as a class question: {made}.")
        return None
    preview(made, expanded=expanded)
    return (*made, None)


def act(fn, *args) -> bool:
    """A store call of the teacher's, its refusal said in words (a class gone, a secret that is not this class's)."""
    try:
        fn(*args)
        return True
    except (ClassError, PermissionError) as e:
        st.error(f"Not done: {e}.")
        return False


def model_answer(info: dict, entry, model, tok) -> tuple[str | None, str] | None:
    """The live model's (answer, words) for a Lesson round, on the weights and prompt ids it was opened with; the
    teacher's own marked answer for a question of their own; None after saying why there is none yet."""
    meta = info["meta"] or {}
    if meta.get("kind") != "lesson":
        mine = st.session_state.get(KEYS, {}).get((info["code"], info["round"]))
        return mine if mine else (None, "Your own question: the class's votes, with no answer marked.")
    if model is None or model_key(entry) != meta.get("model_id"):
        st.error(f"This round was asked of {meta.get('model')} as it was then; pick that model (and training step) "
                 "in the sidebar to run it.")
        return None
    try:
        with st.spinner("The model answers ..."):
            return lesson_answer(LS.STEP[meta["step"]], lesson_context(entry, model, tok, meta["ids"]), info["choices"])
    except ClassError as e:
        st.error(f"{e}.")
        return None


def reveal_round(code: str, secret: str, info: dict, entry, model, tok) -> bool:
    """*Run the model* (or *Reveal* a question of the teacher's own): the answer measured now, then revealed."""
    got = model_answer(info, entry, model, tok)
    return got is not None and act(class_store().reveal, code, secret, info["round"], *got)


def preview_answer(info: dict, entry, model, tok):
    """The model's answer for the teacher's eyes only, before the room sees it (peer instruction wants the share
    right after vote 1); kept in this session, never in the store."""
    got = model_answer(info, entry, model, tok)
    if got is not None:
        st.session_state.setdefault(KEYS, {})[(info["code"], info["round"])] = got


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
