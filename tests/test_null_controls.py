"""Null controls beside the pages' circuit claims (issue 59 §2, core.analysis.null_controls): on an answer-key model
whose circuit is known, the key's head and its key edge stand above both controls; the same claims made on a random
model do not; the verdict's words; the draws are deterministic; each of the four pages shows a verdict after its
button."""
import math

import numpy as np
import pytest
import torch

from core.analysis import null_controls as NC
from core.analysis.answer_keys import load_key
from core.analysis.patching import Metric, default_answers
from core.analysis.prompt_pairs import corrupt_one
from core.nn.model import Transformer
from core.serve.fmt import head_label


@pytest.fixture(scope="module")
def induction_key():
    """The induction key (key.json: L1 H2 -> L2 H1) and one of its task's prompts with its corrupted copy (the
    earlier occurrence of the last token changed), measured by the page's default answers."""
    model, _, key, task = load_key("induction")
    clean = list(next(p for p in task.prompts if len(p) >= 12 and p[-1] in p[:-1]))
    bad = corrupt_one(clean, model.config.vocab_size).ids
    return model, key, clean, bad, Metric(*default_answers(model, clean, bad))


def random_model(config, seed=5):
    torch.manual_seed(seed)  # another seed than the twin's: a model that learned nothing, not the twin itself
    return Transformer(config).eval()


def test_the_key_head_restores_the_answer_and_stands_above_both_controls(induction_key):
    model, key, clean, bad, metric = induction_key
    c = NC.head_patching(model, clean, bad, metric)
    assert c.claim.startswith("L2 H1") and "L2 H1" in key.components  # the key's induction head, by its label
    assert c.stands and c.value > 0.5, c.verdict
    assert c.twin < 0.1 and c.nonsense < c.value - NC.CARRIES
    assert c.verdict.startswith("The finding stands above both controls")


def test_the_key_edge_is_the_path_into_the_keys_and_stands(induction_key):
    model, key, clean, bad, metric = induction_key
    c = NC.path_patching(model, clean, bad, (1, 0), metric)  # into L2 H1's keys
    assert c.claim.startswith("L1 H2's path into L2 H1's k") and ("L1 H2", "L2 H1") in key.edges
    assert c.stands, c.verdict


def test_the_same_claims_on_a_random_model_do_not_stand(induction_key):
    model, _, clean, bad, _ = induction_key
    rnd = random_model(model.config)
    metric = Metric(*default_answers(rnd, clean, bad))
    for c in (NC.head_patching(rnd, clean, bad, metric), NC.path_patching(rnd, clean, bad, (1, 0), metric),
              NC.head_ranking(rnd, clean)):
        assert not c.stands, c.verdict
        assert c.verdict.startswith("It does not stand above both controls"), c.verdict


def test_the_ranking_of_the_key_model_names_a_key_head_and_stands(induction_key):
    model, key, clean, _, _ = induction_key
    twice = clean[: len(clean) // 2] * 2
    c = NC.head_ranking(model, twice, "zero", period=len(clean) // 2)
    assert any(c.claim.startswith(f"switching off {h}") for h in key.components), c.claim
    assert c.stands and c.unit == "nats", c.verdict


def test_the_controls_are_the_methods_own_numbers_on_the_twin_and_the_random_labels(induction_key):
    """The twin's and the nonsense task's maxima recomputed here from patch_heads on the twin and on the random
    labels: the restored logits over the claim's lead."""
    from core.analysis.patching import patch_heads
    model, _, clean, bad, metric = induction_key
    c = NC.head_patching(model, clean, bad, metric)

    def restored(m, labels):
        lead = labels(m, clean) - labels(m, bad)
        return np.nanmax(np.abs(patch_heads(m, clean, bad, labels))) * abs(lead)
    lead = metric(model, clean) - metric(model, bad)
    assert c.twin == pytest.approx(restored(NC.random_twin(model), metric) / lead, rel=1e-3)  # float32 runs
    want = max(restored(model, m) for m in NC.random_labels(metric, model.config.vocab_size)) / lead
    assert c.nonsense == pytest.approx(want, rel=1e-3)


def test_the_draws_are_deterministic_and_never_the_real_labels():
    ids = list(range(40))
    assert NC.shuffled(ids) == NC.shuffled(ids) and sorted(NC.shuffled(ids)) == ids and NC.shuffled(ids) != ids
    assert NC.shuffled(ids, seed=2) != NC.shuffled(ids)
    labels = NC.random_labels(Metric(3, 4), 12, draws=50)
    assert labels == NC.random_labels(Metric(3, 4), 12, draws=50)
    assert all(m.answer not in (3, 4) and m.wrong not in (3, 4) and m.answer != m.wrong for m in labels)
    assert all(m.wrong is None for m in NC.random_labels(Metric(3), 12))  # the log-probability measure stays one


def control(value, twin, nonsense, unit="share", missing=None):
    return NC.Control("L1 H1 restores", value, twin, nonsense, 0.1, unit, "random tokens", twin_missing=missing)


def test_the_verdict_in_words_and_its_margin():
    assert control(0.56, 0.0, 0.46).stands  # exactly the margin above (floats: 0.56 - 0.46 is 0.0999...)
    assert not control(0.56, 0.47, 0.0).stands and not control(0.56, 0.0, 0.47).stands
    assert control(0.56, 0.02, 0.13).verdict == ("The finding stands above both controls: its 56% is at least 10 points "
                                                 "above the random twin's 2% and the nonsense task's 13%.")
    assert control(0.3, 0.02, 0.25).verdict == ("It does not stand above both controls: its 30% is not 10 points above the "
                                                "random twin's 2% and the nonsense task's 25%.")
    assert not control(math.nan, 0.0, 0.0).stands and not control(0.5, math.nan, 0.0).stands
    assert "+1.734 nats" in control(1.734, 0.002, 0.987, unit="nats").verdict


def test_a_missing_twin_is_said_and_only_the_nonsense_task_counts():
    c = control(0.5, math.nan, 0.2, missing="no transcoders")
    assert c.stands and c.verdict == ("The finding stands above the nonsense task: its 50% is at least 10 points above the "
                                      "nonsense task's 20%. The random twin cannot be graded: no transcoders.")
    assert not control(0.5, math.nan, 0.45, missing="no transcoders").stands


# ------------------------------------------------------------------------------------------------ the pages
def _verdicts(at):
    return [e.value for e in [*at.success, *at.warning] if "above" in e.value and "stand" in e.value]


@pytest.mark.slow
def test_cause_and_effect_shows_its_claims_controls_after_the_button(open_page):
    at = open_page("cause_effect", timeout=300)
    assert not _verdicts(at)  # nothing runs before the learner asks
    at.button(key="cause_controls_btn").click().run(timeout=300)
    assert not at.exception
    shown = _verdicts(at)
    assert len(shown) == 2 and all("The finding stands above both controls" in v for v in shown), shown


@pytest.mark.slow
def test_switch_heads_off_shows_the_rankings_control_after_the_button(open_page):
    at = open_page("heads", timeout=300)
    at.button(key="heads_controls_btn").click().run(timeout=300)
    assert not at.exception
    (shown,) = _verdicts(at)
    assert "L1 H3" in at.metric[-3].help and "nats" in shown, shown


@pytest.mark.slow
def test_the_attribution_graph_shows_its_nonsense_control_and_says_the_twin_cannot_be_graded(open_page):
    at = open_page("attribution", timeout=300)
    at.button(key="attr_controls_btn").click().run(timeout=300)
    assert not at.exception
    (shown,) = _verdicts(at)
    assert "the nonsense task" in shown and "The random twin cannot be graded" in shown, shown


@pytest.mark.slow
def test_the_lessons_circuit_step_shows_its_control_after_the_reveal(open_page):
    at = open_page("lesson", timeout=300)
    at.button(key="lesson_goto_12").click().run()
    (w,) = [w for w in at.selectbox if w.key and "_guess" in w.key]
    w.select_index(0).run()
    at.button(key="lesson_check").click().run(timeout=300)
    at.button(key="lesson_controls_btn").click().run(timeout=300)
    assert not at.exception
    (shown,) = _verdicts(at)
    assert shown.startswith("The finding stands above both controls") and head_label(0, 2) in at.metric[-3].help
