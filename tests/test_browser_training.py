"""Real-browser tests of the Training page and Why each piece: a short run started and stopped, bad uploads refused
with a reason, a tiny variant run. Debian's Chromium through Playwright against a live app (tests/browser_app.py);
slow lane."""
import pytest

from tests.browser_app import SHOTS, browser, clean_page, go_to, no_exception, server, wait_idle  # noqa: F401

pytestmark = pytest.mark.slow


def test_short_training_run_starts_and_stops(server, clean_page):
    page, _ = clean_page
    go_to(page, server, "Training")
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
    no_exception(page, "training after stop")
    page.screenshot(path=str(SHOTS / "training-stopped.png"), full_page=True)


@pytest.mark.parametrize("content, words", [
    (b"", "empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "binary"),
    ("caf\u00e9 cr\u00e8me br\u00fbl\u00e9e ".encode("latin-1") * 50, "UTF-8"),
])
def test_bad_uploads_are_refused_with_a_reason(server, clean_page, content, words, tmp_path):
    page, _ = clean_page
    go_to(page, server, "Training")
    page.get_by_text("Upload a .txt file").click()
    wait_idle(page)
    f = tmp_path / "corpus.txt"
    f.write_bytes(content)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(f))
    page.locator('[data-testid="stAlertContentError"]').first.wait_for(timeout=30_000)
    wait_idle(page)
    assert words.lower() in page.locator('[data-testid="stAlertContentError"]').first.inner_text().lower()
    no_exception(page, f"upload {words}")


def test_a_tiny_variant_run_from_why_each_piece(server, clean_page):
    """The Why each piece page: the shipped study's table, then a learner's own run of 50 steps started, its live
    curve drawn, and no error box."""
    page, _ = clean_page
    go_to(page, server, "Why each piece")
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
    no_exception(page, "why each piece with a run")
    page.screenshot(path=str(SHOTS / "why-each-piece-run.png"), full_page=True)
