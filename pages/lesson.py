import streamlit as st

from core import lesson as LS
from pages.lesson.figures import step_figure
from pages.lesson.controls import circuit_controls
from core.nn.tokenizer_base import fragment_note
from ui import ensure_frame, model_cache, model_key, prompt_input, require_model, shared_chart
from ui.lesson_context import WHAT, lesson_context
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"
N_STEPS = LS.N_STEPS

st.title("Lesson: the transformer, one prediction at a time")
st.markdown(
    f"{N_STEPS} steps in the lecture's order. Each one shows a small live view of the selected model on your prompt and "
    "asks you to **predict** something first; then the model answers, with its numbers. Nothing is typed in "
    "advance: change the prompt or the model in the sidebar and every answer is computed again. When the model's "
    "own answer is too close to call, the step says so instead of marking you.")
st.latex(r"\text{predict} \;\rightarrow\; \text{run the model} \;\rightarrow\; \text{compare}")

entry, model, tok = require_model()
c = model.config
mkey = model_key(entry)

# ------------------------------------------------------------------ the link: lesson= (the step, from 1) and prompt=
LINK = LinkSpec({"lesson": Field(("int", 1, N_STEPS), "lesson_step"),  # the step as the path numbers it, from 1
                 "prompt": Field(("prompt", tok, c.n_ctx), "lesson_prompt", cut=True)})
use_link(LINK)


def copy_link(step: int, text: str):
    link_box(LINK, {"lesson": step, "prompt": text})


# ------------------------------------------------------------------ the path
st.session_state.setdefault("lesson_step", 1)
st.session_state.setdefault("lesson_prompt", DEFAULT_PROMPT)
progress = st.session_state.setdefault("lesson_progress", {})  # step key -> True / False / None (not marked)
MARKS = {True: ":material/check_circle:", False: ":material/cancel:", None: ":material/remove_circle_outline:"}


def _go(k: int):
    st.session_state["lesson_step"] = max(1, min(N_STEPS, k))


with st.sidebar:
    st.markdown("### Lesson")
    side = st.container()  # filled at the end of the run, once this run's answer is counted


def sidebar():
    with side:
        done = sum(1 for v in progress.values() if v is not None)
        right = sum(1 for v in progress.values() if v)
        st.caption(f"Score: {right} of {done} graded" + (f" ({len(progress) - done} not marked)"
                                                            if len(progress) > done else ""))
        for k, s in enumerate(LS.STEPS, start=1):
            # material icons, not emoji: a machine without an emoji font shows those as empty boxes
            st.button(f"{k}. {s.title}", icon=MARKS[progress[s.key]] if s.key in progress else
                      ":material/radio_button_unchecked:", key=f"lesson_goto_{k}", on_click=_go, args=(k,),
                      width="stretch", type="primary" if k == st.session_state["lesson_step"] else "secondary")


prompt = prompt_input("Your prompt (used by every step; change it any time)", None, "lesson_prompt", tok, c.n_ctx,
                      height=80)
if prompt.empty or len(prompt.ids) < 4:
    st.info(f"Type a prompt of at least four {tok.units} above: every step runs the model on it.")
    sidebar()
    st.stop()
ids = tuple(prompt.ids)
k = st.session_state["lesson_step"]
step = LS.STEPS[k - 1]
seed = int(st.session_state.get("lesson_temp_seed", 0))
sig = {"prompt": (ids, seed), "model": (), "nothing": ()}[step.on]  # what an answer belongs to: another asks again

ctx = lesson_context(entry, model, tok, ids, seed)
# the question is cheap and asked on every run; the model's answer is measured only when the learner reveals
q = model_cache(lambda key, sig: LS.question(LS.STEP[key], ctx), 64, what=WHAT)(mkey, step.key, sig)
_measure = model_cache(lambda key, sig: LS.STEP[key].measure(ctx, q), 64, what=WHAT)


def _reveal():
    st.session_state[f"lesson_shown_{step.key}"] = (mkey, sig)


def revealed() -> bool:
    return st.session_state.get(f"lesson_shown_{step.key}") == (mkey, sig)


def guess_widget(q: LS.Question):
    key = f"lesson_{step.key}_guess_{hash((mkey, sig))}"  # a new model or prompt starts the question afresh
    label = dict(zip(q.choices, q.labels)).get
    if q.widget == "pills":
        return st.pills(q.ask, list(q.choices), format_func=label, key=key)
    if q.widget == "radio":
        return st.radio(q.ask, list(q.choices), format_func=label, index=None, horizontal=True, key=key)
    if q.widget == "select":  # by index: a choice may be a (layer, head) pair, which a widget hands back as a list
        i = st.selectbox(q.ask, range(len(q.choices)), format_func=q.labels.__getitem__, index=None, key=key)
        return None if i is None else q.choices[i]
    if q.widget == "slider":
        return st.slider(q.ask, *q.slider, key=key)
    if q.decimal:
        return st.number_input(q.ask, min_value=0.0, value=None, format="%g", key=key)
    return st.number_input(q.ask, min_value=0, value=None, step=1, key=key)


def verdict(grade: LS.Grade, words: str):
    """Show the model's answer and record the mark."""
    progress[step.key] = grade.correct
    if grade.correct is None:
        st.info(f"**{grade.call.capitalize()}.** {words} {grade.why[0].upper() + grade.why[1:]}. The model gives no "
                "clear answer here, so this step is not marked.", icon=":material/remove_circle_outline:")
    elif grade.correct:
        st.success(f"**Right.** {words} ({grade.why}).", icon=":material/check_circle:")
    else:
        st.error(f"**Not this time.** {words} ({grade.why}).", icon=":material/cancel:")


def byte_note(*texts) -> bool:
    """Say what a piece of a character (⟨e2 80⟩) is where one first shows on this step; True when one did."""
    note = fragment_note(" ".join(map(str, texts)))
    if note:
        st.caption(note)
    return note is not None


st.progress(k / N_STEPS, text=f"Step {k} of {N_STEPS}: {step.title}")
st.header(f"{k}. {step.title}")

# ------------------------------------------------------------------ the step: prose, a guess, the model's answer
st.markdown(q.text)
if q.latex:
    st.latex(q.latex)
for name, text in q.shows:
    if name:
        st.markdown(f"**{name}**")
    st.code(text, language=None, wrap_lines=True)
noted = byte_note(q.text, q.ask, *q.labels, *(text for _, text in q.shows))
if q.blocked:
    st.info(q.blocked, icon=":material/info:")
else:
    guess = guess_widget(q)
    b1, b2 = st.columns([1, 4])
    b1.button(q.button, key="lesson_check", on_click=_reveal, disabled=guess is None)
    if q.redraw:
        b2.button("Draw two others", key="lesson_temp_new", on_click=st.session_state.update,
                  args=({"lesson_temp_seed": seed + 1},))
    if revealed() and guess is not None:
        grade, shown = LS.answer(step, q, _measure(mkey, step.key, sig), guess)
        verdict(grade, shown.words)
        if not noted:  # a piece first shown in the answer (step 1's chart labels every position of the prompt)
            byte_note(grade.why, shown.words, *(v for _, v in shown.metrics), *q.data.get("tokens", ()))
        if shown.latex:
            st.latex(shown.latex)
        for col, (name, value) in zip(st.columns(len(shown.metrics)) if shown.metrics else [], shown.metrics):
            col.metric(name, value)
        if shown.figure:
            shared_chart(step_figure(*shown.figure), width="stretch", theme=None, key="lesson_fig")
        if shown.caption:
            st.caption(shown.caption)
        if step.key == "circuit":  # the step's path claim beside its null controls (issue 59)
            circuit_controls(model, mkey, q)

# ------------------------------------------------------------------ moving on
st.divider()
c1, c2, c3, c4 = st.columns([1, 1, 2, 2])
c1.button("← Back", key="lesson_back", on_click=_go, args=(k - 1,), disabled=k == 1)
c2.button("Next →", key="lesson_next", on_click=_go, args=(k + 1,), disabled=k == N_STEPS)
full = {"model": entry.name, "prompt": prompt.text, **q.link}
c3.page_link(step.page, label="Open this in the full page", icon=":material/open_in_new:",
             query_params={name: str(v) for name, v in full.items() if v is not None})
with c4:
    copy_link(k, prompt.text)
sidebar()
