"""The Class question "which description fits this feature?" (core.features.describe, issue 58) on a hand-built
example: a feature that fires exactly on 'a', explanations whose rules are token sets, so that every detection score
is a hand count (a rule that marks every firing position or none: TPR is 1 or 0 whatever the quantile weights)."""
import numpy as np
import pytest

from core.features import describe as D
from core.nn.tokenizer import CharTokenizer

TEXT = "abacabad\nbcab cbda\nabcdabca"
ROWS = [TEXT[i:i + 9] for i in range(0, 27, 9)]  # three windows of 9 characters


@pytest.fixture(scope="module")
def data():
    tok = CharTokenizer.from_text(TEXT)
    ids = np.array([tok.encode(r) for r in ROWS])  # (3, 9)
    chars = np.array([list(r) for r in ROWS])
    acts = np.where(chars == "a", 1.0 + np.arange(ids.size).reshape(ids.shape) / 10, 0.0)  # fires on 'a' only
    return tok, ids, chars, acts


def e(unit, tokens, words, control=0.5):
    rule = None if tokens is None else {"kind": "token_in", "tokens": tokens}
    return {"unit": unit, "rule": rule, "words": words, "detection": 0.9, "fuzz_precision": 0.9, "fuzz_recall": 0.9,
            "control": control}


def by_hand(chars, tokens) -> float:
    """Balanced accuracy of "the character is one of ``tokens``" at telling 'a' (where the feature fires) from the
    rest, for rules that mark all of the 'a's or none of them."""
    fire, marked = chars == "a", np.isin(chars, tokens)
    assert marked[fire].all() or not marked[fire].any()
    tpr = float(marked[fire].mean())
    tnr = 1 - marked[~fire].sum() / (~fire).sum()
    return 0.5 * (tpr + tnr)


EXPLANATIONS = [e(0, ["a"], "'a'", control=0.47), e(1, ["b"], "'b'"), e(2, ["c"], "'c'"),
                e(3, ["a", "b"], "'a' or 'b'"), e(4, ["d"], "unexplained"), e(5, None, "unexplained"),
                e(6, ["b", "\n"], "'B'")]  # unit 6's words read as unit 1's (case does not count): never both


def test_the_own_description_is_right_and_the_distractors_score_low(data):
    tok, ids, chars, acts = data
    q = D.build_question(0, EXPLANATIONS, ids, acts, tok)
    assert sorted(q.units) in ([0, 1, 2], [0, 2, 6])  # 'a' or 'b' scores high here; the unexplained never offered
    rules = {e["unit"]: e["rule"]["tokens"] for e in EXPLANATIONS if e["rule"]}
    for u, s in zip(q.units, q.scores):
        assert s == pytest.approx(by_hand(chars, rules[u]), abs=1e-4)
    assert by_hand(chars, ["a"]) == 1.0 and by_hand(chars, ["a", "b"]) > D.LOW
    assert q.options[q.own] == "'a'" and q.right == q.own and q.control == 0.47
    assert all(s <= D.LOW for i, s in enumerate(q.scores) if i != q.own)
    said = D.reveal_words(q)
    assert "“'a'” 1.00 (its own description)" in said and "0.47" in said and "0.50" in said
    assert "marked right" not in said


def test_when_few_rules_score_low_the_lowest_others_fill_in(data):
    tok, ids, chars, acts = data
    few = [EXPLANATIONS[0], EXPLANATIONS[1], EXPLANATIONS[3], e(7, ["a", "c"], "'a' or 'c'")]
    q = D.build_question(0, few, ids, acts, tok)
    ab, ac = by_hand(chars, ["a", "b"]), by_hand(chars, ["a", "c"])  # both above LOW: the lower one fills in
    assert min(ab, ac) > D.LOW and ab != ac
    assert sorted(q.units) == [0, 1, 3 if ab < ac else 7]


def test_a_distractor_that_fits_better_is_marked_right_and_said(data):
    tok, ids, chars, acts = data
    wrong = [e(0, ["a", "b"], "'a' or 'b'", control=0.4), e(1, ["a"], "'a'"), e(2, ["c"], "'c'")]
    q = D.build_question(0, wrong, ids, acts, tok, distractors=[1, 2])
    assert q.options[q.right] == "'a'" and q.units[q.right] == 1 and q.right != q.own
    assert q.scores[q.right] == 1.0 and q.scores[q.own] == pytest.approx(by_hand(chars, ["a", "b"]), abs=1e-4)
    said = D.reveal_words(q)
    assert "fits this feature better than its own description: “'a'” (1.00 against" in said and "0.40" in said


def test_the_order_is_shuffled_by_the_seed_and_repeatable(data):
    tok, ids, _, acts = data
    orders = {D.build_question(0, EXPLANATIONS, ids, acts, tok, seed=s).units for s in range(12)}
    assert len({o.index(0) for o in orders}) > 1  # the right option is not always first
    assert D.build_question(0, EXPLANATIONS, ids, acts, tok, seed=3) == D.build_question(0, EXPLANATIONS, ids,
                                                                                          acts, tok, seed=3)


def test_questions_that_cannot_be_asked_are_refused_in_words(data):
    tok, ids, _, acts = data
    with pytest.raises(ValueError, match="unexplained"):
        D.build_question(4, EXPLANATIONS, ids, acts, tok)
    with pytest.raises(ValueError, match="fires fewer than"):
        D.build_question(0, EXPLANATIONS, ids, np.zeros_like(acts), tok)
    with pytest.raises(ValueError, match="distractors"):
        D.build_question(0, EXPLANATIONS, ids, acts, tok, distractors=[1, 5])
    with pytest.raises(ValueError, match="read the same"):
        D.build_question(0, EXPLANATIONS, ids, acts, tok, distractors=[1, 6])
