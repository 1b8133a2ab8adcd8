"""Every page with a text box survives what students type: nothing may raise an exception to the page."""
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
PAGES = re.findall(r'st\.Page\("(pages/[^"]+\.py)"', (ROOT / "app.py").read_text())

BAD_PROMPTS = {
    "empty": "",
    "whitespace": "   \n\t  \n",
    "10k characters": ("All the world's a stage, and we but players on it. " * 200)[:10_000],
    "emoji": "Hark! 🙂🎭🔥 who goes there? 👑",
    "right-to-left": "مرحبا بالعالم שלום עולם",
    "control characters": "a\x00b\x07c\x1b[31mred\x1b[0m\r\nd\u200b\u202eevil",
    "html and script": "<b>bold</b><script>alert('x')</script><img src=x onerror=alert(1)>",
    "markdown and latex": "**bold** $x^2$ [link](javascript:alert(1)) `code` # heading",
}


def page_with_text_boxes():
    found = []
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
        at.run()
        if page != "pages/home.py":
            at.switch_page(page)
            at.run()
        assert not at.exception, f"{page}: {at.exception}"
        keys = [t.key for t in at.text_area if t.key] + [t.key for t in at.text_input if t.key]
        found += [(page, key) for key in keys]
    return found


CASES = page_with_text_boxes()


@pytest.mark.parametrize("page, key", CASES)
@pytest.mark.parametrize("name", list(BAD_PROMPTS))
def test_bad_prompt_never_raises(page, key, name):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()
    at.switch_page(page)
    at.run()
    box = next((w for w in list(at.text_area) + list(at.text_input) if w.key == key))
    box.input(BAD_PROMPTS[name])
    at.run()
    assert not at.exception, f"{page} [{key}] with {name}: {at.exception[0].message if at.exception else ''}"
    if name == "html and script":
        for el in list(at.markdown) + list(at.caption):
            # user text may appear, but only as text: Streamlit escapes HTML in markdown unless told not to
            assert not getattr(el.proto, "allow_html", False) or "<script>" not in el.value


def test_every_page_is_covered():
    assert any(p == "pages/attention.py" for p, _ in CASES)
