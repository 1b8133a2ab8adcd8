"""The frame (app.py) and Streamlit's legacy pages/ folder mode, without a browser.

A fresh server runs in that legacy mode until app.py's st.navigation: a request for a page's URL runs
the page script alone, with a sidebar menu of every file in pages/. See ui/frame.py for how we stay in the
frame; tests/test_browser.py checks the same on a real server.
"""
import tomllib
from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from conftest import app_pages

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
MENU = "client.showSidebarNavigation"


def test_pages_folder_holds_only_the_pages_app_py_lists():
    listed = [script for script, _ in app_pages()]
    assert len(listed) == len(set(listed)) == 16
    present = sorted(f"pages/{p.name}" for p in (ROOT / "pages").iterdir() if p.is_file())
    # any other file there (a helper module, say) would be a page of its own in the legacy mode's menu
    assert present == sorted(listed)
    # a page's own modules live in the folder of its name (pages/features/), which the legacy mode never lists
    folders = [p for p in (ROOT / "pages").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {f"pages/{p.name}.py" for p in folders} <= set(listed)
    assert all((p / "__init__.py").is_file() for p in folders)  # a package: pages.features.cards, not features.py


def test_config_hides_the_legacy_menu_only():
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert settings["client"]["showSidebarNavigation"] is False  # the legacy mode's menu is hidden


@pytest.fixture
def menu_hidden():
    """Streamlit's config as a fresh server has it (config.toml read): the page menu option off."""
    before = config.get_option(MENU)
    config.set_option(MENU, False)
    yield
    config.set_option(MENU, before)


@pytest.mark.parametrize("page, title", [("pages/attention.py", "Attention, head by head"),
                                         ("pages/heads.py", "Switch heads off"),
                                         ("pages/inside.py", "Inside the model"),
                                         ("pages/generation.py", "Generation"), ("pages/parameters.py", "Parameters")])
def test_a_page_run_before_app_py_ends_inside_the_frame(menu_hidden, page, title):
    # AppTest starts every run in the legacy mode; switching before the first run is a bookmark opened
    # as the first request of a fresh server: the page runs alone, without app.py
    at = AppTest.from_file(APP, default_timeout=90)
    at.switch_page(page)
    at.run()
    assert not at.exception
    assert at.session_state["te_current"][0].name == "shakespeare-char"  # app.py ran ...
    assert at.selectbox(key="te_model_name").value == "shakespeare-char"  # ... with its sidebar picker
    assert at.title and at.title[0].value.startswith(title)  # and we are on the bookmarked page
    assert "te_deep_link" not in at.session_state  # the remembered page was used up
    assert at.session_state["te_frame_switches"] == 1  # one detour through app.py, no loop
    assert config.get_option(MENU) is True  # app.py shows its own menu
