"""AppTest of the Features page's background panels (pages.features.jobs) on a small page script of their own: an SAE
training run started, watched and stopped; one run to its end, then in the session's SAEs; the forming panel's
note on a model without snapshots, and a study run to its figure and table."""
from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from core.features import job as job_mod
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.jobs import jobs
from core.nn.model_store import save_checkpoint
from core.nn.snapshots import snapshot_state
from core.nn.tokenizer import CharTokenizer
from tests.polling import wait_until
from tests.snapshot_models import made_up_text


def page(folder: str, panel: str, steps: int):
    """The page script: the model of ``folder`` as the picker's entry, then one panel."""
    import streamlit as st

    from core.nn.checkpoint import load_checkpoint, read_config
    from core.nn.model_discovery import ModelEntry
    from pages.features.jobs import forming_panel, training_panel
    from ui.saes import session_saes, add_session_sae
    from core.features.train import SAESettings, train_sae
    from pathlib import Path

    entry = ModelEntry(name=Path(folder).name, path=Path(folder), shipped=False, owner=None)
    model, tok = load_checkpoint(folder)
    training = read_config(folder)[2]
    if panel == "train":
        st.session_state.setdefault("te_sae_steps", steps)
        training_panel(entry, model, tok, training)
        st.write(f"session SAEs: {len(session_saes(entry))}")
    else:
        if not session_saes(entry):
            t = train_sae(model, tok, "blocks.0.hook_resid_post", training,
                          SAESettings(d_sae=32, k=4, steps=20, batch_size=128, max_vectors=4096))
            add_session_sae(entry, t.sae, t.metrics)
        forming_panel(entry, model, session_saes(entry)[0])


def tiny_folder(root, snapshots: bool):
    tok = CharTokenizer.from_text(made_up_text())
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=32, d_model=16, n_heads=2, n_layers=1)).eval()
    snaps = {}
    for i, step in enumerate([0, 1, 2, 4, 8, 16, 32] if snapshots else []):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * i * torch.randn_like(p))
        snaps[step] = snapshot_state(model)
    return save_checkpoint(root / ("snap" if snapshots else "plain"), model, tok, {"steps": 32}, snapshots=snaps)


@pytest.fixture(autouse=True)
def _no_jobs_left():
    yield
    for j in jobs("sae"):
        j.stop(wait=30)


def _app(folder, panel, steps=job_mod.MAX_STEPS):
    at = AppTest.from_function(page, args=(str(folder), panel, steps), default_timeout=60)
    return at.run()


def test_training_run_started_and_stopped(tmp_path):
    at = _app(tiny_folder(tmp_path, False), "train")
    assert not at.exception
    assert any("needs about" in c.value and "Training should take" in c.value for c in at.caption)
    at.number_input(key="te_sae_latents").set_value(32)
    at.number_input(key="te_sae_k").set_value(4).run()
    at.button(key="te_sae_start").click().run()
    assert not at.exception
    assert at.button(key="te_sae_start").disabled  # one job per session: Start is greyed while it runs
    job = at.session_state["te_sae_job"]["job"]
    wait_until(lambda: job.status().step > 0, timeout=60)
    at.button(key="te_sae_train_stop").click().run()
    assert job.join(60) and job.status().state == "stopped"
    at.run()
    assert any("Stopped" in c.value for c in at.caption)
    assert "session SAEs: 0" in [m.value for m in at.markdown]
    assert not at.button(key="te_sae_start").disabled


def test_training_run_finishes_into_the_session(tmp_path):
    at = _app(tiny_folder(tmp_path, False), "train", steps=60)
    at.number_input(key="te_sae_latents").set_value(32)
    at.number_input(key="te_sae_k").set_value(4).run()
    at.button(key="te_sae_start").click().run()
    job = at.session_state["te_sae_job"]["job"]
    assert job.join(120) and job.status().state == "finished", job.status().message
    at.run()  # the fragment sees it finished, hands the SAE over and reruns
    at.run()
    assert not at.exception
    assert "session SAEs: 1" in [m.value for m in at.markdown]


def test_memory_refusal_disables_start(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_RUN_MEMORY", "400M")
    at = _app(tiny_folder(tmp_path, False), "train")
    at.number_input(key="te_sae_latents").set_value(131_072).run()
    assert any("the server allows 400 MiB" in e.value for e in at.error)
    assert at.button(key="te_sae_start").disabled


def test_forming_without_snapshots_says_so(tmp_path):
    at = _app(tiny_folder(tmp_path, False), "forming")
    assert not at.exception
    assert any("kept no training snapshots" in i.value for i in at.info)


def test_forming_runs_to_its_figure(tmp_path, monkeypatch):
    from core.features import forming
    monkeypatch.setattr(forming, "FORMING_STEPS", 20)
    at = _app(tiny_folder(tmp_path, True), "forming")
    assert not at.exception
    at.button(key="te_forming_start").click().run()
    job = at.session_state["te_sae_job"]["job"]
    assert job.join(120) and job.status().state == "finished", job.status().message
    at.run()
    at.run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 1
    assert len(at.dataframe) == 1 and "formed at step" in at.dataframe[0].value.columns
