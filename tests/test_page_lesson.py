"""AppTest of the Lesson: every step renders, takes an answer and reveals the model's; progress is kept; a link opens
a step on a prompt, and a bad link opens the defaults with one message."""
import pytest

from core.nn.checkpoint import load_checkpoint
from conftest import SHIPPED

PAGE = "pages/lesson.py"
GUESSES = {  # step -> (widget kind, key prefix, value)
    2: ("radio", "lesson_mask_guess", "yes"), 3: ("radio", "lesson_off_guess", "up"),
    4: ("number_input", "lesson_block_guess", 49_408), 5: ("slider", "lesson_share_guess", 67),
    6: ("number_input", "lesson_cost_guess", 1e12), 7: ("radio", "lesson_temp_guess", 0),
    8: ("radio", "lesson_scaling_guess", "N"), 9: ("radio", "lesson_forming_guess", "second"),
    10: ("radio", "lesson_piece_guess", "no-residual"),
}


def _widget(at, kind, prefix):
    return next(w for w in at.get(kind) if w.key and w.key.startswith(prefix))


def _marks(at):
    return [x.value for x in [*at.success, *at.error, *at.info] if x.value.startswith(("**Right", "**Not", "**Too"))]


@pytest.fixture
def lesson(open_page):
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_every_step_takes_an_answer_and_the_model_grades_it(lesson):
    at = lesson
    for step in range(1, 13):
        at.button(key=f"lesson_goto_{step}").click().run()
        assert not at.exception, (step, at.exception[0].message if at.exception else "")
        assert at.header[0].value.startswith(f"{step}.")
        if step in GUESSES:
            kind, prefix, value = GUESSES[step]
            _widget(at, kind, prefix).set_value(value).run()
        elif step == 1:
            _widget(at, "button_group", "lesson_key_guess").set_value(len(at.text_area(key="lesson_prompt").value) - 2)
            at.run()
        else:
            _widget(at, "selectbox", "lesson_").select_index(0).run()
        at.button(key="lesson_check").click().run()
        assert not at.exception and len(_marks(at)) == 1, (step, _marks(at))
    progress = at.session_state["lesson_progress"]
    assert len(progress) == 12
    # the shipped model: the block's count, 4d² + 2·d·d_ff + 4d at d = 64, d_ff = 256
    assert progress["block"] is True and progress["off"] is True and progress["mask"] is True


def test_the_block_step_grades_against_the_formula(lesson):
    model, _ = load_checkpoint(SHIPPED)
    c = model.config
    at = lesson
    at.button(key="lesson_goto_4").click().run()
    _widget(at, "number_input", "lesson_block_guess").set_value(4 * c.d_model ** 2 + 2 * c.d_model * c.d_ff + 1).run()
    at.button(key="lesson_check").click().run()
    assert at.success and "49,408" in at.success[0].value
    _widget(at, "number_input", "lesson_block_guess").set_value(12 * c.d_model ** 2 * 2).run()
    at.button(key="lesson_check").click().run()
    assert at.error and at.session_state["lesson_progress"]["block"] is False


def test_a_link_opens_a_step_on_a_prompt(open_page):
    at = open_page(PAGE, query={"lesson": "3", "prompt": "Now is the winter", "model": "shakespeare-char"})
    assert at.header[0].value.startswith("3.") and at.text_area(key="lesson_prompt").value == "Now is the winter"
    assert not at.warning


@pytest.mark.parametrize("query, named", [
    ({"lesson": "99"}, "lesson"), ({"lesson": "two"}, "lesson"),
    ({"prompt": "<script>alert(1)</script>" * 200}, "prompt"), ({"frobnicate": "1"}, "frobnicate"),
    ({"lesson": "x" * 100_000}, "lesson"),
])
def test_a_bad_link_opens_the_defaults_and_names_what_was_ignored(open_page, query, named):
    at = open_page(PAGE, query=query)
    assert not at.exception and at.header[0].value.startswith("1.")
    (warning,) = [w for w in at.warning if "link was ignored" in w.value]
    assert f"**{named}**" in warning.value


def test_an_unknown_model_in_a_link_is_named_and_the_default_opens(open_page):
    """app.py reads model= (and step=) before any page: AppTest's first run is the home page's."""
    at = open_page("pages/home.py", query={"model": "no-such-model<b>", "step": "12x"})
    (warning,) = [w for w in at.warning if "link was ignored" in w.value]
    assert "**model**" in warning.value and "**step**" in warning.value and "<b>" not in warning.value
    assert at.session_state["te_model_name"] == "shakespeare-char"
