"""Every text box survives what students type: nothing may raise an exception to the page, and no element
that renders HTML shows the typed markup. The boxes are found in the pages' source (ast), so a new one is
covered by default; boxes that only appear on demand (a pasted corpus, pasted runs, a save name after a run)
are revealed first."""
import ast
import re
from pathlib import Path

from tests.polling import wait_until
import pytest
from streamlit.proto.Html_pb2 import Html as HtmlProto
from streamlit.proto.Markdown_pb2 import Markdown as MarkdownProto
from streamlit.testing.v1.element_tree import Element

ROOT = Path(__file__).resolve().parent.parent
PAGES = re.findall(r'st\.Page\("(pages/[^"]+\.py)"', (ROOT / "app.py").read_text())
TEXT_BOXES = ("text_area", "text_input")

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


# ------------------------------------------------------------------ the boxes, from the source


def _box_wrappers() -> dict[str, tuple[int, str]]:
    """Helpers of the UI (ui/, pages/ and the page folders) that pass one of their parameters on as a text box's key,
    e.g. ui.prompt_input(label, default, key, ...): {name: (position of that parameter, its name)}."""
    wrappers = {}
    for path in [*(ROOT / "ui").glob("*.py"), *(ROOT / "pages").rglob("*.py")]:
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in TEXT_BOXES:
                    key = next((k.value for k in call.keywords if k.arg == "key"), None)
                    if isinstance(key, ast.Name) and key.id in params:
                        wrappers[fn.name] = (params.index(key.id), key.id)
    return wrappers


# boxes in a page's folder that appear only deep in a flow, typed into with hostile text by their own tests
TYPED_ELSEWHERE = {"class_key_in": "tests/test_page_class_hall.py: wrong teacher keys, a flood of guesses"}


def text_boxes_in_source() -> dict[str, set[str]]:
    """{page: {key, ...}} for every page app.py routes to that has a text box, from its source: direct
    st.text_area / st.text_input calls (col.text_input too) and calls of the wrappers above. A box whose key
    is not a literal, or that has none, is listed by line so that the tests below fail on it."""
    wrappers = _box_wrappers()
    found = {}
    for page in PAGES:
        # the page's script and its own folder's modules (pages/<page>/*.py): a box drawn by a part of the page
        folder = (ROOT / page).with_suffix("")
        trees = [ast.parse(path.read_text(encoding="utf-8")) for path in [ROOT / page, *sorted(folder.glob("*.py"))]]
        for tree, call in ((t, n) for t in trees for n in ast.walk(t) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            key = next((k.value for k in call.keywords if k.arg == "key"), None)
            if name in TEXT_BOXES:
                pass
            elif name in wrappers:
                pos, param = wrappers[name]
                key = call.args[pos] if len(call.args) > pos else next(
                    (k.value for k in call.keywords if k.arg == param), None)
            else:
                continue
            literal = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if tree is not trees[0] and (not literal or key.value in TYPED_ELSEWHERE):
                continue  # a part's box keyed by its caller (found at the call) or one its own tests type into
            found.setdefault(page, set()).add(key.value if literal else f"<no literal key, line {call.lineno}>")
    return found


EXPECTED = text_boxes_in_source()


# ------------------------------------------------------------------ boxes that appear only on demand


def _reveal_paste(at):
    at.radio(key="train_corpus").set_value("paste").run()


def _reveal_scaling_paste(at):
    at.radio(key="scal_fit_source").set_value("Paste rows").run()


def _reveal_save_name(at):
    """A tiny run on the always-present pydoc corpus; the save box appears once it has finished."""
    at.radio(key="train_corpus").set_value("pydoc").run()
    for key, value in (("d_model", 16), ("n_heads", 2), ("n_layers", 1), ("n_ctx", 32), ("batch_size", 4),
                       ("steps", 20)):
        at.number_input(key=f"train_{key}").set_value(value)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="train_start").click().run()
    assert not at.exception
    job = at.session_state["train_job"]
    wait_until(lambda: not job.status().moving, timeout=120)
    at.run()
    assert job.status().can_save, job.status()


def _reveal_variant_save_name(at):
    """The Why each piece page's own run, as short as it goes; its save box appears once it has finished."""
    at.selectbox(key="var_train_variant").select("no-mlp").run()
    at.number_input(key="var_train_steps").set_value(50).run()
    at.button(key="var_start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = at.session_state["var_job"]
    wait_until(lambda: not job.status().moving, timeout=180)
    at.run()
    assert job.status().can_save, job.status()


def _reveal_class_teacher(at):
    at.button(key="class_start").click().run()
    assert not at.exception and "class_teacher" in at.session_state


def _reveal_class_own(at):
    _reveal_class_teacher(at)
    at.radio(key="class_kind").set_value("Your own question").run()


ON_DEMAND = {  # key: (page, how to make the box appear)
    "train_paste": ("pages/training.py", _reveal_paste),
    "scal_paste": ("pages/scaling_fit.py", _reveal_scaling_paste),
    "train_save_name": ("pages/training.py", _reveal_save_name),
    "var_save_name": ("pages/variants.py", _reveal_variant_save_name),
    "class_prompt": ("pages/classroom.py", _reveal_class_teacher),
    "class_own_q": ("pages/classroom.py", _reveal_class_own),
    "class_own_choices": ("pages/classroom.py", _reveal_class_own),
}
ALWAYS = [(page, key) for page, keys in sorted(EXPECTED.items()) for key in sorted(keys) if key not in ON_DEMAND]
# the boxes whose eight reruns take longest (5 to 16 s each on a quiet 2-core machine, a full run's junit): typed into
# in the full suite (CI), left out of the fast lane, which keeps every other box and each page's own tests
HEAVY = {"scal_paste", "train_save_name", "var_save_name", "attr_prompt", "gen_prompt", "feat_prompt", "over_prompt"}


def heavy(*values):
    """A parameter marked slow when its box is one of HEAVY."""
    return pytest.param(*values, marks=pytest.mark.slow) if values[-1] in HEAVY else pytest.param(*values)


# ------------------------------------------------------------------ checks


def box(at, page, key):
    for w in list(at.text_area) + list(at.text_input):
        if w.key == key:
            return w
    raise AssertionError(f"{page}: no text box with key {key!r} on the page. If it appears only after some "
                         "action, add that action to ON_DEMAND in tests/test_bad_input.py")


def elements(at):
    return [n for block in (at.main, at.sidebar) for n in block if isinstance(n, Element)]


def assert_no_live_markup(at, where):
    """No element that renders HTML shows the typed <script>: markdown and captions only with allow_html off
    (read from the protobuf itself, so a renamed field raises instead of reading as False), st.html only escaped."""
    markdown = 0
    for el in elements(at):
        if isinstance(el.proto, MarkdownProto):
            markdown += 1
            if el.proto.allow_html:
                assert "<script>" not in el.proto.body, f"{where}: live <script> in {el.type}: {el.proto.body[:200]}"
        elif isinstance(el.proto, HtmlProto):
            assert "<script>" not in el.proto.body, f"{where}: live <script> in st.html: {el.proto.body[:200]}"
    assert markdown, f"{where}: no markdown at all, the walk over the page found nothing"


def type_in(at, page, key, name):
    box(at, page, key).input(BAD_PROMPTS[name])
    at.run()
    where = f"{page} [{key}] with {name}"
    assert not at.exception, f"{where}: {at.exception[0].message if at.exception else ''}"
    assert_no_live_markup(at, where)


# ------------------------------------------------------------------ tests


def assert_boxes_as_scanned(at, page):
    """The page, freshly opened, shows no box the source scan missed (so the scan cannot silently go blind), and
    every box the scan says is always there."""
    shown = {w.key for w in list(at.text_area) + list(at.text_input)}
    assert shown <= EXPECTED.get(page, set()), f"{page}: boxes the source scan missed: {shown - EXPECTED.get(page, set())}"
    always = {key for p, key in ALWAYS if p == page}
    assert always <= shown, f"{page}: {always - shown} not on the page when opened: list them in ON_DEMAND"


@pytest.mark.parametrize("page, key", [heavy(page, key) for page, key in ALWAYS])
def test_bad_prompt_never_raises(page, key, open_page, tmp_path):
    """Every bad prompt typed in turn into one session's box (each one a rerun of the page); first, the page as
    opened shows the boxes the scan found (``test_every_page_is_covered`` checks the pages without such a box)."""
    at = open_page(page, timeout=90, models_dir=tmp_path / "models")
    assert_boxes_as_scanned(at, page)
    for name in BAD_PROMPTS:
        type_in(at, page, key, name)


# the Why each piece page's box appears only after a real run: slow (HEAVY), as the other training tests
@pytest.mark.parametrize("key", [heavy(k) for k in ON_DEMAND])
def test_bad_prompts_in_boxes_that_appear_on_demand(key, open_page, tmp_path):
    page, reveal = ON_DEMAND[key]
    at = open_page(page, timeout=90, models_dir=tmp_path / "models")
    try:
        reveal(at)
        for name in BAD_PROMPTS:
            type_in(at, page, key, name)
            if key.endswith("_save_name"):  # and try to save under it: refused with a message or saved, never raised
                at.button(key=key.replace("_name", "")).click().run()
                assert not at.exception, f"saving as {name}: {at.exception[0].message if at.exception else ''}"
    finally:
        for name in ("train_job", "var_job"):
            job = at.session_state[name] if name in at.session_state else None
            if job is not None:
                job.stop()


def test_every_page_is_covered(open_page, tmp_path):
    """The boxes found in the source are the boxes the tests above type into: every page with one, every key.
    And each page, opened, shows no box the source scan missed (so the scan cannot silently go blind)."""
    assert {"pages/attention.py", "pages/generation.py", "pages/training.py", "pages/scaling_fit.py"} <= set(EXPECTED)
    exercised = set(ALWAYS) | {(page, key) for key, (page, _) in ON_DEMAND.items()}
    expected = {(page, key) for page, keys in EXPECTED.items() for key in keys}
    assert expected == exercised, f"not typed into: {sorted(expected - exercised)}; " \
                                  f"typed into but not in the source: {sorted(exercised - expected)}"
    # each page, opened, shows the boxes the scan found: a page with a box always there is opened and checked by
    # test_bad_prompt_never_raises before it types (one opening less per page), the others here
    typed = {page for page, _ in ALWAYS}
    assert typed <= set(PAGES)
    for page in PAGES:
        if page not in typed:
            assert_boxes_as_scanned(open_page(page, timeout=90, models_dir=tmp_path / "models"), page)
