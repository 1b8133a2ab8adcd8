"""Issue 55 on the Features page: the index of a unit set is estimated before it is built and refused in words over
the budget (TE_FEATURES_MEMORY, MAX_INDEX_SECONDS), built with a progress line; an SAE records the weights it was
trained on and one of other weights is refused in words naming folders from the models folder; an SAE's fingerprint
is computed once, not on every rerun; SAEs trained in a session are held within a memory bound; the SAE form's time
estimate is timed in the compute line, at the job's threads, for ten minutes at most, and counts the whole job; a
unit's button says what it is, a click brings its card into view, and a freshly trained SAE is the one picked."""
import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import SHIPPED
from core.analysis.sae import SAE, SAEConfig, load_sae, model_fingerprint, save_sae
from core.features.units import feature_units
from core.nn.checkpoint import load_checkpoint, read_config
from tests.memory_probe import fresh_peak, peak_growth

PAGE = "pages/features.py"
SITE = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def shipped():
    from core.data.held_out import model_held_out

    model, tok = load_checkpoint(SHIPPED)
    model.eval()
    held = model_held_out(model, tok, read_config(SHIPPED)[2], max_tokens=100_000)  # the page's cap for this model
    return model, tok, held


def large_sae(model, d_sae=131_072, kind="topk") -> SAE:
    """An SAE the file rules allow (64 MiB per matrix), of random weights: only its shape matters here."""
    sae = SAE(SAEConfig(site=SITE, d_in=64, d_sae=d_sae, kind=kind, k=12, trained_on=model_fingerprint(model)),
              generator=torch.Generator().manual_seed(0))
    return sae.requires_grad_(False).eval()


def test_a_large_sae_index_is_refused_in_words_within_a_second(shipped):
    from core.features.index import index_budget, index_cost, index_refusal, pass_flops

    model, tok, held = shipped
    units = feature_units(model, large_sae(model))
    flops = pass_flops(model, SITE)
    t0 = time.perf_counter()
    words, grew = peak_growth(lambda: index_refusal(index_cost(model, units, held), index_budget(), 128, flops,
                                                    "features"))
    assert time.perf_counter() - t0 < 1.0
    assert grew < 64 * 2**20, grew  # a probe of a few tokens, no index
    assert words.startswith("The page cannot index these 131,072 features") and "TE_FEATURES_MEMORY" in words
    fit = int(words.split("at most ")[1].split()[0].replace(",", ""))
    assert 1 <= fit < 131_072
    # a densely firing one says so
    dense = feature_units(model, large_sae(model, 16_384, "relu"))
    assert "fire densely" in index_refusal(index_cost(model, dense, held), 2**30, 128, flops, "features")


@pytest.mark.slow  # over 5 s: the slow lane (the fast lane stays within its minutes)
def test_the_index_estimate_bounds_the_index_and_the_build_reports_progress(shipped):
    from core.data.held_out import HeldOut
    from core.features.index import build_index, index_cost

    model, tok, held = shipped
    part = HeldOut(held.windows[:160], held.targets[:160], held.corpus)  # 20,480 tokens
    for name in ("shipped", "dense"):
        sae = load_sae(SHIPPED / "sae" / SITE) if name == "shipped" else large_sae(model, 4096, "relu")
        cost = index_cost(model, feature_units(model, sae), part)
        got = fresh_peak(
            "from tests.test_features_bounds import *\nfrom core.data.held_out import HeldOut, model_held_out"
            "\nfrom core.features.index import build_index\nmodel, tok = load_checkpoint(SHIPPED); model.eval()\n"
            "held = model_held_out(model, tok, read_config(SHIPPED)[2], max_tokens=100_000)\n"
            "part = HeldOut(held.windows[:160], held.targets[:160], held.corpus)\n"
            f"sae = load_sae(SHIPPED / 'sae' / SITE) if {name!r} == 'shipped' else large_sae(model, 4096, 'relu')\n"
            "units = feature_units(model, sae)\n"
            "build_index(model, units, HeldOut(part.windows[:2], part.targets[:2], part.corpus))  # warmed up",
            "build_index(model, units, part)")
        assert got["grew"] <= cost.memory, (name, got, cost)
        assert cost.memory <= 6 * got["grew"] + 64 * 2**20, (name, got, cost)
    seen = []
    build_index(model, feature_units(model, load_sae(SHIPPED / "sae" / SITE)), part,
                progress=lambda share, words: seen.append((share, words)))
    shares = [s for s, _ in seen]
    assert shares == sorted(shares) and shares[0] == 0 and shares[-1] == 1 and len(seen) >= 4
    assert any("top activations" in w for _, w in seen)


def copy_model(tmp_path, name="copy") -> Path:
    folder = tmp_path / name
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("checkpoints", "transcoders"))
    return folder


def test_a_large_sae_is_refused_on_the_page(open_page, tmp_path):
    folder = copy_model(tmp_path)
    model, _ = load_checkpoint(folder)
    save_sae(large_sae(model), folder / "sae" / SITE, {"l0": 12.0})
    t0 = time.perf_counter()
    at = open_page(PAGE, timeout=120, models_dir=tmp_path, state={"te_model_name": "copy"})  # today: minutes
    took = time.perf_counter() - t0
    shown = [w.value for w in at.warning]
    assert any(w.startswith("The page cannot index these 131,072 features") for w in shown), shown
    assert [b for b in at.button if b.key and b.key.startswith("feat_fire_")]  # the prompt's units still show
    assert took < 60, took


def test_an_sae_of_other_weights_is_refused_by_name(open_page, tmp_path):
    folder = copy_model(tmp_path)
    config = folder / "sae" / SITE / "config.json"
    other = load_checkpoint(SHIPPED.parent / "shakespeare-bpe")[0]  # d = 64 too: the shapes fit
    config.write_text(json.dumps({**json.loads(config.read_text()), "trained_on": model_fingerprint(other)}))
    at = open_page(PAGE, timeout=300, models_dir=tmp_path, state={"te_model_name": "copy"})
    shown = [w.value.replace("\\", "") for w in at.warning]
    assert any(f"copy/sae/{SITE}/config.json" in w and "trained for another model" in w for w in shown), shown
    assert not any(str(tmp_path) in w for w in shown)
    assert any("has no SAE yet" in i.value for i in at.info)


def test_an_sae_folder_linked_out_of_the_model_is_refused_by_name(open_page, tmp_path):
    import os

    folder = copy_model(tmp_path)
    shutil.rmtree(folder / "sae")
    (folder / "sae").mkdir()
    os.symlink(SHIPPED / "sae" / SITE, folder / "sae" / SITE)  # the same SAE, but outside the model's folder
    at = open_page(PAGE, timeout=300, models_dir=tmp_path, state={"te_model_name": "copy"})
    shown = [w.value.replace("\\", "") for w in at.warning]
    assert any(f"copy/sae/{SITE}: a link leading out of the model's folder" in w for w in shown), shown
    assert not any(str(tmp_path) in w or str(SHIPPED) in w for w in shown)


def test_train_sae_records_the_weights_it_read(tmp_path):
    from core.analysis.sae import SAEFileError
    from core.features.train import SAESettings, train_sae
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    from core.nn.tokenizer import CharTokenizer
    from core.data.corpus import pydoc_text

    tok = CharTokenizer.from_text(pydoc_text())
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=32, d_model=16, n_heads=2, n_layers=1)).eval()
    t = train_sae(model, tok, SITE, None, SAESettings(d_sae=32, k=4, steps=5, batch_size=64, max_vectors=2048))
    assert t.sae.config.trained_on == model_fingerprint(model)
    folder = save_sae(t.sae, tmp_path / "sae" / SITE, t.metrics)
    assert load_sae(folder, trained_on=model_fingerprint(model)).config == t.sae.config
    with torch.no_grad():
        model.head.weight[0, 0] += 1.0  # the model trained on a little more: other weights
    with pytest.raises(SAEFileError, match="trained for another model"):
        load_sae(folder, trained_on=model_fingerprint(model, cache=False))


def test_the_sae_fingerprint_is_computed_once_not_on_every_rerun(open_page, monkeypatch):
    import ui.features

    at = open_page(PAGE, timeout=300)
    hashed = []

    class Counting:  # hashlib as ui.features sees it, counting every hash begun
        def __getattr__(self, name):
            import hashlib
            real = getattr(hashlib, name)
            return lambda *a, **k: hashed.append(name) or real(*a, **k)
    monkeypatch.setattr(ui.features, "hashlib", Counting())
    at.run(timeout=300)
    at.run(timeout=300)
    assert not at.exception and hashed == [], hashed


def _session_page(site: str, sizes: list):
    """A page script adding session SAEs of ``sizes`` latents to two models in turn (ui.saes)."""
    from pathlib import Path

    import streamlit as st
    import torch

    import ui.saes as S
    from core.analysis.sae import SAE, SAEConfig
    from core.nn.model_discovery import ModelEntry

    for i, n in enumerate(sizes):
        entry = ModelEntry(name=f"m{i % 2}", path=Path(f"/nowhere/m{i % 2}"), shipped=False, owner=None)
        sae = SAE(SAEConfig(site=site, d_in=64, d_sae=n, k=4), generator=torch.Generator().manual_seed(i))
        S.add_session_sae(entry, sae, {})
    held = [c.sae.config.d_sae for d in st.session_state[S.SESSION_KEY].values() for c in d.values()]
    st.write(f"held {held}")
    st.write(f"pick {st.session_state.get('te_sae_pick')}")  # ui.saes.PICK_KEY, NOT_KEPT_KEY
    st.write(f"note {st.session_state.get('te_sae_not_kept')}")


def test_session_saes_are_held_within_a_memory_bound(monkeypatch):
    import ui.saes

    mib = 2**20
    monkeypatch.setattr(ui.saes, "SESSION_BYTES", int(1.6 * mib), raising=False)
    monkeypatch.setattr(ui.saes, "SERVER_BYTES", 64 * mib, raising=False)
    at = AppTest.from_function(_session_page, args=(SITE, [1024, 1024, 2048, 1024]))
    at.run(timeout=60)
    assert not at.exception, at.exception
    lines = [m.value for m in at.markdown]
    # 1024 latents of 64 numbers: 0.5 MiB; 2048: 1 MiB. Every model together, the oldest dropped first: the last
    # two (2048 on the first model, 1024 on the second) make 1.5 MiB of the 1.6 allowed
    assert lines[0] == "held [2048, 1024]", lines
    assert lines[1].startswith(f"pick yours: {SITE}")  # the page's picker moves to the newest
    monkeypatch.setattr(ui.saes, "SESSION_BYTES", 64 * mib, raising=False)
    monkeypatch.setattr(ui.saes, "SERVER_BYTES", 1 * mib, raising=False)  # the server's SAEs, every session's
    at = AppTest.from_function(_session_page, args=(SITE, [1024, 2048]))
    at.run(timeout=60)
    assert "not kept, as this server holds" in at.markdown[2].value


def test_the_sae_forms_estimate_is_timed_in_the_compute_line_for_ten_minutes(open_page, monkeypatch):
    import ui.compute
    import ui.features
    from core.features.job import job_seconds
    from core.features.train import SAESettings

    lanes = []
    slot = ui.compute.compute_slot
    monkeypatch.setattr(ui.compute, "compute_slot", lambda what, key=None, lane="short": lanes.append(what)
                        or slot(what, key, lane))
    ui.features._pace.clear()
    ui.compute._GATED.clear()  # the line's record of finished calls, kept beside each cache: it went with it
    at = open_page(PAGE, timeout=300)
    assert "timing a few SAE steps" in lanes, lanes
    assert 0 < ui.features._pace._info.ttl <= 600  # an estimate taken under load does not stay
    caption = next(c.value for c in at.caption if "Training should take" in c.value)
    assert "under a minute" not in caption and "read the activations" in caption
    model = load_checkpoint(SHIPPED)[0]
    s = SAESettings(steps=1000)
    assert job_seconds(model, s, 110_000, 0.05) > 1000 * 0.05  # the model's passes count too


def test_a_units_button_says_what_it_is_and_a_click_brings_its_card_into_view(open_page):
    at = open_page(PAGE, timeout=300)
    buttons = [b for b in at.button if b.key and b.key.startswith("feat_fire_")]
    # "feature 159: fires 1.26", then its words and detection score (issue 58): " — 'u' after 'o' · 0.93"
    assert buttons and all(re.fullmatch(r"feature \d+: fires \d+\.\d\d — .+ · [01]\\?\.\d\d", b.label)
                           for b in buttons), \
        [b.label for b in buttons]
    assert not [h for h in at.get("html") if "scrollIntoView" in h.proto.body]
    buttons[1].click().run(timeout=300)
    assert [h for h in at.get("html") if "scrollIntoView" in h.proto.body and "unit-card" in h.proto.body]
    at.run(timeout=300)  # a rerun without a click does not scroll again
    assert not [h for h in at.get("html") if "scrollIntoView" in h.proto.body]


def test_a_freshly_trained_sae_is_the_one_picked(open_page):
    from core.features.train import SAESettings, train_sae
    from ui.saes import SESSION_KEY, SAEChoice

    at = open_page(PAGE, timeout=300)
    assert at.selectbox(key="feat_sae").value == f"saved: {SITE}"
    model, tok = load_checkpoint(SHIPPED)
    t = train_sae(model, tok, SITE, read_config(SHIPPED)[2], SAESettings(d_sae=64, k=4, steps=5, batch_size=256,
                                                                        max_vectors=4096))
    label = f"yours: {SITE}"
    # what ui.saes.add_session_sae leaves in the session when the job's fragment hands the SAE over
    at.session_state[SESSION_KEY] = {str(SHIPPED): {label: SAEChoice(label, t.sae, t.metrics, "session")}}
    at.session_state["te_sae_pick"] = label
    at.run(timeout=300)
    assert not at.exception
    assert at.selectbox(key="feat_sae").value == label
