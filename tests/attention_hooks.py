"""Every layer's attention of one forward, read the way the model offers it: ``run_with_cache`` on the hook points
``blocks.{l}.attn.hook_attn_scores`` (before the causal mask) and ``blocks.{l}.attn.hook_pattern`` (after it)."""
from types import SimpleNamespace

import torch

NAMES = ("attn.hook_attn_scores", "attn.hook_pattern")


def attention(model, idx) -> list[SimpleNamespace]:
    """One record per layer, ``.scores`` and ``.pattern``, (B, h, n, n) each (with the logits: attention_and_logits)."""
    return attention_and_logits(model, idx)[0]


def attention_and_logits(model, idx) -> tuple[list[SimpleNamespace], torch.Tensor]:
    """(records as ``attention``, logits (B, n, m)) of one forward pass."""
    logits, cache = model.run_with_cache(torch.as_tensor(idx), names=lambda name: name.endswith(NAMES))
    records = [SimpleNamespace(scores=cache[f"blocks.{l}.attn.hook_attn_scores"],
                               pattern=cache[f"blocks.{l}.attn.hook_pattern"]) for l in range(model.config.n_layers)]
    return records, logits
