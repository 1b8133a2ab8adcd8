"""python -m core.features.upgrade MODEL_FOLDER [--check]

Brings the SAEs (``sae/<site>/``) and transcoders (``transcoders/layer-L/``) beside a saved model to the layout of
issue 57, in place, without training anything:

- a transcoder saved b_dec-centred (no ``apply_b_dec_to_input`` in its config.json) is folded,
  ``b_enc <- b_enc - b_dec @ W_enc`` (core.analysis.sae.fold_input_centring: the same map, exact to float32
  rounding), and records what it reads; an SAE keeps its centring, and its weights bit for bit;
- every folder is written again by save_sae: SAELens's file names (sae_weights.safetensors, cfg.json) beside ours;
- its health numbers are measured again on the same held-out tokens (core.features.train's definitions, SAELens's:
  ``mse`` summed over a token's numbers), replacing the measured keys of metrics.json and keeping the training
  record (steps, seed, times).

--check: print what would change, write nothing. Exit status 2 for a bad folder."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path


def upgrade(model_folder, write: bool = True, held=None) -> list[dict]:
    """One row per SAE or transcoder beside the model: its folder, whether it was folded, and its numbers before
    and after; the folders rewritten when ``write``. ``held``: the held-out windows (default: the model's own,
    as training took them)."""
    from core.analysis.sae import fold_input_centring, load_sae, read_metrics, sae_folder, save_sae, saved_sites
    from core.data.held_out import model_held_out
    from core.features.train import eval_part, evaluate, split_held_out
    from core.features.transcoder import collect_pairs, fit_stats, replacement_losses
    from core.analysis.transcoders import load_transcoders, reads, transcoder_folder
    from core.nn.checkpoint import load_checkpoint, read_config

    model, tok = load_checkpoint(model_folder)
    model.eval()
    _, _, training = read_config(model_folder)
    held = split_held_out(held or model_held_out(model, tok, training))[1]  # the windows training measured on
    rows = []

    def done(folder, sae, measured, folded):
        old = read_metrics(folder)
        new = {**old, **measured}
        rows.append({"folder": str(folder), "folded": folded,
                     "changed": {k: (old.get(k), v) for k, v in measured.items() if old.get(k) != v}})
        if write:
            save_sae(sae, folder, new)

    for site in saved_sites(model_folder):
        folder = sae_folder(model_folder, site)
        sae = load_sae(folder, root=model_folder)
        done(folder, sae, evaluate(model, sae, held), folded=False)
    for layer, tc in load_transcoders(model_folder, model.config).items():
        folded = tc.config.apply_b_dec_to_input  # True: saved b_dec-centred, folded here
        tc = fold_input_centring(tc)
        if tc.config.reads is None:  # saved before the field
            tc = _recast(tc, replace(tc.config, reads=reads(layer)))
        pairs = collect_pairs(model, eval_part(held, model.config.n_ctx).windows, layer)
        measured = {**fit_stats(tc, *pairs), **replacement_losses(model, {layer: tc}, held)}
        done(transcoder_folder(model_folder, layer), tc, measured, folded)
    return rows


def _recast(sae, config):
    """``sae``'s tensors under ``config`` (same shapes)."""
    import torch

    out = type(sae)(config)
    with torch.no_grad():
        for name, t in sae.tensors().items():
            getattr(out, name).copy_(t)
    return out.requires_grad_(False).eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.features.upgrade", description=__doc__.split("\n\n")[1])
    p.add_argument("model", help="a saved model folder")
    p.add_argument("--check", action="store_true", help="print what would change, write nothing")
    args = p.parse_args(argv)
    if not (Path(args.model) / "config.json").is_file():
        print(f"{p.prog}: error: {args.model} is not a saved model folder (no config.json)", file=sys.stderr)
        return 2
    for row in upgrade(args.model, write=not args.check):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
