"""The null controls beside a page's circuit claim, drawn one way on every page: a button (the controls cost about
twice the method's own time, so they run when asked; core.analysis.null_controls computes them), then the verdict in
words and the three numbers: the claim's effect, the random twin's largest and the nonsense task's largest."""
from __future__ import annotations

import math

import streamlit as st

from core.analysis.null_controls import WHY, Control
from core.serve.fmt import md_escape
from ui.compute import approved

INTRO = (WHY + " So the same method runs twice more: on a **random twin** (this model's shape "
         "with fresh random weights, which learned nothing) and on a **nonsense task** (the question changed so that "
         "no circuit answers it). The finding stands only when its effect clears the largest either control finds.")


def controls_asked(key, seconds: float, button_key: str, what: str = "the claim above") -> bool:
    """The intro and a button that runs the controls on ``what`` (about ``seconds``); True once pressed for ``key``
    in this session (a new prompt or model asks again)."""
    st.markdown(INTRO)
    return approved(key, math.inf, -1.0, f"Check {what} against two null controls (about {max(seconds, 0.1):.1f} s)",
                    "", button_key)


def show_control(c: Control, key: str):
    """The verdict (green when the finding stands), the three numbers, and what each control was."""
    (st.success if c.stands else st.warning)(md_escape(c.verdict), icon=":material/rule:" if c.stands else
                                             ":material/report:")
    m1, m2, m3 = st.columns(3)
    m1.metric("The claim", c.fmt(c.value), help=c.claim)
    m2.metric("Random twin (largest)", "not run" if c.twin_missing else c.fmt(c.twin),
              help=c.twin_missing or "The same method on this model's shape with fresh random weights (seed 0).")
    m3.metric("Nonsense task (largest)", c.fmt(c.nonsense), help=c.nonsense_is)
    margin = f"{100 * c.margin:.0f} points" if c.unit == "share" else f"{c.margin:.1f} nats"
    st.caption(md_escape(f"The claim: {c.claim}. Nonsense task: {c.nonsense_is}. Each control shows the largest effect "
                         f"the method gives to anything there; the claim must clear it by {margin}. The controls took "
                         f"{c.seconds:.2f} s."))
