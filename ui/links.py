"""Links that open a view: a page's shareable state in the URL (st.query_params), read once when a link is opened,
written back as the controls change, and a "Copy link" box. The parsing is core.serve.links (pure, unit-tested);
this module only moves values between the URL, the session and the page."""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

import streamlit as st

from core.serve.fmt import md_escape
from core.serve.links import GLOBAL_KEYS, MAX_LINK_CHARS, fit_link, parse_fields
from ui.frame import _calling_page

_SEEN = "te_link_seen::"  # session key + page: the query string this page last read or wrote


@dataclass
class Link:
    values: dict = field(default_factory=dict)   # URL key -> parsed value, for the fields that were valid
    ignored: list = field(default_factory=list)  # (key, why) for what was not

    def show_ignored(self):
        """One message naming every field of the link that was ignored; nothing when all were used."""
        if self.ignored:
            parts = "; ".join(f"**{md_escape(k[:40])}** ({md_escape(why)})" for k, why in self.ignored[:8])
            more = f"; and {len(self.ignored) - 8} more" if len(self.ignored) > 8 else ""
            st.warning(f"Part of this link was ignored, and the page opened with its defaults there: {parts}{more}.",
                       icon="🔗")


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


def publish(params: dict, page: str | None = None):
    """Write the page's current state into the URL (None values left out), so the address bar is always a link to
    what is on screen; recorded as seen, so that the next rerun does not read it back as a new link."""
    page = page or _page()
    clean = {k: str(v) for k, v in params.items() if v is not None and str(v) != ""}
    clean, _ = fit_link(clean)
    if _signature(st.query_params.to_dict()) != _signature(clean):
        st.query_params.from_dict(clean)
    st.session_state[_SEEN + page] = _signature(clean)


def link_box(params: dict, page: str | None = None):
    """Publish ``params`` and offer them as a link to copy (the code box has a copy button). A prompt too long for
    a link is cut, and the box says so."""
    clean = {k: str(v) for k, v in params.items() if v is not None and str(v) != ""}
    fitted, cut = fit_link(clean)
    publish(fitted, page)
    try:
        base = str(st.context.url).split("?")[0]
    except Exception:  # noqa: BLE001 - no browser (a test run): a link relative to the page
        base = ""
    with st.popover("Copy link", icon=":material/link:"):
        st.caption("A link that opens this view as it is now, for anyone on this server:")
        st.code(f"{base}?{urlencode(fitted)}", language=None, wrap_lines=True)
        if cut:
            st.caption(f"The prompt was cut to its first {cut:,} characters to keep the link under "
                       f"{MAX_LINK_CHARS:,} characters.")


def frame_link(names: list[str]):
    """app.py's part of a link: model= (a name in the picker) and step= (a snapshot of that model), read once per
    query string. A valid model is put into the picker's state; the step waits for the step picker
    (ui.models.step_picker), which knows the model's snapshots. What cannot be used is kept for
    ``show_frame_link_ignored``."""
    query = st.query_params.to_dict()
    sig = _signature({k: v for k, v in query.items() if k in ("model", "step")})
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
        if raw.isdigit() and len(raw) <= 9:
            st.session_state["te_link_step"] = int(raw)
        else:
            ignored.append(("step", "not a training step"))


def show_frame_link_ignored():
    ignored = st.session_state.pop("te_link_ignored", None)
    if ignored:
        Link(ignored=ignored).show_ignored()


def apply_link(spec: dict, targets: dict) -> Link:
    """``read_link(spec)`` and put each valid value into the session state the page's widget reads:
    ``targets`` maps a URL key to (state key, convert) or to a state key (the value as it is). Call it before the
    widgets are drawn; the page shows ``show_ignored()`` where it likes (this does it right away)."""
    link = read_link(spec, _page())
    for url_key, value in link.values.items():
        target = targets.get(url_key)
        if target is None:
            continue
        state_key, convert = target if isinstance(target, tuple) else (target, None)
        st.session_state[state_key] = convert(value) if convert else value
    link.show_ignored()
    return link
