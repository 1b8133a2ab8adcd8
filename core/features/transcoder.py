"""Per-layer transcoders (issue 46): for each block, a sparse map from what its MLP reads (``hook_mlp_in``, the
LayerNorm's output) to what the MLP writes (``hook_mlp_out``), trained as the SAEs of core.features are (TopK by
default, the same AuxK against dead latents, the same held-out windows).

A transcoder is an SAE whose encoder reads one vector and whose decoder writes another, so it is stored as one:
``transcoders/layer-{l}/`` beside the model, with ``sae_weights.safetensors``, ``config.json`` (its site is the
output it writes, ``blocks.{l}.hook_mlp_out``; ``reads`` the input, ``blocks.{l}.hook_mlp_in``), SAELens's
``cfg.json`` and ``metrics.json``. Loading takes the same checks. Its encoder is ``x @ W_enc + b_enc``: no b_dec on
its input (``apply_b_dec_to_input`` false), as SAELens's and circuit-tracer's transcoders compute it; a folder
saved before that layout (b_dec-centred, no field) still loads and encodes as it did (core.analysis.sae). Replacing every MLP by its transcoder gives the *replacement model* of Ameisen et al. (2025), whose loss
is reported beside the model's own and beside the loss with every MLP zero-ablated."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from core.data.held_out import HeldOut, model_held_out
from core.analysis.sae import SAE, SAEFileError, model_fingerprint, save_sae
from core.analysis import transcoders as TF  # the folder layout and the sites (module-qualified: no re-export)
from core.features.train import SAESettings, TrainedSAE, eval_part, mean_ce, split_held_out, train_on

MAX_PAIRS = 400_000  # (input, output) pairs collected per layer: Tiny Shakespeare's held-out part is ~110k tokens


@torch.no_grad()
def collect_pairs(model, windows: torch.Tensor, layer: int, max_vectors: int = MAX_PAIRS,
                  batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, outputs), each (N, d): what block ``layer``'s MLP read and wrote at every token of ``windows``."""
    xs, ys, n = [], [], 0
    for i in range(0, len(windows), batch):
        _, cache = model.run_with_cache(windows[i:i + batch], names=[TF.reads(layer), TF.writes(layer)])
        d = cache[TF.reads(layer)].shape[-1]
        xs.append(cache[TF.reads(layer)].reshape(-1, d))  # (B, n_ctx, d) -> (B * n_ctx, d)
        ys.append(cache[TF.writes(layer)].reshape(-1, d))
        n += len(xs[-1])
        if n >= max_vectors:
            break
    return torch.cat(xs)[:max_vectors].float(), torch.cat(ys)[:max_vectors].float()


def replace_hooks(transcoders: dict) -> list:
    """Hooks that replace each listed block's MLP output by its transcoder's, read from the same run's MLP input."""
    seen = {}
    out = []
    for layer, tc in transcoders.items():
        out.append((TF.reads(layer), lambda x, name, l=layer: seen.__setitem__(l, x) or x))
        out.append((TF.writes(layer), lambda y, name, l=layer, tc=tc: tc(seen[l]).to(y.dtype)))
    return out


def zero_mlp_hooks(layers) -> list:
    return [(TF.writes(l), lambda y, name: torch.zeros_like(y)) for l in layers]


@torch.no_grad()
def fit_stats(tc: SAE, x: torch.Tensor, y: torch.Tensor) -> dict:
    """l0, dead_fraction, mse and explained_variance of transcoder ``tc`` on pairs (x, y), each (N, d), computed as
    core.features.train's docstring defines them for an SAE, with y (the MLP's output) in the place of the
    activation it reconstructs: mse = E_tokens ||y - y_hat||^2 (summed over the d numbers)."""
    f = tc.encode(x)
    y_hat = tc.decode(f)
    err = (y_hat - y).pow(2).sum().item()
    var = (y - y.mean(0)).pow(2).sum().item()
    return {"l0": (f > 0).sum(-1).float().mean().item(), "dead_fraction": ((f > 0).sum(0) == 0).float().mean().item(),
            "mse": err / len(y), "explained_variance": 1 - err / var if var > 0 else float("nan")}


@torch.no_grad()
def replacement_losses(model, transcoders: dict, held: HeldOut) -> dict:
    """Mean cross-entropy on ``held`` of the model, with every MLP replaced by its transcoder, and with every MLP
    zero-ablated; and the share of the MLPs' worth the transcoders keep, (zeroed - replaced) / (zeroed - clean)."""
    held = eval_part(held, model.config.n_ctx)
    clean = mean_ce(model, held)
    replaced = mean_ce(model, held, replace_hooks(transcoders))
    zeroed = mean_ce(model, held, zero_mlp_hooks(transcoders))
    gap = zeroed - clean
    return {"ce_clean": clean, "ce_replaced": replaced, "ce_mlps_zeroed": zeroed,
            "ce_loss_score": (zeroed - replaced) / gap if abs(gap) > 1e-9 else float("nan"),
            "eval_tokens": held.n_tokens}


def train_transcoder(model, tokenizer, layer: int, training: dict | None = None,
                     settings: SAESettings | None = None, held: HeldOut | None = None, progress=None,
                     should_stop=None) -> TrainedSAE:
    """A transcoder of block ``layer``'s MLP, trained on four fifths of the held-out windows and measured on the
    rest (its fit; the loss with it spliced in alone)."""
    settings = settings or SAESettings()
    if not model.config.mlp:
        raise ValueError("this model has no MLP: there is nothing for a transcoder to replace")
    if not 0 <= layer < model.config.n_layers:
        raise ValueError(f"the model has {model.config.n_layers} blocks, numbered 0 to {model.config.n_layers - 1}")
    t0 = time.perf_counter()
    held = held or model_held_out(model, tokenizer, training)
    train_part, eval_held = split_held_out(held)
    x, y = collect_pairs(model, train_part.windows, layer, min(settings.max_vectors, MAX_PAIRS))
    collect_s = time.perf_counter() - t0
    # it records the weights it reads (model_fingerprint): loaded beside other weights, it is refused, not spliced in
    # no b_dec on the input (the bias of what it writes, not of what it reads): the layout SAELens and
    # circuit-tracer compute
    config = replace(settings.config(TF.writes(layer), x.shape[1]), trained_on=model_fingerprint(model, cache=False),
                     apply_b_dec_to_input=False, reads=TF.reads(layer))
    tc = SAE(config, generator=torch.Generator().manual_seed(settings.seed))
    model_was = model.training
    model.eval()
    t1 = time.perf_counter()
    curve = train_on(tc, x, settings, progress, should_stop, targets=y)
    train_s = time.perf_counter() - t1
    tc.requires_grad_(False)
    ex, ey = collect_pairs(model, eval_part(eval_held, model.config.n_ctx).windows, layer)
    metrics = fit_stats(tc, ex, ey)
    metrics.update(replacement_losses(model, {layer: tc}, eval_held))
    model.train(model_was)
    metrics.update({"kind": "transcoder", "reads": TF.reads(layer), "writes": TF.writes(layer), "layer": layer,
                    "d_sae": tc.config.d_sae, "k": tc.config.k, "train_vectors": len(x), "steps": settings.steps,
                    "batch_size": settings.batch_size, "lr": settings.lr, "seed": settings.seed,
                    "collect_s": round(collect_s, 2), "train_s": round(train_s, 2), "corpus": held.corpus,
                    "precision": getattr(tc, "trained_precision", "float32")})  # the products' (core.nn.precision)
    return TrainedSAE(tc, metrics, curve)


def save_transcoder(tc: SAE, model_folder, layer: int, metrics: dict | None = None) -> Path:
    return save_sae(tc, TF.transcoder_folder(model_folder, layer), metrics)


__all__ = ["SAEFileError", "collect_pairs", "fit_stats", "replace_hooks", "replacement_losses", "save_transcoder",
           "train_transcoder", "zero_mlp_hooks"]
