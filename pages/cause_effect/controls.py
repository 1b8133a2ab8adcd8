"""The Cause and effect page's null controls (issue 59 §2): its claims, the strongest head of the heads table and the
earlier head whose path into the inspected head's keys restores most, each checked by the same method on a random
twin and on random answer tokens (core.analysis.null_controls), cached for the server like the page's runs."""
from __future__ import annotations

import streamlit as st

from core.analysis import null_controls as NC
from ui.caching import model_cache
from ui.null_controls import controls_asked, show_control

WHAT = "the null controls"


def controls_section(model, mkey: str, a_ids: tuple, b_ids: tuple, metric, head: tuple[int, int], pass_s: float):
    """The claims' controls behind one button: the strongest head's (patch_heads, output z) and, for ``head`` of a
    later layer, its keys' best path (paths_into). ``pass_s``: one forward of the corrupted prompt's copies, which
    sizes the estimate (the twin's two runs and patched passes, and one patched pass per layer per random pair)."""
    L, draws = model.config.n_layers, NC.NONSENSE_DRAWS
    est = pass_s * ((2 + L + draws * L) + (0 if head[0] == 0 else 4 + 2 * draws))
    st.header("Is it real? Two null controls")
    if not controls_asked(("cause_controls", mkey, a_ids, b_ids, metric, head), est, "cause_controls_btn",
                          "these claims"):
        return
    heads = model_cache(lambda a, b, m: NC.head_patching(model, a, b, m), 16, what=WHAT,
                        spinner="Patching a random twin and random answers ...")(mkey, a_ids, b_ids, metric)
    st.markdown("**The strongest head** of the heads table (its output z put back):")
    show_control(heads, "cause_ctl_heads")
    if head[0] == 0:
        st.caption("The head picked for the score split sits in the first layer: no earlier head has a path into it, "
                   "so there is no path claim to check.")
        return
    paths = model_cache(lambda a, b, m, r: NC.path_patching(model, a, b, r, m), 16, what=WHAT,
                        spinner="Following every path on a random twin and random answers ...")(mkey, a_ids, b_ids,
                                                                                                 metric, head)
    st.markdown("**The path** into the keys of the head picked for the score split above:")
    show_control(paths, "cause_ctl_paths")
