"""The Features page's background work: training an SAE in the background and features forming over training.
A placeholder until that part lands (it replaces this file, keeping these two signatures)."""
from __future__ import annotations

import streamlit as st


def training_panel(entry, model, tok, training) -> None:
    """Train an SAE on the picked model in the background (site, size, k; progress, stop)."""
    st.caption("Training an SAE on this model in the background arrives here soon; until then, "
               "`python -m core.features --model FOLDER --site SITE` trains one from the command line.")


def forming_panel(entry, model, choice) -> None:
    """How the picked SAE's features formed over the model's training snapshots."""
    st.caption("Features forming over training (small SAEs at the training snapshots, matched to this one) "
               "arrives here soon.")
