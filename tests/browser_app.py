"""The live app and the browser for the real-browser tests (tests/test_browser*.py): a `streamlit run app.py` on a
free port (one per test file, with its own models folder), Debian's Chromium through Playwright, and the waits and
checks they share. Importing it skips the importing test file where /usr/bin/chromium or playwright is missing.
Screenshots land in artifacts/screenshots/."""
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("TE_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "artifacts" / "screenshots"

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, proc) -> bool:
    """True once the server answers its health check; the server's own output if it died first."""
    try:
        urllib.request.urlopen(url + "/_stcore/health", timeout=1)
        return True
    except OSError:
        if proc.poll() is not None:
            raise RuntimeError(proc.stdout.read().decode() if proc.stdout else f"streamlit exited {proc.returncode}")
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    env = {**os.environ, "TE_MODELS_DIR": str(tmp_path_factory.mktemp("models"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(url, proc), timeout=60, every=0.3)
    except AssertionError:
        proc.kill()
        raise RuntimeError("streamlit did not start within 60 s") from None
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
    quiet = [0]

    def settled() -> bool:
        # idle for 5 checks in a row, 0.3 s apart: no running script, no placeholder skeletons. Five in a row, not
        # one: the status widget appears only once the script has started, a moment after the page asked for it
        busy = page.locator('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]').count()
        quiet[0] = 0 if busy else quiet[0] + 1
        return quiet[0] >= 5

    try:
        wait_until(settled, timeout=timeout / 1000, every=0.3)
    except AssertionError:
        raise TimeoutError("the page did not settle") from None


def check_clean(page, errors, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{name}: exception box: {boxes.first.inner_text()[:500]}"
    assert not errors, f"{name}: console errors: {errors}"


def go_to(page, server, title):
    """Go to a page by clicking its sidebar link, as a user does."""
    if server not in page.url:
        page.goto(server)
        wait_idle(page)
        page.get_by_text("49,408").first.wait_for(timeout=30_000)
    # the title at the end, case and all: "Training" must not open "Over training"
    page.locator('[data-testid="stSidebarNavLink"]', has_text=re.compile(f"{re.escape(title)}$")).first.click()
    wait_idle(page)


def no_exception(page, name):
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{name}: {boxes.first.inner_text()[:500]}"


@pytest.fixture
def clean_page(browser):
    """A fresh browser tab and the console errors it collects (none allowed at its end); the screenshots' folder made."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page, errors
    assert not errors, f"console errors: {errors}"
    page.close()


def click_cell(page, chart, col_frac, row_frac, panel=0):
    """Click a heatmap cell at fractions of the plot area of the chart's ``panel`` (not its margins), once Plotly
    hovers it."""
    chart.scroll_into_view_if_needed()
    area = chart.locator(".nsewdrag").nth(panel).bounding_box()
    x, y = area["x"] + area["width"] * col_frac, area["y"] + area["height"] * row_frac
    page.mouse.move(x, y)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=30_000)
    page.mouse.click(x, y)


# records, in the browser, every list of sidebar menu entries ever shown (the legacy pages/ mode's menu
# could flash by before the app routes into the frame)
RECORD_MENUS = """
window.__menus = [];
new MutationObserver(() => {
  const names = Array.from(document.querySelectorAll('[data-testid="stSidebarNavLink"]'))
    .map(e => e.innerText.trim().split("\\n").pop().trim());
  const last = window.__menus[window.__menus.length - 1];
  if (names.length && JSON.stringify(names) !== JSON.stringify(last)) window.__menus.push(names);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def menu_titles(page):
    links = page.locator('[data-testid="stSidebarNavLink"]')
    return [links.nth(i).inner_text().strip().split("\n")[-1].strip() for i in range(links.count())]
