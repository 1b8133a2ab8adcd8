"""Issue 54 in real Chromium: a lecture hall's Class page. A teacher (1400 px), a projector at 1280x720 and a student
on a 390x844 phone, each in a browser context of its own. The projector's waiting screen (join address, code, a QR
code decoded back to the student link), a hostile question drawn as its own characters everywhere, a second tab of
the same browser voting as the same student, the vote chart inside the projector's screen, nothing wider than the
phone, the teacher's private link giving the class back after a reload. Screenshots in artifacts/screenshots/."""
import io
import re

import pytest

from tests.browser_app import SHOTS, browser, server, wait_idle  # noqa: F401  fixtures
from tests.polling import wait_until

pytestmark = pytest.mark.slow

HOSTILE_Q = r"Which? $\rule{3000px}{3000px}$ ![x](http://127.0.0.1:9/x.png) <b>bold</b> :red[red]"
HOSTILE_C = r"$\rule{3000px}{3000px}$"

WIDER = """() => { const w = window.innerWidth; const out = [];
  for (const el of document.querySelectorAll('[data-testid="stMain"] *')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1 && getComputedStyle(el).visibility !== 'hidden') out.push(el.tagName + ' '
      + (el.getAttribute('data-testid') || el.className || '') + ' ' + Math.round(r.right));
  }
  return out.slice(0, 10); }"""


def _text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def _button(page, name: str):
    page.get_by_role("button", name=name).first.click()


def _qr_link(page) -> str:
    zxingcpp = pytest.importorskip("zxingcpp", reason="zxing-cpp is not installed (pip install -r requirements-dev.txt)")
    from PIL import Image

    shot = page.locator('[data-testid="stImage"] img').first.screenshot()
    found = zxingcpp.read_barcodes(Image.open(io.BytesIO(shot)))
    return found[0].text if found else ""


def _no_hostile_drawing(page, name):
    assert page.locator(".katex").count() == 0, f"{name}: teacher text drawn as LaTeX"
    assert page.locator('img[src*="127.0.0.1:9"]').count() == 0, f"{name}: a teacher's image fetched"
    assert page.locator('[data-testid="stMain"] b', has_text="bold").count() == 0, f"{name}: a teacher's tag drawn"


def test_a_lecture_hall_teacher_projector_and_phone(server, browser):  # noqa: F811
    t_ctx = browser.new_context(viewport={"width": 1400, "height": 1800})
    p_ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    s_ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    teacher, projector, phone = t_ctx.new_page(), p_ctx.new_page(), s_ctx.new_page()
    errors = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for p in (teacher, projector, phone):
            p.on("pageerror", lambda e: errors.append(str(e)))
        teacher.goto(server + "/classroom")
        wait_idle(teacher)
        _button(teacher, "Start a class")
        teacher.get_by_text("Class code:").first.wait_for(timeout=30_000)
        code = re.search(r"Class code: ([2-9A-Z]{4}) ([2-9A-Z]{4})", _text(teacher))
        code = code.group(1) + code.group(2)
        assert "teacher=" not in _text(teacher)  # folded at first: the laptop may already be on the projector
        teacher.get_by_text("Your private teacher link: keep it off the projector").first.click()
        private = teacher.locator('[data-testid="stCode"]').filter(has_text="teacher=").first.inner_text().strip()
        assert f"class={code}&teacher=" in private

        # the projector's waiting screen: where to go, the code, a QR code of the student link; no sidebar
        projector.goto(f"{server}/classroom?class={code}&view=projector")
        projector.get_by_text("Open the Class page and type this code").first.wait_for(timeout=30_000)
        wait_idle(projector)
        text = _text(projector)
        assert f"{code[:4]} {code[4:]}" in text and f"{server}/classroom" in text and "teacher=" not in text
        assert not projector.locator('[data-testid="stSidebar"]').is_visible()
        assert _qr_link(projector) == f"{server}/classroom?class={code}"
        projector.screenshot(path=str(SHOTS / "class-projector-waiting.png"))

        # a hostile question of the teacher's own, with the right choice marked privately
        teacher.get_by_text("Your own question").first.click()
        teacher.get_by_label("Question (plain text, shown as typed)").fill(HOSTILE_Q)
        teacher.get_by_label(re.compile("Choices, one per line")).fill(f"{HOSTILE_C}\n1\n10")
        teacher.keyboard.press("Control+Enter")
        wait_idle(teacher)
        teacher.get_by_text("The right choice, if there is one").first.wait_for(timeout=30_000)
        teacher.locator('[data-testid="stSelectbox"]').filter(has_text="The right choice").locator("input").click()
        teacher.keyboard.type("10")
        teacher.keyboard.press("Enter")
        wait_idle(teacher)
        _button(teacher, "Open this question (vote 1)")
        teacher.get_by_text("voted the first time").first.wait_for(timeout=30_000)

        # the phone: the question above the fold, drawn as typed, nothing wider than the screen
        phone.goto(f"{server}/classroom?class={code}")
        phone.get_by_text("Your prediction").first.wait_for(timeout=30_000)
        wait_idle(phone)
        question = phone.locator(".te-question").first
        assert question.inner_text().strip() == HOSTILE_Q
        assert question.bounding_box()["y"] < 844
        _no_hostile_drawing(phone, "phone")
        assert phone.evaluate(WIDER) == []
        phone.locator('[data-testid="stRadio"] label').filter(has_text="rule").first.click()
        _button(phone, "Vote")
        phone.get_by_text("Recorded:").first.wait_for(timeout=30_000)
        assert HOSTILE_C in _text(phone)
        _no_hostile_drawing(phone, "phone after voting")
        phone.screenshot(path=str(SHOTS / "class-phone-vote.png"), full_page=True)
        # a second tab of the same browser is the same student: its vote replaces the first
        tab = s_ctx.new_page()
        tab.goto(f"{server}/classroom?class={code}")
        tab.get_by_text("Your prediction").first.wait_for(timeout=30_000)
        tab.locator('[data-testid="stRadio"] label').filter(has_text=re.compile(r"^10$")).first.click()
        _button(tab, "Vote")
        tab.get_by_text("Recorded:").first.wait_for(timeout=30_000)
        wait_until(lambda: "1 joined" in _text(teacher) and "1 voted the first time" in _text(teacher), timeout=20)
        wait_until(lambda: "Only you see this" in _text(teacher) and "100%" in _text(teacher), timeout=20)
        assert "Only you see this" not in _text(phone) + _text(projector)

        # Show votes: the chart inside the projector's 1280x720, no scrolling
        _button(teacher, "Show votes")
        chart = projector.locator('[data-testid="stPlotlyChart"]')
        wait_until(lambda: chart.count() == 1, timeout=20)
        wait_idle(projector)
        box = chart.first.bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= 720 and box["x"] + box["width"] <= 1280, box
        _no_hostile_drawing(projector, "projector")
        projector.screenshot(path=str(SHOTS / "class-projector-votes.png"))

        # the reveal: the answer and its numbers in large type on the projector, the same numbers on the phone
        _button(teacher, "Reveal")
        projector.get_by_text("The answer: 10").first.wait_for(timeout=30_000)
        phone.get_by_text("The answer: 10").first.wait_for(timeout=30_000)
        assert "Right the first time: 100% of 1" in _text(projector) and "Right the first time: 100% of 1" in _text(phone)
        size = projector.locator(".te-answer").first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        assert size >= 32
        assert phone.evaluate(WIDER) == []
        projector.screenshot(path=str(SHOTS / "class-projector-answer.png"))
        phone.screenshot(path=str(SHOTS / "class-phone-answer.png"), full_page=True)
        teacher.screenshot(path=str(SHOTS / "class-teacher.png"), full_page=True)

        # the teacher's tab reloads: the class is not lost, the private link gives it back
        teacher.reload()
        wait_idle(teacher)
        assert "Start a class" in _text(teacher)
        teacher.goto(private)
        teacher.get_by_text("Class code:").first.wait_for(timeout=30_000)
        wait_idle(teacher)
        assert "teacher=" not in teacher.url and f"{code[:4]} {code[4:]}" in _text(teacher)
        assert teacher.get_by_role("button", name="End the class").count() == 1
        for p in (teacher, projector, phone):
            assert p.locator('[data-testid="stException"]').count() == 0
        assert not errors, errors
    finally:
        for c in (t_ctx, p_ctx, s_ctx):
            c.close()
