"""Real-browser tests of the Attention page (and the sidebar's training step, which it shares with Over training):
typed HTML stays text, a click in the heads grid or on a weight, a crafted link, one pick of the model, the step slider
dragged to 0. Debian's Chromium through Playwright against a live app (tests/browser_app.py); slow lane."""
import re

import pytest

from tests.browser_app import SHOTS, browser, clean_page, click_cell, go_to, no_exception, server, wait_idle  # noqa: F401

pytestmark = pytest.mark.slow


def test_typed_html_stays_text_and_odd_characters_are_named(server, clean_page):
    page, errors = clean_page
    # the character model by name: only its vocabulary lacks the emoji and the Hebrew the warning must name (the
    # byte-level BPE model encodes them); a link names it, not the picker's default (alphabetically the BPE model
    # comes first, and a loaded machine once opened the page on it)
    page.goto(server + "/attention?model=shakespeare-char")
    wait_idle(page)
    errors[:] = [e for e in errors if "404" not in e]  # Streamlit's own probes at a page's path (as below)
    box = page.locator('[data-testid="stTextArea"] textarea').first
    payload = "<b>bold</b><script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\"> 🙂 שלום"
    box.fill(payload)
    box.press("Control+Enter")
    wait_idle(page)
    no_exception(page, "attention with HTML")
    assert page.evaluate("window.__xss") is None  # nothing the user typed ran
    assert page.locator("main b", has_text="bold").count() == 0  # and no tag became markup
    warning = page.locator('[data-testid="stAlertContentWarning"]').first.inner_text()
    assert "🙂" in warning and "ש" in warning
    page.screenshot(path=str(SHOTS / "attention-odd-input.png"), full_page=True)


def test_clicking_a_head_in_the_grid_opens_it(server, clean_page):
    page, _ = clean_page
    go_to(page, server, "Attention")
    assert page.get_by_text("Layer 1, head 1").count() > 0
    grid = page.locator('[data-testid="stPlotlyChart"]').nth(2)  # the all-heads grid, after the panels and the sources
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    x, y = box["x"] + box["width"] * 0.60, box["y"] + box["height"] * 0.80  # layer 2, head 3 of 2 x 4
    page.mouse.move(x, y)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=30_000)  # Plotly has found the cell under the mouse
    page.mouse.click(x, y)
    page.get_by_text("Layer 2, head 3").first.wait_for(timeout=30_000)
    wait_idle(page)
    no_exception(page, "attention after a click in the grid")


def test_dragging_the_training_step_back_to_zero(server, clean_page):
    """The sidebar's "Model at training step" on the Attention page and on Over training: moved by keyboard as a
    slider is (Home: the first step), each page reruns on the step-0 model with no error box."""
    page, _ = clean_page
    go_to(page, server, "Attention")
    thumb = page.locator('[data-testid="stSidebar"] input[type="range"]').first
    thumb.wait_for(timeout=30_000)  # the shipped model keeps snapshots: the sidebar offers them
    thumb.focus()
    page.keyboard.press("Home")
    page.get_by_text("the model at training step 0").first.wait_for(timeout=60_000)
    wait_idle(page)
    no_exception(page, "attention at step 0")
    page.screenshot(path=str(SHOTS / "attention-step-0.png"), full_page=True)
    go_to(page, server, "Over training")
    thumb = page.locator('[data-testid="stSidebar"] input[type="range"]').first
    thumb.focus()
    page.keyboard.press("End")  # back to the final model: Over training shows every step whatever the slider says
    wait_idle(page)
    page.get_by_text("Which tokens become easy first").first.wait_for(timeout=60_000)
    no_exception(page, "over training")
    page.screenshot(path=str(SHOTS / "over-training.png"), full_page=True)


def test_a_crafted_link_opens_the_same_head_on_the_same_prompt(server, clean_page):
    """A teacher's link: the prompt box, the pickers and the figure's title follow it; a click on the weights then
    takes that cell's score apart."""
    page, errors = clean_page
    page.goto(server + "/attention?model=shakespeare-char&prompt=To%20be%2C%20or%20not&layer=2&head=1")
    wait_idle(page)
    page.get_by_text("Layer 2, head 1: rows are queries").first.wait_for(timeout=30_000)
    # Streamlit's frontend, loaded at a page's path, first probes <path>/_stcore/health and host-config (404) and
    # then the root's: two console errors that are Streamlit's, not the app's
    errors[:] = [e for e in errors if "404" not in e]
    assert page.locator('[data-testid="stTextArea"] textarea').first.input_value() == "To be, or not"
    shown = page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').evaluate_all(
        "els => els.map(e => (e.innerText + ' ' + Array.from(e.querySelectorAll('input')).map(i => i.value).join(' ')))")
    assert "layer 2" in shown[0] and "head 1" in shown[1], shown[:2]
    panels = page.locator('[data-testid="stPlotlyChart"]').first
    click_cell(page, panels, 0.5 / 13, 0.5 / 13, panel=2)  # the weights (third panel), 13 positions: query 0, key 0
    page.get_by_text("Now: query 1 'T', key 1 'T'").first.wait_for(timeout=30_000)  # positions count from 1
    wait_idle(page)
    no_exception(page, "attention from a link, after a click")


def test_one_pick_in_the_sidebar_switches_the_model_on_a_page_that_writes_its_link(server, clean_page):
    """The Attention page writes model= into the URL on every run; the frame must not read that write back as a new
    link, which undid the learner's first pick (it took two picks to switch, and two to switch back)."""
    page, errors = clean_page
    page.goto(server + "/attention")
    wait_idle(page)
    errors[:] = [e for e in errors if "404" not in e]  # Streamlit's own probes at a page's path (see above)
    picker = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first
    for name, vocab in (("shakespeare-bpe", "m=1024"), ("shakespeare-char", "m=65")):
        picker.click()
        page.get_by_role("option", name=re.compile(name)).first.click()
        wait_idle(page)
        page.locator('[data-testid="stSidebar"]').get_by_text(vocab).first.wait_for(timeout=30_000)
        wait_idle(page)
        shown = picker.evaluate("e => e.innerText + ' ' + Array.from(e.querySelectorAll('input')).map(i => i.value).join(' ')")
        assert name in shown and f"model={name}" in page.url, (name, shown, page.url)
        no_exception(page, f"attention after picking {name}")
