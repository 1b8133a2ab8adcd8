"""Issue 44 in a real browser: a teacher, a projector and three students, each in a browser context of its own (no
shared cookies or storage), through one full round of the Class page on a live `streamlit run app.py`; the students'
pages pick up each step by themselves (the page refreshes every 2 s). Skips where Chromium or playwright is missing."""
import re

import pytest

from tests.browser_app import CHROMIUM_ARGS, SHOTS, browser, server, wait_idle  # noqa: F401  fixtures
from tests.polling import wait_until

pytestmark = pytest.mark.slow


def _radio(page, label: str):
    page.locator('[data-testid="stRadio"] label').filter(has_text=re.compile(f"^{re.escape(label)}$")).first.click()


def _button(page, name: str):
    page.get_by_role("button", name=name).first.click()


def _text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def test_one_round_with_a_teacher_a_projector_and_three_students(server, browser):  # noqa: F811
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1800}) for _ in range(5)]
    teacher, projector, *students = [c.new_page() for c in contexts]
    errors = []
    try:
        for p in (teacher, projector, *students):
            p.on("pageerror", lambda e: errors.append(str(e)))
        teacher.goto(server + "/classroom")
        wait_idle(teacher)
        _button(teacher, "Start a class")
        teacher.get_by_text("Class code:").first.wait_for(timeout=30_000)
        code = "".join(re.search(r"Class code: ([2-9A-Z]{4}) ([2-9A-Z]{4})", _text(teacher)).groups())
        teacher.get_by_text("What students will see").first.wait_for(timeout=60_000)  # step 3 on the default prompt
        _button(teacher, "Open this question (vote 1)")
        teacher.get_by_text("voted the first time").first.wait_for(timeout=30_000)

        projector.goto(f"{server}/classroom?class={code}&view=projector")
        projector.get_by_text("voted").first.wait_for(timeout=30_000)
        for s in students:
            s.goto(f"{server}/classroom?class={code}")
            s.get_by_text("Your prediction").first.wait_for(timeout=30_000)
        for s, pick in zip(students, ("up", "down", "up")):
            _radio(s, pick)
            _button(s, "Vote")
            s.get_by_text(f"Recorded: {pick} (vote 1)").first.wait_for(timeout=30_000)
        # the teacher's count and the projector's follow by themselves; what was chosen stays hidden
        wait_until(lambda: "3 voted the first time" in _text(teacher), timeout=20)
        wait_until(lambda: "3 voted" in _text(projector), timeout=20)
        assert projector.locator('[data-testid="stPlotlyChart"]').count() == 0
        _button(teacher, "Show votes")
        wait_until(lambda: projector.locator('[data-testid="stPlotlyChart"]').count() == 1, timeout=20)

        _button(teacher, "Discuss and vote again")
        for s, pick in zip(students, ("up", "up", "down")):
            s.get_by_text("Vote 2 is open").first.wait_for(timeout=30_000)
            _radio(s, pick)
            _button(s, "Vote")
            s.get_by_text(f"Recorded: {pick} (vote 2)").first.wait_for(timeout=30_000)
        wait_until(lambda: "3 the second" in _text(teacher).replace("**", ""), timeout=20)
        _button(teacher, "Run the model")
        teacher.get_by_text("The model's answer:").first.wait_for(timeout=60_000)
        answer = re.search(r"The model's answer: (\w+)", _text(teacher)).group(1)
        for p in (projector, *students):
            p.get_by_text("The model's answer").first.wait_for(timeout=30_000)
            assert answer in _text(p)
        SHOTS.mkdir(parents=True, exist_ok=True)
        for name, p in (("class-teacher", teacher), ("class-projector", projector), ("class-student", students[0])):
            p.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
            assert p.locator('[data-testid="stException"]').count() == 0, name
        assert not errors, errors
    finally:
        for c in contexts:
            c.close()
