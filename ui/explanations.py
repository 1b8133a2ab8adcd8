"""The explanations of units (issue 58) where a learner meets them. Where they come from: a saved SAE's
explanations.json (read once per file and its stamp; a broken one is said by name and the page goes on without it),
an SAE this session trained (its job's explanations, kept by the SAE's fingerprint), a block's MLP neurons (explained
when the learner asks, once per server: ui.features.Browser). What the page draws of them: a card's explanation
with its scores beside chance and the control, the search box. The numbers are core.features.explain's."""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from core.analysis.sae import sae_folder
from core.features.explain import MARGIN
from core.features.explanations import FILE, context_marks, load_explanations, search, short_words
from core.features.rules import UNEXPLAINED, words
from core.serve.fmt import md_escape
from ui.features import fingerprint

SESSION_KEY = "te_sae_explanations"  # {SAE fingerprint: {unit: explanation}} of SAEs this session trained
NEURONS_KEY = "feat_explained_blocks"  # {(model key, layer)} of blocks whose neurons this session asked to explain
MAX_SESSION = 8   # explanations of session SAEs kept (a session keeps at most 4 SAEs: ui.saes)
SHOWN = 12        # search results shown as buttons, per unit set


@st.cache_data(max_entries=32, show_spinner=False)
def _read(folder: str, stamp: tuple, n_units: int) -> tuple[dict | None, str | None]:
    """({unit: explanation} or None when there is no file, None) or (None, why the file was refused)."""
    try:
        found = load_explanations(folder, n_units)
    except ValueError as e:
        return None, str(e)
    return ({e["unit"]: e for e in found} if found is not None else None), None


def keep_session(sae, explanations: list | None) -> None:
    """Keep the explanations the job made for an SAE this session trained (None: it made none)."""
    if explanations is None:
        return
    kept = st.session_state.setdefault(SESSION_KEY, {})
    kept[fingerprint(sae)] = {e["unit"]: e for e in explanations}
    while len(kept) > MAX_SESSION:  # the oldest first: dicts keep their order
        kept.pop(next(iter(kept)))


def sae_explanations(entry, choice) -> tuple[dict | None, str | None]:
    """The explanations of an SAE (a ui.saes.SAEChoice) as {unit: explanation}; None when none is stored; and why
    its explanations.json was refused (the file named from the models' folder), None when it was not."""
    if choice.source == "session":
        return st.session_state.get(SESSION_KEY, {}).get(choice.key), None
    folder = sae_folder(entry.path, choice.site)
    try:
        s = (Path(folder) / FILE).lstat()
        stamp = (s.st_mtime_ns, s.st_size)
    except OSError:
        stamp = ()
    found, error = _read(str(folder), stamp, choice.sae.config.d_sae)
    return found, error and error.replace(str(Path(entry.path).parent) + os.sep, "")


def neuron_explanations(browser, layer: int) -> dict | None:
    """Block ``layer``'s neurons' explanations once this session asked for them, else None."""
    if (browser.key, layer) in st.session_state.get(NEURONS_KEY, set()):
        return browser.neuron_explanations(layer)
    return None


def _ask(key: str, layer: int):
    st.session_state.setdefault(NEURONS_KEY, set()).add((key, layer))


def explain_neurons_button(browser, layer: int, key: str) -> None:
    """A button that explains every neuron of block ``layer`` (once per server; the page then shows their words)."""
    st.button(f"Explain block {layer + 1}'s neurons", key=key, on_click=_ask,
              args=(browser.key, layer), help="Searches a rule for each neuron on held-out text and scores it on "
                                              "other held-out text: seconds here, once per server.")


def unit_label(word: str, unit: int, value: float, e: dict | None) -> str:
    """A firing unit's button: "feature 159: fires 1.26 — 'u' after 'o' · 0.93" (its words and detection)."""
    return f"{word} {unit}: fires {value:.2f}" + (f" — {md_escape(short_words(e))}" if e else "")


def unit_help(e: dict | None) -> str:
    if e is None:
        return ""
    said = "It is unexplained" if e["words"] == UNEXPLAINED else f"It stands for: {e['words']}"
    return f" {said} (detection {e['detection']:.2f}; chance 0.50, another unit's rule {e['control']:.2f})."


def unit_line(name: str, e: dict | None) -> str:
    """One line of markdown saying what a unit stands for: "**Feature 12** stands for: 'u' after 'o' (detection
    0.93; chance 0.50, another unit's rule 0.49)"; said as unexplained when it is; "" without an explanation."""
    if e is None:
        return ""
    if e["words"] == UNEXPLAINED:
        return f"**{name}** is unexplained: no rule tells where it fires better than chance and another unit's rule."
    return f"**{name}** stands for: {md_escape(e['words'])} (detection {e['detection']:.2f}; chance 0.50, another " \
           f"unit's rule {e['control']:.2f})."


def explanation(e: dict | None, unit_word: str, tok_unit: str, none_words: str) -> None:
    """A card's lead: the unit's explanation in words, its scores beside chance (0.5) and the control, and how to
    read them; an unexplained unit said so; ``none_words`` when there is none."""
    if e is None:
        st.markdown(f"**What it stands for**: {none_words}")
        return
    if e["rule"] is None:
        st.markdown(f"**Unexplained**: this {unit_word} fires too rarely on the held-out text for a rule to be "
                    "searched and scored.")
        return
    if e["words"] == UNEXPLAINED:
        st.markdown(f"**Unexplained**: no rule of the grammar tells where it fires clearly better than chance and "
                    f"another unit's rule. The best one found, *{md_escape(words(e['rule'], tok_unit))}*, scores "
                    f"{e['detection']:.2f}, against {max(e['control'], 0.5):.2f} for "
                    + ("chance" if e["control"] <= 0.5 else "another unit's rule")
                    + f": a rule must beat both by {MARGIN:.2f} to count. Its matches are underlined in the contexts.")
    else:
        st.markdown(f"**What it stands for**: {md_escape(e['words'])}")
    st.markdown(f"Detection **{e['detection']:.2f}** (chance 0.50; another unit's rule, the control: "
                f"{e['control']:.2f}) · fuzzing precision **{e['fuzz_precision']:.2f}**, recall "
                f"**{e['fuzz_recall']:.2f}**")
    st.caption("Scored on held-out text the search never saw. **Detection**: how well the rule tells the contexts "
               f"where the {unit_word} fires (drawn across its range of activations) from as many where it does "
               "not, as balanced accuracy: 0.5 is a coin flip, 1 never wrong. **Fuzzing**, inside stretches where it "
               "fires: **precision** is the share of tokens the rule marks where it really fires, **recall** the "
               "share of its firing tokens the rule marks. In the contexts below the rule's tokens are underlined "
               "in blue: a shaded token with no line is one the rule misses, a line under no shade a false alarm.")


def search_box(sets: list, open_unit, key: str) -> None:
    """Find units by what they stand for: ``sets`` [(kind, word, layer, {unit: explanation}, {unit: promoted
    tokens})]; each hit a button that calls ``open_unit(kind, unit, layer)`` (a card's callback)."""
    query = st.text_input("Find a unit by what it stands for", key=key,
                          placeholder="a token or words: u, line break, capital",
                          help="Searches the explanations' rules and words, and the tokens each unit promotes.")
    if not query:
        return
    for kind, word, layer, found, top in sets:
        hits = search(found, query, top)
        place = "" if layer is None else f" of block {layer + 1}"
        count = f"{len(hits)}" if len(hits) < 50 else "50 or more"  # search() returns 50 at most
        st.caption(f"{count} {word}s{place} match" + (f"; the best {SHOWN} here: explained ones first, the closest "
                                                      "and best scored first." if len(hits) > SHOWN else "."))
        shown = hits[:SHOWN]
        cols = st.columns(2)  # the first half on the left: read down either way, and in order when a phone stacks them
        for j, h in enumerate(shown):
            by_output = h["matched"] == "the tokens it promotes"  # not by what it reads: said on the button
            label = f"{word} {h['unit']} — {md_escape(short_words(h))}" + (" · promotes it" if by_output else "")
            cols[j >= (len(shown) + 1) // 2].button(label, key=f"{key}_{kind}_{j}", on_click=open_unit,
                                                    args=(kind, h["unit"], layer),
                                                    help=f"Matched by {h['matched']}. Opens its card.{unit_help(h)}")


def card_marks(e: dict | None, card, windows, tok) -> tuple[list, list]:
    """Where the unit's rule holds in its card's top contexts and in each band's samples (nothing without a rule)."""
    rule = e["rule"] if e else None
    return (context_marks(rule, card.contexts, windows, tok),
            [context_marks(rule, contexts, windows, tok) for _, contexts in card.bands])
