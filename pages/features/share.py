"""The Features page's link (issue 57): the prompt, the SAE (by its picker's label) and the feature whose card is
open; the model is the frame's. A feature the SAE lacks, or an SAE this server does not have, is named and the page
opens its default there."""
from __future__ import annotations

import streamlit as st

from core.serve.links import Field, LinkSpec
from pages.features.cards import KINDS, OPEN_FEATURE, OPEN_KIND
from ui.links import link_box, use_link

MAX_LATENT = 10**9  # a feature number's bound before the SAE is known; the SAE's own width is checked after


def link_spec(tok, n_ctx: int) -> LinkSpec:
    return LinkSpec({"prompt": Field(("prompt", tok, n_ctx), "feat_prompt", cut=True),
                     "sae": Field(("text", 200), "feat_sae"),
                     "feature": Field(("int", 0, MAX_LATENT), OPEN_FEATURE)})


def read_link(spec: LinkSpec, choices: list):
    """Call before the SAE picker and the prompt box are drawn: the link's fields into their widgets, a feature
    checked against the SAE the link (or the picker's default) names, the card opened on it."""
    widths = {ch.label: ch.sae.config.d_sae for ch in choices}

    def check(values: dict) -> list[tuple[str, str]]:
        out = []
        if "sae" in values and values["sae"] not in widths:
            out.append(("sae", "this model has no SAE of that name on this server"))
        if "feature" in values:
            label = values.get("sae") if values.get("sae") in widths else \
                st.session_state.get("feat_sae") if st.session_state.get("feat_sae") in widths else \
                next(iter(widths), None)
            if label is None:
                out.append(("feature", "this model has no SAE yet, so no features"))
            elif values["feature"] >= widths[label]:
                n = widths[label]
                out.append(("feature", f"this SAE has {n:,} features, 0 to {n - 1:,}; the card opens on the "
                                       "strongest one at the prompt's last position"))
        return out

    link = use_link(spec, check=check)
    if "feature" in link.values:
        st.session_state[OPEN_KIND] = KINDS[0]


def copy_link(spec: LinkSpec, kind: str):
    """The link box: the feature only while a feature's card is open (not a neuron's)."""
    link_box(spec, {"feature": st.session_state.get(OPEN_FEATURE) if kind == KINDS[0] else None})
