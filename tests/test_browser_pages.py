"""Real-browser tests of Generation (a slider moved), Your scaling law (a malformed CSV), Inside the model (a click
in the stream column) and Cause and effect (clicks on its cells): what AppTest cannot do, a real click or key on a
chart or slider. Debian's Chromium through Playwright against a live app (tests/browser_app.py); slow lane."""
import pytest

from tests.browser_app import browser, clean_page, click_cell, go_to, no_exception, server, wait_idle  # noqa: F401

pytestmark = pytest.mark.slow


def test_moving_a_slider_updates_the_page(server, clean_page):
    page, _ = clean_page
    go_to(page, server, "Generation")
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
    no_exception(page, "generation after a slider move")


def test_malformed_csv_on_the_scaling_page(server, clean_page, tmp_path):
    page, _ = clean_page
    go_to(page, server, "Your scaling law")  # the scaling page that fits runs
    page.get_by_text("Upload a CSV").first.click()
    wait_idle(page)
    f = tmp_path / "runs.csv"
    f.write_text("N,D,loss\n1e6,2e7,3.1\nnot-a-number,2e7,3.0\n")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(f))
    page.locator('[data-testid="stAlertContentError"]').first.wait_for(timeout=30_000)
    no_exception(page, "scaling with a malformed CSV")


def test_clicking_a_step_in_the_stream_column_opens_it(server, clean_page):
    """AppTest cannot click a chart: this is the one check that a click on the Inside the model page's stream
    column reaches its callback and opens that step's numbers."""
    page, _ = clean_page
    go_to(page, server, "Inside the model")
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
    no_exception(page, "inside the model after a click in the stream column")


def test_clicking_cells_on_cause_and_effect(server, clean_page):
    """A click on the residual grid reads its cell out in words; a click in the head table opens that head."""
    page, _ = clean_page
    go_to(page, server, "Cause and effect")
    charts = page.locator('[data-testid="stPlotlyChart"]')
    click_cell(page, charts.nth(0), 0.99, 0.83)  # the last position of the last row: the read-out stream
    page.get_by_text("putting this one vector back restores").first.wait_for(timeout=30_000)
    wait_idle(page)
    click_cell(page, page.locator('[data-testid="stPlotlyChart"]').nth(2), 2.5 / 4, 0.25)  # L1 H3 of 2 x 4
    page.get_by_text("now: L1 H3").first.wait_for(timeout=30_000)
    wait_idle(page)
    no_exception(page, "cause and effect after clicks")
