"""python -m core.features --model FOLDER --site NAME [--features N] [--k K] [--steps S] [--kind topk|relu]
python -m core.features --model FOLDER --transcoder [--layer L] [--features N] [--k K] [--steps S]

Trains a sparse autoencoder on one site of a saved model, over the held-out 10% of its corpus, and saves it beside
the model in sae/<site>/ (or --out); with --transcoder, a transcoder of each block's MLP (or block L's), saved in
transcoders/layer-L/. Prints the health numbers. Exit status 2 for a bad argument or model."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from core.training.cli_args import OneLineParser, writable_place


def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m core.features", description=__doc__.split("\n\n")[1])
    p.add_argument("--model", required=True, help="a saved model folder (config.json and model.safetensors)")
    p.add_argument("--site", default=None, help="a hook name such as blocks.0.hook_resid_post (an SAE)")
    p.add_argument("--transcoder", action="store_true",
                   help="train transcoders of the MLPs (what each reads to what it writes) instead of an SAE")
    p.add_argument("--layer", type=int, default=None, help="with --transcoder: this block only (default: every one)")
    p.add_argument("--features", type=int, default=None, help="latents (default: 8 x the site's width)")
    p.add_argument("--k", type=int, default=None, help="latents kept per token by TopK (default 12)")
    p.add_argument("--kind", choices=("topk", "relu"), default="topk")
    p.add_argument("--l1", type=float, default=None, help="the ReLU kind's L1 penalty")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps (default 2,000)")
    p.add_argument("--batch", type=int, default=None, help="activations per step (default 2,048)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--out", default=None, help="folder to save into (default MODEL/sae/SITE)")
    return p


def out_problem(out: Path) -> str | None:
    """Why the SAE could not be saved in ``out`` (None: it can), asked before the training, not after it."""
    if os.path.lexists(out) and not out.is_dir():
        return f"{out} is there and is not a folder"
    return None if out.is_dir() and os.access(out, os.W_OK | os.X_OK) else writable_place(out)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.transcoder:
        return transcoders_main(args)
    if args.site is None:
        parser().error("give --site NAME for an SAE, or --transcoder")
    import torch

    from core.features.activations import model_held_out
    from core.features.sae import sae_folder, save_sae
    from core.features.sites import check_site, site_width
    from core.features.train import SAESettings, train_sae
    from core.nn.checkpoint import CheckpointError, load_checkpoint, read_config

    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads must be 1 or more, got {args.threads}")
            torch.set_num_threads(args.threads)
        model, tokenizer = load_checkpoint(args.model)
        _, _, training = read_config(args.model)
        check_site(model.config, args.site)
        given = {"d_sae": args.features, "k": args.k, "kind": args.kind, "l1": args.l1, "steps": args.steps,
                 "batch_size": args.batch, "lr": args.lr, "seed": args.seed}
        settings = SAESettings(**{k: v for k, v in given.items() if v is not None})
        settings.config(args.site, site_width(model.config, args.site))  # a bad --features or --k, before the work
        out = Path(args.out) if args.out else sae_folder(args.model, args.site)
        problem = out_problem(out)
        if problem:
            raise ValueError(problem)
        held = model_held_out(model, tokenizer, training)  # a text too short for one window, before the work
    except (CheckpointError, OSError, ValueError) as e:
        print(f"python -m core.features: error: {e}", file=sys.stderr)
        return 2
    last = [0.0]

    def progress(step, steps, loss):
        if time.monotonic() - last[0] > 5 or step == steps:
            last[0] = time.monotonic()
            print(f"step {step:,}/{steps:,}  reconstruction loss {loss:.4f}", flush=True)

    result = train_sae(model, tokenizer, args.site, training, settings, held=held, progress=progress)
    try:
        save_sae(result.sae, out, result.metrics)
    except OSError as e:  # the place changed during the run
        print(f"python -m core.features: error: the SAE could not be saved in {out}: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: result.metrics[k] for k in ("l0", "explained_variance", "dead_fraction", "ce_loss_score",
                                                      "mse")}, indent=2))
    print(f"saved {out}")
    return 0


def transcoders_main(args) -> int:
    """--transcoder: one transcoder per block (or --layer's), each saved as it finishes, with its numbers and the
    loss of the model with every saved transcoder spliced in."""
    import torch

    from core.features.activations import model_held_out
    from core.features.train import SAESettings
    from core.features.transcoder import load_transcoders, replacement_losses, save_transcoder, train_transcoder
    from core.nn.checkpoint import CheckpointError, load_checkpoint, read_config

    try:
        if args.threads is not None:
            torch.set_num_threads(max(1, args.threads))
        model, tokenizer = load_checkpoint(args.model)
        _, _, training = read_config(args.model)
        if not model.config.mlp:
            raise ValueError("this model has no MLP: there is nothing for a transcoder to replace")
        layers = range(model.config.n_layers) if args.layer is None else [args.layer]
        if args.layer is not None and not 0 <= args.layer < model.config.n_layers:
            raise ValueError(f"--layer: the model has blocks 0 to {model.config.n_layers - 1}")
        given = {"d_sae": args.features, "k": args.k, "steps": args.steps, "batch_size": args.batch, "lr": args.lr,
                 "seed": args.seed}
        settings = SAESettings(**{k: v for k, v in given.items() if v is not None})
        held = model_held_out(model, tokenizer, training)
    except (CheckpointError, OSError, ValueError) as e:
        print(f"python -m core.features: error: {e}", file=sys.stderr)
        return 2
    for layer in layers:
        r = train_transcoder(model, tokenizer, layer, training, settings, held=held)
        save_transcoder(r.sae, args.model, layer, r.metrics)
        print(f"layer {layer}: " + json.dumps({k: round(r.metrics[k], 4) for k in (
            "l0", "explained_variance", "dead_fraction", "ce_clean", "ce_replaced", "ce_mlps_zeroed",
            "train_s")}), flush=True)
    every = load_transcoders(args.model, model.config)
    print("every saved transcoder spliced in: " + json.dumps(
        {k: round(v, 4) for k, v in replacement_losses(model, every, held).items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
