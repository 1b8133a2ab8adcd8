"""A small model trained for a few steps with snapshots kept (core.nn.snapshots), and the weights captured at each
kept step while it trained, independently of the snapshot writer: the known answer the snapshot tests load back."""
from __future__ import annotations

import random

import torch

from core.nn.model_store import save_checkpoint
from core.training.recipes import TrainConfig
from core.training.trainer import Trainer, training_record

STEPS, SNAPSHOTS = 40, 6


def made_up_text(chars: int = 6000, seed: int = 0) -> str:
    """Words of our own (no corpus needed): short lines of a few hundred random words."""
    rng = random.Random(seed)
    words = ["the", "old", "man", "sat", "by", "a", "river", "and", "sang", "to", "his", "dog", "at", "night"]
    out = []
    while sum(map(len, out)) < chars:
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) + ".\n")
    return "".join(out)[:chars]


def train_with_snapshots(folder, steps: int = STEPS, snapshots: int = SNAPSHOTS, **overrides):
    """Train, save to ``folder`` with its snapshots; returns (trainer, {step: float32 weights captured then})."""
    tc = TrainConfig.recipe("muon", steps=steps, eval_interval=20, eval_batches=2, snapshots=snapshots,
                            heads_interval=10, **overrides)
    text = made_up_text()
    tr = Trainer(text, dict(n_ctx=32, d_model=16, n_heads=2, n_layers=2), tc)
    captured = {}

    def capture():
        if tr.step_num in tr.snapshot_plan:  # the plan says which steps; the copy here is our own
            captured[tr.step_num] = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}

    capture()
    while not tr.done:
        tr.step()
        capture()
    save_checkpoint(folder, tr.model, tr.tokenizer, training_record(tr, "made-up.txt", len(text), 0.0), tr.log,
                    heads=tr.heads.rows, snapshots=tr.snapshots)
    return tr, captured


def step_zero_pattern(folder, ids: list[int], layer0_head: int = 0) -> torch.Tensor:
    """Layer 1's attention pattern of head ``layer0_head`` at step 0, by hand from the snapshot file's tensors
    (embedding, LayerNorm, W_Q and W_K, scaled scores, causal mask, softmax): (n, n)."""
    import json
    import math
    from pathlib import Path

    import torch.nn.functional as F
    from safetensors.torch import load_file

    cfg = json.loads((Path(folder) / "config.json").read_text())["model"]
    w = {k: v.double() for k, v in load_file(str(Path(folder) / "checkpoints" / "step-000000.safetensors")).items()}
    d, h = cfg["d_model"], cfg["n_heads"]
    dh = d // h
    x = w["tok_emb.weight"][ids] + w["pos_emb.weight"][: len(ids)]                       # (n, d)
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    normed = (x - mu) / torch.sqrt(var + cfg.get("ln_eps", 1e-5)) * w["blocks.0.ln1.weight"] + w["blocks.0.ln1.bias"]
    qkv = normed @ w["blocks.0.attn.qkv.weight"].T + w.get("blocks.0.attn.qkv.bias", 0)  # (n, 3d)
    q = qkv[:, layer0_head * dh:(layer0_head + 1) * dh]
    k = qkv[:, d + layer0_head * dh:d + (layer0_head + 1) * dh]
    scores = q @ k.T / math.sqrt(dh)
    n = len(ids)
    scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return F.softmax(scores, dim=-1)
