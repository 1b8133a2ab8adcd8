"""Links longer than the server reads. Streamlit drops a query string of more than 1,000 fields, or of more than
512 Ki characters, whole, before any page runs, and says so only in the server's log: such a link opened every page on
its defaults without a word. The limits are kept (they bound the work one request can ask for), but the server now
reads the link's first fields that fit them (core.serve.links.cut_query) and adds one of its own, LINK_CUT_KEY, saying
how long the link was; the frame (or the page's link) says so, once."""
from __future__ import annotations

import streamlit as st

from core.serve.links import LINK_CUT_KEY, cut_query, read_cut

_LIMITS = {}  # Streamlit's two limits, once read_long_links has found them


def say_cut():
    """Say once, above the page, that the server cut this link (its LINK_CUT_KEY field): the frame does, and a
    page's use_link, for a run that the frame did not start; the one that comes first says it."""
    query = st.query_params.to_dict()
    if LINK_CUT_KEY not in query:
        return
    sig = hash(tuple(sorted((str(k), str(v)) for k, v in query.items())))
    if st.session_state.get("te_link_cut_said") != sig:
        st.session_state["te_link_cut_said"] = sig
        st.warning(cut_words(read_cut(query[LINK_CUT_KEY])), icon=":material/link:")


def cut_words(cut: tuple[int, int] | None) -> str:
    if cut is None:
        return f"This link holds a field **{LINK_CUT_KEY}** that only the server writes: it was ignored."
    fields, chars = cut
    over = (f"{fields:,} fields, more than the {_LIMITS.get('fields', 1000):,} this server reads"
            if fields > _LIMITS.get("fields", 1000) else
            f"{chars:,} characters, more than the {_LIMITS.get('chars', 512 * 1024):,} this server reads")
    return (f"This link is too long to read whole ({over}): its first fields were read, the rest were ignored. "
            "A link this app writes is never that long.")


def read_long_links() -> bool:
    """Make the server cut a link over Streamlit's limits to what fits (core.serve.links.cut_query) instead of
    dropping it whole. Installed once per process, when this module is first imported (app.py imports it before any
    page runs; a process's very first request comes before, which deploy.warm makes a warm-up's). False when this
    Streamlit has no such limits to wrap (nothing done)."""
    try:
        # local: Streamlit's runtime internals, there only inside a running app
        from streamlit.runtime import app_session
        from streamlit.runtime.state import query_params as qp
    except ImportError:
        return False
    original = getattr(qp, "sanitize_query_string", None)
    fields = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", None)
    chars = getattr(qp, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", None)
    if original is None or not fields or not chars:
        return False
    _LIMITS.update(fields=int(fields), chars=int(chars))
    if getattr(original, "_te_cuts", False):  # patched once, never wrapped twice
        return True

    def sanitize_query_string(query_string: str) -> str:
        kept = original(query_string)
        if kept or not query_string:
            return kept
        return original(cut_query(query_string, int(fields), int(chars)))  # within both limits now

    sanitize_query_string._te_cuts = True
    qp.sanitize_query_string = sanitize_query_string  # read by the script runner (populate_from_query_string)
    if getattr(app_session, "sanitize_query_string", None) is original:  # and by the session, before any run
        app_session.sanitize_query_string = sanitize_query_string
    return True
