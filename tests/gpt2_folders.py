"""Small Hugging Face GPT-2 folders for tests, built offline with transformers (a test dependency only)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from core.data.corpus import pydoc_text
from core.nn.bpe import BPETokenizer


@lru_cache(maxsize=4)
def small_bpe(vocab_size: int = 300) -> BPETokenizer:
    """A byte-level BPE learned from Python's own documentation (ships with Python: no data files needed),
    with GPT-2's '<|endoftext|>' as its one special token."""
    return BPETokenizer.train(pydoc_text()[:150_000], vocab_size=vocab_size, special_tokens=["<|endoftext|>"])


def gpt2_config(vocab_size: int, **kw):
    from transformers import GPT2Config

    shape = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, activation_function="gelu_new",
                 tie_word_embeddings=True)
    shape.update(kw)
    shape.setdefault("bos_token_id", None)  # GPT-2's 50256 lies outside a small vocabulary
    shape.setdefault("eos_token_id", None)
    return GPT2Config(vocab_size=vocab_size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **shape)


def save_random_gpt2(folder, tokenizer: BPETokenizer | None = None, seed: int = 0, tokenizer_files: str = "json",
                     **config):
    """A GPT2LMHeadModel with random weights, every bias and LayerNorm parameter non-zero, saved by
    ``save_pretrained`` (safetensors) into ``folder`` with its tokenizer (tokenizer.json, or "vocab" for
    vocab.json + merges.txt). Returns (folder, the transformers model in eval mode)."""
    import json

    from transformers import GPT2LMHeadModel

    tokenizer = tokenizer or small_bpe()
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(gpt2_config(tokenizer.vocab_size, **config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:  # LayerNorm scales near 1, shifts and biases clearly non-zero
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if name.endswith("weight") else 0.0))
    folder = Path(folder)
    model.save_pretrained(folder)
    if tokenizer_files == "json":
        (folder / "tokenizer.json").write_text(tokenizer.to_str())
    else:
        vocab, merges = tokenizer.vocab_and_merges()
        (folder / "vocab.json").write_text(json.dumps(vocab))
        (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return folder, model
