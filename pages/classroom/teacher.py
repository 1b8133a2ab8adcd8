"""The teacher's side of the Class page (issue 54): starting a class (with the server's teacher key where one is
set), taking it back after a reload, asking a question, the live counts with peer instruction's advice, and what a
round leaves (the shift between the votes, the CSV)."""
from __future__ import annotations

import threading
import time

import streamlit as st

from core.serve.class_rules import peer_advice
from core.serve.class_rules import ClassError, StoreUnavailable, normalize_code, rounds_csv, shift_rows
from core.serve.fmt import md_escape
from pages.classroom.identity import client_address, key_ok, teacher_key, teacher_link
from pages.classroom.views import show_counts
from pages.classroom.parts import KEYS, REFRESH_S, TEACHER, class_store

LINK_SHOWN = "class_link_shown"  # session state: codes whose private teacher link was pointed out once
KEY_TRIES, KEY_WINDOW_S = 5, 600  # wrong teacher keys one address may try in the window (per replica)
_FAILED: dict[str, list[float]] = {}  # address -> times of its wrong keys, shared by this replica's sessions
_FAILED_LOCK = threading.Lock()


def key_guess_allowed(address: str) -> bool:
    with _FAILED_LOCK:
        recent = [t for t in _FAILED.get(address, []) if t > time.time() - KEY_WINDOW_S]
        _FAILED[address] = recent
        return len(recent) < KEY_TRIES


def key_guess_failed(address: str):
    with _FAILED_LOCK:
        _FAILED.setdefault(address, []).append(time.time())
        if len(_FAILED) > 10_000:  # a flood of addresses must not grow this without end
            _FAILED.clear()


def start_form():
    """*Start a class*: with TE_TEACHER_KEY set, only who types it; without it, anyone, within the limits per address
    (the store's create_class(client=...))."""
    need = bool(teacher_key())
    given = st.text_input("Teacher key", type="password", key="class_key_in", max_chars=200,
                          help="This server asks for its teacher key (TE_TEACHER_KEY) to start a class.") if need else ""
    if not st.button("Start a class", key="class_start", type="primary"):
        return
    if need and not key_guess_allowed(client_address()):
        st.error(f"Too many wrong teacher keys from your address: try again in {KEY_WINDOW_S // 60} minutes.")
        return
    if need and not key_ok(given):
        key_guess_failed(client_address())
        st.error("That is not this server's teacher key; ask whoever runs the server. Students need no key: they "
                 "join with the code their teacher shows.")
        return
    try:
        st.session_state[TEACHER] = class_store().create_class(client=None if need else client_address())
    except ClassError as e:
        st.error(f"Not started: {e}.")
        return
    st.rerun()


def take_back(raw_code: str, secret: str) -> bool:
    """A teacher's private link (``?class=CODE&teacher=SECRET``): this tab runs the class again. The secret leaves the
    address bar at once, whatever the answer."""
    st.query_params.pop("teacher", None)
    try:
        code = normalize_code(raw_code)
        ok = class_store().is_teacher(code, secret)
    except ClassError as e:
        st.error(f"This teacher link cannot be used: {e}.")
        return False
    if not ok:
        st.error("This teacher link is not this class's: check that it was copied whole.")
        return False
    st.session_state[TEACHER] = (code, secret)
    st.session_state.setdefault(LINK_SHOWN, set()).add(code)
    st.query_params.pop("class", None)
    return True


def private_link(code: str, secret: str):
    """The teacher's way back after a reload or a closed tab: a link shown open once, then folded (never on the
    projector or a student's screen)."""
    # folded, always: right after Start a class the laptop may already be on the projector, and a phone photo of the
    # link would be the class
    if code not in st.session_state.setdefault(LINK_SHOWN, set()):
        st.info("Your private teacher link is in the folded box below: open it on your own screen only, and keep it "
                "to come back if this tab reloads.", icon=":material/key:")
    st.session_state[LINK_SHOWN].add(code)
    with st.expander("Your private teacher link: keep it off the projector", expanded=False,
                     icon=":material/key:"):
        st.caption("If this tab reloads or closes, open this link to run the class again. Whoever has it runs the "
                   "class, so keep it to yourself (the copy button is at its right).")
        st.code(teacher_link(code, secret), language=None, wrap_lines=True)


def durability_note():
    """Once a session: where the store would lose recorded votes on its own restart (Redis without persistence)."""
    if st.session_state.get("class_durability_said"):
        return
    st.session_state["class_durability_said"] = True
    try:
        note = class_store().durability()
    except StoreUnavailable:
        note = None
    if note:
        st.warning(note, icon=":material/warning:")


def teacher_counts(code: str, secret: str, round_id: int):
    """The teacher's live count (every REFRESH_S): who joined, how many voted in each vote, what peer instruction
    suggests once vote 1 is in and the teacher knows the answer privately; what they chose once shown."""
    @st.fragment(run_every=REFRESH_S)
    def live():
        try:
            info = class_store().round_info(code, round_id)
        except ClassError as e:
            st.error(f"{e}.")
            return
        lock = " (joining locked)" if info["locked"] else ""
        st.markdown(f"**{info['joined']}** joined{lock} · **{info['votes'][1]}** voted the first time, "
                    f"**{info['votes'][2]}** the second. " + ("" if info["shown"] else "What they chose stays "
                                                              "hidden, here and on the projector, until *Show votes*."))
        advise(code, secret, info)
        show_counts(info, "class_teacher_votes")
    live()


def advise(code: str, secret: str, info: dict):
    """After vote 1, for the teacher only: the share right (against the answer the teacher previewed or marked) and
    what peer instruction suggests for it."""
    key = st.session_state.get(KEYS, {}).get((code, info["round"]))
    if key is None or key[0] is None or info["revealed"] or info["votes"][1] == 0:
        return
    try:
        tally = class_store().tally(code, secret, info["round"], 1)
    except (ClassError, PermissionError):
        return
    share = tally.get(key[0], 0) / max(1, sum(tally.values()))
    st.info(f"Only you see this: **{share:.0%}** of vote 1 chose '{md_escape(key[0])}' — {peer_advice(share)}.",
            icon=":material/visibility_off:")



def csv_download(code: str, secret: str):
    """The rounds as CSV, built only when asked for (a class may hold 100 rounds)."""
    if not st.button("Prepare the rounds as CSV", key="class_csv_make"):
        return
    try:
        rows = class_store().rounds(code, secret)
    except (ClassError, PermissionError) as e:
        st.error(f"{e}.")
        return
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
