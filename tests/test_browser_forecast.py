"""Issue 45 in a real browser: on Your scaling law, a learner changes the proposed run to a small one, writes down a
forecast, clicks Train it, and sees the run train in the background and the forecast scored, its point joining the
fit. Skips where Chromium or playwright is missing, or without Tiny Shakespeare: the run must train on the shipped
study's own corpus (its checksum is checked), or its point would not belong to that fit."""
import re

import pytest

from tests.browser_app import SHOTS, browser, server, wait_idle  # noqa: F401  fixtures
from core.data.corpus import shakespeare_path
from tests.polling import wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shakespeare_path() is None, reason="needs Tiny Shakespeare (TE_CORPUS or "
                                 "../shared/data): the forecast run trains on the shipped study's own corpus")]


def _text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def _number(page, label: str, value: str):
    box = page.get_by_role("spinbutton", name=label, exact=True)  # not the "Help for ..." button beside it
    box.fill(value)
    box.press("Enter")
    wait_idle(page)


def test_forecast_train_and_score(server, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 2000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(server + "/scaling_fit")
        wait_idle(page)
        page.get_by_text("Forecast the next run").first.wait_for(timeout=120_000)
        page.get_by_text("This is the proposed run").first.wait_for(timeout=120_000)
        wait_idle(page)
        # a small run, so that the test waits seconds: d = 16 on 30,720 characters (30 steps). Typed into the box:
        # the list of 47 widths opens scrolled to the chosen one, where "16" may not be drawn yet
        box = page.get_by_role("combobox", name="Width d")
        box.click()
        box.press_sequentially("16")
        page.get_by_role("option", name="16", exact=True).click()
        wait_idle(page)
        _number(page, "Characters D", "30720")
        page.get_by_text("This is your choice").first.wait_for(timeout=60_000)
        _number(page, "Your point", "2.9")
        _number(page, "Upper end (90 %)", "3.2")
        _number(page, "Lower end (10 %)", "2.6")
        page.get_by_role("button", name="Train it").click()
        page.get_by_text("Your forecasts this session").first.wait_for(timeout=240_000)
        text = _text(page)
        assert re.search(r"The law's interval held [01] of 1, yours [01]\.", text)
        wait_until(lambda: "The law of 25 runs (1 of them trained for forecasts)" in _text(page), timeout=120)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "forecast-scored.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert not errors, errors
    finally:
        page.close()
