"""python -m core.features --model FOLDER --site NAME [--features N] [--k K | --kind relu --l1 L] [--out DIR]
python -m core.features --model FOLDER --transcoder [--layer L] [--features N] [--k K]   (both: [--steps S] ...)

Trains a sparse autoencoder on one site of a saved model, over the held-out 10% of its corpus, and saves it beside
the model in sae/<site>/ (or --out); with --transcoder, a transcoder of each block's MLP (or block L's), saved in
transcoders/layer-L/. A folder that already holds an SAE, or anything else, is refused unless --overwrite, which
replaces the SAE's own files only. Prints the health numbers. Exit status 2 for a bad argument or model."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from core.training.cli_args import OneLineParser, Outputs, json_with, out_problem

PROG = "python -m core.features"
# what save_sae writes (core.analysis.sae's names: ours, SAELens's cfg.json and weights, and the weights' name
# before them, which save_sae removes) and the explanations written after it; a config.json is an SAE's when it says
# its site and sizes (a model's has none of them), a cfg.json when it says the sizes (SAELens's own)
SAE_FILES = (("config.json", lambda p: json_with(p, "site", "d_in", "d_sae")),
             ("cfg.json", lambda p: json_with(p, "d_in", "d_sae")), ("sae_weights.safetensors", None),
             ("sae.safetensors", None), ("metrics.json", None), ("explanations.json", lambda p: explanations_file(p)))


def explanations_file(path) -> bool:
    from core.features.explanations import load_explanations  # local: numpy loads only for the work

    try:
        return load_explanations(Path(path).parent) is not None
    except ValueError:
        return False
SAE_OUT = Outputs(PROG, "an SAE", files=SAE_FILES)
TRANSCODER_OUT = Outputs(PROG + " --transcoder", "a transcoder", files=SAE_FILES, fixed=True)


def parser() -> OneLineParser:
    # local: the command line answers a bad argument before torch and the models load
    from core.features.job import MAX_STEPS  # the Features page's ceiling: one limit for the form and the command

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[1])
    p.add_argument("--model", required=True, help="a saved model folder (config.json and model.safetensors)")
    p.add_argument("--site", default=None, help="a hook name such as blocks.0.hook_resid_post (an SAE)")
    p.add_argument("--transcoder", action="store_true",
                   help="train transcoders of the MLPs (what each reads to what it writes) instead of an SAE")
    p.add_argument("--layer", type=int, default=None, help="with --transcoder: this block only (default: every one)")
    p.add_argument("--features", type=int, default=None, help="latents (default: 8 x the site's width)")
    p.add_argument("--k", type=int, default=None, help="latents kept per token by TopK, at most --features "
                                                       "(default 12)")
    p.add_argument("--kind", choices=("topk", "relu"), default=None, help="an SAE's activation (default topk)")
    p.add_argument("--l1", type=float, default=None, help="the ReLU kind's L1 penalty (default 0.003)")
    p.add_argument("--steps", type=int, default=None, help=f"optimiser steps, at most {MAX_STEPS:,} (default 2,000)")
    p.add_argument("--batch", type=int, default=None, help="activations per step (default 2,048)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="default 0")
    p.add_argument("--precision", choices=("auto", "float32"), default=None,
                   help="auto: bfloat16 products where a short probe measures them faster on this CPU at this shape "
                        "with the same loss (recorded in metrics.json); float32: never (default: TE_PRECISION, auto)")
    p.add_argument("--threads", type=int, default=None, help="torch threads, 1 to this machine's cores "
                                                             "(default: torch's own)")
    p.add_argument("--out", default=None, help="an SAE's folder (default MODEL/sae/SITE); one that holds an SAE "
                   "or other files is refused unless --overwrite. Transcoders live in MODEL/transcoders/layer-L/")
    p.add_argument("--overwrite", action="store_true", help="replace the SAE (or the transcoders) there: their "
                   "own files only (with its explanations.json), every other file stays as it is")
    return p


def flag_problem(args) -> str | None:
    """Why these flags do not go together (None: they do), before the model is read: a flag that this kind of
    run would take and never use is refused, not ignored."""
    if args.transcoder:
        for flag in ("site", "kind", "l1", "out"):
            if getattr(args, flag) is not None:
                return (f"--{flag} applies to an SAE, not to --transcoder (a TopK transcoder of each MLP, saved in "
                        "MODEL/transcoders/layer-L/)")
    elif args.layer is not None:
        return "--layer applies to --transcoder; an SAE's place is --site"
    elif args.site is None:
        return "give --site NAME for an SAE, or --transcoder"
    if args.kind == "relu" and args.k is not None:
        return "--k applies to --kind topk; a ReLU SAE's sparsity is set by --l1"
    if args.kind != "relu" and args.l1 is not None:
        return "--l1 applies to --kind relu; a TopK SAE keeps --k latents instead"
    cores = os.cpu_count() or 1  # torch starts a thread per count asked
    if args.threads is not None and not 1 <= args.threads <= cores:
        return f"--threads must be from 1 to {cores}, this machine's cores (got {args.threads})"
    if args.seed is not None and not 0 <= args.seed < 2**63:  # torch took -1 as 2**64 - 1, and 2**64 failed late
        return f"--seed must be a whole number from 0 to 2**63 - 1 (got {args.seed})"
    # local: the command line answers a bad argument before torch and the models load
    from core.features.job import MAX_STEPS

    if args.steps is not None and args.steps > MAX_STEPS:
        return f"--steps must be at most {MAX_STEPS:,} (about 15 minutes on one core at the default batch)"
    return None


def settings_for(args, config, site: str, held, cap: int):
    """The SAESettings of these flags, checked for ``site`` of a model of ``config`` (shape, memory) and against
    what they will meet: --k against the latents and --batch against the ``held`` windows' training vectors
    (at most ``cap``), both of which were cut down to size without a word."""
    # local: the command line answers a bad argument before torch and the models load
    from core.features.job import memory_problem
    from core.analysis.sites import site_width
    from core.features.train import SAESettings, memory_estimate, split_held_out
    from core.nn.precision import run_precision

    given = {"d_sae": args.features, "k": args.k, "kind": args.kind, "l1": args.l1, "steps": args.steps,
             "batch_size": args.batch, "lr": args.lr, "seed": args.seed,
             "precision": args.precision or run_precision()}  # a bad TE_PRECISION: a ValueError in words
    settings = SAESettings(**{k: v for k, v in given.items() if v is not None})
    cfg = settings.config(site, site_width(config, site))  # a bad --features, --l1 or a site's shape, in words
    if args.k is not None and args.k > cfg.d_sae:
        raise ValueError(f"--k {args.k:,} is more than the SAE's {cfg.d_sae:,} latents (--features)")
    vectors = min(cap, split_held_out(held)[0].n_tokens)  # the four fifths of the held-out windows it trains on
    if args.batch is not None and args.batch > vectors:
        raise ValueError(f"--batch {args.batch:,} is more than the {vectors:,} activations the held-out text gives "
                         "to train on")
    problem = memory_problem(memory_estimate(config, site, vectors, settings), "this SAE")
    if problem:
        raise ValueError(problem)
    return settings


def error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    problem = flag_problem(args)
    if problem:
        p.error(problem)
    if args.transcoder:
        return transcoders_main(args)
    # local: the command line answers a bad argument before torch and the models load (tests patch train_sae there)
    import torch
    from core.features.activations import MAX_BYTES, MAX_VECTORS
    from core.data.held_out import model_held_out
    from core.analysis.sae import sae_folder, save_sae
    from core.features.explain import explain_sae
    from core.features.explanations import write_explanations
    from core.analysis.sites import check_site, site_width
    from core.features.train import train_sae
    from core.nn.checkpoint import CheckpointError, load_checkpoint, read_config

    try:
        model, tokenizer = load_checkpoint(args.model)
        _, _, training = read_config(args.model)
        check_site(model.config, args.site)
        out = Path(args.out) if args.out else sae_folder(args.model, args.site)
        # before the training, not after it; the default place named as such (no --out was given)
        problem = out_problem(out, SAE_OUT, args.overwrite, label=None if args.out else f"{out} (the default --out)")
        if problem:
            raise ValueError(problem)
        held = model_held_out(model, tokenizer, training)  # a text too short for one window, before the work
        width = site_width(model.config, args.site)
        settings = settings_for(args, model.config, args.site, held, min(MAX_VECTORS, MAX_BYTES // (4 * width)))
        if args.threads is not None:
            torch.set_num_threads(args.threads)
    except (CheckpointError, OSError, ValueError) as e:
        return error(str(e))
    last = [0.0]

    def progress(step, steps, loss):
        if time.monotonic() - last[0] > 5 or step == steps:
            last[0] = time.monotonic()
            print(f"step {step:,}/{steps:,}  reconstruction loss {loss:.4f}", flush=True)

    result = train_sae(model, tokenizer, args.site, training, settings, held=held, progress=progress)
    try:
        save_sae(result.sae, out, result.metrics)  # its three files, each replaced alone: the rest stays
        write_explanations(out, explain_sae(model, tokenizer, result.sae, held=held))  # each latent's words
    except OSError as e:  # the place changed during the run
        return error(f"the SAE could not be saved in {out}: {e}")
    print(json.dumps({k: result.metrics[k] for k in ("l0", "explained_variance", "dead_fraction", "ce_loss_score",
                                                      "mse", "precision")}, indent=2))
    print(f"saved {out}")
    return 0


def transcoders_main(args) -> int:
    """--transcoder: one transcoder per block (or --layer's), each saved as it finishes, with its numbers and the
    loss of the model with every saved transcoder spliced in."""
    # local: the command line answers a bad argument before torch and the models load
    import torch
    from core.features.activations import MAX_VECTORS
    from core.data.held_out import model_held_out
    from core.features.explain import explain_sae
    from core.features.explanations import write_explanations
    from core.features.transcoder import MAX_PAIRS, replacement_losses, save_transcoder, train_transcoder
    from core.analysis.transcoders import load_transcoders, reads, transcoder_folder, writes
    from core.nn.checkpoint import CheckpointError, load_checkpoint, read_config

    try:
        model, tokenizer = load_checkpoint(args.model)
        _, _, training = read_config(args.model)
        if not model.config.mlp:
            raise ValueError("this model has no MLP: there is nothing for a transcoder to replace")
        if args.layer is not None and not 0 <= args.layer < model.config.n_layers:
            raise ValueError(f"--layer: the model has blocks 0 to {model.config.n_layers - 1}")
        layers = range(model.config.n_layers) if args.layer is None else [args.layer]
        for layer in layers:  # every folder judged before the first transcoder trains
            problem = out_problem(transcoder_folder(args.model, layer), TRANSCODER_OUT, args.overwrite)
            if problem:
                raise ValueError(problem)
        held = model_held_out(model, tokenizer, training)
        # a transcoder reads and writes d_model numbers, as the SAE of the block's MLP output would
        settings = settings_for(args, model.config, writes(layers[0]), held, min(MAX_VECTORS, MAX_PAIRS))
        if args.threads is not None:
            torch.set_num_threads(args.threads)
    except (CheckpointError, OSError, ValueError) as e:
        return error(str(e))
    for layer in layers:
        r = train_transcoder(model, tokenizer, layer, training, settings, held=held)
        folder = save_transcoder(r.sae, args.model, layer, r.metrics)
        write_explanations(folder, explain_sae(model, tokenizer, r.sae, held=held, reads=reads(layer)))
        print(f"layer {layer}: " + json.dumps({**{k: round(r.metrics[k], 4) for k in (
            "l0", "explained_variance", "dead_fraction", "ce_clean", "ce_replaced", "ce_mlps_zeroed",
            "train_s")}, "precision": r.metrics["precision"]}), flush=True)
    every = load_transcoders(args.model, model.config)
    print("every saved transcoder spliced in: " + json.dumps(
        {k: round(v, 4) for k, v in replacement_losses(model, every, held).items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
