import streamlit as st

from core import lesson as LS
from core.figures.class_figures import projector_css
from core.serve.class_rules import ClassError, choice_key, normalize_code
from ui import current, ensure_frame, model_key, prompt_input
from pages.classroom.describe import describe_round
from pages.classroom.key_round import KEY_KIND, key_round
from pages.classroom.forecast import forecast_reveal, forecast_round
from pages.classroom.identity import client_address, student_link, voter_id
from pages.classroom.teacher import (csv_download, durability_note, private_link, shift_table, start_form, take_back,
                              teacher_counts)
from pages.classroom.views import choice_label, plain, show_counts, show_question, waiting_screen
from pages.classroom.parts import (KEYS, MAX_OWN_CHOICES, REFRESH_S, TEACHER, act, admit, current_round, join_code_box,
                          lesson_round, offered, open_store, preview_answer, reveal_round)
from ui.lesson_context import lesson_context

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"
INTRO = ("A question for the whole room. Everyone predicts on their own device, the class talks it over, everyone "
         "predicts again, and only then does the live model answer, on the teacher's prompt. Seeing how the votes "
         "moved between the two rounds is the point: a discussion tends to pull a room toward the right answer, and "
         "the model settles it with its own numbers, not a key typed in advance.")
FLOW = (r"\begin{aligned}&\text{vote 1} \rightarrow \text{discuss} \rightarrow \text{vote 2}\\"
        r"&\rightarrow \text{the model answers}\end{aligned}")  # two lines: one is wider than a phone

raw_code, view = st.query_params.get("class"), st.query_params.get("view")
if view == "projector" and raw_code:
    st.html(projector_css())  # the projector shows the round alone: no sidebar, no title, no prose
else:
    st.title("Class")
store = open_store()
if store is None:
    st.query_params.pop("teacher", None)  # a private link's secret never stays in the address bar
    st.stop()
if raw_code and st.query_params.get("teacher"):
    if take_back(raw_code, st.query_params["teacher"]):
        st.rerun()
    raw_code = st.query_params.get("class")

# ------------------------------------------------------------------ who is this session: projector, teacher, student
# the projector first: the teacher's own tab opened on the projector link must show the projector's screen, never the
# teacher's controls, private link or previewed answer
if raw_code and view == "projector" or TEACHER not in st.session_state and raw_code:
    try:
        code = normalize_code(raw_code)
    except ClassError as e:
        st.error(f"This link's class code cannot be read: {e}.")
        st.stop()
    role = "projector" if view == "projector" else "student"
elif TEACHER in st.session_state:
    role = "teacher"
else:
    st.markdown(INTRO)
    st.latex(FLOW)
    left, right = st.columns(2)
    with left:  # Join first: most visitors are students, and on a phone the first column comes first
        st.subheader("Join")
        st.caption("Type the code your teacher shows. You vote anonymously.")
        join_code_box("class_code_in")
    with right:
        st.subheader("Teach")
        st.caption("Start a class: you get a code, a link for students, one for the projector and a private one that "
                   "gives you the class back if this tab reloads.")
        start_form()
    st.stop()


# ------------------------------------------------------------------ the projector: read-only, large type, one screen
def projector(code: str):
    @st.fragment(run_every=REFRESH_S)
    def live():
        info = current_round(code, lambda: None, waiting=lambda: waiting_screen(code))
        if info is None:
            return
        show_question(info, large=True, context=False)
        if not info["revealed"]:
            plain("   ·   ".join(info["choices"]), 1.8, 500, key="te-choices")
            phase = "vote 2, after discussing" if info["phase"] == 2 else "vote 1"
            plain(f"{info['votes'][info['phase']]} voted · {phase} · class {code[:4]} {code[4:]}", 1.6, 600,
                  "#3b5bdb", key="te-count")
        show_counts(info, "class_projector_votes", large=True)
    live()


# ------------------------------------------------------------------ a student: the question, a vote, "recorded"
def student(code: str):
    refused = admit(code)
    if refused:
        st.error(refused)
        return
    me, where = voter_id(code), client_address()

    @st.fragment(run_every=REFRESH_S)
    def live():
        info = current_round(code, lambda: st.caption(f"Class {code[:4]} {code[4:]}"))
        if info is None:
            return
        show_question(info)
        mine = st.session_state.setdefault("class_my_votes", {})  # (code, round, phase) -> choice, as recorded
        if info["revealed"]:
            show_counts(info, "class_student_votes")
            return
        phase = info["phase"]
        key = (code, info["round"], phase)
        choice = st.radio("Your prediction" if phase == 1 else "Your prediction, after discussing (keep it or change "
                          "it)", info["choices"], index=None, key=f"class_choice_{info['round']}_{phase}",
                          format_func=choice_label)
        if st.button("Vote" if key not in mine else "Change my vote", key=f"class_vote_{info['round']}_{phase}",
                     disabled=choice is None, type="primary"):
            try:
                store.vote(code, info["round"], me, choice, phase, client=where)  # committed before "recorded"
                mine[key] = choice
            except ClassError as e:
                st.error(f"Not recorded: {e}.")
        if key in mine:  # the choice Markdown-escaped: a teacher's "$...$" or "![](...)" stays its own characters
            st.success(f"Recorded: **{choice_label(mine[key])}** (vote {phase}). You may change it until the teacher "
                       "moves on.")
        elif phase == 2 and (code, info["round"], 1) in mine:
            st.info(f"Vote 2 is open: your first vote was **{choice_label(mine[(code, info['round'], 1)])}**. Vote "
                    "again.")
    live()
    with st.expander("What is this page?"):
        st.markdown(INTRO)


# ------------------------------------------------------------------ the teacher: questions, votes, the answer
def new_question(entry, model, tok):
    """The question the teacher may open next: (question, choices, meta, private answer or None), or None."""
    kind = st.radio("Ask", ["A Lesson step, on your prompt", "Which description fits a feature",
                            "Forecast the next run", KEY_KIND, "Your own question"], horizontal=True, key="class_kind")
    if kind == KEY_KIND:  # issue 59: the answer key's model, not the sidebar's; the key answers
        return key_round()
    if kind.startswith(("A Lesson", "Which")) and model is None:
        st.info("No model is loaded: pick one in the sidebar to ask about it, or ask a question of your own.")
    elif kind.startswith("Which"):  # issue 58: graded by the descriptions' scores on the feature
        return describe_round(entry, model, tok, DEFAULT_PROMPT)
    elif kind.startswith("A Lesson"):
        prompt = prompt_input("Your prompt (the model runs on it)", DEFAULT_PROMPT, "class_prompt", tok,
                              model.config.n_ctx, height=70)
        k = st.selectbox("Step", range(LS.N_STEPS), format_func=lambda i: f"{i + 1}. {LS.STEPS[i].title}",
                         index=LS.STEPS.index(LS.STEP["off"]), key="class_step")  # a head switched off: a good opener
        if prompt.empty or len(prompt.ids) < 4:
            st.info(f"Type a prompt of at least four {tok.units}.")
            return None
        return offered(lesson_round(LS.STEPS[k], lesson_context(entry, model, tok, prompt.ids), entry.name,
                                    prompt.text, model_key(entry)), expanded=False)
    elif kind.startswith("Forecast"):  # the run the shipped law proposes, or the one set on Your scaling law
        return offered(forecast_round(), expanded=True)
    else:
        q = st.text_input("Question (plain text, shown as typed)", key="class_own_q", max_chars=300)
        lines = st.text_area(f"Choices, one per line (2 to {MAX_OWN_CHOICES}, each at most 300 characters)",
                             key="class_own_choices", height=120)
        choices = tuple(x.strip() for x in lines.splitlines() if x.strip())
        if len({choice_key(c) for c in choices}) < len(choices):
            st.caption("Two of these choices read the same (case, spaces and the way a number is written do not "
                       "count): make each one different.")
            return None
        right = st.selectbox("The right choice, if there is one (only you see it; revealed at the end)",
                             [None, *choices], key="class_own_right", format_func=lambda c: "(none)" if c is None else c
                             ) if len(choices) >= 2 else None
        if q.strip() and 2 <= len(choices) <= MAX_OWN_CHOICES:
            return q.strip(), choices, {"kind": "free"}, None if right is None else (right, "The teacher's answer.")
        if lines.strip():
            st.caption(f"{len(choices)} choices: a question needs 2 to {MAX_OWN_CHOICES}.")
    return None


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
    durability_note()
    st.markdown(f"## Class code: `{code[:4]} {code[4:]}`")
    c1, c2, c3 = st.columns(3)  # new tabs: this tab stays the teacher's
    c1.link_button("Students' link", student_link(code), icon=":material/group:")
    c2.link_button("Projector: the round alone, in large type", student_link(code) + "&view=projector",
                   icon=":material/tv:")
    if c3.button("Unlock joining" if info["locked"] else "Lock joining", key="class_lock",
                 help="Locked: nobody new joins; those who joined keep voting."):
        if act(store.lock_joining, code, secret, not info["locked"]):  # from the store's state, never a stale widget
            st.rerun()
    private_link(code, secret)
    if info["round"] is None:
        waiting_screen(code, large=False)

    entry, model, tok = current()
    st.subheader("A new question")
    new = new_question(entry, model, tok)
    if st.button("Open this question (vote 1)", key="class_open", disabled=new is None, type="primary"):
        try:
            rid = store.open_round(code, secret, *new[:3])
        except (ClassError, PermissionError) as e:
            st.error(f"Not opened: {e}.")
        else:
            if new[3] is not None:  # the teacher's own answer, kept in this session only
                st.session_state.setdefault(KEYS, {})[(code, rid)] = new[3]
            st.rerun()

    if info["round"] is not None:
        st.divider()
        rid = info["round"]
        st.subheader(f"Round {rid}")
        plain(info["question"], 1.2, 600)
        teacher_counts(code, secret, rid)
        b1, b2, b3, b4 = st.columns(4)
        if b1.button("Show votes", key="class_show", disabled=info["shown"]):
            if act(store.show_votes, code, secret, rid):
                st.rerun()
        if b2.button("Discuss and vote again", key="class_phase2", disabled=info["phase"] == 2 or info["revealed"]):
            if act(store.set_phase, code, secret, rid, 2):
                st.rerun()
        kind = (info["meta"] or {}).get("kind")
        if kind == "lesson" and b3.button("Preview the answer (only you)", key="class_preview",
                                          disabled=info["revealed"] or (code, rid) in st.session_state.get(KEYS, {})):
            preview_answer(info, entry, model, tok)
            st.rerun()
        if kind == "forecast" and not info["revealed"]:
            landed = forecast_reveal(info)  # trains the run first; (answer, words) once it is in
            if landed and b4.button("Reveal where the run landed", key="class_reveal", type="primary"):
                if act(store.reveal, code, secret, rid, *landed):
                    st.rerun()
        elif b4.button("Run the model" if kind == "lesson" else "Reveal", key="class_reveal",
                       disabled=info["revealed"], type="primary"):
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
