"""Real-browser test: Playwright drives Debian's Chromium against a live `streamlit run app.py`.

Opens every page listed in the sidebar, types into the first prompt box a page has, and fails on any
Streamlit exception box or browser console error. Screenshots land in artifacts/screenshots/.
Skips (with the reason) where /usr/bin/chromium or the playwright package is missing.
"""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("TE_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "artifacts" / "screenshots"

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    env = {**os.environ, "TE_MODELS_DIR": str(tmp_path_factory.mktemp("models"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stdout.read().decode())
            time.sleep(0.3)
    else:
        proc.kill()
        raise RuntimeError("streamlit did not start within 60 s")
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def wait_idle(page, timeout=60_000):
    """Wait until Streamlit has finished running the script (no 'Running...' status widget)."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout)
    page.wait_for_timeout(1500)  # the status widget appears only once the script has started
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)
    page.wait_for_timeout(300)


def check_clean(page, errors, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{name}: exception box: {boxes.first.inner_text()[:500]}"
    assert not errors, f"{name}: console errors: {errors}"


def test_every_page_renders_without_exception(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server)
    wait_idle(page)
    # the first run must finish before the links are read: until st.navigation has run, the sidebar lists
    # the files of pages/ (Streamlit's older multipage scheme), e.g. pages/_common.py
    page.get_by_text("49,408").first.wait_for(timeout=30_000)  # the home page shows the lecture's count
    links = page.locator('[data-testid="stSidebarNavLink"]')
    for i in range(max(1, links.count())):
        # click rather than load each URL afresh: a fresh load of /<page> makes the frontend probe
        # /<page>/_stcore/health first, and the browser logs that expected 404 as a console error
        if links.count():
            links.nth(i).click()
        wait_idle(page)
        name = (page.url.rstrip("/").rsplit("/", 1)[-1] or "home").split("?")[0]
        if name.startswith("127.0.0.1"):
            name = "home"
        prompt = page.locator('[data-testid="stTextArea"] textarea, [data-testid="stTextInput"] input')
        if prompt.count():
            prompt.first.fill("To be, or not to be:")
            prompt.first.press("Control+Enter" if prompt.first.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
            wait_idle(page)
        check_clean(page, errors, name)
