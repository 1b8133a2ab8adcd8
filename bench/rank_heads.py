"""Ranking every head of GPT-2 small (random weights, GPT-2's biases, GELU and tied output map; 144 heads):
one whole forward pass per head, as rank_heads did before, against core.analysis.interventions.head_losses (the blocks
before a head's layer run once, a layer's 12 ablations as one batch).

    python -m bench.rank_heads [--tokens 15 256 1024] [--out bench/results/rank-heads.csv]

Both on the same random prompt of each length, one after the other, with the app's torch thread setting
(TE_TORCH_THREADS, default 1); the largest difference between their losses is reported beside the times.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import write_csv  # noqa: E402
from core.analysis.interventions import head_losses, head_losses_cost, token_losses  # noqa: E402
from core.nn.config import MODEL_PRESETS  # noqa: E402
from core.nn.model import Transformer  # noqa: E402
from core.serve.threads import page_threads, use_threads  # noqa: E402


def per_head(model, ids, mode):
    """The old way: the intact model once, then one whole forward pass per head."""
    c = model.config
    base = token_losses(model, ids)
    return base, np.stack([[token_losses(model, ids, [(l, k)], mode) for k in range(c.n_heads)]
                           for l in range(c.n_layers)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="*", default=[15, 256, 1024])
    ap.add_argument("--mode", default="zero")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    use_threads(page_threads())
    torch.manual_seed(0)
    config = dataclasses.replace(MODEL_PRESETS["GPT-2 small"], bias=True, activation="gelu_tanh", tie_weights=True)
    model = Transformer(config).eval()
    rows = []
    for n in args.tokens:
        ids = torch.randint(config.vocab_size, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        new = head_losses(model, ids, args.mode)
        t_new = time.perf_counter() - t0
        t0 = time.perf_counter()
        old = per_head(model, ids, args.mode)
        t_old = time.perf_counter() - t0
        diff = max(float(np.abs(a - b).max()) for a, b in zip(new, old))
        rows.append({"tokens": n, "mode": args.mode, "per_head_s": round(t_old, 2), "batched_s": round(t_new, 2),
                     "speedup": round(t_old / t_new, 2), "cost_forward_passes": round(head_losses_cost(config, n), 1),
                     "max_loss_difference": f"{diff:.1e}", "threads": torch.get_num_threads(),
                     "load_avg_1min": round(load, 2),
                     "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)})
        print(rows[-1], flush=True)
    if args.out:
        write_csv(rows, args.out)


if __name__ == "__main__":
    main()
