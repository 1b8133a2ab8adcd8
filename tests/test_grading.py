"""Grading the methods against the answer keys (core.analysis.grading, issue 59 §2): the AUROC and the precision and
recall against hand counts, the examples' pairs, a key whose answer is known graded 1.0 by the ablation ranking and 0
when the key is made wrong, and the null controls: a key head's finding stands above both, a random model's does
not, and the nonsense labels read off the method's own runs equal a run of their own. Tiny models: seconds in all."""
import csv
import math

import numpy as np
import pytest
import torch

from core.analysis import grading as G
from core.analysis import grading_scores as GS
from core.analysis import null_controls as NC
from core.analysis.answer_keys import AnswerKey, list_keys, load_key
from core.analysis.interventions import rank_heads
from core.analysis.patching import Metric, patch_heads, paths_into
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


def test_nonsense_labels_are_random_tokens_never_the_examples_own(copy_key):
    model, _, _, task = copy_key
    ps = G.pairs(task, model.config.n_ctx, 32)
    bad = G.nonsense_labels(ps, model.config.vocab_size)
    assert len(bad) == len(ps) and bad == G.nonsense_labels(ps, model.config.vocab_size)  # fixed by the seed
    for p, m in zip(ps, bad):
        assert m.answer != m.wrong and not {m.answer, m.wrong} & {p.answer, p.wrong}
        assert 0 <= min(m.answer, m.wrong) and max(m.answer, m.wrong) < model.config.vocab_size
    assert len({(m.answer, m.wrong) for m in bad}) > len(bad) // 2  # drawn per example, not one pair for all


def test_random_twin_has_the_config_and_fresh_weights(copy_key):
    model = copy_key[0]
    state = torch.random.get_rng_state()
    twin = NC.random_twin(model)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left as it was
    assert twin.config == model.config
    assert not torch.equal(twin.tok_emb.weight, model.tok_emb.weight)
    assert torch.equal(NC.random_twin(model).tok_emb.weight, twin.tok_emb.weight)  # the same seed, the same twin


def test_the_copy_key_graded_by_the_ablation_ranking(copy_key):
    """The copy key's task runs through one head (L1 H3): switching each head off alone must find it, AUROC 1.0, and
    precision and recall 1 at the page's threshold; the rises are Switch heads off's own (rank_heads, each example's
    answer appended, its last position), and the finding stands above both controls."""
    model, _, _, task = copy_key
    g = G.grade("copy", "ablation", count=24, loaded=copy_key)
    assert g.scores.names == ["L1 H1", "L1 H2", "L1 H3", "L1 H4"]
    assert g.auroc == 1.0 and g.precision == 1.0 and g.recall == 1.0
    rises = np.zeros(4)
    for e in G.pairs(task, model.config.n_ctx, 24):
        for eff in rank_heads(model, list(e.clean) + [e.answer], "zero", positions=slice(-1, None)):
            rises[eff.layer * 4 + eff.head] += eff.increase / 24
    assert np.allclose(g.scores.values, rises, atol=1e-5)  # float32 runs batched another way
    assert g.finding == pytest.approx(rises.max(), abs=1e-5) and g.unit == "nats" and g.margin == G.COPY_GAIN
    assert np.all(np.abs(np.delete(g.scores.values, 2)) < 1e-6)  # the other heads do nothing for the task
    assert g.stands and g.finding - max(g.random_twin, g.nonsense_task) >= G.COPY_GAIN


def test_a_key_heads_finding_stands_and_a_random_models_does_not(copy_key):
    """Patching on the copy key: L1 H3 restores the clean answer (the share checked against patch_heads' shares
    weighted by gaps from separate runs), far above what the random twin or random labels restore: it stands. The
    same grade with a random model as "the model" (another seed than the twin's) finds a strongest head too, but
    random labels give as much: it does not stand."""
    model, _, key, task = copy_key
    g = G.grade("copy", "patching", count=16, loaded=copy_key)
    num, den = np.zeros(4), 0.0
    for e in G.pairs(task, model.config.n_ctx, 16):
        m = Metric(e.answer, e.wrong)
        gap = m(model, e.clean) - m(model, e.corrupt)
        num, den = num + patch_heads(model, list(e.clean), list(e.corrupt), m).reshape(-1) * gap, den + abs(gap)
    assert np.allclose(g.scores.values, num / den, atol=1e-6)
    assert g.finding == pytest.approx(np.abs(num / den).max(), abs=1e-6) and g.scores.claim.startswith("L1 H3")
    assert g.stands and g.unit == "share" and "The finding stands above both controls" in g.verdict
    random_model = NC.random_twin(model, seed=NC.TWIN_SEED + 1)
    r = G.grade("copy", "patching", count=16, loaded=(random_model, None, key, task))
    assert r.finding > G.CARRIES  # a random network has a "strongest head" too ...
    assert not r.stands and r.nonsense_task > r.finding - G.CARRIES  # ... and random labels give as much
    assert "does not stand" in r.verdict


def test_the_nonsense_read_off_the_methods_runs_equals_its_own_run():
    """The nonsense labels' restored logits read off the patching runs (grading._tapped) against patch_heads and
    paths_into run with the nonsense metric itself (share x its own gap from separate runs); the ablation's nonsense
    rises against rank_heads on the prompt with the nonsense token appended."""
    model, _, _, task = load_key("induction")
    e = G.pairs(task, model.config.n_ctx, 1)[0]
    bad = G.nonsense_labels([e], model.config.vocab_size)[0]
    clean, corrupt = list(e.clean), list(e.corrupt)
    gap = bad(model, clean) - bad(model, corrupt)
    _, _, fake = G._tapped(lambda m: patch_heads(model, clean, corrupt, m), Metric(e.answer, e.wrong), bad)
    assert np.allclose(fake, patch_heads(model, clean, corrupt, bad).reshape(-1) * gap, atol=1e-6)
    _, _, fake = G._tapped(lambda m: paths_into(model, clean, corrupt, (1, 0), m, "k"), Metric(e.answer, e.wrong), bad)
    assert np.allclose(fake, np.array(list(paths_into(model, clean, corrupt, (1, 0), bad, "k").values())) * gap,
                       atol=1e-6)
    s = G.score_ablation(model, [e], [bad])
    own = {(f.layer, f.head): f.increase for f in rank_heads(model, clean + [bad.answer], positions=slice(-1, None))}
    assert s.nonsense == pytest.approx(max(own.values()), abs=1e-5)  # float32 runs batched another way


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
    assert set(map(tuple, key.edges)) <= set(GS.candidate_edges(model.config))


def test_the_bench_table_holds_the_contract_columns():
    path = REPO_ROOT / "bench" / "results" / "answer-keys.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:7] == ["key", "method", "auroc", "precision", "recall", "random_twin", "nonsense_task"]
    assert {r["key"] for r in rows} == set(list_keys())
    assert {r["method"] for r in rows} >= set(G.METHODS)
