"""The learner's hunt (issue 59 §3, core.analysis.hunt): a pick scored against a key by hand counts, an empty pick
and names the model lacks refused in words, the key's edges written as the screen writes them, the induction head
read from the key, the measured table read and its failures named. No model runs: milliseconds."""
import csv
import math
from pathlib import Path

import pytest

from core.analysis.answer_keys import AnswerKey
from core.analysis.hunt import (edge_lines, failures, induction_head, induction_question, pick_words, read_grades,
                                score_pick, stands_on)
from core.nn.config import ModelConfig

KEY = AnswerKey("toy", "a toy task", ("L1 H2", "L2 H1", "L1 MLP"),
                (("tokens", "L1 H2"), ("L1 H2", "L2 H1"), ("L2 H1", "logits")), Path("."))
CONFIG = ModelConfig(vocab_size=8, n_ctx=8, d_model=8, n_heads=2, n_layers=2)


def test_a_pick_scored_against_a_hand_count():
    # pick L1 H2, L2 H2, L1 MLP, L1 H2 again (a set: 3 names); key L1 H2, L2 H1, L1 MLP. Hits: L1 H2, L1 MLP -> 2.
    # precision 2/3, recall 2/3, F1 = 2 (2/3)(2/3) / (4/3) = 2/3
    s = score_pick(KEY, ["L1 H2", "L2 H2", "L1 MLP", "L1 H2"], CONFIG)
    assert s.picked == ("L1 H2", "L2 H2", "L1 MLP") and s.hits == ("L1 H2", "L1 MLP")
    assert s.extra == ("L2 H2",) and s.missed == ("L2 H1",)
    assert (s.precision, s.recall, s.f1) == (pytest.approx(2 / 3), pytest.approx(2 / 3), pytest.approx(2 / 3))
    # one right head alone: precision 1, recall 1/3, F1 = 2 (1/3) / (4/3) = 1/2
    s = score_pick(KEY, ["L2 H1"])
    assert (s.precision, s.recall, s.f1) == (1.0, pytest.approx(1 / 3), pytest.approx(0.5))
    s = score_pick(KEY, ["L2 H2"], CONFIG)  # nothing right: F1 0, not a division by zero
    assert (s.precision, s.recall, s.f1) == (0.0, 0.0, 0.0)
    assert score_pick(KEY, KEY.components, CONFIG).f1 == 1.0


def test_an_empty_pick_or_a_name_the_model_lacks_is_refused_in_words():
    with pytest.raises(ValueError, match="pick at least one component"):
        score_pick(KEY, [], CONFIG)
    with pytest.raises(ValueError, match="L1 H3: not a component of this model"):
        score_pick(KEY, ["L1 H2", "L1 H3"], CONFIG)  # picked on a key whose model has 3 heads
    with pytest.raises(ValueError, match="L3 H1, MLP 1: not components"):
        score_pick(KEY, ["L3 H1", "MLP 1"], CONFIG)


def test_the_pick_in_words():
    text = pick_words(score_pick(KEY, ["L1 H2", "L2 H2"], CONFIG))
    assert text == "1 of your 2 picks is in the key (L1 H2); L2 H2 is not; you missed L2 H1, L1 MLP."


def test_the_keys_edges_as_the_screen_writes_them():
    assert edge_lines(KEY) == ["tokens → L1 H2", "L1 H2 → L2 H1", "L2 H1 → logits"]


def test_the_induction_head_is_the_later_end_of_the_head_to_head_edge():
    assert induction_head(KEY) == "L2 H1"
    backwards = AnswerKey("b", "t", KEY.components, (("L2 H1", "L1 H2"),), Path("."))  # written the other way round
    assert induction_head(backwards) == "L2 H1"
    with pytest.raises(ValueError, match="names no single induction head"):
        induction_head(AnswerKey("c", "t", ("L1 H3",), (("tokens", "L1 H3"), ("L1 H3", "logits")), Path(".")))
    question, heads, right, words = induction_question(KEY, CONFIG)
    assert heads == ("L1 H1", "L1 H2", "L2 H1", "L2 H2") and right == "L2 H1"
    assert "L1 H2 → L2 H1" in words and "a toy task" in question


def test_the_measured_table_and_its_failures(tmp_path):
    path = tmp_path / "grades.csv"
    # key, method, auroc, stands, the finding, the twin's and the nonsense task's largest scores, note (margin 0.1)
    rows = [("a", "dla", "1.0", "True", "0.9", "0.0", "0.1", ""), ("a", "ablation", "0.5", "False", "0.5", "0.0", "0.0", ""),
            ("b", "dla", "1.0", "False", "0.5", "0.1", "0.45", ""), ("c", "dla", "1.0", "False", "0.5", "0.45", "0.42", ""),
            ("b", "path_patching", "", "", "0.0", "0.0", "0.0", "no grade: ..."),
            ("b", "attribution_graph", "", "", "", "", "", "not graded: ..."),
            ("d", "attribution_graph", "1.0", "False", "0.3", "", "0.25", "")]  # no twin run: only labels named
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["key", "method", "auroc", "precision", "recall", "random_twin", "nonsense_task", "finding", "unit",
                    "margin", "stands", "note"])
        for key, method, auc, stands, finding, twin, nonsense, note in rows:
            w.writerow([key, method, auc, auc, auc, twin, nonsense, finding, "share", "0.1" if finding else "",
                        stands, note])
    got = read_grades(path)
    assert [r["stands"] for r in got] == [True, False, False, False, None, None, False] and math.isnan(got[4]["auroc"])
    assert (got[2]["finding"], got[2]["nonsense_task"], got[2]["margin"], got[2]["unit"]) == (0.5, 0.45, 0.1, "share")
    bad = failures(got)
    assert set(bad) == {"ablation", "dla", "path_patching", "attribution_graph"}  # dla on a stands: no failure
    assert bad["ablation"] == {"its scores miss the key (AUROC below 0.9)": ["a"],  # and its call at the threshold:
                               "at its page's threshold it misses part of the key (recall below 1)": ["a"],
                               "at its page's threshold it also calls what the key does not hold (precision below 1)":
                               ["a"]}
    assert bad["dla"] == {"its finding does not stand: random labels score within the margin of it": ["b"],
                          "its finding does not stand: a random-weight twin and random labels score within the "
                          "margin of it": ["c"]}
    assert bad["path_patching"] == {  # a finding of 0 on a key with nothing to find: the right answer, said
        "no grade (the key holds nothing it scores; rightly, its finding there does not stand)": ["b"]}
    assert bad["attribution_graph"] == {"not graded": ["b"], "its finding does not stand: random labels score "
                                                             "within the margin of it": ["d"]}
    assert stands_on(got) == {"dla": ["a"]}
    assert read_grades(tmp_path / "none.csv") == []
