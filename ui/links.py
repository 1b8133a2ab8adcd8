"""Links that open a view: a page's shareable state in the URL (st.query_params), read once when a link is opened,
written back as the controls change, and a "Copy link" box. The parsing is core.serve.links (pure, unit-tested);
this module only moves values between the URL, the session and the page."""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

import streamlit as st

from core.serve.fmt import md_escape
from core.serve.links import GLOBAL_KEYS, LinkSpec, parse_fields
from ui.frame import _calling_page
from ui.long_links import read_long_links, say_cut

read_long_links()  # once per process, at the first import (app.py's): a link over the server's limits is cut, not lost

_SEEN = "te_link_seen::"  # session key + page: the query string this page last read or wrote
_HELD = "te_link_held::"  # session key + page: a link's values held until the page applies them (hold, take)
FRAME_KEYS = ("model", "step")  # read by the frame (frame_link), written by every page's link box


@dataclass
class Link:
    values: dict = field(default_factory=dict)   # URL key -> parsed value, for the fields that were valid
    ignored: list = field(default_factory=list)  # (key, why) for what was not

    def show_ignored(self):
        """One message naming every field of the link that was ignored; nothing when all were used."""
        if self.ignored:
            named, counted = self.ignored, 0
            if named[-1][0] == "…":  # parse_fields' count of the keys it did not name: "950 more fields ..."
                named, counted = named[:-1], int(named[-1][1].split()[0].replace(",", ""))
            parts = "; ".join(f"**{md_escape(k[:40])}** ({md_escape(why)})" for k, why in named[:8])
            rest = max(0, len(named) - 8) + counted
            more = f"; and {rest:,} more" if rest else ""
            st.warning(f"Part of this link was ignored, and the page opened with its defaults there: {parts}{more}.",
                       icon=":material/link:")


def _signature(query: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in query.items()))


def _page() -> str:
    return _calling_page() or "app"


def read_link(spec: dict, page: str | None = None) -> Link:
    """The fields of ``spec`` (URL key -> kind and bounds, see core.serve.links.parse_fields) found in the URL, parsed,
    the first time this page sees this query string; later reruns (the learner moving a control) get an empty Link,
    so a link sets the controls once and never fights them. Keys outside ``spec`` and the frame's own (model, step)
    are named as ignored."""
    page = page or _page()
    query = st.query_params.to_dict()
    sig = _signature(query)
    if st.session_state.get(_SEEN + page) == sig:
        return Link()
    st.session_state[_SEEN + page] = sig
    values, ignored = parse_fields(query, spec, extra_known=GLOBAL_KEYS)
    return Link(values, ignored)


def _frame_signature(query: dict) -> tuple:
    return _signature({k: v for k, v in query.items() if k in FRAME_KEYS})


def publish(params: dict, page: str | None = None):
    """Write the page's current state into the URL (None values left out), so the address bar is always a link to
    what is on screen; recorded as seen, by the page and by the frame, so that the next rerun reads neither the
    page's fields nor its model= and step= back as a new link (a frame that did undid the learner's next pick in
    the model picker)."""
    page = page or _page()
    clean = {k: str(v) for k, v in params.items() if v is not None and str(v) != ""}
    if _signature(st.query_params.to_dict()) != _signature(clean):
        st.query_params.from_dict(clean)
    st.session_state[_SEEN + page] = _signature(clean)
    st.session_state[_SEEN + "frame"] = _frame_signature(clean)


def frame_params() -> dict:
    """The frame's part of every page's link: the picked model and, for a snapshot, its training step."""
    entry = (st.session_state.get("te_current") or (None,))[0]
    if entry is None:
        return {}
    return {"model": entry.name, "step": entry.step}


def use_link(spec: LinkSpec, page: str | None = None, check=None) -> Link:
    """Read a page's link (once per query string, ``read_link``), put each valid value into the session state of
    the widget it sets (``LinkSpec.updates``) and name what was ignored. Call it before the widgets are drawn.
    ``check(values)``: the page's own test of the parsed values (a feature its SAE lacks), [(key, why)] to drop."""
    link = read_link(spec.kinds, page or _page())
    for key, why in (check(link.values) if check and link.values else []):
        link.values.pop(key, None)
        link.ignored.append((key, why))
    st.session_state.update(spec.updates(link.values))
    say_cut()
    link.show_ignored()
    return link


def hold(link: Link, keys, page: str | None = None):
    """Keep the link's ``keys`` until the page can apply them (``take``): values that wait for what the page
    computes first (a graph's nodes) and for its own resets of those widgets."""
    held = {k: link.values[k] for k in keys if k in link.values}
    if held:
        st.session_state[_HELD + (page or _page())] = held


def take(key: str, page: str | None = None):
    """A held value of the link, once; None when there is none."""
    return (st.session_state.get(_HELD + (page or _page())) or {}).pop(key, None)


def say_ignored(ignored):
    Link(ignored=list(ignored)).show_ignored()


def link_box(spec: LinkSpec, overrides: dict | None = None, page: str | None = None):
    """Publish the page's state as its link and offer it to copy (the code box has a copy button): the values of the
    session state ``spec``'s fields name, ``overrides`` for the rest, and the frame's model and step. A prompt (or a
    pair of prompts, cut together) too long for a link is cut, and the box says so."""
    fitted, cut = spec.fit(spec.params(st.session_state, {**frame_params(), **(overrides or {})}))
    publish(fitted, page)
    try:
        base = (st.context.url or "").split("?")[0]  # None without a browser (a test run): a link relative to the page
    except Exception:  # noqa: BLE001 - no script run context
        base = ""
    with st.popover("Copy link", icon=":material/link:"):
        st.caption("A link that opens this view as it is now, for anyone on this server:")
        st.code(f"{base}?{urlencode(fitted)}", language=None, wrap_lines=True)
        if cut:
            st.caption(cut.words())
    return fitted, cut


def frame_link(names: list[str]):
    """app.py's part of a link: model= (a name in the picker) and step= (a snapshot of that model), read once per
    query string. A valid model is put into the picker's state; the step waits for the step picker
    (ui.models.step_picker), which knows the model's snapshots. What cannot be used is kept for
    ``show_frame_link_ignored``."""
    query = st.query_params.to_dict()
    sig = _signature({k: v for k, v in query.items() if k in FRAME_KEYS})
    if st.session_state.get(_SEEN + "frame") == sig:
        return
    st.session_state[_SEEN + "frame"] = sig
    ignored = st.session_state.setdefault("te_link_ignored", [])
    if "model" in query:
        model = str(query["model"])
        if model in names:
            st.session_state["te_model_name"] = model
        else:
            ignored.append(("model", "no model of that name on this server"))
    if "step" in query:
        raw = str(query["step"])
        if raw.isdigit() and len(raw) <= 12:
            st.session_state["te_link_step"] = int(raw)
        else:
            ignored.append(("step", "not a training step"))


def show_frame_link_ignored():
    say_cut()  # a link the server had to cut (read_long_links), said above the page
    ignored = st.session_state.pop("te_link_ignored", None)
    if ignored:
        Link(ignored=ignored).show_ignored()

