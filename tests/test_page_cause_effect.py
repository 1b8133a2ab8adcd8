"""AppTest of the Cause and effect page: the example pair, the corrupted copy, the prompts it must refuse or warn
about, and its measure checked against the model run directly in the test."""
import pytest
import torch

from conftest import SHIPPED
from core.analysis.induction import model_probe
from core.nn.checkpoint import load_checkpoint
from hand_forward import edge_path
from attention_hooks import attention

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
    # the shipped model's induction circuit, found here by hand: the earlier head whose clean write, added to the
    # sources head's key input alone (tests/hand_forward.edge_path), restores most; its previous-token score from
    # the model's own attention on the probe
    src = at.selectbox(key="cause_src_head").value
    m_c, m_x = float(last[answer] - last[wrong]), float(last_x[answer] - last_x[wrong])
    a_ids, b_ids = tok.encode(clean), tok.encode(corrupt)

    def path(sender, via):
        logits = edge_path(model, a_ids, b_ids, sender, [src], via)
        return (float(logits[-1, answer] - logits[-1, wrong]) - m_x) / (m_c - m_x)
    senders = [(l, h) for l in range(src[0]) for h in range(model.config.n_heads)]
    via_k = {s: path(s, "k") for s in senders}
    found = max(senders, key=via_k.get)
    with torch.no_grad():
        pats = attention(model, model_probe(model, tok))[found[0]].pattern[:, found[1]]  # (S, n, n)
    prev = float(torch.diagonal(pats, -1, -2, -1).mean())
    assert src == (1, 3) and found == (0, 2) and prev > 0.5            # L2 H4's keys, built by L1 H3
    assert via_k[found] > 0.3 and via_k[found] > 3 * abs(path(found, "q"))   # through the keys, not the queries
    text = next(x.value for x in at.success if "Path patching finds" in x.value)
    assert f"Path patching finds **L1 H3** (previous-token score {prev:.2f})" in text
    assert f"restores {100 * via_k[found]:.0f}% of the clean answer" in text
    assert "K-composition" in text and "Q-composition" not in _texts(at)
    # the key side's largest source, L1 H1, does not look one token back, and the page no longer says it does
    assert "**L1 H1** adds most" in text and "(not a previous-token head)" in text


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


def test_the_key_box_opens_on_where_the_head_looks_on_each_new_prompt(page, shipped):
    """The box "Key position j (default: where it looks most)" kept the last prompt's j on a new prompt."""
    model, tok = shipped
    at = page()
    box = lambda: next(x for x in at.number_input if x.key and x.key.startswith("cause_src_j_"))  # noqa: E731
    box().set_value(5).run()
    assert box().value == 5
    clean = "the king is dead, long live the king. the king is"
    at.text_area(key=CLEAN).input(clean).run()
    at.button(key="cause_make").click().run()
    l, h = at.selectbox(key="cause_src_head").value
    i = int(at.number_input(key="cause_src_i").value) - 1
    with torch.no_grad():
        row = attention(model, torch.tensor([tok.encode(clean)]))[l].pattern[0, h, i]
    want = int(row[: i + 1].argmax()) + 1
    assert want != 5 and box().value == want and not at.exception
