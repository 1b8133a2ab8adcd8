"""Real-browser test: Playwright drives Debian's Chromium against a live `streamlit run app.py`.

Opens every page listed in the sidebar, types into the first prompt box a page has, and fails on any
Streamlit exception box or browser console error. Screenshots land in artifacts/screenshots/.
Skips (with the reason) where /usr/bin/chromium or the playwright package is missing.
"""
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import app_pages
from tests.polling import wait_until

pytestmark = pytest.mark.slow  # runs by default; `pytest -m "not slow"` skips it locally

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


def _healthy(url: str, proc) -> bool:
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
    port = _free_port()
    env = {**os.environ, "TE_MODELS_DIR": str(tmp_path_factory.mktemp("models"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url, proc), timeout=60, every=0.3)
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


def _menu(page):
    links = page.locator('[data-testid="stSidebarNavLink"]')
    return [links.nth(i).inner_text().strip().split("\n")[-1].strip() for i in range(links.count())]


# one cold start (a fresh server each costs ~12 s); tests/test_frame.py checks every other page's deep link
@pytest.mark.parametrize("path, heading", [("/attention", "Attention, head by head")])
def test_deep_link_right_after_start_runs_inside_the_frame(browser, tmp_path, path, heading):
    """Opening a page's URL as the first request of a fresh server must end on that page, inside the
    frame: the sidebar picker and our own menu, never Streamlit's legacy pages/ folder menu (whose
    entries are file names: "common" for a helper module, "app", ...)."""
    titles = [title for _, title in app_pages()]
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env={**os.environ, "TE_MODELS_DIR": str(tmp_path)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _healthy(url, proc), timeout=60, every=0.3)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.add_init_script(RECORD_MENUS)
        page.goto(url + path)
        page.get_by_text("d=64 · h=4").first.wait_for(timeout=30_000)  # the sidebar's model summary
        first = _menu(page)  # the menu right after the first load
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.url.split("?")[0].rstrip("/").endswith(path), page.url  # still the bookmarked page
        assert page.locator("h1", has_text=heading).count() == 1
        assert first == titles and _menu(page) == titles
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


def _open(page, server, title):
    """Go to a page by clicking its sidebar link, as a user does."""
    if server not in page.url:
        page.goto(server)
        wait_idle(page)
        page.get_by_text("49,408").first.wait_for(timeout=30_000)
    # the title at the end, case and all: "Training" must not open "Over training"
    page.locator('[data-testid="stSidebarNavLink"]', has_text=re.compile(f"{re.escape(title)}$")).first.click()
    wait_idle(page)


def _no_exception(page, name):
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{name}: {boxes.first.inner_text()[:500]}"


@pytest.fixture
def clean_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page, errors
    assert not errors, f"console errors: {errors}"
    page.close()


def test_typed_html_stays_text_and_odd_characters_are_named(server, clean_page):
    page, _ = clean_page
    _open(page, server, "Attention")
    box = page.locator('[data-testid="stTextArea"] textarea').first
    payload = "<b>bold</b><script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\"> 🙂 שלום"
    box.fill(payload)
    box.press("Control+Enter")
    wait_idle(page)
    _no_exception(page, "attention with HTML")
    assert page.evaluate("window.__xss") is None  # nothing the user typed ran
    assert page.locator("main b", has_text="bold").count() == 0  # and no tag became markup
    warning = page.locator('[data-testid="stAlertContentWarning"]').first.inner_text()
    assert "🙂" in warning and "ש" in warning
    page.screenshot(path=str(SHOTS / "attention-odd-input.png"), full_page=True)


def test_moving_a_slider_updates_the_page(server, clean_page):
    page, _ = clean_page
    _open(page, server, "Generation")
    # the temperature sweep's own slider: not the sidebar's training step, nor the steering section's alpha
    slider = page.locator('[data-testid="stMain"] [data-testid="stSlider"]', has_text="T (log scale)") \
        .locator('input[type="range"]').first
    before = slider.get_attribute("aria-valuetext")
    entropy = page.locator('[data-testid="stMetric"]', has_text="Entropy H(p(T))")
    entropy_before = entropy.inner_text()
    slider.focus()
    for _ in range(5):
        slider.press("ArrowRight")
    wait_idle(page)
    assert slider.get_attribute("aria-valuetext") != before
    # the slider's part of the page (a fragment) ran again with the new T: a higher T spreads the distribution
    page.wait_for_function("([el, old]) => el.innerText !== old", arg=[entropy.element_handle(), entropy_before],
                           timeout=30_000)
    _no_exception(page, "generation after a slider move")


def test_short_training_run_starts_and_stops(server, clean_page):
    page, _ = clean_page
    _open(page, server, "Training")
    steps = page.get_by_label("steps", exact=True)
    steps.fill("300")
    steps.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Start training").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=30_000)
    # let it train a little: the live view's Step metric moves past 0 (it polls the run meanwhile)
    page.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stMetric"]')].some(
        m => m.innerText.startsWith('Step') && parseInt(m.innerText.split('\\n').pop().replace(/,/g, '')) > 0)""",
                           timeout=60_000)
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("Save the model").first.wait_for(timeout=30_000)
    wait_idle(page)
    _no_exception(page, "training after stop")
    page.screenshot(path=str(SHOTS / "training-stopped.png"), full_page=True)


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "binary"),
    ("caf\u00e9 cr\u00e8me br\u00fbl\u00e9e ".encode("latin-1") * 50, "UTF-8"),
])
def test_bad_uploads_are_refused_with_a_reason(server, clean_page, content, words, tmp_path):
    page, _ = clean_page
    _open(page, server, "Training")
    page.get_by_text("Upload a .txt file").click()
    wait_idle(page)
    f = tmp_path / "corpus.txt"
    f.write_bytes(content)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(f))
    page.locator('[data-testid="stAlertContentError"]').first.wait_for(timeout=30_000)
    wait_idle(page)
    assert words.lower() in page.locator('[data-testid="stAlertContentError"]').first.inner_text().lower()
    _no_exception(page, f"upload {words}")


def test_malformed_csv_on_the_scaling_page(server, clean_page, tmp_path):
    page, _ = clean_page
    _open(page, server, "Your scaling law")  # the scaling page that fits runs
    page.get_by_text("Upload a CSV").first.click()
    wait_idle(page)
    f = tmp_path / "runs.csv"
    f.write_text("N,D,loss\n1e6,2e7,3.1\nnot-a-number,2e7,3.0\n")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(f))
    page.locator('[data-testid="stAlertContentError"]').first.wait_for(timeout=30_000)
    _no_exception(page, "scaling with a malformed CSV")


def test_clicking_a_head_in_the_grid_opens_it(server, clean_page):
    page, _ = clean_page
    _open(page, server, "Attention")
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
    _no_exception(page, "attention after a click in the grid")


def test_clicking_a_step_in_the_stream_column_opens_it(server, clean_page):
    """AppTest cannot click a chart: this is the one check that a click on the Inside the model page's stream
    column reaches its callback and opens that step's numbers."""
    page, _ = clean_page
    _open(page, server, "Inside the model")
    assert page.get_by_text("The embedding: a vector for the character").count() > 0  # the step open at first
    column = page.locator('[data-testid="stPlotlyChart"]').first
    column.scroll_into_view_if_needed()
    bar = column.locator("g.trace.bars").first.locator("g.point").nth(1)  # "L1 attention", what it adds
    box = bar.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=30_000)  # Plotly has found the bar under the mouse
    page.mouse.click(x, y)
    page.get_by_text("Block 1, attention: each head's share").first.wait_for(timeout=30_000)
    wait_idle(page)
    _no_exception(page, "inside the model after a click in the stream column")


def test_dragging_the_training_step_back_to_zero(server, clean_page):
    """The sidebar's "Model at training step" on the Attention page and on Over training: moved by keyboard as a
    slider is (Home: the first step), each page reruns on the step-0 model with no error box."""
    page, _ = clean_page
    _open(page, server, "Attention")
    thumb = page.locator('[data-testid="stSidebar"] input[type="range"]').first
    thumb.wait_for(timeout=30_000)  # the shipped model keeps snapshots: the sidebar offers them
    thumb.focus()
    page.keyboard.press("Home")
    page.get_by_text("the model at training step 0").first.wait_for(timeout=60_000)
    wait_idle(page)
    _no_exception(page, "attention at step 0")
    page.screenshot(path=str(SHOTS / "attention-step-0.png"), full_page=True)
    _open(page, server, "Over training")
    thumb = page.locator('[data-testid="stSidebar"] input[type="range"]').first
    thumb.focus()
    page.keyboard.press("End")  # back to the final model: Over training shows every step whatever the slider says
    wait_idle(page)
    page.get_by_text("Which tokens become easy first").first.wait_for(timeout=60_000)
    _no_exception(page, "over training")
    page.screenshot(path=str(SHOTS / "over-training.png"), full_page=True)


def test_a_tiny_variant_run_from_why_each_piece(server, clean_page):
    """The Why each piece page: the shipped study's table, then a learner's own run of 50 steps started, its live
    curve drawn, and no error box."""
    page, _ = clean_page
    _open(page, server, "Why each piece")
    page.get_by_text("The claims, measured").first.wait_for(timeout=60_000)
    steps = page.get_by_label("Steps", exact=True)
    steps.fill("50")
    steps.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Start").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=60_000)
    # the run's own curve: its live chart appears once the run has an evaluation
    page.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].some(
        c => c.textContent.includes('your lecture'))""", timeout=120_000)
    wait_idle(page)
    _no_exception(page, "why each piece with a run")
    page.screenshot(path=str(SHOTS / "why-each-piece-run.png"), full_page=True)


def _click_cell(page, chart, col_frac, row_frac, panel=0):
    """Click a heatmap cell at fractions of the plot area of the chart's ``panel`` (not its margins), once Plotly
    hovers it."""
    chart.scroll_into_view_if_needed()
    area = chart.locator(".nsewdrag").nth(panel).bounding_box()
    x, y = area["x"] + area["width"] * col_frac, area["y"] + area["height"] * row_frac
    page.mouse.move(x, y)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=30_000)
    page.mouse.click(x, y)


def test_clicking_cells_on_cause_and_effect(server, clean_page):
    """A click on the residual grid reads its cell out in words; a click in the head table opens that head."""
    page, _ = clean_page
    _open(page, server, "Cause and effect")
    charts = page.locator('[data-testid="stPlotlyChart"]')
    _click_cell(page, charts.nth(0), 0.99, 0.83)  # the last position of the last row: the read-out stream
    page.get_by_text("putting this one vector back restores").first.wait_for(timeout=30_000)
    wait_idle(page)
    _click_cell(page, page.locator('[data-testid="stPlotlyChart"]').nth(2), 2.5 / 4, 0.25)  # L1 H3 of 2 x 4
    page.get_by_text("now: L1 H3").first.wait_for(timeout=30_000)
    wait_idle(page)
    _no_exception(page, "cause and effect after clicks")


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
    _click_cell(page, panels, 0.5 / 13, 0.5 / 13, panel=2)  # the weights (third panel), 13 positions: query 0, key 0
    page.get_by_text("Now: query 1 'T', key 1 'T'").first.wait_for(timeout=30_000)  # positions count from 1
    wait_idle(page)
    _no_exception(page, "attention from a link, after a click")


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
        _no_exception(page, f"attention after picking {name}")


def test_a_feature_opens_from_the_prompt_view(server, browser):
    """Features page: a click on a feature firing at a prompt position opens that feature's card."""
    if not (ROOT / "assets/models/shakespeare-char/sae/blocks.0.hook_resid_post/sae.safetensors").exists():
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
