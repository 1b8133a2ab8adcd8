"""Grading the methods against the answer keys (core.analysis.grading, issue 59 §2): the AUROC and the precision and
recall against hand counts, the examples' pairs, a key whose answer is known graded 1.0 by the ablation ranking and 0
when the key is made wrong, and the null controls below the real task. Tiny models: seconds in all."""
import csv
import math

import numpy as np
import pytest
import torch

from core.analysis import grading as G
from core.analysis import null_controls as NC
from core.analysis.answer_keys import AnswerKey, list_keys, load_key
from core.serve.paths import REPO_ROOT


def test_auroc_against_a_hand_count():
    # members 0.9, 0.3, 0.5 against non-members 0.8, 0.5: the six pairs give 1 (0.9>0.8), 1 (0.9>0.5), 0, 0, 0,
    # and a tie 0.5 = 0.5 counted half: 2.5 / 6
    values, labels = [0.9, 0.8, 0.3, 0.5, 0.5], [1, 0, 1, 0, 1]
    assert G.auroc(values, labels) == pytest.approx(2.5 / 6)
    assert G.auroc([3, 2, 1], [1, 1, 0]) == 1.0 and G.auroc([1, 2, 3], [1, 1, 0]) == 0.0
    assert G.auroc([float("nan"), 0.0], [1, 0]) == 0.0  # a NaN score ranks below everything
    assert math.isnan(G.auroc([1.0, 2.0], [1, 1]))  # no non-member: no AUROC


def test_precision_and_recall_against_a_hand_count():
    # called (>= 0.5): 0.9, 0.8, 0.5, 0.5; members among them: 0.9 and the last 0.5 -> precision 2/4; members
    # 3, of which 2 called -> recall 2/3
    p, r = G.precision_recall([0.9, 0.8, 0.3, 0.5, 0.5], [1, 0, 1, 0, 1], 0.5)
    assert (p, r) == (pytest.approx(0.5), pytest.approx(2 / 3))
    p, r = G.precision_recall([0.1, 0.2], [1, 0], 0.5)
    assert math.isnan(p) and r == 0.0


def test_the_verdict_rule():
    assert G.stands(1.0, 0.5, 0.8) and not G.stands(1.0, 0.5, 0.85) and not G.stands(0.9, float("nan"), 0.1)
    assert G.verdict(1.0, 0.5, 0.8).startswith("the finding stands")
    assert G.verdict(1.0, 0.5, 1.0).startswith("the finding does not stand")


@pytest.fixture(autouse=True)
def one_thread():
    """The app's thread setting (one): tiny models on a busy machine run many times faster than with several."""
    was = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(was)


@pytest.fixture(scope="module")
def copy_key():
    return load_key("copy")


def test_pairs_are_patchable_and_differ_in_the_answer(copy_key):
    model, _, _, task = copy_key
    ps = G.pairs(task, model.config.n_ctx, 32)
    assert len(ps) == 32
    for p in ps:
        assert len(p.clean) == len(p.corrupt) < model.config.n_ctx
        assert p.clean != p.corrupt and p.answer != p.wrong
        i = task.prompts.index(p.clean)
        assert task.answers[i] == p.answer
    assert G.pairs(task, model.config.n_ctx, 32) == ps  # fixed by the seed


def test_nonsense_task_shuffles_the_answers_only(copy_key):
    task = copy_key[3]
    bad = G.nonsense(task)
    assert bad.prompts == task.prompts and sorted(bad.answers) == sorted(task.answers)
    assert np.mean(np.array(bad.answers) == np.array(task.answers)) < 0.5


def test_random_twin_has_the_config_and_fresh_weights(copy_key):
    model = copy_key[0]
    state = torch.random.get_rng_state()
    twin = NC.random_twin(model)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left as it was
    assert twin.config == model.config
    assert not torch.equal(twin.tok_emb.weight, model.tok_emb.weight)
    assert torch.equal(NC.random_twin(model).tok_emb.weight, twin.tok_emb.weight)  # the same seed, the same twin


def test_the_copy_key_graded_by_the_ablation_ranking(copy_key):
    """The copy key's task runs through one head (L1 H3): switching each head off alone (rank_heads) must find it,
    AUROC 1.0, and precision and recall 1 at the page's threshold; the random twin ranks it lower."""
    g = G.grade("copy", "ablation", count=24, loaded=copy_key)
    assert g.scores.names == ["L1 H1", "L1 H2", "L1 H3", "L1 H4"]
    assert g.auroc == 1.0 and g.precision == 1.0 and g.recall == 1.0
    assert int(np.argmax(g.scores.values)) == 2 and g.scores.values[2] > G.COPY_GAIN
    assert np.all(np.abs(np.delete(g.scores.values, 2)) < 1e-6)  # the other heads do nothing for the task
    assert g.random_twin < g.auroc


@pytest.mark.parametrize("name", ["induction", "ioi"])
def test_the_nonsense_task_scores_lower_than_the_real_one(name):
    """Cutting each edge alone: on the real task the key's edges cost the most (AUROC >= 0.9); with the answers
    shuffled among the examples, the ranking falls apart, and on the random twin too."""
    g = G.grade(name, "edge_ablation", count=24)
    assert g.auroc >= 0.9
    assert g.nonsense_task < g.auroc - 0.1 and g.random_twin < g.auroc - 0.1


def test_a_wrong_key_gets_a_low_grade(copy_key):
    """The same scores against a key that names another head: the grade can fail."""
    model, _, key, task = copy_key
    s = G.score_ablation(model, G.pairs(task, model.config.n_ctx, 16))
    wrong = AnswerKey("wrong", key.task, ("L1 H1",), key.edges, key.folder)
    assert G.auroc(s.values, G.truth(wrong, s)) < 0.5
    assert G.auroc(s.values, G.truth(key, s)) == 1.0


@pytest.mark.parametrize("name", list_keys())
def test_every_key_edge_is_a_candidate_edge(name):
    model, _, key, _ = load_key(name)
    assert set(map(tuple, key.edges)) <= set(G.candidate_edges(model.config))


def test_the_bench_table_holds_the_contract_columns():
    path = REPO_ROOT / "bench" / "results" / "answer-keys.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:7] == ["key", "method", "auroc", "precision", "recall", "random_twin", "nonsense_task"]
    assert {r["key"] for r in rows} == set(list_keys())
    assert {r["method"] for r in rows} >= set(G.METHODS)
