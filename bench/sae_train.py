"""Issue 60's SAE rows: our trainer (``core.features.train.train_on``) against SAELens's ``SAETrainer`` with the same
settings (TopK, 512 latents, k = 12, batch 2,048, 512 steps, lr 2e-3, the same threads, the same batches drawn from
the shipped character model's blocks.0.hook_resid_post activations of its held-out training part), both explained
variances on the same held-out evaluation activations; then our trainer in the precision the probe chooses
(core.nn.precision) against our fp32. Alternating rounds: the load falls on both.

SAELens runs in the peers' environment (its own pins, bench/peers/): the python named by TE_PEERS_PYTHON, else the
first of PEER_PYTHONS that exists; without one its row is skipped with the reason, never faked.

    python -m bench.run --only sae_train [--threads 2] [--quick]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SITE, STEPS, BATCH, D_SAE, K, LR = "blocks.0.hook_resid_post", 512, 2048, 512, 12, 2e-3
PEER_PYTHONS = (ROOT / "bench" / "peers" / ".venv" / "bin" / "python", Path("/work/peers-venv/bin/python"))

PEER = r'''
import json, sys, time, torch
from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
from sae_lens.training.sae_trainer import SAETrainer
from sae_lens.config import SAETrainerConfig
path, steps, threads, lr, B, d_sae, k, seed = sys.argv[1:9]
steps, threads, B, d_sae, k, seed, lr = int(steps), int(threads), int(B), int(d_sae), int(k), int(seed), float(lr)
torch.set_num_threads(threads)
d = torch.load(path)
acts, ev = d["train"], d["eval"]
torch.manual_seed(seed)
sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=acts.shape[1], d_sae=d_sae, k=k, dtype="float32", device="cpu"))
def batches():  # our trainer's order: a seeded permutation, cycled
    g = torch.Generator().manual_seed(seed)
    n, at, order = len(acts), 0, torch.randperm(len(acts), generator=g)
    while True:
        if at + B > n:
            order, at = torch.randperm(n, generator=g), 0
        yield acts[order[at:at + B]]
        at += B
cfg = SAETrainerConfig(total_training_samples=steps * B, train_batch_size_samples=B, lr=lr, lr_end=lr / 10,
                       device="cpu")
trainer = SAETrainer(cfg, sae, batches())
t = time.perf_counter()
trainer.fit()
s = time.perf_counter() - t
with torch.no_grad():
    err = (sae.decode(sae.encode(ev)) - ev).pow(2).sum()
print(json.dumps({"s": s, "ev": 1 - (err / (ev - ev.mean(0)).pow(2).sum()).item()}))
'''


def peer_python() -> str | None:
    named = os.environ.get("TE_PEERS_PYTHON")
    if named:
        return named
    return next((str(p) for p in PEER_PYTHONS if p.exists()), None)


def activations() -> tuple[torch.Tensor, torch.Tensor]:
    """(training, evaluation) activations of the shipped model's site: its held-out text split as train_sae does."""
    from core.data.held_out import model_held_out
    from core.features.activations import collect
    from core.features.train import split_held_out
    from core.nn.checkpoint import load_checkpoint, read_config

    folder = ROOT / "assets" / "models" / "shakespeare-char"
    model, tok = load_checkpoint(folder)
    train, ev = split_held_out(model_held_out(model, tok, read_config(folder)[2]))
    return collect(model, train.windows, SITE), collect(model, ev.windows, SITE)


def train_ours(acts, ev, steps: int, precision: str = "float32") -> dict:
    from core.analysis.sae import SAE
    from core.features.train import SAESettings, reconstruction_stats, train_on

    settings = SAESettings(d_sae=D_SAE, k=K, steps=steps, batch_size=BATCH, lr=LR, precision=precision)
    sae = SAE(settings.config(SITE, acts.shape[1]), generator=torch.Generator().manual_seed(0))
    t = time.perf_counter()
    train_on(sae, acts, settings)
    s = time.perf_counter() - t
    return {"s": s, "ev": reconstruction_stats(sae, ev)["explained_variance"],
            "precision": getattr(sae, "trained_precision", "float32")}


def train_peer(python: str, path: str, steps: int) -> dict:
    out = subprocess.run([python, "-c", PEER, path, str(steps), str(torch.get_num_threads()), str(LR), str(BATCH),
                          str(D_SAE), str(K), "0"], capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "no output")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def main(quick: bool = False, record=None):
    if record is None:
        from bench.run import record
    steps, rounds = (16, 1) if quick else (STEPS, 2)
    acts, ev = activations()
    threads = torch.get_num_threads()
    print(f"\nSAE training vs SAELens: d_in {acts.shape[1]}, {D_SAE} latents, TopK k={K}, {steps} steps x {BATCH:,}, "
          f"lr {LR}, {threads} torch threads ({len(acts):,} training / {len(ev):,} evaluation activations)")
    python = peer_python()
    ours, peer, fast = [], [], []
    models = os.environ.get("TE_MODELS_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "acts.pt")
        torch.save({"train": acts, "eval": ev}, path)
        for _ in range(rounds):  # alternating: ours, the peer, ours in the chosen precision
            ours.append(train_ours(acts, ev, steps))
            if python:
                try:
                    peer.append(train_peer(python, path, steps))
                except Exception as e:  # the peer's failure is reported, never replaced by a number
                    print(f"  SAELens row skipped: {e}")
                    python = None
            os.environ["TE_MODELS_DIR"] = tmp  # the probe's cache: fresh, so the row measures the probe itself
            try:
                fast.append(train_ours(acts, ev, steps, precision="auto"))
            finally:
                os.environ.pop("TE_MODELS_DIR") if models is None else os.environ.__setitem__("TE_MODELS_DIR", models)
                Path(tmp, "precision.json").unlink(missing_ok=True)
    rate = lambda runs: steps * BATCH / min(r["s"] for r in runs)  # noqa: E731 (the best round of each)
    o_ev = ours[-1]["ev"]
    if peer:
        record(f"SAE training vs SAELens, {threads} threads", rate(ours), rate(peer), "act/s", target=1.5,
               note=f"(explained variance ours {o_ev:.4f}, SAELens {peer[-1]['ev']:.4f}; {load()})")
    else:
        print("  SAELens row skipped: no peers environment (bench/peers/, or TE_PEERS_PYTHON)")
    record(f"SAE training, probed precision ({fast[-1]['precision']}) vs fp32", rate(fast), rate(ours), "act/s",
           note=f"(explained variance {fast[-1]['ev']:.4f} vs fp32 {o_ev:.4f}; {load()})")


if __name__ == "__main__":
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    main()
