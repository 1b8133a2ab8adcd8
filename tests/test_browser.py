"""Real-browser test: Playwright drives Debian's Chromium against a live `streamlit run app.py` (tests/browser_app.py).

Opens every page listed in the sidebar, types into the first prompt box a page has, and fails on any Streamlit
exception box or browser console error; a deep link as a fresh server's first request; a feature opened from the
prompt view. The other pages' checks are in tests/test_browser_*.py, a file per page or two, so that the test
workers (pytest.ini: a whole file each) share them. Skips (with the reason) where /usr/bin/chromium or the
playwright package is missing.
"""
import os
import re
import subprocess
import sys

import pytest

from conftest import app_pages
from tests.browser_app import (  # noqa: F401
    RECORD_MENUS,
    ROOT,
    SHOTS,
    browser,
    check_clean,
    free_port,
    healthy,
    menu_titles,
    server,
    wait_idle,
)
from tests.polling import wait_until

pytestmark = pytest.mark.slow  # runs by default; `pytest -m "not slow"` skips it locally


def test_every_page_renders_without_exception(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server)
    wait_idle(page)
    page.get_by_text("49,408").first.wait_for(timeout=30_000)  # the home page shows the lecture's count
    links = page.locator('[data-testid="stSidebarNavLink"]')
    titles = [links.nth(i).inner_text().strip() for i in range(links.count())]
    assert titles, "no pages in the sidebar"
    for i, title in enumerate(titles):
        # navigate as a user does, by the sidebar; the app routes on the client without a reload
        page.locator('[data-testid="stSidebarNavLink"]').nth(i).click()
        wait_idle(page)
        name = page.url.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
        name = "home" if ":" in name or not name else name
        prompt = page.locator('[data-testid="stTextArea"] textarea, [data-testid="stTextInput"] input')
        if prompt.count():
            prompt.first.fill("To be, or not to be:")
            prompt.first.press("Control+Enter" if prompt.first.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
            wait_idle(page)
        check_clean(page, errors, name)


# one cold start (a fresh server each costs ~12 s); tests/test_frame.py checks every other page's deep link
@pytest.mark.parametrize("path, heading", [("/attention", "Attention, head by head")])
def test_deep_link_right_after_start_runs_inside_the_frame(browser, tmp_path, path, heading):
    """Opening a page's URL as the first request of a fresh server must end on that page, inside the
    frame: the sidebar picker and our own menu, never Streamlit's legacy pages/ folder menu (whose
    entries are file names: "common" for a helper module, "app", ...)."""
    titles = [title for _, title in app_pages()]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env={**os.environ, "TE_MODELS_DIR": str(tmp_path)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: healthy(url, proc), timeout=60, every=0.3)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.add_init_script(RECORD_MENUS)
        page.goto(url + path)
        page.get_by_text("d=64 · h=4").first.wait_for(timeout=30_000)  # the sidebar's model summary
        first = menu_titles(page)  # the menu right after the first load
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.url.split("?")[0].rstrip("/").endswith(path), page.url  # still the bookmarked page
        assert page.locator("h1", has_text=heading).count() == 1
        assert first == titles and menu_titles(page) == titles
        shown = page.evaluate("window.__menus")
        assert shown, "no sidebar menu was recorded"
        strays = sorted({name for menu in shown for name in menu} - set(titles))
        assert not strays, f"the sidebar menu showed {strays} (all menus shown: {shown})"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"cold-deep-link-{path.strip('/')}.png"), full_page=True)
        page.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_feature_opens_from_the_prompt_view(server, browser):
    """Features page: a click on a feature firing at a prompt position opens that feature's card."""
    if not (ROOT / "assets/models/shakespeare-char/sae/blocks.0.hook_resid_post/sae_weights.safetensors").exists():
        pytest.skip("the shipped SAE is not in this checkout")
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server)
    wait_idle(page)
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Features").first.click()
    wait_idle(page, timeout=180_000)  # the first visit indexes every feature over the held-out text
    button = page.get_by_role("button", name=re.compile(r"^feature \d+: fires ")).nth(2)  # the third at the position
    unit = re.match(r"feature (\d+)", button.inner_text().strip()).group(1)
    button.click()
    wait_idle(page, timeout=120_000)
    page.get_by_role("heading", name=f"SAE feature {unit}").wait_for(timeout=30_000)
    check_clean(page, errors, "features_opened")
