"""The Features page's drawn parts: a unit's card, the units firing at a prompt position (buttons that open a card),
a unit switched off on the prompt, and the purity comparison. Numbers come from core.features through ui.features;
the words and HTML from core.views.features_view; the figures from pages.features.figures."""
from __future__ import annotations

import numpy as np
import streamlit as st

from pages.features import figures as FF
from core.serve.fmt import md_escape
from core.views import features_view as FV
from ui import explanations as UX
from ui.charts import chart

OPEN_KIND, OPEN_FEATURE, OPEN_LAYER, OPEN_NEURON = "feat_kind", "feat_unit", "feat_layer", "feat_neuron"
KINDS = ("SAE feature", "MLP neuron")
CARD_ANCHOR = "unit-card"    # section 3's heading
SCROLL_KEY = "feat_scroll"   # clicks on a unit so far: the run after one scrolls its card into view


def open_unit(kind: str, unit: int, layer: int | None = None):
    """Button callback (runs before the script, so it may set the card's widgets)."""
    st.session_state[SCROLL_KEY] = st.session_state.get(SCROLL_KEY, 0) + 1
    st.session_state[OPEN_KIND] = kind
    if kind == KINDS[0]:
        st.session_state[OPEN_FEATURE] = unit
    else:
        st.session_state[OPEN_LAYER], st.session_state[OPEN_NEURON] = layer + 1, unit


def firing_buttons(pu, pos: int, kind: str, layer: int | None, key: str, explained: dict | None = None):
    """One button per unit firing at ``pos``, with its words and detection score when ``explained`` ({unit:
    explanation}) has them; a click opens that unit's card below."""
    units = FV.firing_units(pu, pos)
    if not units:
        st.caption("Nothing fires here." if kind == KINDS[0] else "No neuron of this block is above 0 here.")
        return
    word = "feature" if kind == KINDS[0] else "neuron"
    st.caption(f"Each button: a {word} and how strongly it fires here (its activation; 0 is silent)"
               + (", then what it stands for and its detection score (0.5 is chance)" if explained else "")
               + ". A click opens its card below.")
    for j, (u, v) in enumerate(units):
        e = explained.get(u) if explained else None
        st.button(UX.unit_label(word, u, v, e), key=f"{key}_{j}", on_click=open_unit, args=(kind, u, layer),
                  help=f"Open {kind.lower()} {u}'s card (its activation here: {v:.3f}).{UX.unit_help(e)}")


def card_heading(title: str):
    """Section 3's heading; on the run after a click on a unit, a script that scrolls it into view (the card below
    the fold changed, and nothing showed it). The click count makes each script new, so the browser runs it."""
    st.header(title, anchor=CARD_ANCHOR)
    clicks = st.session_state.get(SCROLL_KEY, 0)
    if clicks and st.session_state.get("feat_scrolled") != clicks:
        st.session_state["feat_scrolled"] = clicks
        st.html(FV.scroll_script(CARD_ANCHOR, clicks), unsafe_allow_javascript=True)  # our own script, no text


def draw_card(card, unit_word: str, marks: tuple = (None, None)):
    """A unit's card: contexts (``marks``: where its rule holds in the top ones and each band's, underlined), lower
    bands, histogram, promoted and suppressed tokens, switch-off losses."""
    st.markdown(f"**Top {len(card.contexts)} contexts** on the held-out text: each line is ±8 tokens around one of "
                f"the {unit_word}'s largest activations (the number at the left), the token itself outlined, the "
                "shade its activation there. Hover a token for its value.")
    st.html(FV.contexts_html(card.contexts, marks=marks[0]))
    top = max((c.value for c in card.contexts), default=None)
    with st.expander("Samples from lower activations (a quarter, a half, three quarters of its largest)"):
        for j, ((lo, hi), contexts) in enumerate(card.bands):
            st.markdown(f"Activation in ({lo:.0%}, {hi:.0%}] of its largest:")
            st.html(FV.contexts_html(contexts, top, marks[1][j] if marks[1] else None))
    left, right = st.columns(2)
    with left:
        chart(FF.histogram_figure(card), width="stretch", key="feat_hist")
        _loss_words(card, unit_word)
    with right:
        chart(FF.logit_figure(card), width="stretch", key="feat_logits")
        st.caption(f"Its direction taken {md_escape(card.ln_words)}: the tokens it pushes up (blue) and down "
                   "(orange) on its own, before any later layer reads it.")


def _loss_words(card, unit_word: str):
    if card.loss_top is None:
        st.markdown(f"This {unit_word} never fires on the held-out text, so switching it off changes nothing.")
        return
    all_words = (f"and by **{card.loss_all:+.3f}** nats on average at the {card.n_all:,} of the first "
                 f"{card.eval_tokens:,} held-out tokens where it fires" if card.loss_all is not None else
                 f"(it does not fire in the first {card.eval_tokens:,} held-out tokens)")
    st.markdown(f"**Switched off**, the loss of the next token changes by **{card.loss_top:+.3f}** nats at its top "
                f"contexts {all_words}. Above 0: the model needed it there.")


def draw_off(off, tokens: list[str], unit_word: str):
    """Each prompt token's loss with the unit off against clean."""
    fired = int((off.acts > 0).sum())
    st.markdown(f"The {unit_word} fires at **{fired}** of your {len(off.acts)} positions; switched off everywhere, "
                f"your prompt's mean loss goes from {off.clean.mean():.3f} to {off.off.mean():.3f} nats "
                f"({off.change.mean():+.4f}). The largest change: {np.abs(off.change).max():.3f} nats.")
    chart(FF.off_loss_figure(off, tokens), width="stretch", key="feat_off")


def draw_comparison(sets: dict, summaries: dict):
    """Purity of every unit set: the numbers as a table, the distributions overlaid, one sentence."""
    rows = [{"units": name, "firing units": s["units"], "mean purity": round(s["mean"], 3),
             "median": round(s["median"], 3), "share above 0.5": f"{s['above_half']:.0%}"}
            for name, s in summaries.items()]
    st.dataframe(rows, hide_index=True)
    chart(FF.purity_figure(sets), width="stretch", key="feat_purity")
    names = list(summaries)
    if len(names) >= 2:
        st.markdown(FV.purity_words(names[0], summaries[names[0]], names[1], summaries[names[1]]))
