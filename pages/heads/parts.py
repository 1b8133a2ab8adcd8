"""The Switch heads off page's prompt buttons (callbacks: they run before the script, so they may set the box)."""
from __future__ import annotations

import streamlit as st

from core.analysis.induction import model_probe
from core.analysis.interventions import repeat_ids
from ui.prompts import prompt_ids_now, set_prompt_ids


def repeat_prompt(key: str, tok, n_ctx: int):
    """The ids the model reads, written twice as ids. Their text encoded again could differ for a BPE (the copies
    can merge at the seam)."""
    ids = prompt_ids_now(key, tok)
    if ids:
        doubled, cut = repeat_ids(ids, n_ctx)
        set_prompt_ids(key, tok, doubled)
        st.session_state["heads_repeat_note"] = (tok.decode(doubled), cut, len(ids))


def random_twice(key: str, model, tok):
    """One row of the induction probe (a BPE's whole tokens, or the box would show '�'), where nothing but copying
    predicts the second copy; a fresh draw each press."""
    seed = int(st.session_state.get("heads_random_draws", 0))
    st.session_state["heads_random_draws"] = seed + 1
    set_prompt_ids(key, tok, model_probe(model, tok, n_seqs=1, seed=1000 + seed)[0].tolist())
    st.session_state.pop("heads_repeat_note", None)
