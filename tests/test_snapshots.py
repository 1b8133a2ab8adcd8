"""Snapshots through training (core.nn.snapshots): which steps are kept, what is written, what loads back, and what
a missing, corrupt or escaping snapshot does."""
import io
import json
import os
import zipfile

import pytest
import torch

from core.nn.checkpoint import CheckpointError, checkpoint_steps, load_checkpoint, save_checkpoint
from core.nn.model_store import checkpoint_zip
from core.nn.snapshots import read_snapshot_states, snapshot_losses, snapshot_name, snapshot_steps
from tests.snapshot_models import STEPS, train_with_snapshots


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("snap") / "snap"
    tr, captured = train_with_snapshots(folder)
    return folder, tr, captured


def test_steps_are_zero_then_log_spaced_up_to_the_last():
    # log-spaced from 1 to 1000 in 4 points: 10^0, 10^1, 10^2, 10^3
    assert snapshot_steps(1000, 4) == [0, 1, 10, 100, 1000]
    # 3 points from 1 to 12,000: 1, sqrt(12000) = 109.54..., 12000
    assert snapshot_steps(12000, 3) == [0, 1, 110, 12000]
    # more points than steps: each step once, none past the end
    assert snapshot_steps(5, 20) == [0, 1, 2, 3, 4, 5]
    assert snapshot_steps(100, 0) == [] and snapshot_steps(0, 5) == [0]
    twenty = snapshot_steps(12000, 20)
    assert twenty[0] == 0 and twenty[-1] == 12000 and len(twenty) == 21
    # each the nearest step to 12000^(i/19), the same growth factor (1.64) from one to the next
    assert twenty[1:] == sorted({round(12000 ** (i / 19)) for i in range(20)})


def test_names_are_zero_padded():
    assert snapshot_name(0) == "step-000000.safetensors" and snapshot_name(1234567) == "step-1234567.safetensors"


def test_the_weights_saved_at_a_step_are_those_the_run_had_then(trained):
    folder, tr, captured = trained
    assert checkpoint_steps(folder) == sorted(captured) == snapshot_steps(STEPS, 6)
    for step, weights in captured.items():
        model, _ = load_checkpoint(folder, step=step)
        got = model.state_dict()
        for name, w in weights.items():  # stored in float16: equal to the captured weights rounded so
            assert torch.equal(got[name], w.half().float()), (step, name)
    first, last = load_checkpoint(folder, step=0)[0], load_checkpoint(folder)[0]
    assert not torch.equal(first.tok_emb.weight, last.tok_emb.weight)  # training moved them
    files = sorted(os.listdir(folder / "checkpoints"))
    assert files == [snapshot_name(s) for s in sorted(captured)]


def test_the_losses_at_each_snapshot_are_recorded(trained):
    folder, tr, _ = trained
    training = json.loads((folder / "config.json").read_text())["training"]
    losses = snapshot_losses(training)
    assert sorted(losses) == checkpoint_steps(folder)
    # measured on the run's fixed evaluation windows: a fresh evaluation of the step-0 weights gives the same
    model, _ = load_checkpoint(folder, step=0)
    tr.model.load_state_dict(model.state_dict())
    assert tr.evaluate()["val_loss"] == pytest.approx(losses[0]["val_loss"], abs=2e-3)  # float16 rounding only
    assert losses[0]["val_loss"] > losses[STEPS]["val_loss"]


def test_a_model_without_snapshots_works_as_before(tmp_path, trained):
    _, tr, _ = trained
    save_checkpoint(tmp_path / "plain", tr.model, tr.tokenizer)
    assert checkpoint_steps(tmp_path / "plain") == []
    load_checkpoint(tmp_path / "plain")  # the final weights, as always
    with pytest.raises(CheckpointError, match="kept no snapshots"):
        load_checkpoint(tmp_path / "plain", step=0)


def test_a_step_it_did_not_keep_is_refused_by_number(trained):
    folder, _, _ = trained
    with pytest.raises(CheckpointError, match="no snapshot at step 3"):
        load_checkpoint(folder, step=3)
    for bad in ("0", -1, True, 2.0):
        with pytest.raises(CheckpointError):
            load_checkpoint(folder, step=bad)


def test_a_corrupt_snapshot_is_named_and_the_others_still_load(tmp_path, trained):
    _, tr, _ = trained
    folder = tmp_path / "m"
    save_checkpoint(folder, tr.model, tr.tokenizer, snapshots=dict(tr.snapshots))
    (folder / "checkpoints" / snapshot_name(4)).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    (folder / "checkpoints" / snapshot_name(9)).unlink()  # missing
    assert checkpoint_steps(folder) == [0, 1, 2, 4, 19, 40]
    with pytest.raises(CheckpointError, match="step-000004.safetensors"):
        load_checkpoint(folder, step=4)
    with pytest.raises(CheckpointError, match="no snapshot at step 9"):
        load_checkpoint(folder, step=9)
    load_checkpoint(folder, step=19)
    assert sorted(read_snapshot_states(folder)) == [0, 1, 2, 19, 40]  # a copy leaves out the unreadable one


def test_a_snapshot_with_nan_or_the_wrong_shape_is_refused(tmp_path, trained):
    _, tr, _ = trained
    states = {s: dict(v) for s, v in tr.snapshots.items()}
    states[1]["tok_emb.weight"] = torch.full_like(states[1]["tok_emb.weight"], float("nan"))
    states[2]["tok_emb.weight"] = states[2]["tok_emb.weight"][:, :8].contiguous()
    save_checkpoint(tmp_path / "m", tr.model, tr.tokenizer, snapshots=states)
    with pytest.raises(CheckpointError, match="non-finite"):
        load_checkpoint(tmp_path / "m", step=1)
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_checkpoint(tmp_path / "m", step=2)


def test_a_snapshot_folder_that_links_out_is_ignored(tmp_path, trained):
    folder, tr, _ = trained
    save_checkpoint(tmp_path / "m", tr.model, tr.tokenizer)
    os.symlink(folder / "checkpoints", tmp_path / "m" / "checkpoints")  # real snapshots, but outside this folder
    assert checkpoint_steps(tmp_path / "m") == []
    with pytest.raises(CheckpointError, match="kept no snapshots"):
        load_checkpoint(tmp_path / "m", step=0)


def test_the_zip_download_holds_the_snapshots(trained):
    folder, _, _ = trained
    names = zipfile.ZipFile(io.BytesIO(checkpoint_zip(folder))).namelist()
    assert f"snap/checkpoints/{snapshot_name(0)}" in names and "snap/model.safetensors" in names
    assert len([n for n in names if "/checkpoints/" in n]) == len(checkpoint_steps(folder))


def test_snapshots_can_be_switched_off(tmp_path):
    tr, captured = train_with_snapshots(tmp_path / "off", steps=5, snapshots=0)
    assert captured == {} and tr.snapshots == {} and not (tmp_path / "off" / "checkpoints").exists()
    assert "snapshots" not in json.loads((tmp_path / "off" / "config.json").read_text())["training"]
