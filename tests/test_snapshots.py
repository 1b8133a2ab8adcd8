"""Snapshots through training (core.nn.snapshots): which steps are kept, what is written, what loads back, and what
a missing, corrupt or escaping snapshot does."""
import io
import json
import math
import os
import shutil
import zipfile

import pytest
import torch

from core.nn.checkpoint import CheckpointError, load_checkpoint
from core.nn.snapshots import checkpoint_steps
from core.nn.model_store import save_checkpoint
from core.nn.model_store import checkpoint_zip
from core.nn.snapshots import MAX_SNAPSHOTS, snapshot_files, snapshot_losses, snapshot_name, snapshot_steps
from core.training.recipes import TrainConfig
from tests.snapshot_models import STEPS, train_with_snapshots


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("snap") / "snap"
    tr, captured = train_with_snapshots(folder)
    return folder, tr, captured


def _log_gaps(steps):
    return [math.log(b / a) for a, b in zip(steps, steps[1:])]


@pytest.mark.parametrize("total,count", [(12000, 20), (1000, 4), (100_000, 50), (2000, 199), (10**9, 20)])
def test_steps_are_zero_then_log_spaced_up_to_the_last(total, count):
    steps = snapshot_steps(total, count)
    assert steps[0] == 0 and steps[-1] == total
    assert all(a < b for a, b in zip(steps, steps[1:]))  # strictly increasing: each step once
    assert len(steps) <= count + 1
    # roughly log-spaced, checked without the formula: past the first steps (where rounding to whole steps
    # bunches them), consecutive steps grow by about the same factor, and that factor covers the run in `count`
    far = [s for s in steps if s >= 50]
    factor = (total ** (1 / (count - 1)))  # 1 to total in count - 1 equal steps of log(step)
    for gap in _log_gaps(far):
        assert gap == pytest.approx(math.log(factor), rel=0.25, abs=0.02)
    # half of the count falls after the run's geometric middle, sqrt(total) (evenly spaced steps would put nearly
    # all there); the other half before it, fewer where rounding makes the first steps coincide
    assert abs(sum(1 for s in steps if s >= math.sqrt(total)) - count / 2) <= 1.5


def test_the_count_of_steps_kept():
    assert snapshot_steps(100, 0) == [] and snapshot_steps(0, 5) == [0]
    assert snapshot_steps(5, 20) == [0, 1, 2, 3, 4, 5]  # more asked than steps: each step once, none past the end
    assert len(snapshot_steps(10**6, 20)) == 21  # no collisions at this length: all twenty after step 0
    assert snapshot_steps(100, 1) == [0, 100]  # one after the start: the trained model, not also step 1
    assert snapshot_steps(100, 2) == [0, 1, 100]
    many = snapshot_steps(100_000, 300)  # more than a folder lists: the end of training is still there
    assert many[-1] == 100_000 and len(many) <= MAX_SNAPSHOTS


def test_a_run_cannot_ask_for_more_snapshots_than_a_folder_lists():
    with pytest.raises(ValueError, match="snapshots must be at most"):
        TrainConfig(snapshots=300)
    TrainConfig(snapshots=MAX_SNAPSHOTS - 1)


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
    assert sorted(snapshot_files(folder)) == [0, 1, 2, 19, 40]  # a copy leaves out the unreadable one


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


def _copies(folder, src, names):
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(src, folder / "checkpoints" / name)


def test_a_folder_of_more_than_the_listing_keeps_its_last_step(tmp_path, trained):
    src_folder, tr, _ = trained
    folder = tmp_path / "m"
    save_checkpoint(folder, tr.model, tr.tokenizer)
    # 300 snapshots, as a run of --snapshots 300 once wrote (any valid file will do for each)
    _copies(folder, src_folder / "checkpoints" / snapshot_name(0), [snapshot_name(s) for s in range(0, 3000, 10)])
    steps = checkpoint_steps(folder)
    assert len(steps) == MAX_SNAPSHOTS and steps[0] == 0 and steps[-1] == 2990  # the last is listed
    load_checkpoint(folder, step=2990)  # and loads


def test_each_step_is_listed_once_under_its_own_name(tmp_path, trained):
    src_folder, tr, _ = trained
    folder = tmp_path / "m"
    save_checkpoint(folder, tr.model, tr.tokenizer)
    one = src_folder / "checkpoints" / snapshot_name(0)
    # two names for step 12 and for step 120 (six and seven digits), and a step past 10^9 (ten digits)
    _copies(folder, one, ["step-000012.safetensors", "step-0000012.safetensors", "step-000120.safetensors",
                          "step-0000120.safetensors", "step-1000000000.safetensors", "step-12.safetensors"])
    assert checkpoint_steps(folder) == [12, 120, 10**9]
    assert snapshot_name(10**9) == "step-1000000000.safetensors"
    load_checkpoint(folder, step=10**9)
    # a step known only by a name that is not its own is not listed (it would not load)
    (folder / "checkpoints" / "step-000012.safetensors").unlink()
    assert checkpoint_steps(folder) == [120, 10**9]


def test_a_copy_of_the_snapshots_copies_the_files_and_decodes_none(tmp_path, trained, monkeypatch):
    import core.nn.checkpoint as C
    import safetensors.torch as ST

    src, tr, _ = trained

    def no_decoding(*args, **kwargs):
        raise AssertionError("a copy decodes no tensor")

    monkeypatch.setattr(C, "load_file", no_decoding)
    monkeypatch.setattr(ST, "load_file", no_decoding)
    monkeypatch.setattr(ST, "load", no_decoding)
    save_checkpoint(tmp_path / "copy", tr.model, tr.tokenizer, snapshots=snapshot_files(src))
    monkeypatch.undo()
    names = sorted(os.listdir(src / "checkpoints"))
    assert sorted(os.listdir(tmp_path / "copy" / "checkpoints")) == names
    for n in names:  # byte for byte
        assert (tmp_path / "copy" / "checkpoints" / n).read_bytes() == (src / "checkpoints" / n).read_bytes()
    assert checkpoint_steps(tmp_path / "copy") == checkpoint_steps(src)
    load_checkpoint(tmp_path / "copy", step=checkpoint_steps(src)[-1])
