"""Hugging Face GPT-2 folders, in and out, without ``transformers`` (a test and benchmark dependency only).

A GPT-2 folder holds config.json (``model_type: gpt2``), model.safetensors and its tokenizer (tokenizer.json, or
vocab.json + merges.txt). GPT-2 is our ``Transformer`` with three config fields switched on: biases on every
linear map (``bias``), GELU in its tanh approximation (``activation="gelu_tanh"``) and the output map tied to the
token embedding (``tie_weights``). Its weights differ from ours only in names and in one convention: GPT-2's
``Conv1D`` stores a linear map as (in, out), the transpose of ``nn.Linear``'s (out, in). Q, K and V are one
(d, 3d) matrix there as here, heads side by side in the same order.

In: ``config_from_hf`` reads a config.json and refuses what is not plain GPT-2 (checkpoint.load_checkpoint
does the rest). Out: ``export_gpt2`` writes any of our models as such a folder, so that
``GPT2LMHeadModel.from_pretrained(folder)`` computes our logits and its tokenizer our ids.
"""
from __future__ import annotations

import io
import json
import re
import tempfile
import zipfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.nn.config import ModelConfig
from core.nn.bpe import TOKENIZER_FILE, BPETokenizer, MERGES_FILE, VOCAB_FILE
from core.nn.tokenizer import CharTokenizer

# GPT2Config's defaults, for keys a config.json leaves out (as transformers reads it)
GPT2_DEFAULTS = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True)
# transformers' activation names -> ours. gelu_new, gelu_pytorch_tanh and gelu_fast are one formula, the tanh approximation
FROM_HF_ACTIVATION = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                      "gelu": "gelu", "relu": "relu"}
TO_HF_ACTIVATION = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")  # PyTorch's own formats are pickles
# buffers some GPT-2 files carry besides the weights (the causal mask of old transformers versions): not weights
IGNORED = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")


def is_hf_config(data: dict) -> bool:
    """Whether a config.json is a Hugging Face one (theirs carry a model_type, ours a format_version)."""
    return "format_version" not in data and any(k in data for k in ("model_type", "architectures", "auto_map"))


def config_from_hf(data: dict) -> ModelConfig:
    """Our ModelConfig for a Hugging Face config.json. ValueError, in words, for anything but plain GPT-2:
    custom code (auto_map), another model_type, or GPT-2 options our Transformer does not compute."""
    if "auto_map" in data or data.get("trust_remote_code"):
        raise ValueError("this config asks to run code shipped with the model (auto_map / trust_remote_code); "
                         "this app never runs code from a model folder and reads plain GPT-2 checkpoints only")
    kind = data.get("model_type")
    if kind != "gpt2":
        raise ValueError(f"model_type {kind!r} is not supported: this app opens GPT-2 checkpoints "
                         "(model_type 'gpt2') and its own")
    v = {**GPT2_DEFAULTS, **{k: data[k] for k in GPT2_DEFAULTS if k in data and data[k] is not None}}
    if data.get("n_inner") is None:
        v["n_inner"] = None
    unsupported = [name for name, ok in (("add_cross_attention", not data.get("add_cross_attention", False)),
                                         ("scale_attn_weights", data.get("scale_attn_weights", True) is True),
                                         ("scale_attn_by_inverse_layer_idx",
                                          not data.get("scale_attn_by_inverse_layer_idx", False))) if not ok]
    if unsupported:
        raise ValueError(f"GPT-2 option {', '.join(unsupported)} is set differently from GPT-2's own; this app's "
                         "transformer does not compute it")
    activation = FROM_HF_ACTIVATION.get(v["activation_function"])
    if activation is None:
        raise ValueError(f"activation_function {v['activation_function']!r} is not supported (this app knows "
                         f"{', '.join(FROM_HF_ACTIVATION)})")
    if not isinstance(v["tie_word_embeddings"], bool):
        raise ValueError("tie_word_embeddings must be true or false")
    return ModelConfig(vocab_size=v["vocab_size"], n_ctx=v["n_positions"], d_model=v["n_embd"], n_heads=v["n_head"],
                       n_layers=v["n_layer"], d_ff=v["n_inner"], bias=True, activation=activation,
                       tie_weights=v["tie_word_embeddings"], ln_eps=v["layer_norm_epsilon"])


def weight_names(config: ModelConfig, prefix: str = "transformer.") -> list[tuple[str, str, bool]]:
    """(our name, GPT-2's name, stored transposed?) for every tensor of a GPT-2 file of this config, biases
    included whether or not ours has them; the output map only when it is not tied to the embedding."""
    names = [("tok_emb.weight", f"{prefix}wte.weight", False), ("pos_emb.weight", f"{prefix}wpe.weight", False)]
    for i in range(config.n_layers):
        h = f"{prefix}h.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            names += [(f"blocks.{i}.{ours}.weight", f"{h}{theirs}.weight", False),
                      (f"blocks.{i}.{ours}.bias", f"{h}{theirs}.bias", False)]
        for ours, theirs in (("attn.qkv", "attn.c_attn"), ("attn.out", "attn.c_proj"), ("mlp.w1", "mlp.c_fc"),
                             ("mlp.w2", "mlp.c_proj")):
            names += [(f"blocks.{i}.{ours}.weight", f"{h}{theirs}.weight", True),  # Conv1D: (in, out)
                      (f"blocks.{i}.{ours}.bias", f"{h}{theirs}.bias", False)]
    names += [("ln_f.weight", f"{prefix}ln_f.weight", False), ("ln_f.bias", f"{prefix}ln_f.bias", False)]
    if not config.tie_weights:
        names.append(("head.weight", "lm_head.weight", False))
    return names


def file_prefix(keys) -> str:
    """'transformer.' for a file saved from GPT2LMHeadModel, '' for one saved from GPT2Model (OpenAI's own)."""
    return "transformer." if any(k.startswith("transformer.") for k in keys) else ""


def relevant(keys, config: ModelConfig) -> list[str]:
    """The keys of a GPT-2 file that hold weights we read: buffers dropped, and a tied model's lm_head copy."""
    return [k for k in keys if not IGNORED.match(k) and not (config.tie_weights and k == "lm_head.weight")]


def expected_shapes(config: ModelConfig, ours: dict[str, tuple], prefix: str) -> dict[str, tuple]:
    """GPT-2's name -> shape for a config, from our model's shapes (``ours``: name -> shape)."""
    return {theirs: tuple(reversed(ours[name])) if transposed else tuple(ours[name])
            for name, theirs, transposed in weight_names(config, prefix)}


def state_from_hf(tensors: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict (float32) from a GPT-2 file's tensors (checked beforehand by the checkpoint loader)."""
    prefix = file_prefix(tensors)
    state = {}
    for ours, theirs, transposed in weight_names(config, prefix):
        t = tensors[theirs].float()
        state[ours] = t.t().contiguous() if transposed else t  # GPT-2's Conv1D (in, out) -> our Linear (out, in)
    return state


# ------------------------------------------------------------------ ours out

def hf_config(config: ModelConfig, tokenizer=None) -> dict:
    """A GPT-2 config.json for our config: dropout off (we never train with it), GPT-2's attention scaling."""
    eot = _endoftext_id(tokenizer)
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": config.vocab_size, "n_positions": config.n_ctx, "n_embd": config.d_model,
        "n_layer": config.n_layers, "n_head": config.n_heads, "n_inner": config.d_ff,
        "activation_function": TO_HF_ACTIVATION[config.activation], "layer_norm_epsilon": config.ln_eps,
        "tie_word_embeddings": config.tie_weights,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "bos_token_id": eot, "eos_token_id": eot, "dtype": "float32",
    }


def _endoftext_id(tokenizer) -> int | None:
    if isinstance(tokenizer, BPETokenizer):
        ids = tokenizer.encode("<|endoftext|>")
        if len(ids) == 1 and tokenizer.pieces[ids[0]] == "<|endoftext|>":
            return ids[0]
    return None


def char_tokenizer_json(tokenizer: CharTokenizer) -> str:
    """Our character tokenizer as a tokenizer.json that gives the same ids: a BPE with the characters as its
    vocabulary and no merges, nothing before it (no normalisation, no splitting) and a decoder that joins
    tokens with nothing between them. With no unknown token it drops unknown characters, as ours does."""
    # local: tokenizers loads only when a BPE tokenizer is read or trained
    from tokenizers import Tokenizer as HFTokenizer, decoders, models

    tok = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(tokenizer.chars)}, merges=[]))
    tok.decoder = decoders.Fuse()
    return tok.to_str()


def tokenizer_files(tokenizer) -> dict[str, str]:
    """The tokenizer files of an exported folder: tokenizer.json always; for a byte-level BPE also GPT-2's
    vocab.json and merges.txt; tokenizer_config.json naming the class that reads them."""
    if isinstance(tokenizer, CharTokenizer):
        files = {TOKENIZER_FILE: char_tokenizer_json(tokenizer)}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    else:
        files = {TOKENIZER_FILE: tokenizer.to_str()}
        vm = tokenizer.vocab_and_merges()
        eot = "<|endoftext|>" if _endoftext_id(tokenizer) is not None else None
        if vm is not None:
            vocab, merges = vm
            files[VOCAB_FILE] = json.dumps(vocab, ensure_ascii=False)
            files[MERGES_FILE] = "#version: 0.2\n" + "\n".join(merges) + "\n"
            # GPT2Tokenizer would otherwise add '<|endoftext|>' as a token of its own when the vocabulary lacks it
            config = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False, "unk_token": eot,
                      "bos_token": eot, "eos_token": eot, "clean_up_tokenization_spaces": False}
        else:
            config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    files["tokenizer_config.json"] = json.dumps(config, indent=2)
    return files


def export_state(model) -> dict[str, torch.Tensor]:
    """GPT-2's tensors for our model: Conv1D weights transposed, zero biases where ours has none."""
    c = model.config
    ours = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    state = {}
    for name, theirs, transposed in weight_names(c):
        if name in ours:
            t = ours[name]
            state[theirs] = (t.t() if transposed else t).contiguous()  # our Linear (out, in) -> GPT-2's Conv1D (in, out)
        else:  # a bias our bias-free model does not have: GPT-2 adds zero
            width = ours[name.replace(".bias", ".weight")].shape[0]
            state[theirs] = torch.zeros(width)
    return state


def export_card(name: str, config: ModelConfig, tokenizer) -> str:
    return (f"# {name}\n\nA transformer from Transformer Explorer, exported as a Hugging Face GPT-2 folder: "
            f"d={config.d_model}, h={config.n_heads}, L={config.n_layers}, d_ff={config.d_ff}, n_ctx={config.n_ctx}, "
            f"vocabulary {config.vocab_size} ({tokenizer.describe()}), activation {config.activation}, "
            f"{'biases' if config.bias else 'no biases (exported as zeros)'}, "
            f"{'output map tied to the embedding' if config.tie_weights else 'output map untied'}.\n\n"
            "```python\nfrom transformers import AutoTokenizer, GPT2LMHeadModel\n\n"
            f"model = GPT2LMHeadModel.from_pretrained(\"{name}\")\ntokenizer = AutoTokenizer.from_pretrained(\"{name}\")\n"
            "ids = tokenizer(\"ROMEO:\", return_tensors=\"pt\").input_ids\n"
            "print(tokenizer.decode(model.generate(ids, max_new_tokens=100, do_sample=True)[0]))\n```\n")


def export_gpt2(model, tokenizer, folder) -> Path:
    """Write ``model`` (any of ours) and its tokenizer as a Hugging Face GPT-2 folder: config.json,
    model.safetensors, tokenizer files and a README. ``GPT2LMHeadModel.from_pretrained(folder)`` then gives
    our logits, and ``AutoTokenizer.from_pretrained(folder)`` our ids. The folder is created (or filled)."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError("the tokenizer has more tokens than the model has rows")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(export_state(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(model.config, tokenizer), indent=2), encoding="utf-8")
    for name, text in tokenizer_files(tokenizer).items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "README.md").write_text(export_card(folder.name, model.config, tokenizer), encoding="utf-8")
    return folder


def export_zip(model, tokenizer, name: str) -> bytes:
    """The exported GPT-2 folder as a zip archive in memory, its files under '<name>/' (one folder when unpacked)."""
    with tempfile.TemporaryDirectory(prefix="te-export-") as tmp:
        folder = export_gpt2(model, tokenizer, Path(tmp) / name)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(folder.iterdir()):
                zf.write(f, arcname=f"{name}/{f.name}")
    return buf.getvalue()
