"""Copy as code: a page's view as a short Python program (core.views.snippets writes it), offered in a popover
beside Copy link; the code box has a copy button."""
from __future__ import annotations

import streamlit as st


def code_box(program: str | None, missing: str = "This view cannot be written as code."):
    """A "Copy as code" popover holding ``program`` (Python source), or ``missing`` in words when it is None."""
    with st.popover("Copy as code", icon=":material/code:"):
        if program is None:
            st.caption(missing)
            return
        st.caption("A Python program that computes this view's numbers with the project's own code (`core`), for "
                   "the model and settings shown. Save it in the Transformer Explorer folder and run it there "
                   "(`python view.py`), or paste it into a notebook started there.")
        st.code(program, language="python")
