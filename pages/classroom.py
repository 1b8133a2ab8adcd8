import streamlit as st

from core import lesson as LS
from core.serve.classroom import ClassError, normalize_code
from ui import current, ensure_frame, model_key, prompt_input
from ui.classroom import (MAX_OWN_CHOICES, REFRESH_S, TEACHER, act, admit, class_store, csv_download, current_round,
                          join_code_box, lesson_round, preview, reveal_round, show_counts, show_question, shift_table,
                          teacher_counts, voter_id)
from ui.class_forecast import forecast_reveal, forecast_round
from ui.lesson_context import lesson_context

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"

st.title("Class")
if st.query_params.get("view") != "projector":  # the projector shows the round alone, in large type
    st.markdown(
        "A question for the whole room. Everyone predicts on their own device, the class talks it over, everyone "
        "predicts again, and only then does the live model answer, on the teacher's prompt. Seeing how the votes "
        "moved between the two rounds is the point: a discussion tends to pull a room toward the right answer, and "
        "the model settles it with its own numbers, not a key typed in advance.")
    st.latex(r"\text{vote 1} \;\rightarrow\; \text{discuss} \;\rightarrow\; \text{vote 2} \;\rightarrow\; "
             r"\text{the model answers}")

store = class_store()
raw_code, view = st.query_params.get("class"), st.query_params.get("view")


def _start():
    try:
        st.session_state[TEACHER] = store.create_class()
    except ClassError as e:
        st.session_state["class_start_error"] = str(e)


# ------------------------------------------------------------------ who is this session: teacher, projector, student
if TEACHER in st.session_state:
    role = "teacher"
elif raw_code:
    try:
        code = normalize_code(raw_code)
    except ClassError as e:
        st.error(f"This link's class code cannot be read: {e}.")
        st.stop()
    role = "projector" if view == "projector" else "student"
else:
    left, right = st.columns(2)
    with left:
        st.subheader("Teach")
        st.caption("Start a class: you get a code and two links, one for students and one for the projector. Only "
                   "this browser tab can run the class.")
        st.button("Start a class", key="class_start", on_click=_start, type="primary")
        if "class_start_error" in st.session_state:
            st.error(st.session_state.pop("class_start_error"))
    with right:
        st.subheader("Join")
        st.caption("Type the code your teacher shows. You vote anonymously.")
        join_code_box("class_code_in")
    st.stop()


# ------------------------------------------------------------------ the projector: read-only, large type
def projector(code: str):
    @st.fragment(run_every=REFRESH_S)
    def live():
        info = current_round(code, lambda: st.markdown(f"## Class code: `{code}`"))
        if info is None:
            return
        show_question(info, large=True)
        st.markdown("  ·  ".join(f"**{c}**" for c in info["choices"]))
        phase = "vote 2 (after discussing)" if info["phase"] == 2 else "vote 1"
        st.markdown(f"### {info['votes'][info['phase']]} voted · {phase}")
        show_counts(info, "class_projector_votes", large=True)
    live()


# ------------------------------------------------------------------ a student: the question, a vote, "recorded"
def student(code: str):
    refused = admit(code)
    if refused:
        st.error(refused)
        return
    me = voter_id()

    @st.fragment(run_every=REFRESH_S)
    def live():
        info = current_round(code, lambda: st.caption(f"Class {code}"))
        if info is None:
            return
        show_question(info)
        mine = st.session_state.setdefault("class_my_votes", {})  # (code, round, phase) -> choice, as recorded
        if info["revealed"]:
            answer = info["answer"]
            landed = (info["meta"] or {}).get("kind") == "forecast"
            st.success(f"{'The run landed' if landed else 'The model' + chr(39) + 's answer'}: **{answer}**."
                       if answer is not None else "The model gave no single answer here.")
            show_counts(info, "class_student_votes")
            return
        phase = info["phase"]
        key = (code, info["round"], phase)
        choice = st.radio("Your prediction" if phase == 1 else "Your prediction, after discussing (keep it or change "
                          "it)", info["choices"], index=None, key=f"class_choice_{info['round']}_{phase}")
        if st.button("Vote" if key not in mine else "Change my vote", key=f"class_vote_{info['round']}_{phase}",
                     disabled=choice is None, type="primary"):
            try:
                store.vote(code, info["round"], me, choice, phase)  # committed before "recorded" is shown
                mine[key] = choice
            except ClassError as e:
                st.error(f"Not recorded: {e}.")
        if key in mine:
            st.success(f"Recorded: **{mine[key]}** (vote {phase}). You may change it until the teacher moves on.")
        elif phase == 2 and (code, info["round"], 1) in mine:
            st.info(f"Vote 2 is open: your first vote was **{mine[(code, info['round'], 1)]}**. Vote again.")
    live()


# ------------------------------------------------------------------ the teacher: questions, votes, the model's answer
def teacher():
    code, secret = st.session_state[TEACHER]
    try:
        info = store.round_info(code)
    except ClassError as e:
        st.error(f"{e}.")
        if st.button("Start a new class", key="class_restart"):
            del st.session_state[TEACHER]
            st.rerun()
        return
    st.markdown(f"## Class code: `{code}`")
    c1, c2 = st.columns(2)
    c1.page_link("pages/classroom.py", label="Students: this page with the code", query_params={"class": code},
                 icon=":material/group:")
    c2.page_link("pages/classroom.py", label="Projector: read-only, large type",
                 query_params={"class": code, "view": "projector"}, icon=":material/tv:")
    st.caption(f"Students open the Class page and type **{code}**, or follow the first link. Keep this tab: it alone "
               "runs the class.")

    entry, model, tok = current()
    st.subheader("A new question")
    kind = st.radio("Ask", ["A Lesson step, on your prompt", "Forecast the next run", "Your own question"],
                    horizontal=True, key="class_kind")
    new = None
    if kind.startswith("A Lesson") and model is None:
        st.info("No model is loaded: pick one in the sidebar to ask a Lesson step, or ask a question of your own.")
    elif kind.startswith("A Lesson"):
        prompt = prompt_input("Your prompt (the model runs on it)", DEFAULT_PROMPT, "class_prompt", tok,
                              model.config.n_ctx, height=70)
        k = st.selectbox("Step", range(LS.N_STEPS), format_func=lambda i: f"{i + 1}. {LS.STEPS[i].title}",
                         index=LS.STEPS.index(LS.STEP["off"]), key="class_step")  # a head switched off: a good opener
        step = LS.STEPS[k]
        if prompt.empty or len(prompt.ids) < 4:
            st.info(f"Type a prompt of at least four {tok.units}.")
        else:
            made = lesson_round(step, lesson_context(entry, model, tok, prompt.ids), entry.name, prompt.text,
                                model_key(entry))
            if isinstance(made, str):
                st.info(f"Not as a class question: {made}.")
            else:
                new = made
                preview(made, expanded=False)
    elif kind.startswith("Forecast"):
        made = forecast_round()  # the run the shipped law proposes, or the one set on Your scaling law
        if isinstance(made, str):
            st.info(f"Not as a class question: {made}.")
        else:
            new = made
            preview(made, expanded=True)
    else:
        q = st.text_input("Question", key="class_own_q", max_chars=500)
        lines = st.text_area(f"Choices, one per line (2 to {MAX_OWN_CHOICES})", key="class_own_choices", height=120)
        choices = tuple(x.strip() for x in lines.splitlines() if x.strip())
        if q.strip() and 2 <= len(choices) <= MAX_OWN_CHOICES and len(set(choices)) == len(choices):
            new = (q.strip(), choices, {"kind": "free"})
        elif lines.strip():
            st.caption(f"{len(choices)} distinct choices: a question needs 2 to {MAX_OWN_CHOICES}, each different.")
    if st.button("Open this question (vote 1)", key="class_open", disabled=new is None, type="primary"):
        if act(store.open_round, code, secret, *new):
            st.rerun()

    if info["round"] is not None:
        st.divider()
        rid = info["round"]
        st.subheader(f"Round {rid}: {info['question']}")
        teacher_counts(code, rid)
        b1, b2, b3 = st.columns(3)
        if b1.button("Show votes", key="class_show", disabled=info["shown"]):
            if act(store.show_votes, code, secret, rid):
                st.rerun()
        if b2.button("Discuss and vote again", key="class_phase2", disabled=info["phase"] == 2 or info["revealed"]):
            if act(store.set_phase, code, secret, rid, 2):
                st.rerun()
        if (info["meta"] or {}).get("kind") == "forecast" and not info["revealed"]:
            landed = forecast_reveal(info)  # trains the run first; (answer, words) once it is in
            if landed and b3.button("Reveal where the run landed", key="class_reveal", type="primary"):
                if act(store.reveal, code, secret, rid, *landed):
                    st.rerun()
        elif b3.button("Run the model", key="class_reveal", disabled=info["revealed"], type="primary"):
            if reveal_round(code, secret, info, entry, model, tok):
                st.rerun()
        if info["revealed"]:
            shift_table(code, secret, rid, info["choices"])
        csv_download(code, secret)
    if st.button("End the class", key="class_end"):
        act(store.close, code, secret)
        del st.session_state[TEACHER]
        st.rerun()


{"teacher": teacher, "student": lambda: student(code), "projector": lambda: projector(code)}[role]()
