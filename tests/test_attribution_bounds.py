"""Issue 55: the Attribution graph's bounds before work and the transcoders it trusts. A graph's memory and time are
estimated from its active features before it is built and refused in words over TE_ATTRIBUTION_MEMORY (with the end
of the prompt and the feature cap that would fit); a capped graph stays exact; transcoders of other weights, or in a
folder linked out of the model's, are refused in words naming folders from the models folder; the graph caches are
keyed on the transcoders' weights; pruning and the scores are cached; the graph waits in the long lane; the key
position of the query-key split is picked NaN-safely."""
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SHIPPED
from core.analysis import attribution as A
from core.analysis import attribution_prune as P
from core.analysis.sae import SAE, SAEConfig, SAEFileError, model_fingerprint, save_sae
from core.analysis.transcoders import load_transcoders, transcoder_folder, writes
from core.nn.checkpoint import load_checkpoint
from core.serve.threads import torch_threads
from tests.memory_probe import fresh_peak, peak_growth
from tests.test_page_scaling import text_of

PAGE = "pages/attribution.py"
BPE = SHIPPED.parent / "shakespeare-bpe"
TEXT = "The king is dead. Long live the king! The king is dead. Long live the king! The king is dead."


@pytest.fixture(scope="module")
def shipped():
    model, tok = load_checkpoint(SHIPPED)
    return model.eval(), tok, load_transcoders(SHIPPED, model.config)


def dense(model, tcs) -> dict:
    """Transcoders that pass every check (shapes, finite values, this model's fingerprint) but fire densely: the
    shipped ones' weights as ReLU transcoders with b_enc = 5."""
    out = {}
    for layer, tc in tcs.items():
        t = SAE(SAEConfig(site=writes(layer), d_in=tc.config.d_in, d_sae=tc.config.d_sae, kind="relu", k=12,
                          trained_on=model_fingerprint(model)))
        with torch.no_grad():
            for name in ("W_enc", "W_dec", "b_dec"):
                getattr(t, name).copy_(getattr(tc, name))
            t.b_enc.fill_(5.0)
        out[layer] = t.requires_grad_(False).eval()
    return out


def test_a_dense_transcoder_graph_is_refused_in_words_within_a_second(shipped):
    from core.analysis import attribution_cost as av

    model, tok, tcs = shipped
    heavy = dense(model, tcs)
    ids = tok.encode(TEXT)[:64]
    with torch_threads(1), torch.no_grad():  # the app's page work runs on one torch thread (TE_TORCH_THREADS)
        model(torch.tensor([ids]))  # torch's first forward in a process pays for its own start, as a server's did
        t0 = time.perf_counter()
        plan, grew = peak_growth(lambda: av.plan_graph(model, heavy, ids, budget=2**30, units="characters"))
        took = time.perf_counter() - t0
    assert took < 1.0, took  # the request to the words (the graph itself would take minutes and tens of GiB)
    assert grew < 64 * 2**20, grew  # nothing large allocated: the estimate counts features, it builds nothing
    assert plan.memory > 8 * 2**30 and plan.refusal is not None
    words = plan.refusal
    assert "too large to build here" in words and "TE_ATTRIBUTION_MEMORY" in words and "fire densely" in words
    assert f"its last {plan.fits_tokens} characters" in words and f"at most {plan.fits_cap:,} feature nodes" in words
    # what the words offer does fit, by the same estimate
    assert av.plan_graph(model, heavy, ids[-plan.fits_tokens:], budget=2**30).refusal is None
    assert av.plan_graph(model, heavy, ids, cap=plan.fits_cap, budget=2**30).refusal is None
    assert av.plan_graph(model, tcs, ids, budget=2**30).refusal is None  # the shipped transcoders' graph fits


@pytest.mark.slow  # over 5 s: the slow lane (the fast lane stays within its minutes)
def test_the_estimate_bounds_the_graph_it_describes(shipped):
    """The estimate is at least what building, pruning and scoring the graph really takes (measured in a process of
    its own), and not wildly more."""
    from core.analysis import attribution_cost as av

    model, tok, tcs = shipped
    for name, n in (("shipped", 32), ("dense", 4)):
        transcoders = tcs if name == "shipped" else dense(model, tcs)
        ids = tok.encode(TEXT)[:n]
        plan = av.plan_graph(model, transcoders, ids, budget=None)
        got = fresh_peak(
            "from tests.test_attribution_bounds import *\n"
            "model, tok = load_checkpoint(SHIPPED); model.eval(); tcs = load_transcoders(SHIPPED, model.config)\n"
            f"tcs = tcs if {name!r} == 'shipped' else dense(model, tcs); ids = {list(ids)}\n"
            "A.attribution_graph(model, tcs, ids[:3])  # kernels and allocator warmed up first",
            f"g = A.attribution_graph(model, tcs, ids, batch={plan.batch}); P.prune(g); P.scores(g)\n"
            "out['features'] = g.n_features")
        assert got["features"] == plan.features
        assert got["grew"] <= plan.memory, (name, got, plan.memory)
        assert plan.memory <= 4 * got["grew"] + 64 * 2**20, (name, got, plan.memory)


def test_a_capped_graph_keeps_its_most_influential_features_and_stays_exact(shipped):
    model, tok, tcs = shipped
    heavy = dense(model, tcs)
    ids = tok.encode(TEXT)[:5]
    full = A.attribution_graph(model, heavy, ids)
    g = A.attribution_graph(model, heavy, ids, max_feature_nodes=200)
    assert g.n_features == 200 and g.dropped == full.n_features - 200
    F = g.n_features
    targets = list(range(F)) + list(range(g.slices()["logits"].start, g.n_nodes))
    # edges plus constants add up to every target's real input: the left-out features went into the error nodes
    np.testing.assert_allclose(g.adjacency[targets].sum(1) + g.constants[targets], g.inputs[targets], atol=2e-3)
    np.testing.assert_allclose(g.inputs[F:][-len(g.logit_tokens):], full.inputs[-len(full.logit_tokens):], atol=1e-4)
    # the head split of a capped graph adds up to its edges (the same features kept, the same error nodes)
    parts = A.head_split(model, heavy, g, [targets[-1]])
    S = g.slices()["logits"].start
    total = sum(v for v in parts.values())
    np.testing.assert_allclose(total[0], g.adjacency[targets[-1], :S], atol=1e-6)
    qk = A.qk_split(model, heavy, ids, 1, 0, len(ids) - 1, 0, features=[tuple(f) for f in g.features.tolist()])
    assert qk["terms"].shape == (S, S) and len(qk["sources"]) == F
    # a cap at every active feature is no cap
    same = A.attribution_graph(model, heavy, ids, max_feature_nodes=full.n_features)
    assert same.dropped == 0 and np.array_equal(same.adjacency, full.adjacency)


def test_transcoders_record_the_weights_they_were_trained_on(shipped, tmp_path):
    model, tok, tcs = shipped
    fp = model_fingerprint(model)
    assert load_transcoders(SHIPPED, model.config, trained_on=fp).keys() == {0, 1}  # the shipped ones say so
    bpe, _ = load_checkpoint(BPE)
    assert load_transcoders(BPE, bpe.config, trained_on=model_fingerprint(bpe)).keys() == {0, 1}
    with pytest.raises(SAEFileError, match="trained for another model"):
        load_transcoders(BPE, bpe.config, trained_on=fp)  # the character model's weights are not the BPE model's


def copy_model(tmp_path, name="copy", transcoders=SHIPPED) -> Path:
    """A copy of the shipped character model in a models folder of its own, with ``transcoders``' transcoders
    (None: none)."""
    folder = tmp_path / name
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("checkpoints", "sae", "transcoders"))
    if transcoders is not None:
        shutil.copytree(transcoders / "transcoders", folder / "transcoders")
    return folder


def open_copy(open_page, tmp_path, name="copy", query=None):
    return open_page(PAGE, timeout=300, models_dir=tmp_path, state={"te_model_name": name}, query=query)


def test_another_models_transcoders_are_refused_in_words(open_page, tmp_path):
    copy_model(tmp_path, transcoders=BPE)  # same width (64): today they splice in, and the graph scores wrong
    at = open_copy(open_page, tmp_path)
    text = text_of(at)
    assert "cannot be used" in text and "trained for another model" in text, text[:600]
    assert "copy/transcoders/layer-0/config.json" in text and str(tmp_path) not in text  # from the models folder
    assert not [m for m in at.metric if m.label == "Replacement score"]


def test_a_transcoder_folder_linked_out_of_the_model_is_refused(open_page, tmp_path):
    folder = copy_model(tmp_path, transcoders=None)
    os.symlink(SHIPPED / "transcoders", folder / "transcoders")  # the same weights, but outside the model's folder
    at = open_copy(open_page, tmp_path)
    text = text_of(at)
    assert "link leading out of its model's folder" in text, text[:600]
    assert str(tmp_path) not in text and str(SHIPPED) not in text


def test_a_dense_graph_is_refused_on_the_page_and_the_offered_cap_builds(open_page, tmp_path, monkeypatch):
    monkeypatch.setenv("TE_ATTRIBUTION_MEMORY", "96M")  # a small budget: the capped graph builds in seconds
    folder = copy_model(tmp_path, transcoders=None)
    model, _ = load_checkpoint(folder)
    for layer, tc in dense(model, load_transcoders(SHIPPED, model.config)).items():
        save_sae(tc, transcoder_folder(folder, layer))
    at = open_copy(open_page, tmp_path)
    text = text_of(at)
    assert "too large to build here" in text and "96 MiB (TE_ATTRIBUTION_MEMORY)" in text, text[:800]
    assert not [m for m in at.metric if m.label == "Replacement score"]  # nothing was built
    button = at.button(key="attr_fit_cap")
    cap = int(button.label.split("at most ")[1].split()[0].replace(",", ""))
    button.click().run(timeout=300)
    assert not at.exception, at.exception[0].message
    assert int(next(m.value for m in at.metric if m.label == "Active features").replace(",", "")) == cap


def test_a_retrained_transcoder_is_another_graph(open_page, tmp_path):
    """The graph caches are keyed on the transcoders' weights: a server showing the model, a transcoder retrained
    beside it, and the next rerun draws the new transcoder's graph, not the old one's."""
    folder = copy_model(tmp_path)
    at = open_copy(open_page, tmp_path)
    before = next(m.value for m in at.metric if m.label == "Active features")
    model, _ = load_checkpoint(folder)
    tc = load_transcoders(folder, model.config)[1]
    fewer = SAE(SAEConfig(site=tc.config.site, d_in=64, d_sae=512, kind="topk", k=4,
                          trained_on=model_fingerprint(model)))
    with torch.no_grad():
        for name, t in tc.tensors().items():
            getattr(fewer, name).copy_(t)
    save_sae(fewer, transcoder_folder(folder, 1))  # k = 4 instead of 12: fewer active features in block 2
    at.run(timeout=300)
    assert not at.exception
    after = next(m.value for m in at.metric if m.label == "Active features")
    assert int(after.replace(",", "")) < int(before.replace(",", ""))


def test_pruning_and_scores_are_cached_and_the_graph_waits_in_the_long_lane(open_page, tmp_path, monkeypatch):
    import ui.compute

    lanes, calls = [], {"prune": 0, "scores": 0}
    slot = ui.compute.compute_slot
    monkeypatch.setattr(ui.compute, "compute_slot", lambda what, key=None, lane="short": lanes.append((what, lane))
                        or slot(what, key, lane))
    for name in calls:
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _real=real, _name=name, **k: calls.__setitem__(_name, calls[_name] + 1)
                            or _real(*a, **k))
    copy_model(tmp_path, name="lanes")  # a model of its own: nothing of it is cached yet
    at = open_copy(open_page, tmp_path, name="lanes")
    assert ("the attribution graph", "long") in lanes, lanes
    seen = dict(calls)
    at.run(timeout=300)
    at.run(timeout=300)
    assert not at.exception and calls == seen, (seen, calls)  # two reruns: the N x N work is not done again


def test_the_key_position_is_picked_nan_safely(open_page, tmp_path, monkeypatch):
    from core.analysis import attribution_probes as P

    real = P.attention_row

    def with_nan(model, ids, layer, head):
        row = np.array(real(model, ids, layer, head), dtype=float)
        row[:] = np.linspace(0.0, 0.1, len(row))
        row[0], row[3] = np.nan, 0.9  # a NaN weight first; the largest real one at position 4
        return row
    monkeypatch.setattr(P, "attention_row", with_nan)
    copy_model(tmp_path, name="nan")
    at = open_copy(open_page, tmp_path, name="nan")
    assert at.session_state["attr_qk_key"] == 4
