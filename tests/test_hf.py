"""Hugging Face GPT-2 folders in and out (core.nn.hf, core.nn.checkpoint): the same logits as transformers'
GPT2LMHeadModel to 1e-4 both ways, the same token ids as its tokenizer, and the refusals."""
import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from core.nn.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from core.nn.model_discovery import discover_models  # noqa: E402
from core.nn.model_store import save_checkpoint  # noqa: E402
from core.nn.hf import export_gpt2, export_zip  # noqa: E402
from core.nn.config import ModelConfig  # noqa: E402
from core.nn.model import Transformer  # noqa: E402
from core.nn.params import count_parameters  # noqa: E402
from tests.conftest import SHIPPED  # noqa: E402
from tests.gpt2_folders import gpt2_config, save_random_gpt2, small_bpe  # noqa: E402
from tests.attention_hooks import attention_and_logits  # noqa: E402

TEXTS = ["def f(x):\n    return x + 1  # the end", "KING HENRY: 🙂 مرحبا \x01 tabs\tand spaces  ."]


def ids_of(tok, text, n_ctx):
    return torch.tensor([tok.encode(text)[:n_ctx]])


CONFIGS = [
    dict(tie_word_embeddings=True, activation_function="gelu_new"),
    dict(tie_word_embeddings=False, activation_function="gelu_new", n_inner=48),
    dict(tie_word_embeddings=True, activation_function="relu", n_layer=3, n_head=2, layer_norm_epsilon=1e-6),
    dict(tie_word_embeddings=False, activation_function="gelu", n_embd=48, n_head=3),
]


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: f"tied={kw['tie_word_embeddings']}-{kw['activation_function']}")
def test_a_gpt2_folder_gives_transformers_logits(tmp_path, kw):
    folder, theirs = save_random_gpt2(tmp_path / "gpt2", **kw)
    model, tok = load_checkpoint(folder)
    c = model.config
    assert c.bias and c.tie_weights == kw["tie_word_embeddings"] and (model.head.weight is model.tok_emb.weight) == c.tie_weights
    for text in TEXTS:
        idx = ids_of(tok, text, c.n_ctx)
        with torch.no_grad():
            expected = theirs(idx).logits
        for got in (model(idx).logits, attention_and_logits(model, idx)[1]):  # fused, then written out
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        # incremental decoding with the cache gives the same last logits
        out = model(idx[:, :-3], use_cache=True)
        last = model(idx[:, -3:], past=out.present, use_cache=True).logits
        torch.testing.assert_close(last, expected[:, -3:], atol=1e-4, rtol=0)
    # the counts by formula equal transformers' own parameter count
    assert count_parameters(c)["total"] == sum(p.numel() for p in theirs.parameters())


def test_vocab_and_merges_instead_of_tokenizer_json(tmp_path):
    folder, theirs = save_random_gpt2(tmp_path / "gpt2", tokenizer_files="vocab")
    model, tok = load_checkpoint(folder)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS + ["one<|endoftext|>two"]:
        assert tok.encode(text) == hf_tok.encode(text)
    idx = ids_of(tok, TEXTS[0], 64)
    torch.testing.assert_close(model(idx).logits, theirs(idx).logits.detach(), atol=1e-4, rtol=0)


def test_a_gpt2_model_file_without_the_transformer_prefix(tmp_path):
    """OpenAI's own GPT-2 files were saved from GPT2Model: names without 'transformer.', and the causal mask
    stored as a buffer 'h.0.attn.bias' beside the weights."""
    from safetensors.torch import load_file, save_file

    folder, theirs = save_random_gpt2(tmp_path / "gpt2")
    state = {k.removeprefix("transformer."): v for k, v in load_file(folder / "model.safetensors").items()}
    state["h.0.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
    save_file(state, folder / "model.safetensors")
    model, tok = load_checkpoint(folder)
    idx = ids_of(tok, TEXTS[1], 64)
    torch.testing.assert_close(model(idx).logits, theirs(idx).logits.detach(), atol=1e-4, rtol=0)


# ------------------------------------------------------------------ ours out

def hf_logits(folder, idx):
    theirs = transformers.GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return theirs(idx).logits


def test_the_lecture_model_exported_gives_our_logits_and_ids(tmp_path):
    model, tok = load_checkpoint(SHIPPED)
    folder = export_gpt2(model, tok, tmp_path / "lecture-gpt2")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    text = "KING OF CLUBS:\nA deck of cards was shuffled twice\nand every ace came out in spring;"
    ids = tok.encode(text)
    assert hf_tok.encode(text) == ids and hf_tok.decode(ids) == text
    idx = torch.tensor([ids])
    torch.testing.assert_close(hf_logits(folder, idx), model(idx).logits, atol=1e-4, rtol=0)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["activation_function"] == "relu" and cfg["tie_word_embeddings"] is False
    # and it reads back in as a GPT-2 folder: same logits, same ids
    again, tok2 = load_checkpoint(folder)
    assert again.config.bias and tok2.encode(text) == ids
    torch.testing.assert_close(again(idx).logits, model(idx).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("tied, activation", [(True, "gelu_tanh"), (False, "gelu")])
def test_a_bpe_model_with_biases_exported(tmp_path, tied, activation):
    tok = small_bpe()
    torch.manual_seed(3)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=32, d_model=24, n_heads=3, n_layers=2,
                                    bias=True, activation=activation, tie_weights=tied, ln_eps=1e-6)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    folder = export_gpt2(model, tok, tmp_path / "bpe-gpt2")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        assert hf_tok.encode(text) == tok.encode(text)
    idx = ids_of(tok, TEXTS[0], 32)
    torch.testing.assert_close(hf_logits(folder, idx), model(idx).logits, atol=1e-4, rtol=0)
    # saved as one of ours (the tied matrix once, the tokenizer as tokenizer.json) and loaded back
    ours = save_checkpoint(tmp_path / "ours", model, tok)
    assert (ours / "tokenizer.json").is_file()
    back, tok2 = load_checkpoint(ours)
    assert back.config == model.config and (back.head.weight is back.tok_emb.weight) == tied
    assert torch.equal(back(idx).logits, model(idx).logits) and tok2.pieces == tok.pieces


def test_export_zip_unpacks_to_one_loadable_folder(tmp_path):
    import zipfile

    model, tok = load_checkpoint(SHIPPED)
    data = export_zip(model, tok, "lecture")
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path)
    assert {n.split("/")[0] for n in names} == {"lecture"}
    assert {"lecture/config.json", "lecture/model.safetensors", "lecture/tokenizer.json"} <= set(names)
    again, _ = load_checkpoint(tmp_path / "lecture")
    idx = torch.tensor([tok.encode("ROMEO:")])
    torch.testing.assert_close(again(idx).logits, model(idx).logits, atol=1e-5, rtol=0)


# ------------------------------------------------------------------ refusals and discovery

def test_pickle_weights_are_refused_by_name_and_never_opened(tmp_path, monkeypatch):
    folder, _ = save_random_gpt2(tmp_path / "gpt2")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not even a real pickle")
    import pickle

    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load"))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder)
    assert info.value.path.endswith("pytorch_model.bin") and "safetensors" in str(info.value)
    assert "convert" in str(info.value).lower()
    entry = next(e for e in discover_models(tmp_path / "none", tmp_path) if e.name == "gpt2")
    assert "pytorch_model.bin" in entry.error


@pytest.mark.parametrize("change, words", [
    ({"model_type": "llama"}, "model_type 'llama' is not supported"),
    ({"auto_map": {"AutoModelForCausalLM": "modeling_evil.Evil"}}, "never runs code"),
    ({"trust_remote_code": True}, "never runs code"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"activation_function": "quick_gelu"}, "activation_function 'quick_gelu'"),
    ({"n_embd": 30}, "not divisible"),
])
def test_other_models_and_custom_code_are_refused_clearly(tmp_path, change, words):
    folder, _ = save_random_gpt2(tmp_path / "gpt2")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(CheckpointError, match="config.json") as info:
        load_checkpoint(folder)
    assert words in str(info.value)


def test_missing_tokenizer_and_mismatched_weights_are_named(tmp_path):
    folder, _ = save_random_gpt2(tmp_path / "gpt2")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer"):
        load_checkpoint(folder)
    folder, _ = save_random_gpt2(tmp_path / "gpt2b")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "n_layer": 3}))
    with pytest.raises(CheckpointError, match="missing tensors: transformer.h.2"):
        load_checkpoint(folder)


def test_discover_models_lists_gpt2_folders(tmp_path):
    save_random_gpt2(tmp_path / "my-gpt2")
    shutil.copytree(SHIPPED, tmp_path / "copy")
    entries = {e.name: e for e in discover_models(tmp_path / "none", tmp_path)}
    assert entries["my-gpt2"].error is None and entries["my-gpt2"].hf
    assert entries["copy"].error is None and not entries["copy"].hf


def test_parameter_counts_of_gpt2_variants_equal_transformers():
    from transformers import GPT2LMHeadModel

    for kw in [dict(), dict(tie_word_embeddings=False), dict(n_inner=20, n_layer=3), dict(n_embd=48, n_head=6)]:
        cfg = gpt2_config(301, **kw)
        with torch.device("meta"):
            theirs = GPT2LMHeadModel(cfg)
        from core.nn.hf import config_from_hf

        ours = config_from_hf(cfg.to_dict())
        assert count_parameters(ours)["total"] == sum(p.numel() for p in theirs.parameters()), kw
    small = config_from_hf(gpt2_config(50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024).to_dict())
    counts = count_parameters(small)
    assert counts["total"] == 124_439_808 and counts["per_block"] == 7_087_872  # GPT-2 small, as published
