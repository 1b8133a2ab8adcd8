"""bench.run's peer rows (issue 60) without the peers' environment: nothing here installs anything. Where the
environment is absent, or its setup fails, every peer row is recorded as skipped with the reason and has no figures.
Fast lane."""
import json

import pytest
import torch

import bench.peers as P
import bench.run as R
from bench.peers import rows, setup


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.setattr(P, "VENV", tmp_path / "absent")
    monkeypatch.setattr(R, "RESULTS", [])


def test_the_peer_rows_skip_saying_why_when_the_environment_is_absent(no_env, tmp_path):
    threads = torch.get_num_threads()
    out = tmp_path / "bench.json"
    try:
        R.main(["--only", "peers", "--threads", "1", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    got = json.loads(out.read_text())
    assert [r["benchmark"] for r in got] == [f"peers: {n}" for n in rows.NAMES]
    for r in got:
        assert "python -m bench.peers.setup" in r["skipped"] and str(P.VENV) in r["skipped"]
        assert "ours" not in r and "peer" not in r and "error" not in r  # no figure, and not a failure
        assert r["threads"] == 1


def fake_python(venv, script: str):
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text("#!/bin/sh\n" + script)
    py.chmod(0o755)


def test_a_failed_install_leaves_no_ready_environment_and_the_rows_say_why(no_env, monkeypatch):
    # pip "fails" (as without network): a stand-in python that exits 1 saying so; no venv is really created
    monkeypatch.setattr(setup.venv.EnvBuilder, "create", lambda self, d: fake_python(d, "echo 'ERROR: no network' >&2; exit 1\n"))
    why = setup.setup()
    assert why.startswith("pip failed (rc 1") and "no network" in why
    assert P.missing() is not None and "did not finish" in P.missing()
    rows.main(False, R.record, R.RESULTS, R._peak_growth)
    assert all("did not finish" in r["skipped"] for r in R.RESULTS) and len(R.RESULTS) == len(rows.NAMES)


def test_a_side_that_does_not_start_skips_every_row_with_its_words(no_env, monkeypatch):
    fake_python(P.VENV, "echo 'ImportError: no module named sae_lens' >&2; exit 3\n")
    (P.VENV / P.READY).write_text("{}")
    assert P.missing() is None
    rows.main(False, R.record, R.RESULTS, R._peak_growth)
    assert len(R.RESULTS) == len(rows.NAMES)
    for r in R.RESULTS:
        assert "did not start" in r["skipped"] and "rc 3" in r["skipped"] and "no module named sae_lens" in r["skipped"]


def test_our_weights_reach_transformer_lens_by_gpt2s_attribute_paths():
    """side.tree: GPT-2's flat names as the attribute tree TransformerLens's converter reads (h[l] indexed)."""
    from bench.peers.side import tree
    from core.nn.config import LECTURE
    from core.nn.hf import export_state
    from core.nn.model import Transformer

    model = Transformer(LECTURE)
    flat = export_state(model)
    t = tree(flat)
    assert t.transformer.h[1].attn.c_attn.weight is flat["transformer.h.1.attn.c_attn.weight"]
    assert torch.equal(t.transformer.wte.weight, model.tok_emb.weight)
    assert torch.equal(t.lm_head.weight, model.head.weight)
    assert sorted(t.transformer.h) == list(range(LECTURE.n_layers))
