"""AppTest of the Cause and effect page: the example pair, the corrupted copy, the prompts it must refuse or warn
about, and its measure checked against the model run directly in the test."""
import pytest
import torch

from conftest import SHIPPED
from core.nn.checkpoint import load_checkpoint

PAGE = "pages/cause_effect.py"
CLEAN, CORRUPT = "cause_clean", "cause_corrupt"


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(SHIPPED)


@pytest.fixture
def page(open_page):
    def open_(clean=None, corrupt=None, **kw):
        at = open_page(PAGE, **kw)
        if clean is not None:
            at.text_area(key=CLEAN).input(clean)
        if corrupt is not None:
            at.text_area(key=CORRUPT).input(corrupt)
        if clean is not None or corrupt is not None:
            at.run()
        assert not at.exception, at.exception[0].message if at.exception else ""
        return at
    return open_


def _texts(at):
    return " ".join(x.value for x in [*at.warning, *at.info, *at.success, *at.caption, *at.markdown])


def _pick(at, prefix):
    """The answer boxes' keys end in the prompt pair's hash: new prompts open on their own defaults."""
    return next(s for s in at.selectbox if s.key and s.key.startswith(prefix))


def _metric(at, label):
    return float(next(m.value for m in at.metric if m.label == label))


def test_the_example_opens_and_its_measure_is_the_models_logit_difference(page, shipped):
    model, tok = shipped
    at = page()
    headers = [h.value for h in at.header]
    assert "Which heads carry it" in headers and "Why does this head attend here?" in headers
    clean, corrupt = at.text_area(key=CLEAN).value, at.text_area(key=CORRUPT).value
    assert len(clean) == len(corrupt) and sum(a != b for a, b in zip(clean, corrupt)) == 1
    answer, wrong = (_pick(at, "cause_answer_").value, _pick(at, "cause_wrong_").value)
    with torch.no_grad():
        last = model(torch.tensor([tok.encode(clean)])).logits[0, -1]
        last_x = model(torch.tensor([tok.encode(corrupt)])).logits[0, -1]
    assert answer == int(last.argmax())                      # the default answer: the clean run's top prediction
    assert _metric(at, "M on the clean prompt") == pytest.approx(float(last[answer] - last[wrong]), abs=2e-3)
    assert _metric(at, "M on the corrupted prompt") == pytest.approx(float(last_x[answer] - last_x[wrong]), abs=2e-3)
    # the shipped model's induction circuit: the previous-token head's path into the induction head's keys
    assert "K-composition" in _texts(at) or "Q-composition" in _texts(at)


def test_the_corrupted_copy_changes_one_token(page):
    at = page(clean="To be or not to be, that is the question. To be or not to", corrupt="")
    assert any("Make a corrupted copy" in x.value for x in at.info)
    at.button(key="cause_make").click().run()
    clean, corrupt = at.text_area(key=CLEAN).value, at.text_area(key=CORRUPT).value
    changed = [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b]
    assert len(clean) == len(corrupt) and len(changed) == 1
    # the last token "o" occurred before: the latest earlier "o", where an induction head would look
    assert changed[0] == clean.rindex("o", 0, len(clean) - 1)
    assert not at.exception and "Which heads carry it" in [h.value for h in at.header]


def test_prompts_of_different_lengths_are_refused_and_can_be_cut_or_padded(page):
    at = page(clean="the cat sat", corrupt="a cat sat")
    assert any("same length" in w.value for w in at.warning) and "Which heads carry it" not in [h.value for h in at.header]
    at.button(key="cause_cut").click().run()
    assert at.text_area(key=CLEAN).value == "e cat sat" and at.text_area(key=CORRUPT).value == "a cat sat"
    assert not at.warning and "Which heads carry it" in [h.value for h in at.header]
    at.text_area(key=CORRUPT).input("a cat sat").run()
    at.text_area(key=CLEAN).input("the cat sat").run()
    at.button(key="cause_pad").click().run()
    assert at.text_area(key=CORRUPT).value == "  a cat sat" and not at.exception


def test_empty_and_identical_prompts_say_what_is_missing(page):
    at = page(clean="", corrupt="")
    assert any("Type a clean prompt" in x.value for x in at.info) and not at.exception
    at = page(clean="same text here", corrupt="same text here")
    assert any("nothing to restore" in w.value for w in at.warning)
    assert "Where the difference travels: the residual stream" not in [h.value for h in at.header]


def test_the_same_answer_twice_leaves_the_measure_undefined(page):
    at = page()
    _pick(at, "cause_wrong_").set_value(_pick(at, "cause_answer_").value).run()
    assert not at.exception and any("undefined" in w.value for w in at.warning)


def test_unknown_characters_are_dropped_with_a_word(page):
    at = page(clean="hello 🙂 world", corrupt="hellp 🙂 world")
    assert not at.exception
    assert sum("never seen" in w.value and "🙂" in w.value for w in at.warning) == 2  # once under each box
    assert "Which heads carry it" in [h.value for h in at.header]


def test_the_bpe_model_runs_the_page(page):
    at = page(state={"te_model_name": "shakespeare-bpe"})
    assert not at.exception and "Why does this head attend here?" in [h.value for h in at.header]
