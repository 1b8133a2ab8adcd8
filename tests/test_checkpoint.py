import json
import math
import os
import random
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.nn.checkpoint import CheckpointError, load_checkpoint
from core.nn.model_discovery import discover_models
from core.nn.model_card import read_card, read_log
from core.nn.model_store import (checkpoint_owner, default_model_name, recover_interrupted_saves, sanitise_model_name,
                                 save_checkpoint, user_model_folder)
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer

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

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr("core.nn.model_store.save_file", boom)
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


# --- owners, default names, and replacing a model safely (issue 12) ---

def _tok():
    return CharTokenizer.from_text(TEXT)


def _model(seed: int, tok):
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1))


def _holds(path, model) -> bool:
    """The checkpoint at ``path`` loads completely and holds exactly ``model``'s weights."""
    loaded, _ = load_checkpoint(path)
    ref = model.state_dict()
    state = loaded.state_dict()
    return state.keys() == ref.keys() and all(torch.equal(state[k], ref[k]) for k in ref)


def test_owner_is_recorded_and_read_back(tmp_path):
    tok = _tok()
    model = _model(0, tok)
    owned = save_checkpoint(tmp_path / "owned", model, tok, owner="sess_1-A")
    cli = save_checkpoint(tmp_path / "cli", model, tok)
    assert _config(owned)["owner"] == "sess_1-A"
    assert "owner" in _config(cli) and _config(cli)["owner"] is None
    assert checkpoint_owner(owned) == "sess_1-A"
    assert checkpoint_owner(cli) is None
    assert checkpoint_owner(tmp_path / "missing") is None
    (cli / "config.json").write_text("{")
    assert checkpoint_owner(cli) is None  # unreadable: no owner, no exception
    assert _holds(owned, model)  # the owner key does not disturb loading


def test_discover_fills_the_owner(tmp_path):
    tok = _tok()
    user = tmp_path / "user"
    save_checkpoint(user / "a", _model(0, tok), tok, owner="alice")
    save_checkpoint(user / "b", _model(0, tok), tok)
    entries = discover_models(None, user)
    assert [(e.name, e.owner, e.error) for e in entries] == [("a", "alice", None), ("b", None, None)]


def test_discover_reads_again_a_folder_replaced_while_it_was_read(tmp_path, monkeypatch):
    """Another replica's save swaps a new folder in under the name while this one checks it: the check's files
    vanish mid-read. That folder is read again (and listed once), and a folder that is gone is left out; neither
    may end the page run with a FileNotFoundError (seen under two processes saving in a loop)."""
    import core.nn.checkpoint as ckpt
    tok = _tok()
    user = tmp_path / "user"
    save_checkpoint(user / "a", _model(0, tok), tok, owner="alice")
    save_checkpoint(user / "b", _model(0, tok), tok)
    real, calls = ckpt._check, []

    def swapped_once(folder, **kw):
        calls.append(folder.name)
        if folder.name == "a" and calls.count("a") == 1:
            raise FileNotFoundError(2, "No such file or directory", str(folder / "config.json"))
        if folder.name == "b":
            shutil.rmtree(folder)  # deleted meanwhile
            raise FileNotFoundError(2, "No such file or directory", str(folder / "config.json"))
        return real(folder, **kw)
    monkeypatch.setattr("core.nn.model_discovery._check", swapped_once)
    entries = discover_models(None, user)
    assert [(e.name, e.owner, e.error) for e in entries] == [("a", "alice", None)]
    assert calls == ["a", "a", "b"]


def test_user_model_folder_refuses_someone_elses_model(tmp_path):
    tok = _tok()
    first, second = _model(0, tok), _model(1, tok)
    base = tmp_path / "models"
    save_checkpoint(base / "mine", first, tok, owner="alice")
    save_checkpoint(base / "cli", first, tok)  # saved by the command line: no owner
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="'mine' already exists and belongs to someone else; choose another name"):
            user_model_folder(base, "mine", overwrite=overwrite, owner="bob")
        with pytest.raises(ValueError, match="belongs to someone else"):
            user_model_folder(base, "cli", overwrite=overwrite, owner="bob")
    with pytest.raises(ValueError, match="belongs to someone else"):
        user_model_folder(base, "mine", overwrite=True)  # no owner is not alice either
    with pytest.raises(ValueError, match="you already have a model called 'mine'; choose another name or replace it"):
        user_model_folder(base, "mine", owner="alice")
    assert user_model_folder(base, "mine", overwrite=True, owner="alice") == base.resolve() / "mine"
    assert user_model_folder(base, "cli", overwrite=True) == base.resolve() / "cli"
    assert user_model_folder(base, "new", owner="bob") == base.resolve() / "new"
    # a save with an owner never replaces someone else's model, even when called without the check above
    with pytest.raises(ValueError, match="belongs to someone else"):
        save_checkpoint(base / "mine", second, tok, overwrite=True, owner="bob")
    assert _holds(base / "mine", first) and checkpoint_owner(base / "mine") == "alice"
    assert sorted(p.name for p in base.iterdir()) == ["cli", "mine"]
    save_checkpoint(base / "mine", second, tok, overwrite=True, owner="alice")
    assert _holds(base / "mine", second)


@pytest.mark.parametrize("bad", ["", "a" * 65, "a b", "../x", "x/y", "x.y", "\u00e9", "x\n", "<b>", 5, b"abc"])
def test_bad_owner_strings_are_refused(tmp_path, bad):
    tok = _tok()
    with pytest.raises(ValueError, match="owner"):
        user_model_folder(tmp_path, "x", owner=bad)
    with pytest.raises(ValueError, match="owner"):
        save_checkpoint(tmp_path / "x", _model(0, tok), tok, owner=bad)
    assert list(tmp_path.iterdir()) == []
    assert user_model_folder(tmp_path, "x", owner="a" * 64) == tmp_path.resolve() / "x"


def test_default_model_name():
    now = datetime(2024, 11, 30, 9, 12, 59)
    name = default_model_name("shakespeare.txt", now, random.Random(1))
    assert re.fullmatch(r"shakespeare-1130-0912-[0-9a-f]{4}", name)
    assert sanitise_model_name(name) == name
    assert default_model_name("shakespeare.txt", now, random.Random(2)) != name
    assert default_model_name("Tiny Shakespeare (v2).txt", now).startswith("tiny-shakespeare-v2-1130-0912-")
    assert default_model_name("\u65e5\u672c\u8a9e.txt", now).startswith("model-1130-0912-")
    assert default_model_name("", now).startswith("model-1130-0912-")
    for corpus in ["../../etc/passwd", "C:\\data\\Caf\u00e9.md", "a" * 200, ".hidden", "x.y.z", "---", "v1.5 final"]:
        made = default_model_name(corpus, now)
        assert sanitise_model_name(made) == made
        assert re.fullmatch(r"[a-z0-9-]{1,20}-1130-0912-[0-9a-f]{4}", made), made


class _FailingRenames:
    """os.rename that raises at the given calls (1 = the first rename after patching)."""

    def __init__(self, fail_at):
        self.fail_at, self.calls, self.real = set(fail_at), 0, os.rename

    def __call__(self, src, dst, *args, **kwargs):
        self.calls += 1
        if self.calls in self.fail_at:
            raise OSError(f"simulated failure of rename {self.calls}: {src} -> {dst}")
        return self.real(src, dst, *args, **kwargs)


@pytest.mark.parametrize("fail_renames, fail_removal, expect", [
    ({1}, False, "old"),         # 1st operation: m -> .m.old
    ({2}, False, "old"),         # 2nd operation: tmp -> m (the old model is renamed back)
    ({2, 3}, False, "recover"),  # 2nd operation, and renaming the old model back fails too
    (set(), True, "new"),        # 3rd operation: removing .m.old
], ids=["rename-1", "rename-2", "rename-2-and-rollback", "remove-old"])
def test_a_failed_replacement_keeps_the_old_or_the_new_model(tmp_path, monkeypatch, fail_renames, fail_removal, expect):
    tok = _tok()
    old_model, new_model = _model(0, tok), _model(1, tok)
    base = tmp_path / "models"
    path = save_checkpoint(base / "m", old_model, tok)
    monkeypatch.setattr(os, "rename", _FailingRenames(fail_renames))
    if fail_removal:
        real_rmtree = shutil.rmtree

        def rmtree(p, ignore_errors=False, *args, **kwargs):
            if Path(p).name == ".m.old":
                if ignore_errors:
                    return None  # what a real rmtree that cannot remove anything does when told to ignore errors
                raise PermissionError(f"simulated: cannot remove {p}")
            return real_rmtree(p, ignore_errors, *args, **kwargs)
        monkeypatch.setattr(shutil, "rmtree", rmtree)
    raised = False
    try:
        save_checkpoint(path, new_model, tok, overwrite=True)
    except OSError:
        raised = True
    monkeypatch.undo()
    assert raised == (expect != "new")
    if expect == "recover":  # nothing under the name until the next model listing puts the old one back
        assert not path.exists() and (base / ".m.old").is_dir()
        assert [(e.name, e.error) for e in discover_models(None, base)] == [("m", None)]
    assert _holds(path, new_model if expect == "new" else old_model)
    names = sorted(p.name for p in base.iterdir())
    assert names == ([".m.old", "m"] if fail_removal else ["m"])  # never a temporary folder left behind
    # a leftover old copy is neither listed nor put back over the new model, and the next replacement clears it
    assert [e.name for e in discover_models(None, base)] == ["m"]
    assert _holds(path, new_model if expect == "new" else old_model)
    third = _model(2, tok)
    save_checkpoint(path, third, tok, overwrite=True)
    assert _holds(path, third) and sorted(p.name for p in base.iterdir()) == ["m"]


def _kill_between_the_renames(base, model, tok):
    """The models folder as a process killed right after a replacement's first rename leaves it."""
    path = save_checkpoint(base / "m", model, tok)
    os.rename(path, base / ".m.old")
    partial = base / ".m.k1l2l3ed.tmp"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half written")
    return path


def test_discover_undoes_a_save_killed_between_its_two_renames(tmp_path):
    tok = _tok()
    old_model = _model(0, tok)
    base = tmp_path / "models"
    path = _kill_between_the_renames(base, old_model, tok)
    hour_ago = time.time() - 3700
    os.utime(base / ".m.k1l2l3ed.tmp", (hour_ago, hour_ago))
    young = base / ".x.y0ung000.tmp"  # may belong to a save still writing: kept
    young.mkdir()
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / ".s.old").mkdir()  # the shipped folder is never touched
    assert [(e.name, e.shipped, e.error) for e in discover_models(shipped, base)] == [("m", False, None)]
    assert _holds(path, old_model)
    assert sorted(p.name for p in base.iterdir()) == [".x.y0ung000.tmp", "m"]
    assert sorted(p.name for p in shipped.iterdir()) == [".s.old"]


def test_recover_interrupted_saves_and_the_next_save_undo_a_killed_save(tmp_path):
    tok = _tok()
    old_model, new_model = _model(0, tok), _model(1, tok)
    base = tmp_path / "a"
    path = _kill_between_the_renames(base, old_model, tok)
    assert recover_interrupted_saves(base, stale_tmp_s=0) == ["m"]
    assert _holds(path, old_model) and sorted(p.name for p in base.iterdir()) == ["m"]
    assert recover_interrupted_saves(base) == []
    # a save to that name first puts the old model back: it is refused without overwrite, replaced with it
    base = tmp_path / "b"
    path = _kill_between_the_renames(base, old_model, tok)
    with pytest.raises(FileExistsError):
        save_checkpoint(path, new_model, tok)
    assert _holds(path, old_model)
    os.rename(path, base / ".m.old")
    save_checkpoint(path, new_model, tok, overwrite=True)
    assert _holds(path, new_model) and ".m.old" not in [p.name for p in base.iterdir()]


def test_recovery_never_follows_links_or_replaces_a_model(tmp_path):
    tok = _tok()
    first, second = _model(0, tok), _model(1, tok)
    outside = tmp_path / "outside"
    victim = save_checkpoint(outside / "victim", first, tok)
    base = tmp_path / "models"
    base.mkdir()
    (base / ".evil.old").symlink_to(victim)
    (base / ".link.abcd1234.tmp").symlink_to(outside)
    os.utime(base / ".link.abcd1234.tmp", (0, 0), follow_symlinks=False)
    (base / "dangling").symlink_to(tmp_path / "nowhere")
    save_checkpoint(base / "dangling-old", first, tok)
    os.rename(base / "dangling-old", base / ".dangling.old")
    save_checkpoint(base / "m", first, tok)
    save_checkpoint(base / "m2", second, tok)
    os.rename(base / "m2", base / ".m.old")  # an old copy beside a complete model: a leftover, not restored
    assert recover_interrupted_saves(base, stale_tmp_s=0) == []
    assert sorted(p.name for p in base.iterdir()) == [".dangling.old", ".evil.old", ".link.abcd1234.tmp", ".m.old",
                                                      "dangling", "m"]
    assert _holds(victim, first) and sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert _holds(base / "m", first)


def test_card_states_the_repeat_mixture_its_cost_and_when_the_head_formed():
    from core.nn.model_card import model_card
    from core.analysis.induction import induction_summary
    from core.nn.config import ModelConfig
    rows = [{"step": s, "layer": l, "head": h, "previous_token": 0.5, "induction": (v if (l, h) == (1, 3) else 0.01),
             "first_copy_loss": 4.0, "second_copy_loss": 0.5}
            for s, v in ((0, 0.0), (500, 0.2), (600, 0.45), (700, 0.8)) for l in range(2) for h in range(4)]
    training = {"train_config": {"repeat_fraction": 0.2, "repeat_first_steps": 1000, "repeat_min_span": 20,
                                 "repeat_max_span": 60},
                "val_loss": 1.55, "compared_to": {"model": "plain", "val_loss": 1.52, "difference": 0.03},
                "induction": induction_summary(rows)}
    card = model_card("m", ModelConfig(), training)
    assert "every row for the first 1,000 steps, 20% of rows after that" in card
    assert "20-60 random characters" in card
    assert "L2 H4 (counted from 1): induction score 0.80 at step 700; crossed 0.30 at step 600" in card
    assert "1.5500 vs 1.5200 for plain (no repeats), a difference of +0.0300" in card
    assert "repeat mixture" not in model_card("m", ModelConfig(), {"train_config": {"repeat_fraction": 0.0}})


def test_card_of_a_character_model_adds_bits_per_character():
    """A record from before bits/char were measured: the card divides nats/char by ln 2 itself."""
    from core.nn.model_card import model_card
    from core.nn.config import ModelConfig
    card = model_card("m", ModelConfig(), {"val_loss": 1.5561, "train_loss": 1.363})
    assert "| final validation loss | 1.5561 nats/char |" in card
    assert f"| validation bits per character | {1.5561 / math.log(2):.4f} " in card and "2.2450" in card
    assert "tokenizer |" not in card and "characters per token" not in card
    card = model_card("m", ModelConfig(), {"val_loss": 1.5, "val_bits_per_char": 2.1})  # a recorded value wins
    assert "| validation bits per character | 2.1000 " in card
