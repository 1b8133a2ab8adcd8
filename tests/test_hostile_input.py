"""Hostile model folders and fields: every crafted file is built here, in a temporary folder, and each must give
its message while the good models keep working. Nothing here is timed: "not re-read" is counted (calls to the
header reader, to the loader), "not built" is checked by making the model class fail if it is ever built."""
import json
import math
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import core.nn.checkpoint as ck
from core.nn.checkpoint import CheckpointError, check_checkpoint, load_checkpoint
from core.nn.model_discovery import discover_models
from core.nn.model_card import read_card, read_heads, read_log
from core.nn.model_store import save_checkpoint, user_model_folder
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.bpe import BPETokenizer, TokenizerFailed
from core.nn.tokenizer import CharTokenizer, Prompt
from tests.conftest import app_pages

SECRET = "TOP-SECRET-4c7e"  # what a file outside the models folder holds: it must never reach a page


def _good(path: Path, seed: int = 0) -> Path:
    """A small, valid character model folder of ours."""
    torch.manual_seed(seed)
    tok = CharTokenizer.from_text("abcdefgh ")
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=8, d_model=8, n_heads=2, n_layers=1))
    return save_checkpoint(path, model, tok)


def _secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.md").write_text(f"# {SECRET}\n", encoding="utf-8")
    return outside / "secret.md"


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _write_config(folder: Path, data) -> None:
    (folder / "config.json").write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def _bpe_folder(path: Path, pre_tokenizer: dict | None = None, extra_tokens: int = 0) -> Path:
    """A model folder of ours with a byte-level BPE, its tokenizer.json then edited: another pre-tokenizer, or
    ``extra_tokens`` more entries in its vocabulary."""
    bpe = BPETokenizer.train("the cat sat on the mat " * 50, vocab_size=270)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=bpe.vocab_size, n_ctx=8, d_model=8, n_heads=2, n_layers=1))
    folder = save_checkpoint(path, model, bpe)
    spec = json.loads((folder / "tokenizer.json").read_text())
    if pre_tokenizer is not None:
        spec["pre_tokenizer"] = pre_tokenizer
    base = len(spec["model"]["vocab"])
    for i in range(extra_tokens):
        spec["model"]["vocab"][f"x{i}"] = base + i
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return folder


def _panicking(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# ------------------------------------------------------------------ 1. links out of a model folder
@pytest.mark.parametrize("name", ["README.md", "log.csv", "heads.csv", "config.json", "model.safetensors"])
def test_no_file_of_a_model_folder_is_read_through_a_link_that_leaves_it(tmp_path, name):
    folder = _good(tmp_path / "models" / "x")
    secret = _secret(tmp_path)
    (folder / name).unlink(missing_ok=True)
    os.symlink(secret, folder / name)
    if name == "README.md":
        with pytest.raises(CheckpointError, match="outside its model folder"):
            read_card(folder)
    elif name == "log.csv":
        with pytest.raises(CheckpointError, match="outside its model folder"):
            read_log(folder)
    elif name == "heads.csv":
        with pytest.raises(CheckpointError, match="outside its model folder"):
            read_heads(folder)
    else:
        with pytest.raises(CheckpointError, match="outside its model folder"):
            check_checkpoint(folder)
        with pytest.raises(CheckpointError, match="outside its model folder"):
            load_checkpoint(folder)
        entry, = discover_models(None, tmp_path / "models")
        assert "outside its model folder" in entry.error and SECRET not in entry.error


def test_a_link_to_another_file_of_the_same_folder_is_read(tmp_path):
    folder = _good(tmp_path / "models" / "x")
    (folder / "card-v2.md").write_text("# x\n\nthe real card\n", encoding="utf-8")
    (folder / "README.md").unlink()
    os.symlink("card-v2.md", folder / "README.md")
    assert "the real card" in read_card(folder)


def test_a_tokenizer_file_linked_out_of_the_folder_is_refused(tmp_path):
    folder = _bpe_folder(tmp_path / "models" / "b")
    outside = tmp_path / "tok.json"
    shutil.move(folder / "tokenizer.json", outside)
    os.symlink(outside, folder / "tokenizer.json")
    with pytest.raises(CheckpointError, match="outside its model folder"):
        load_checkpoint(folder)


def test_a_model_folder_that_links_outside_the_models_folder_is_not_listed_as_a_model(tmp_path):
    models = tmp_path / "models"
    _good(tmp_path / "elsewhere" / "m")
    _good(models / "real")
    os.symlink(tmp_path / "elsewhere" / "m", models / "away")
    os.symlink(models / "real", models / "alias")  # inside: listed
    entries = {e.name: e for e in discover_models(None, models)}
    assert entries["real"].error is None and entries["alias"].error is None
    assert "outside" in entries["away"].error


def test_a_fifo_in_place_of_the_card_is_refused_without_blocking(tmp_path):
    folder = _good(tmp_path / "models" / "x")
    (folder / "README.md").unlink()
    os.mkfifo(folder / "README.md")  # opening it for reading would wait for a writer forever
    with pytest.raises(CheckpointError, match="not a regular file"):
        read_card(folder)


# ------------------------------------------------------------------ 3. one bad config.json
@pytest.mark.parametrize("raw, words", [
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ('{"format_version": 1, "model": {"d_model": ' + "9" * 5000 + '}, "tokenizer": {"type": "char", "vocab": ["a"]}}',
     "unreadable JSON"),
])
def test_a_malformed_config_is_that_folders_error_and_the_others_are_listed(tmp_path, raw, words):
    models = tmp_path / "models"
    _good(models / "fine")
    bad = _good(models / "odd", seed=1)
    _write_config(bad, raw)
    entries = {e.name: e for e in discover_models(None, models)}
    assert entries["fine"].error is None
    assert words in entries["odd"].error


def test_an_unexpected_failure_while_checking_a_folder_stays_that_folders_error(tmp_path, monkeypatch):
    models = tmp_path / "models"
    _good(models / "a")
    _good(models / "b", seed=1)
    real = ck._check

    def check(folder, with_tokenizer=True):
        if folder.name == "b":
            raise MemoryError("simulated")
        return real(folder, with_tokenizer)

    monkeypatch.setattr("core.nn.model_discovery._check", check)
    entries = {e.name: e for e in discover_models(None, models)}
    assert entries["a"].error is None and "MemoryError" in entries["b"].error


# ------------------------------------------------------------------ 4. sizes checked before anything is built
def test_a_config_of_100000_layers_is_refused_before_any_model_is_built(tmp_path, monkeypatch):
    folder = _good(tmp_path / "m")
    data = _config(folder)
    data["model"]["n_layers"] = 100_000
    _write_config(folder, data)

    def never(*a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(ck, "Transformer", never)
    with pytest.raises(CheckpointError, match="100,000 layers"):
        check_checkpoint(folder)


def test_a_config_that_needs_more_bytes_than_the_weights_hold_is_refused_before_building(tmp_path, monkeypatch):
    folder = _good(tmp_path / "m")
    data = _config(folder)
    data["model"].update(n_layers=10, d_model=64, n_heads=4, n_ctx=64, d_ff=256)  # 10 blocks of 49,408
    _write_config(folder, data)
    monkeypatch.setattr(ck, "Transformer", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built")))
    size = (folder / "model.safetensors").stat().st_size
    with pytest.raises(CheckpointError) as e:
        check_checkpoint(folder)
    # 10 * 49,408 (blocks) + 9 * 64 * 2 (embedding and output) + 64 * 64 (positions) + 128 (final norm), 2 bytes each
    needed = 2 * (10 * 49_408 + 2 * 9 * 64 + 64 * 64 + 2 * 64)
    assert f"{needed:,} bytes" in str(e.value) and f"{size:,} bytes" in str(e.value)


def test_expected_names_for_many_layers_match_a_model_built_with_them():
    cfg = ModelConfig(vocab_size=5, n_ctx=4, d_model=4, n_heads=2, n_layers=7, bias=True, tie_weights=True)
    with torch.device("meta"):
        built = {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items() if k != "head.weight"}
    assert ck._expected(cfg) == built


# ------------------------------------------------------------------ 5. fat headers, and discovery read once
def _weights_with_header(folder: Path, header: dict, claimed: int | None = None) -> None:
    raw = json.dumps(header).encode()
    n = len(raw) if claimed is None else claimed
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", n) + raw)


def test_a_header_claiming_2_to_the_63_bytes_or_too_many_entries_is_refused(tmp_path):
    folder = _good(tmp_path / "m")
    _weights_with_header(folder, {}, claimed=2**63)
    with pytest.raises(CheckpointError, match="claims"):
        check_checkpoint(folder)
    many = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(5000)}
    _weights_with_header(folder, many)
    with pytest.raises(CheckpointError, match="5,000 tensors"):
        check_checkpoint(folder)


def test_a_header_whose_offsets_leave_the_file_is_refused(tmp_path):
    folder = _good(tmp_path / "m")
    _weights_with_header(folder, {"tok_emb.weight": {"dtype": "F32", "shape": [9, 8], "data_offsets": [0, 288]}})
    with pytest.raises(CheckpointError, match="outside the file"):
        check_checkpoint(folder)


def test_discovery_reads_a_folder_again_only_when_it_changed(tmp_path, monkeypatch):
    models = tmp_path / "models"
    for i in range(3):
        _good(models / f"m{i}", seed=i)
    broken = _good(models / "broken", seed=9)
    _weights_with_header(broken, {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    reads = []
    real = ck.read_header
    monkeypatch.setattr(ck, "read_header", lambda folder, name: reads.append(Path(folder).name) or real(folder, name))
    first = discover_models(None, models)
    assert sorted(reads) == ["broken", "m0", "m1", "m2"]
    reads.clear()
    assert [(e.name, e.error) for e in discover_models(None, models)] == [(e.name, e.error) for e in first]
    assert reads == []  # nothing changed: nothing read, the broken folder's refusal included
    data = _config(models / "m1")
    data["training"] = {"note": "edited"}
    _write_config(models / "m1", data)
    discover_models(None, models)
    assert reads == ["m1"]


def test_discovery_reads_at_most_max_model_folders_and_says_how_many_it_left(tmp_path, monkeypatch):
    models = tmp_path / "models"
    monkeypatch.setattr("core.nn.model_discovery.MAX_MODEL_FOLDERS", 3)
    for i in range(5):
        (models / f"f{i}").mkdir(parents=True)
    entries = discover_models(None, models)
    assert [e.name for e in entries[:3]] == ["f0", "f1", "f2"]
    assert len(entries) == 4 and "left 2 out" in entries[3].error


# ------------------------------------------------------------------ 7. tokenizers: size, vocabulary, panics
def test_a_tokenizer_with_more_tokens_than_any_real_one_is_refused_before_the_rust_parse(tmp_path, monkeypatch):
    import core.nn.bpe as tk

    monkeypatch.setattr(tk, "MAX_TOKENIZER_VOCAB", 1000)  # the real bound is 262,144: the same rule, a smaller file
    folder = _bpe_folder(tmp_path / "b", extra_tokens=1000)
    with pytest.raises(CheckpointError, match="1,2[0-9]{2} tokens; this app reads at most 1,000"):
        load_checkpoint(folder)


def test_a_tokenizer_whose_regex_panics_on_ordinary_text_is_refused_at_load(tmp_path):
    folder = _bpe_folder(tmp_path / "b", pre_tokenizer=_panicking("(a|aa)+$"))
    with pytest.raises(CheckpointError, match="fails on ordinary text"):
        load_checkpoint(folder)


def test_a_tokenizer_panic_on_a_prompt_becomes_a_message_not_a_dead_page(tmp_path):
    folder = _bpe_folder(tmp_path / "b", pre_tokenizer=_panicking("(b|bb)+$"))  # the probe holds no run of b
    _, tok = load_checkpoint(folder)
    with pytest.raises(TokenizerFailed):
        tok.encode("b" * 1000 + "c")
    prompt = Prompt(tok, "b" * 1000 + "c", 8)
    assert prompt.empty and prompt.failure and "cannot read this text" in prompt.messages(8)[0]
    assert Prompt(tok, "the cat", 8).ids  # other text still works


# ------------------------------------------------------------------ 18. one name, whatever its letter case
def test_names_that_differ_only_by_case_are_one_name(tmp_path):
    models = tmp_path / "models"
    tok = CharTokenizer.from_text("ab")
    model = Transformer(ModelConfig(vocab_size=2, n_ctx=4, d_model=4, n_heads=1, n_layers=1))
    save_checkpoint(user_model_folder(models, "case-Test", owner="alice"), model, tok, owner="alice")
    with pytest.raises(ValueError, match="someone else"):
        user_model_folder(models, "CASE-test", owner="bob")
    with pytest.raises(ValueError, match="already have"):
        user_model_folder(models, "CASE-test", owner="alice")
    again = user_model_folder(models, "CASE-test", owner="alice", overwrite=True)
    assert again.name == "case-Test"
    # a save racing under the other spelling finds the twin under the lock
    with pytest.raises(FileExistsError, match="same name"):
        save_checkpoint(models / "CASE-TEST", model, tok, owner="carol")
    assert sorted(p.name for p in models.iterdir()) == ["case-Test"]


# ------------------------------------------------------------------ the app: crafted folders beside good models
def _crafted(tmp_path: Path) -> Path:
    """A models folder holding one of each hostile folder, and one good model."""
    models = tmp_path / "models"
    secret = _secret(tmp_path)
    _good(models / "a-good-one")
    card = _good(models / "link-card", seed=1)
    (card / "README.md").unlink()
    os.symlink(secret, card / "README.md")
    _write_config(_good(models / "deep-json", seed=2), "[" * 200_000 + "]" * 200_000)
    odd = _good(models / "huge-int", seed=3)
    _write_config(odd, (odd / "config.json").read_text().replace('"d_model": 8', '"d_model": ' + "9" * 5000))
    layers = _good(models / "many-layers", seed=4)
    data = _config(layers)
    data["model"]["n_layers"] = 100_000
    _write_config(layers, data)
    _weights_with_header(_good(models / "fat-header", seed=5), {}, claimed=2**63)
    nan = _good(models / "nan-weights", seed=6)
    model, tok = load_checkpoint(nan)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["tok_emb.weight"][0, 0] = math.nan
    save_file(state, str(nan / "model.safetensors"), metadata={"format": "pt"})
    _bpe_folder(models / "panic-regex", pre_tokenizer=_panicking("(a|aa)+$"))
    os.symlink(tmp_path / "outside", models / "link-folder")
    return models


@pytest.mark.slow  # the heaviest of its file: seconds
def test_crafted_folders_give_their_reasons_once_and_every_page_works(tmp_path, open_page):
    models = _crafted(tmp_path)
    at = open_page("pages/home.py", models_dir=models)
    expander, = [e for e in at.sidebar.expander if "could not be loaded" in e.label]
    listed = " ".join(m.value for m in expander.markdown).replace("\\", "")  # the names are Markdown-escaped
    for name in ("deep-json", "huge-int", "many-layers", "fat-header", "link-folder"):
        assert name in listed, name
    assert len(at.sidebar.warning) == 0  # one expander, not a warning per folder
    picker = at.sidebar.selectbox[0]
    assert "a-good-one (a classmate’s)" in picker.options and "shakespeare-char" in picker.options
    for page, _ in app_pages():
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, at.exception[0].message if at.exception else None)
        shown = " ".join(str(el.value) for kind in ("markdown", "caption", "warning", "error", "info")
                         for el in getattr(at, kind))
        assert SECRET not in shown, page


def test_the_symlinked_card_is_never_shown_and_the_home_page_says_why(tmp_path, open_page):
    models = _crafted(tmp_path)
    at = open_page("pages/home.py", models_dir=models, state={"te_model_name": "link-card"})
    assert not at.exception
    assert any("outside its model folder" in w.value for w in at.warning)
    assert SECRET not in " ".join(m.value for m in at.markdown)


@pytest.mark.parametrize("name, words", [("nan-weights", "non-finite"), ("panic-regex", "fails on ordinary text")])
def test_a_model_refused_at_load_is_refused_once_per_folder_state(tmp_path, open_page, monkeypatch, name, words):
    import ui

    models = _crafted(tmp_path)
    loads = []
    real = load_checkpoint
    monkeypatch.setattr(ui.models, "load_checkpoint", lambda path: loads.append(path) or real(path))
    at = open_page("pages/home.py", models_dir=models, state={"te_model_name": name})
    assert any(words in e.value for e in at.sidebar.error)
    at.run()
    at.run()
    assert not at.exception and len(loads) == 1  # the refusal is kept; the weights are not read on every rerun


def test_uncaught_errors_show_no_stack_trace_to_users():
    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert config["client"]["showErrorDetails"] in ("type", "none")


# ------------------------------------------------------------------ 19. a lone surrogate in a box
def test_a_message_with_a_lone_surrogate_is_repaired_to_the_same_length():
    from streamlit.proto.BackMsg_pb2 import BackMsg

    import ui

    msg = BackMsg()
    w = msg.rerun_script.widget_states.widgets.add()
    w.id, w.string_value = "prompt", "emoji half: @@@ end"
    raw = msg.SerializeToString()
    broken = raw.replace("@@@".encode(), b"\xed\xa0\xbd")  # what a browser sends for a lone high surrogate
    with pytest.raises(Exception):
        BackMsg().ParseFromString(broken)  # what closed the socket
    fixed = ui.repair_surrogates(broken)
    assert len(fixed) == len(broken)
    back = BackMsg()
    back.ParseFromString(fixed)
    assert back.rerun_script.widget_states.widgets[0].string_value == "emoji half: \ufffd end"
    assert ui.repair_surrogates(raw) == raw  # a message without one is untouched


@pytest.mark.slow
def test_a_lone_surrogate_typed_into_a_prompt_keeps_the_connection_and_warns(tmp_path):
    import tempfile

    from bench.load import start_server
    from deploy.client import Session

    proc, url = start_server(tempfile.mkdtemp(prefix="te-surrogate-"), warm=False)
    try:
        # the repair is installed by app.py's first run: a socket already waiting for its next message then still
        # waits with the old reader, so the repaired reader serves the sessions that come after (a warmed server's)
        first = Session(url, timeout=120)
        first.run("home")
        first.close()
        s = Session(url, timeout=120)
        try:
            s.run("attention")
            box = s.widget_id("text_area", "Your prompt")
            # what a browser's encoder sends for a lone low surrogate: three bytes that are not UTF-8
            s.run("attention", {box: "To be @@@ or not"}, edit=lambda raw: raw.replace(b"@@@", b"\xed\xb0\x80"))
            assert not s.exceptions
            texts = [el.alert.body for el in s.elements if el.WhichOneof("type") == "alert"]
            assert any("could not be read" in t for t in texts), texts
        finally:
            s.close()
    finally:
        proc.terminate()
        proc.wait(15)
