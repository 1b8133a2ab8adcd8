"""Training an SAE on one site of a model, and its health numbers, named as SAELens names them and computed as
its ``run_evals`` computes them (sae_lens/evals.py, 6.54: get_sparsity_and_variance_metrics and
get_downstream_reconstruction_metrics), over the N evaluation tokens, x (d_in) each, f = encode(x):

    l0                  E_tokens #{j : f_j > 0}, the latents active on a token
    mse                 E_tokens ||x - x_hat||^2, summed over the d_in numbers of a token (not a mean per number:
                        SAELens's convention, as in its training loss), then averaged over the tokens
    explained_variance  1 - E||x - x_hat||^2 / (E||x||^2 - ||E x||^2) = 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2
    ce_loss_score       (ce_zero_ablated - ce_spliced) / (ce_zero_ablated - ce_clean): SAELens's
                        (ce_loss_with_ablation - ce_loss_with_sae) / (ce_loss_with_ablation - ce_loss_without_sae),
                        1 when the reconstruction serves the model as well as the real activation, 0 when as badly as
                        the site zeroed; each CE the mean next-token cross-entropy over the tokens (nats)
    dead_fraction       share of latents that never fire on the evaluation tokens: of SAELens's feature_density,
                        the share that is 0 (SAELens reports the densities, not this share)

The held-out windows are split: every fifth window is kept for the evaluation, the rest trains the SAE, so the
numbers are measured on tokens the SAE never saw. Dead latents are fought with the auxiliary loss of Gao et al.
(2024, "AuxK"): the latents that have not fired for a while are asked to explain what the live ones leave over."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from core.analysis.sites import Site, as_site
from core.data.held_out import HeldOut, model_held_out
from core.features.activations import MAX_BYTES, MAX_VECTORS, collect
from core.analysis.sae import MAX_SAE_BYTES, SAE, SAEConfig, model_fingerprint
from core.features.sparse_code import sparse_code
from core.nn.precision import FP32, autocast, choose, worth_probing
from core.serve.paths import user_models_dir

EXPANSION = 8           # d_sae = 8 x d_in by default
DEFAULT_K = 12          # latents kept per token by TopK
EVAL_EVERY = 5          # every fifth held-out window evaluates, the other four train
EVAL_TOKENS = 32_768    # the most tokens an evaluation runs the model on (three runs: clean, zeroed, spliced)
AUX_COEF = 1 / 32       # Gao et al.'s weight of the AuxK loss
DEAD_AFTER = 25_000     # a latent that has not fired on this many training vectors counts as dead for AuxK


@dataclass(frozen=True)
class SAESettings:
    d_sae: int | None = None      # None: EXPANSION x d_in
    k: int = DEFAULT_K
    kind: str = "topk"
    l1: float = 3e-3              # the ReLU kind's penalty (on the activations times their decoder norms)
    steps: int = 2_000
    batch_size: int = 2_048
    lr: float = 2e-3
    seed: int = 0
    max_vectors: int = MAX_VECTORS
    max_bytes: int = MAX_BYTES
    # "float32", or "auto": bf16 products where a short probe at this shape measures them faster with the same loss
    # (core.nn.precision; never bf16 by the setting alone). Tests and shipped numbers keep float32.
    precision: str = "float32"

    def __post_init__(self):
        if self.precision not in ("float32", "auto"):
            raise ValueError(f"precision must be float32 or auto, got {self.precision!r}")
        for name in ("steps", "batch_size", "max_vectors", "max_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a whole number ≥ 1, got {v!r}")
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr < 1:
            raise ValueError(f"lr must be between 0 and 1, got {self.lr!r}")

    def config(self, site: Site | str, d_in: int) -> SAEConfig:
        d_sae = EXPANSION * d_in if self.d_sae is None else self.d_sae  # not `or`: a d_sae of 0 is refused, not replaced
        size = 4 * (2 * d_in * d_sae + d_sae + d_in)  # float32 bytes of the four tensors
        if size > MAX_SAE_BYTES:  # it could be trained but never loaded again
            raise ValueError(f"{d_sae:,} latents on {d_in} numbers make {size / 2**20:,.0f} MiB, more than the "
                             f"{MAX_SAE_BYTES // 2**20} MiB an SAE file may be; take fewer latents")
        return SAEConfig(site=site, d_in=d_in, d_sae=d_sae, kind=self.kind, k=min(self.k, d_sae),
                         l1=self.l1 if self.kind == "relu" else 0.0)

    @property
    def vectors_seen(self) -> int:
        return self.steps * self.batch_size


class TrainedSAE(NamedTuple):
    sae: SAE
    metrics: dict
    curve: list  # (step, normalised reconstruction loss) every few steps


def split_held_out(held: HeldOut) -> tuple[HeldOut, HeldOut]:
    """(training part, evaluation part): every EVAL_EVERY-th window evaluates (interleaved: both parts come from the
    whole held-out text, not one from its start and one from its end)."""
    idx = torch.arange(len(held.windows))
    ev = idx % EVAL_EVERY == EVAL_EVERY - 1
    if not ev.any():  # one window only: it must do both
        ev = idx == idx[-1]
        return held, HeldOut(held.windows[ev], held.targets[ev], held.corpus)
    return (HeldOut(held.windows[~ev], held.targets[~ev], held.corpus),
            HeldOut(held.windows[ev], held.targets[ev], held.corpus))


def splice_hooks(sae: SAE) -> list[tuple[str, Callable]]:
    """Hooks that replace the site's activation by the SAE's reconstruction of it."""
    return [(sae.site, lambda x, name: sae(x))]


def zero_hooks(site: Site | str) -> list[tuple[str, Callable]]:
    return [(str(site), lambda x, name: torch.zeros_like(x))]


@torch.no_grad()
def mean_ce(model, held: HeldOut, hooks=(), batch: int = 32) -> float:
    """Mean next-token cross-entropy (nats) over ``held``'s windows, with ``hooks`` running in the forward."""
    total, count = 0.0, 0
    for i in range(0, len(held.windows), batch):
        x, y = held.windows[i:i + batch], held.targets[i:i + batch]
        logits = model(x, hooks=list(hooks) or None).logits  # (B, n, m)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        count += y.numel()
    return total / count


def ce_loss_score(clean: float, spliced: float, zeroed: float) -> float:
    """(zeroed - spliced) / (zeroed - clean); nan when zeroing the site costs nothing (no scale to measure on)."""
    gap = zeroed - clean
    return (zeroed - spliced) / gap if abs(gap) > 1e-9 else float("nan")


@torch.no_grad()
def reconstruction_stats(sae: SAE, acts: torch.Tensor, chunk: int = 8192) -> dict:
    """l0, mse, explained_variance and dead_fraction of ``sae`` on activations (N, d_in), as the module's docstring
    defines them, with the fire count of each latent."""
    n = len(acts)
    mean = acts.mean(0)
    err = var = l0 = 0.0
    fires = torch.zeros(sae.config.d_sae, dtype=torch.long)
    for i in range(0, n, chunk):
        x = acts[i:i + chunk]
        f = sae.encode(x)
        active = f > 0
        fires += active.sum(0)
        l0 += active.sum().item()
        err += (sae.decode(f) - x).pow(2).sum().item()
        var += (x - mean).pow(2).sum().item()
    # mse per token, summed over its d numbers (SAELens's): err / n, not err / (n * d)
    return {"l0": l0 / n, "mse": err / n, "explained_variance": 1 - err / var if var > 0 else float("nan"),
            "dead_fraction": (fires == 0).float().mean().item(), "fires": fires}


def eval_part(held: HeldOut, n_ctx: int) -> HeldOut:
    keep = max(1, EVAL_TOKENS // n_ctx)
    return HeldOut(held.windows[:keep], held.targets[:keep], held.corpus)


@torch.no_grad()
def evaluate(model, sae: SAE, held: HeldOut, max_bytes: int = MAX_BYTES) -> dict:
    """The health numbers of ``sae`` on the evaluation windows ``held`` (capped at EVAL_TOKENS tokens)."""
    return _evaluate(model, sae, as_site(model.config, sae.site), held, max_bytes)


def _evaluate(model, sae: SAE, site: Site, held: HeldOut, max_bytes: int) -> dict:
    """``evaluate`` with the SAE's site already checked against ``model`` (train_sae made it a Site at its entry)."""
    held = eval_part(held, model.config.n_ctx)
    acts = collect(model, held.windows, site, max_bytes=max_bytes)
    stats = reconstruction_stats(sae, acts)
    stats.pop("fires")
    clean = mean_ce(model, held)
    spliced = mean_ce(model, held, splice_hooks(sae))
    zeroed = mean_ce(model, held, zero_hooks(site))
    return {**stats, "ce_loss_score": ce_loss_score(clean, spliced, zeroed), "ce_clean": clean,
            "ce_spliced": spliced, "ce_zero_ablated": zeroed, "eval_tokens": held.n_tokens, "corpus": held.corpus}


def memory_estimate(config, site: Site | str, held_tokens: int, settings: SAESettings = SAESettings()) -> int:
    """Bytes a training run holds at its peak: the collected activations, the SAE with Adam's two moments, and one
    batch's (batch, d_sae) activations a few times over for the backward pass."""
    width = as_site(config, site).width
    n = min(settings.max_vectors, settings.max_bytes // (4 * width), held_tokens)
    d_sae = settings.d_sae or EXPANSION * width
    params = 2 * width * d_sae + d_sae + width
    return 4 * (n * width + 4 * params + 6 * settings.batch_size * d_sae)


def _init_from(sae: SAE, acts: torch.Tensor):
    with torch.no_grad():
        sae.b_dec.copy_(acts.mean(0))  # inputs centred: the decoder's bias starts at the mean activation


# Measured against SAELens's trainer at its settings (bench/sae_train.py: 512 latents, k 12, 512 steps of 2,048,
# lr 2e-3; explained variance on the held-out activations, SAELens 0.952): the old trainer (unit-norm W_enc = W_dec.T,
# decay over the last 20 %, no projection) 0.9399; projecting W_dec's gradient 0.9426; + constant lr 0.9464;
# + W_enc at 0.01x 0.9494, 0.1x 0.9509, 0.2x 0.9538, 0.3x 0.9546, 0.5x 0.9588; clipping the gradient at 1.0 (SAELens's) changed nothing.
# (SAELens starts W_dec at norm 0.1 and reads it through its norm: the encoder starts small, the decoder's effective
# rows unit norm, as here.)
ENC_INIT = 0.5          # W_enc starts as ENC_INIT x W_dec's transpose
PROJECT_GRAD = True     # W_dec's gradient made orthogonal to each (unit) row before the step, as SAELens's
                        # normalised decoder makes it: the radial part would only be undone by the renormalisation
DECAY_FROM = 1.0        # lr constant to the end (< 1: linear to 0 from that share of the steps)
CLIP = None             # gradient-norm clip (SAELens's trainer clips at 1.0: no change measured)


class _Work(NamedTuple):
    """The tensors a TopK run trains: the SAE's own, with the encoder transposed so that each latent's weights are
    one contiguous row (core.features.sparse_code); copied back into the SAE at the end."""
    w_enc_t: torch.Tensor  # (d_sae, d_in)
    b_enc: torch.Tensor
    w_dec: torch.Tensor    # (d_sae, d_in)
    b_dec: torch.Tensor


def _work_tensors(sae: SAE) -> _Work:
    return _Work(*(torch.nn.Parameter(t.detach().clone()) for t in
                   (sae.W_enc.t().contiguous(), sae.b_enc, sae.W_dec, sae.b_dec)))


@torch.no_grad()
def _copy_back(sae: SAE, w: _Work):
    sae.W_enc.copy_(w.w_enc_t.t())
    sae.b_enc.copy_(w.b_enc)
    sae.W_dec.copy_(w.w_dec)
    sae.b_dec.copy_(w.b_dec)


def _topk_losses(sae: SAE, w: _Work, x, y, var, dead, aux_k, precision: str = FP32):
    """(reconstruction loss, total loss, fired (d_sae,) bool) of one batch through the sparse step. In bf16 only
    the dense product that chooses the latents runs in bf16; their values are then recomputed in fp32 from the
    k chosen columns (the sparse step's own sums stay fp32)."""
    k = sae.config.k
    xc = x - w.b_dec if sae.config.apply_b_dec_to_input else x  # (B, d_in)
    with torch.no_grad(), autocast(precision):  # choosing the k latents needs every pre-activation, no gradient
        pre = torch.addmm(w.b_enc, xc, w.w_enc_t.t())  # (B, d_sae)
        top = pre.topk(k, dim=-1, sorted=False)
    values = top.values if precision == FP32 else _values(w, xc, top.indices)
    out, f = sparse_code(xc, w.w_enc_t, w.b_enc, w.w_dec, top.indices, values)
    x_hat = out + w.b_dec
    rec = (x_hat - y).pow(2).sum(-1).mean() / var
    fired = torch.bincount(top.indices[f > 0], minlength=sae.config.d_sae) > 0
    if not dead.any():
        return rec, rec, fired
    # AuxK: the top dead latents reconstruct the residual error the live ones leave (Gao et al. 2024, A.2)
    e = (y - x_hat).detach()
    with torch.no_grad():
        aux_top = pre.masked_fill(~dead, float("-inf")).topk(min(aux_k, int(dead.sum())), dim=-1, sorted=False)
    aux_values = aux_top.values if precision == FP32 else _values(w, xc, aux_top.indices)
    e_hat, _ = sparse_code(xc, w.w_enc_t, w.b_enc, w.w_dec, aux_top.indices, aux_values)
    aux = (e_hat - e).pow(2).sum(-1).mean() / (e - e.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
    return rec, rec + AUX_COEF * torch.nan_to_num(aux, nan=0.0), fired


@torch.no_grad()
def _values(w: _Work, xc, idx):
    """The pre-activations of latents ``idx`` (B, k) in fp32, from their k encoder rows: (B, k)."""
    return (w.w_enc_t[idx] * xc.unsqueeze(1)).sum(-1) + w.b_enc[idx]  # (B, k, d_in) * (B, 1, d_in), summed


PROBE_STEPS = 6  # steps of each precision a probe times (after one untimed step): a second or two at 512 latents


def _probe_precision(sae: SAE, acts, ys, var, settings: SAESettings) -> dict:
    """core.nn.precision.choose for this SAE's shape: a few steps of each precision on copies of its tensors, the
    same batches, timed, with the reconstruction loss the last step reached."""
    bs = min(settings.batch_size, len(acts))
    rows = torch.randperm(len(acts), generator=torch.Generator().manual_seed(settings.seed))[:bs]
    x, y = acts[rows], ys[rows]
    no_dead = torch.zeros(sae.config.d_sae, dtype=torch.bool)

    def probe(precision: str) -> tuple[float, float]:
        w = _work_tensors(sae)
        opt = torch.optim.Adam(list(w), lr=settings.lr)
        times = []
        for _ in range(PROBE_STEPS + 1):
            t = time.perf_counter()
            rec, loss, _ = _topk_losses(sae, w, x, y, var, no_dead, 1, precision)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
        return min(times[1:]), rec.item()  # the fastest step: a load spike on a shared CPU falls on one

    c = sae.config
    shape = f"sae d_in={c.d_in} d_sae={c.d_sae} k={c.k} batch={bs} threads={torch.get_num_threads()}"
    # a run under 20 x the probe's 14 steps reads a cached choice or trains in fp32 (core.nn.precision.worth_probing)
    return choose(shape, probe, cache_dir=user_models_dir(), may_probe=worth_probing(settings.steps, PROBE_STEPS))


def _relu_losses(sae: SAE, x, y, var):
    f = sae.encode(x)
    rec = (sae.decode(f) - y).pow(2).sum(-1).mean() / var
    loss = rec + sae.config.l1 * (f * sae.W_dec.norm(dim=1)).sum(-1).mean() / var.sqrt()
    return rec, loss, (f > 0).any(0)


def _start(sae: SAE, ys: torch.Tensor):
    """b_dec and W_dec as ``_init_from`` sets them, then W_enc at ENC_INIT times W_dec's transpose (measured against
    SAELens at 512 steps: explained variance 0.9399 -> 0.9588, issue 60)."""
    _init_from(sae, ys)
    with torch.no_grad():
        sae.W_enc.copy_(ENC_INIT * sae.W_dec.t())


def train_on(sae: SAE, acts: torch.Tensor, settings: SAESettings, progress=None, should_stop=None,
             targets: torch.Tensor | None = None) -> list:
    """Train ``sae`` on activations (N, d_in) in place; returns the curve [(step, normalised loss)].
    ``progress(step, steps, loss)`` is called every few steps; ``should_stop()`` True ends the run early.
    ``targets`` (N, d_in): what to reconstruct instead of the activations themselves: a transcoder reads the MLP's
    input and writes its output (core.features.transcoder)."""
    g = torch.Generator().manual_seed(settings.seed)
    ys = acts if targets is None else targets  # (N, d_in): what the decoder must write
    _start(sae, ys)
    n = len(acts)
    var = (ys - ys.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)  # E||y - E y||^2: the loss's unit
    topk = sae.config.kind == "topk"
    w = _work_tensors(sae) if topk else None
    chosen = _probe_precision(sae, acts, ys, var, settings) if topk and settings.precision == "auto" else {}
    precision = sae.trained_precision = chosen.get("precision", FP32)  # read by train_sae for the record
    params = list(w) if topk else list(sae.parameters())
    w_dec = w.w_dec if topk else sae.W_dec
    opt = torch.optim.Adam(params, lr=settings.lr, betas=(0.9, 0.999))
    steps, bs = settings.steps, min(settings.batch_size, n)
    decay_from = int(DECAY_FROM * steps)  # constant, then linear to 0 (as SAELens's optional decay)
    since_fired = torch.zeros(sae.config.d_sae)
    aux_k = max(1, sae.config.d_in // 2)
    order, at = torch.randperm(n, generator=g), 0
    curve = []
    for step in range(steps):
        if should_stop is not None and should_stop():
            break
        if at + bs > n:
            order, at = torch.randperm(n, generator=g), 0
        rows = order[at:at + bs]
        x = acts[rows]  # (bs, d_in)
        y = x if targets is None else ys[rows]  # (bs, d_in): what to reconstruct, the same tensor for an SAE
        at += bs
        for group in opt.param_groups:
            group["lr"] = settings.lr * (1.0 if step < decay_from else (steps - step) / max(1, steps - decay_from))
        dead = since_fired >= DEAD_AFTER
        if topk:
            rec, loss, fired = _topk_losses(sae, w, x, y, var, dead, aux_k, precision)
        else:
            rec, loss, fired = _relu_losses(sae, x, y, var)
        since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + bs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if PROJECT_GRAD:
            with torch.no_grad():  # rows are unit norm: remove each row's gradient along itself
                w_dec.grad -= (w_dec.grad * w_dec).sum(-1, keepdim=True) * w_dec
        if CLIP is not None:
            torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        with torch.no_grad():  # rows of W_dec back to unit norm, so a feature's activation measures its size
            w_dec /= w_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        if step % 25 == 0 or step == steps - 1:
            curve.append((step, rec.item()))
            if progress is not None:
                progress(step + 1, steps, rec.item())
    if topk:
        _copy_back(sae, w)
    sae.eval()
    return curve


def train_sae(model, tokenizer, site: Site | str, training: dict | None = None, settings: SAESettings | None = None,
              held: HeldOut | None = None, progress=None, should_stop=None) -> TrainedSAE:
    """An SAE trained on ``site`` of ``model`` over the held-out part of its corpus (``training``: its config.json's
    training record, which names the corpus; or pass ``held``), with its health numbers measured on the held-out
    windows it did not train on."""
    settings = settings or SAESettings()
    site = as_site(model.config, site)  # checked once, here; everything below takes the Site as it is
    t0 = time.perf_counter()
    held = held or model_held_out(model, tokenizer, training)
    train_part, eval_held = split_held_out(held)
    acts = collect(model, train_part.windows, site, settings.max_vectors, settings.max_bytes)
    collect_s = time.perf_counter() - t0
    # it records the weights it read (model_fingerprint): loaded beside other weights, it is refused, not used
    config = replace(settings.config(site, acts.shape[1]), trained_on=model_fingerprint(model, cache=False))
    sae = SAE(config, generator=torch.Generator().manual_seed(settings.seed))
    model_was = model.training
    model.eval()
    t1 = time.perf_counter()
    curve = train_on(sae, acts, settings, progress, should_stop)
    train_s = time.perf_counter() - t1
    sae.requires_grad_(False)
    metrics = _evaluate(model, sae, site, eval_held, settings.max_bytes)
    model.train(model_was)
    metrics.update({"site": site.name, "d_sae": sae.config.d_sae, "k": sae.config.k, "kind": sae.config.kind,
                    "train_vectors": len(acts), "steps": curve[-1][0] + 1 if curve else 0,
                    "batch_size": settings.batch_size, "lr": settings.lr, "seed": settings.seed,
                    "collect_s": round(collect_s, 2), "train_s": round(train_s, 2),
                    "threads": torch.get_num_threads(), "precision": getattr(sae, "trained_precision", "float32")})
    return TrainedSAE(sae, metrics, curve)
