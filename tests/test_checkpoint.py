import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.checkpoint import (
    CheckpointError, discover_models, load_checkpoint, read_card, read_log, save_checkpoint,
)
from core.model import ModelConfig, Transformer
from core.tokenizer import CharTokenizer

TEXT = "the quick brown fox jumps over the lazy dog\n"


@pytest.fixture
def saved(tmp_path):
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1))
    log = [{"step": 0, "train_loss": 3.3, "val_loss": 3.4, "tokens_per_s": None},
           {"step": 10, "train_loss": 2.0, "val_loss": 2.1, "tokens_per_s": 1000.0}]
    path = save_checkpoint(tmp_path / "m", model, tok, {"steps": 10, "val_loss": 2.1, "command": "python -m core.train"}, log)
    return path, model, tok


def test_round_trip(saved):
    path, model, tok = saved
    assert sorted(p.name for p in path.iterdir()) == ["README.md", "config.json", "log.csv", "model.safetensors"]
    loaded, tok2 = load_checkpoint(path)
    assert tok2.chars == tok.chars and loaded.config == model.config
    idx = torch.tensor([tok.encode("the fox")])
    assert torch.equal(loaded(idx).logits, model.eval()(idx).logits)
    assert not loaded.training
    rows = read_log(path)
    assert rows[1] == {"step": 10.0, "train_loss": 2.0, "val_loss": 2.1, "tokens_per_s": 1000.0}
    assert rows[0]["tokens_per_s"] is None
    card = read_card(path)
    assert "python -m core.train" in card and "2.1000" in card


def test_save_is_atomic_and_refuses_overwrite(saved, monkeypatch):
    path, model, tok = saved
    with pytest.raises(FileExistsError):
        save_checkpoint(path, model, tok)
    import core.checkpoint as ck

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(ck, "save_file", boom)
    with pytest.raises(RuntimeError):
        save_checkpoint(path, model, tok, overwrite=True)
    # the old checkpoint is intact and no temporary folder is left behind
    load_checkpoint(path)
    assert [p.name for p in path.parent.iterdir()] == ["m"]


def _config(path):
    return json.loads((path / "config.json").read_text())


def _write_config(path, data):
    (path / "config.json").write_text(json.dumps(data))


def corrupt_missing_config(p): (p / "config.json").unlink()
def corrupt_missing_weights(p): (p / "model.safetensors").unlink()
def corrupt_bad_json(p): (p / "config.json").write_text("{ not json")
def corrupt_not_object(p): (p / "config.json").write_text("[1, 2]")
def corrupt_version(p): _write_config(p, {**_config(p), "format_version": 99})
def corrupt_bad_config(p): _write_config(p, {**_config(p), "model": {**_config(p)["model"], "n_heads": 3}})
def corrupt_unknown_field(p): _write_config(p, {**_config(p), "model": {**_config(p)["model"], "wings": 2}})
def corrupt_vocab_mismatch(p):
    c = _config(p)
    c["tokenizer"]["vocab"] = c["tokenizer"]["vocab"][:-1]
    _write_config(p, c)
def corrupt_truncated_weights(p):
    raw = (p / "model.safetensors").read_bytes()
    (p / "model.safetensors").write_bytes(raw[: len(raw) // 2])
def corrupt_garbage_weights(p): (p / "model.safetensors").write_bytes(b"\x80\x03}q\x00(X\x01")  # a pickle
def corrupt_shape(p):
    state = load_file(p / "model.safetensors")
    state["head.weight"] = torch.zeros(3, 3)
    save_file(state, p / "model.safetensors")
def corrupt_missing_tensor(p):
    state = load_file(p / "model.safetensors")
    del state["ln_f.weight"]
    save_file(state, p / "model.safetensors")
def corrupt_extra_tensor(p):
    state = load_file(p / "model.safetensors")
    state["extra"] = torch.zeros(1)
    save_file(state, p / "model.safetensors")
def corrupt_nan(p):
    state = load_file(p / "model.safetensors")
    state["tok_emb.weight"][0, 0] = math.nan
    save_file(state, p / "model.safetensors")
def corrupt_int_dtype(p):
    state = load_file(p / "model.safetensors")
    state["ln_f.bias"] = state["ln_f.bias"].long()
    save_file(state, p / "model.safetensors")


@pytest.mark.parametrize("corrupt, file, words", [
    (corrupt_missing_config, "config.json", "missing file"),
    (corrupt_missing_weights, "model.safetensors", "missing file"),
    (corrupt_bad_json, "config.json", "bad JSON"),
    (corrupt_not_object, "config.json", "JSON object"),
    (corrupt_version, "config.json", "unknown format_version"),
    (corrupt_bad_config, "config.json", "not divisible"),
    (corrupt_unknown_field, "config.json", "invalid model config"),
    (corrupt_vocab_mismatch, "config.json", "vocab_size"),
    (corrupt_truncated_weights, "model.safetensors", "safetensors"),
    (corrupt_garbage_weights, "model.safetensors", "safetensors"),
    (corrupt_shape, "model.safetensors", "shape mismatch"),
    (corrupt_missing_tensor, "model.safetensors", "missing tensors"),
    (corrupt_extra_tensor, "model.safetensors", "unexpected tensors"),
    (corrupt_nan, "model.safetensors", "non-finite"),
    (corrupt_int_dtype, "model.safetensors", "dtype"),
])
def test_corrupt_checkpoints_raise_one_clear_error(saved, corrupt, file, words):
    path = saved[0]
    corrupt(path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert info.value.path.endswith(file)
    assert words in str(info.value)


def test_not_a_folder(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint folder"):
        load_checkpoint(tmp_path / "nothing")


def test_discover_lists_broken_models_with_their_error(saved, tmp_path_factory):
    path = saved[0]
    user = tmp_path_factory.mktemp("user")
    (user / "broken").mkdir()
    (user / "broken" / "config.json").write_text("{")
    entries = discover_models(path.parent, user)
    assert [(e.name, e.shipped, e.error is None) for e in entries] == [("m", True, True), ("broken", False, False)]
    assert "bad JSON" in entries[1].error
