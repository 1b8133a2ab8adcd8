"""Issue 42's training row: the shipped-size SAE (d_in 64, 512 latents, TopK k=12, AuxK on) trained on 1 M
activations, 512 steps of 2,048, with ``core.features.train.train_on``, on the shipped character model's own
activations at blocks.0.hook_resid_post (its held-out text; cycled, as the app's runs cycle them). Target: <= 60 s.

The peer, measured in the same run: a plain dense autoencoder of the same shapes (ReLU encoder, linear decoder, MSE,
Adam: no TopK, no AuxK, no decoder renormalisation), the same 512 steps of 2,048. Its ratio (peer / ours) says what
the sparse autoencoder's extra work costs over the matrix products any autoencoder pays.

    python -m bench.run --only features [--threads 2]
    python -m bench.features --threads 2 [--steps 64]   # fewer steps: the time is scaled up to 512
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SITE = "blocks.0.hook_resid_post"
STEPS, BATCH, D_SAE, K = 512, 2048, 512, 12
TARGET_S = 60.0


def shipped_activations() -> tuple[torch.Tensor, str]:
    from core.features.activations import collect
    from core.data.held_out import model_held_out
    from core.nn.checkpoint import load_checkpoint, read_config

    folder = ROOT / "assets" / "models" / "shakespeare-char"
    model, tok = load_checkpoint(folder)
    _, _, training = read_config(folder)
    held = model_held_out(model, tok, training)
    return collect(model, held.windows, SITE), held.corpus


def train_ours(acts: torch.Tensor, steps: int) -> float:
    from core.analysis.sae import SAE
    from core.features.train import SAESettings, train_on

    settings = SAESettings(d_sae=D_SAE, k=K, steps=steps, batch_size=BATCH)
    sae = SAE(settings.config(SITE, acts.shape[1]), generator=torch.Generator().manual_seed(0))
    t = time.perf_counter()
    train_on(sae, acts, settings)
    return time.perf_counter() - t


def train_peer(acts: torch.Tensor, steps: int) -> float:
    """A dense autoencoder step of the same shapes, the same batches' cost: x (2048, 64) -> (2048, 512) -> (2048, 64)."""
    g = torch.Generator().manual_seed(0)
    enc, dec = torch.nn.Linear(acts.shape[1], D_SAE), torch.nn.Linear(D_SAE, acts.shape[1])
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=2e-3)
    n = len(acts)
    t = time.perf_counter()
    for _ in range(steps):
        x = acts[torch.randint(n, (BATCH,), generator=g)]  # (2048, 64)
        loss = (dec(torch.relu(enc(x))) - x).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def main(argv=None, steps: int = STEPS) -> list[dict]:
    from bench.run import RESULTS, record

    acts, corpus = shipped_activations()
    scale = STEPS / steps  # a shorter run's time scaled to the row's 512 steps
    ours = peer = float("inf")
    for _ in range(2):  # alternating rounds: the machine's load falls on both; the best of each
        ours = min(ours, train_ours(acts, steps) * scale)
        peer = min(peer, train_peer(acts, steps) * scale)
    threads = torch.get_num_threads()
    print(f"\nSAE training: d_in 64, {D_SAE} latents, TopK k={K}, {STEPS} steps x {BATCH:,} = "
          f"{STEPS * BATCH:,} activations ({len(acts):,} distinct, {corpus}), {threads} torch threads")
    row = record(f"SAE training, 1 M activations, {threads} threads", ours, peer, "s", higher_is_better=False,
                 note=f"(peer: a dense autoencoder of the same shapes; target: ours <= {TARGET_S:.0f} s, "
                      f"{'met' if ours <= TARGET_S else 'NOT met'})")
    out = {"benchmark": row["benchmark"] + " (target)", "ours": ours, "unit": "s", "target_s": TARGET_S,
           "met": ours <= TARGET_S, "threads": threads}
    RESULTS.append(out)
    return [row, out]


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.features", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=STEPS)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    main(steps=a.steps)
