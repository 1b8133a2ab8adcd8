"""The hunt view of the Cause and effect page (issue 59 §3): a learner picks an answer key and a method, picks the
components they believe form the circuit, presses *Score my pick*; the score is checked against precision, recall and
F1 counted here from key.json, and the key is shown only after the score. An empty pick and a key gone from the shelf
are said in words."""
import json

from core.serve.paths import REPO_ROOT
from tests.test_page_classroom import words

PAGE = "pages/cause_effect.py"
KEY_DIR = REPO_ROOT / "assets" / "answer_keys" / "induction"


def _hunt(open_page, **state):
    return open_page(PAGE, state={"cause_mode": "hunt", **state}, timeout=120)


def test_the_key_is_shown_only_after_the_pick_is_scored(open_page):
    key = json.loads((KEY_DIR / "key.json").read_text())
    at = _hunt(open_page, hunt_key="induction")
    shown = words(at)
    assert key["task"] in shown and "Score my pick" in [b.label for b in at.button]
    assert "**Components:**" not in shown and not at.metric  # nothing of the key before a score

    at.button(key="hunt_score").click().run()  # nothing picked
    assert "Not scored: pick at least one component" in words(at) and "**Components:**" not in words(at)

    heads = [f"L{l + 1} H{h + 1}" for l in range(2) for h in range(2)]
    wrong = next(h for h in heads if h not in key["components"])
    pick = [key["components"][-1], wrong]  # one right, one wrong
    at.multiselect(key="hunt_pick_induction").set_value(pick).run()
    assert "**Components:**" not in words(at)
    at.button(key="hunt_score").click().run()
    assert not at.exception
    hits = len(set(pick) & set(key["components"]))
    p, r = hits / len(pick), hits / len(key["components"])
    f1 = 2 * p * r / (p + r)
    assert {m.label: m.value for m in at.metric} == {"Precision": f"{p:.2f}", "Recall": f"{r:.2f}", "F1": f"{f1:.2f}"}
    shown = words(at)
    assert f"**Components:** {', '.join(key['components'])}." in shown
    assert all(f"{s} → {t}" in shown for s, t in key["edges"])
    assert "The method's own grade" in shown and "Where the methods fail" in shown


def test_a_live_grade_says_its_verdict(open_page):
    at = _hunt(open_page, hunt_key="copy", hunt_method="dla")
    at.button(key="hunt_grade").click().run()
    assert not at.exception
    assert "Measured now on 64 examples" in words(at) and "Verdict: The finding stands above both controls" in words(at)


def test_a_key_gone_from_the_shelf_is_said_in_words(open_page):
    at = _hunt(open_page, hunt_key="no-such-key")
    assert "The answer key 'no-such-key' is gone" in words(at) and not at.exception


def test_the_attribution_graph_is_a_hunt_method_and_its_grade_says_the_twin_has_no_transcoders(open_page):
    at = _hunt(open_page, hunt_key="copy", hunt_method="attribution_graph")
    assert "The attribution graph" in at.radio(key="hunt_method").options and not at.exception
    at.button(key="hunt_grade").click().run()
    assert not at.exception
    shown = words(at)
    assert "L1 H3 carries" in shown and "The random twin cannot be graded" in shown
