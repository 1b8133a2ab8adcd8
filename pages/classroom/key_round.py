"""A Class round on an answer key (issue 59 §3): the room votes on which head of the induction answer key's model is
its induction head, and the key answers. core.analysis.hunt.induction_question reads the head from key.json (the head
the key's head -> head edge runs into) and offers every head of the model; the reveal adds what switching that head
off alone costs, measured now on the key's task."""
from __future__ import annotations

import streamlit as st

from core.analysis.answer_keys import accuracy, list_keys, load_key
from core.analysis.hunt import induction_question
from pages.classroom.parts import preview

KEY = "induction"  # the answer key the round asks about: its circuit is previous-token head -> induction head
KEY_KIND = "The induction head of an answer key"


@st.cache_data(max_entries=4, show_spinner="Reading the answer key ...")
def _question(name: str) -> tuple[str, tuple[str, ...], str, str]:
    model, _, key, task = load_key(name)
    question, heads, right, words = induction_question(key, model.config)
    clean, off = accuracy(model, task), accuracy(model, task, off=[right])
    return question, heads, right, (f"{words} Switched off alone, it takes the model's accuracy on the key's "
                                    f"{len(task.prompts)} prompts from {clean:.0%} to {off:.0%}.")


def key_round() -> tuple | None:
    """(question, choices, meta, (right choice, reveal words)) of the round, previewed; None after saying why not."""
    if KEY not in list_keys():
        st.info(f"Not as a class question: the answer key {KEY!r} is not shipped with this copy of the explorer.")
        return None
    question, heads, right, words = _question(KEY)
    meta = {"kind": "answer_key", "key": KEY}
    preview((question, heads, meta), expanded=True)
    return question, heads, meta, (right, words)
