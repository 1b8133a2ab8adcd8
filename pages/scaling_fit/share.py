"""The Your scaling law page's link (issue 57): the forecast's base study, the width d and the characters D of the run
asked about. They wait (ui.links.hold) until the forecast section has drawn its proposal, which would otherwise put
its own width and D in the boxes, and a base this session lacks (your study, before it has runs) is named."""
import streamlit as st

from core.serve.links import Field, LinkSpec
from core.views import scaling_forecast as vf
from ui.links import hold, link_box, say_ignored, take, use_link

KEYS = {"base": "scal_fc_base", "width": "scal_fc_width", "D": "scal_fc_tokens"}  # URL key -> the widget's state


def read_link() -> LinkSpec:
    """Call before the section's widgets: every field held for ``apply_base`` and ``apply_run``."""
    spec = LinkSpec({"base": Field(("choice", ("shipped", "yours"))),
                     "width": Field(("choice", tuple(str(w) for w in vf.WIDTH_CHOICES))),
                     "D": Field(("int", 1_000, 200_000_000))})
    hold(use_link(spec), tuple(KEYS))
    return spec


def apply_base(bases: dict):
    """Before the base's radio: the link's base, when this session has that study."""
    base = take("base")
    if base is not None and base not in bases:
        which = "study of its own" if base == "yours" else "shipped study"
        say_ignored([("base", f"this session has no {which} with enough runs, so the forecast starts from "
                              f"{next(iter(bases.values())).label}")])
    elif base is not None:
        st.session_state[KEYS["base"]] = base


def apply_run():
    """After the proposal has filled the width and D boxes: the link's width and D instead."""
    width, tokens = take("width"), take("D")
    st.session_state.update({KEYS["width"]: int(width)} if width is not None else {})
    st.session_state.update({KEYS["D"]: int(tokens)} if tokens is not None else {})


def copy_link(spec: LinkSpec):
    link_box(spec, {key: st.session_state.get(state) for key, state in KEYS.items()})
