"""Deep links and the frame: a page opened alone (a bookmark on a cold server) switches into app.py's frame."""
from __future__ import annotations

import inspect
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException

ROOT = Path(__file__).resolve().parent.parent  # the repo root: this file is ui/frame.py

# Streamlit and the pages/ folder. A folder named pages/ beside the entry script makes Streamlit start in
# its legacy multipage mode: until some session calls st.navigation, a request runs the page script its
# URL names alone (no app.py, so no sidebar picker), with a sidebar menu of every file in pages/. The
# first st.navigation call (app.py's) ends that mode for the whole server. Three supported pieces keep
# a cold server's first request, a bookmark to /attention say, inside the frame:
# - pages/ holds page scripts only, so the legacy menu lists no helper: a page's own modules live in the folder
#   of its name (pages/features/ beside pages/features.py), which that mode never lists. The script stays
#   beside its folder, not inside it: the legacy mode finds pages/*.py only, and a bookmark to a page it cannot
#   find opens a "Page not found" dialog before app.py runs;
# - .streamlit/config.toml sets client.showSidebarNavigation = false, which hides the legacy menu, and
#   app.py calls show_page_menu() before st.navigation, so our own menu shows all the same;
# - every page calls ensure_frame() first: run alone, it switches to app.py, which calls st.navigation
#   and then resume_deep_link() to switch back to that page, now in the frame.
PAGES_DIR = ROOT / "pages"
_DEEP_LINK = "te_deep_link"  # session key: the page a request opened before app.py had run (a bookmark)


def _calling_page() -> str | None:
    """The page script (as "pages/name.py") whose run called us, found on the call stack."""
    frame = inspect.currentframe().f_back
    while frame is not None:  # up through ui's own frames (ensure_frame, current, ...) to the page's
        file = frame.f_globals.get("__file__")
        if file and Path(file).resolve().parent == PAGES_DIR:
            return Path(file).resolve().relative_to(ROOT).as_posix()
        frame = frame.f_back
    return None


def ensure_frame():
    """Make sure this page runs inside app.py's frame (router, sidebar, model picker).

    A page runs without the frame only in Streamlit's legacy pages/ mode, i.e. when the very first
    request after a server start opens the page's URL (a bookmark). Then we remember the page and switch
    to app.py (the legacy app's main page); app.py's st.navigation ends the legacy mode for the whole
    server, and resume_deep_link() switches on to the remembered page. Every page calls this first,
    before it draws anything."""
    if "te_current" in st.session_state:  # app.py's sidebar ran in this session: we are in the frame
        return
    page = _calling_page()
    tries = st.session_state.get("te_frame_switches", 0)
    if page is None or tries >= 2:  # never loop: past two tries the page runs without the frame
        return
    st.session_state["te_frame_switches"] = tries + 1
    st.session_state[_DEEP_LINK] = (page, st.query_params.to_dict())
    st.switch_page("app.py")


def resume_deep_link():
    """Called by app.py right after st.navigation: if a page sent us here (ensure_frame), go back to it,
    now inside the frame. A page that st.navigation does not list is dropped (the app stays on Home)."""
    page, query = st.session_state.pop(_DEEP_LINK, (None, None))
    if page is None:
        return
    try:
        st.switch_page(page, query_params=query or None)
    except StreamlitAPIException:  # not one of app.py's pages
        pass


def show_page_menu():
    """Let app.py's st.navigation show its sidebar menu. config.toml sets client.showSidebarNavigation to
    false to hide the menu of Streamlit's legacy pages/ folder mode; Streamlit applies that option to
    st.navigation's sidebar menu too, so app.py turns it back on before calling st.navigation. The option
    is process-wide, which is what we want: that first st.navigation ends the legacy mode for good."""
    if st.get_option("client.showSidebarNavigation") is False:
        st.set_option("client.showSidebarNavigation", True)
