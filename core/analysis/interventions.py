"""Switching heads off: what a head is for, measured by what breaks when it is gone.

``ablate_heads`` runs the model with chosen heads' outputs removed before W_O mixes them (hooks on
``blocks.{l}.attn.hook_z``, (B, n, h, d/h)): set to zero ("zero"), or replaced by their mean over the batch and
positions ("mean", which keeps the head's average push on the residual stream and removes only what depends on the
tokens). Layers and heads count from 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.induction import copy_slices  # which losses belong to which copy: one definition, core.analysis.induction's
from core.analysis.picks import nan_last
from core.nn.hooks import HookRun

MODES = ("zero", "mean")
Head = tuple[int, int]


def check_heads(config, heads) -> list[Head]:
    """The heads as a sorted list of distinct (layer, head) pairs; ValueError for one the model lacks."""
    out = set()
    for pair in heads:
        layer, head = (int(v) for v in pair)
        if not (0 <= layer < config.n_layers and 0 <= head < config.n_heads):
            raise ValueError(f"the model has no head ({layer}, {head}): layers 0..{config.n_layers - 1}, "
                             f"heads 0..{config.n_heads - 1}")
        out.add((layer, head))
    return sorted(out)


def z_name(layer: int) -> str:
    """The hook point of every head's output of ``layer`` before W_O mixes them: (B, n, h, d/h)."""
    return f"blocks.{layer}.attn.hook_z"


@torch.no_grad()
def head_means(model, idx: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, every head's output averaged over the batch and positions of ``idx``: (h, d/h) each."""
    L = model.config.n_layers
    _, cache = model.run_with_cache(idx, names=[z_name(l) for l in range(L)])
    return [cache[z_name(l)].mean(dim=(0, 1)) for l in range(L)]  # (B, n, h, d/h) -> (h, d/h)


def ablation_hooks(config, heads, mode: str = "zero", means: list[torch.Tensor] | None = None) -> list:
    """The (name, fn) hooks for ``Transformer.forward`` that switch ``heads`` off: one on each concerned layer's
    ``attn.hook_z`` ([] when there are none)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    heads = check_heads(config, heads)
    if mode == "mean" and heads and means is None:
        raise ValueError("mean ablation needs the heads' mean outputs (head_means)")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def off(z, name, layer):  # z: (B, n, h, d/h)
        z = z.clone()  # not in place: a kept hook_z (or a caller's tensor) keeps its values
        for h in by_layer[layer]:
            z[:, :, h] = 0.0 if mode == "zero" else means[layer][h]  # (d/h,) broadcast over (B, n, d/h)
        return z

    return [(z_name(layer), lambda z, name, layer=layer: off(z, name, layer)) for layer in sorted(by_layer)]


@torch.no_grad()
def ablate_heads(model, idx: torch.Tensor, heads=(), mode: str = "zero", targets: torch.Tensor | None = None):
    """The model's ``ModelOutput`` on ``idx`` (B, n) with ``heads`` [(layer, head), ...] switched off.
    zero: the head's output is 0 before W_O; mean: its mean over the batch and positions of ``idx``.
    ``heads=[]`` is exactly the normal forward pass."""
    heads = check_heads(model.config, heads)
    means = head_means(model, idx) if heads and mode == "mean" else None
    return model(idx, targets=targets, hooks=ablation_hooks(model.config, heads, mode, means))


@torch.no_grad()
def token_losses(model, ids: list[int], heads=(), mode: str = "zero") -> np.ndarray:
    """(n-1,) loss in nats of predicting ids[i+1] from ids[:i+1], with ``heads`` switched off."""
    if len(ids) < 2:
        raise ValueError("need at least two tokens: one to read and one to predict")
    idx = torch.tensor([ids], dtype=torch.long)
    logits = ablate_heads(model, idx, heads, mode).logits[0, :-1]  # (n-1, m)
    return F.cross_entropy(logits, idx[0, 1:], reduction="none").double().numpy()


@torch.no_grad()
def mean_logprob(model, ids, start: int) -> float:
    """The model's mean log-probability (at temperature 1) of the tokens ``ids[start:]``: how typical a text is.
    Token 0 is predicted from nothing (there is no start-of-text token), so ``start=0`` scores every token the model
    predicts, the same as ``start=1``. ValueError when no token is left to score."""
    ids = list(ids)
    if not 0 <= start < len(ids):
        raise ValueError(f"start={start}: no token of the {len(ids)} to score (need 0 <= start < {len(ids)})")
    losses = token_losses(model, ids)  # entry i: the loss of ids[i + 1]
    # ids[t] is scored by entry t - 1; t runs from max(start, 1). (losses[start - 1:] at start=0 was losses[-1:],
    # the last token alone)
    return float(-losses[max(start, 1) - 1:].mean())


@torch.no_grad()
def next_token_probs(model, ids: list[int], heads=(), mode: str = "zero", positions=None) -> np.ndarray:
    """(n, m) next-token distributions at every position with ``heads`` switched off; with ``positions`` (a list of
    positions) only their rows, (len(positions), m): the whole table is n m floats, 400 MB in float64 for GPT-2
    small at 1,024 tokens."""
    idx = torch.tensor([ids], dtype=torch.long)
    logits = ablate_heads(model, idx, heads, mode).logits[0]  # (n, m)
    if positions is not None:
        logits = logits[list(positions)]
    return F.softmax(logits.double(), dim=-1).numpy()


@torch.no_grad()
def greedy_continuation(model, ids: list[int], steps: int, heads=(), mode: str = "zero") -> list[int]:
    """``steps`` greedy tokens after ``ids`` with ``heads`` switched off. A mean ablation keeps the means of
    the prompt itself for every new token, so the intervention is the same one the other views show.
    Keys and values are cached while the sequence fits in n_ctx; past it the window slides and every step reads
    the last n_ctx tokens again (positions are absolute), as in core.analysis.sampling.stream."""
    if not ids:
        raise ValueError("the prompt is empty")
    n_ctx = model.config.n_ctx
    prompt = torch.tensor([ids[-n_ctx:]], dtype=torch.long)
    heads = check_heads(model.config, heads)
    means = head_means(model, prompt) if heads and mode == "mean" else None
    run = HookRun(ablation_hooks(model.config, heads, mode, means))  # one run for every step: it keeps nothing
    seq = list(ids)
    past, pending = None, []  # pending: tokens the model has not read yet
    for _ in range(steps):
        if past is not None and past.length + len(pending) <= n_ctx:
            out = model(torch.tensor([pending]), past=past, use_cache=True, hooks=run, last_only=True)
        else:  # the first step, or the window slid: read the whole window again
            window = seq[-n_ctx:]
            out = model(torch.tensor([window]), use_cache=len(window) < n_ctx, hooks=run, last_only=True)
        past = out.present
        seq.append(int(out.logits[0, -1].argmax()))
        pending = seq[-1:]
    return seq[len(ids):]


@dataclass
class HeadEffect:
    layer: int
    head: int
    loss: float          # mean loss on the prompt with this head off
    increase: float      # loss - the intact model's loss (nats per token)


LOSS_CHUNK = 2**23  # logits worked on at once by head_losses (32 MB in float32)


def _chunked_losses(model, x: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """(B, n-1) losses of the predictions the stream x (B, n, d) leaving the last block makes for ``targets``
    (n-1,), a block of positions at a time: never more than LOSS_CHUNK logits at once."""
    B, n, _ = x.shape
    step = max(1, LOSS_CHUNK // (B * model.config.vocab_size))
    parts = []
    for lo in range(0, n - 1, step):
        hi = min(lo + step, n - 1)
        logits = model.readout(x[:, lo:hi])  # (B, hi - lo, m)
        # rows of m logits as they lie in memory: a (B, m, s) transposed view makes the loss a third slower overall
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[lo:hi].repeat(B), reduction="none")
        parts.append(loss.view(B, hi - lo))  # (B (hi - lo),) -> (B, hi - lo)
    return torch.cat(parts, dim=1).double().numpy()


def _layer_off(model, stream: torch.Tensor, layer: int, mode: str, means, targets: torch.Tensor) -> np.ndarray:
    """(h, n-1) losses with each head of ``layer`` off alone, from the stream (1, n, d) entering the layer: one
    batch of h rows, row k with head k off, through blocks layer..L-1 and the output map."""
    h = model.config.n_heads
    rows = torch.arange(h)

    def off(z, name):  # z: (h, n, h, d/h): batch row k switches head k off
        z = z.clone()
        # z[k, :, k] for every k at once: (h, n, d/h) <- (h, 1, d/h)
        z[rows, :, rows] = 0.0 if mode == "zero" else means[:, None, :]
        return z

    rows_in = stream.expand(h, -1, -1)  # (1, n, d) -> (h, n, d), one row per head switched off
    out = model.blocks_from(rows_in, layer, hooks=HookRun([(z_name(layer), off)]))
    return _chunked_losses(model, out, targets)


def _check(ids, mode):
    if len(ids) < 2:
        raise ValueError("need at least two tokens: one to read and one to predict")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    return torch.tensor([ids], dtype=torch.long)


@torch.no_grad()
def head_losses(model, ids: list[int], mode: str = "zero") -> tuple[np.ndarray, np.ndarray]:
    """Per-token losses (as ``token_losses``) with every head on, (n-1,), and with each head switched off alone,
    (L, h, n-1). The same numbers as one ``token_losses(model, ids, [(l, k)], mode)`` per head, computed with
    less work: switching off a head of layer l changes nothing before block l, so the blocks run once with every
    head on (which also gives the means of a mean ablation) and the stream entering each block is kept; then the
    h heads of layer l are switched off in one batch of h rows (row k: head k off), starting from that stream."""
    idx = _check(ids, mode)
    L = model.config.n_layers
    means = [None] * L

    x, streams = model.embed(idx), []
    for layer in range(L):
        streams.append(x)  # (1, n, d) entering block ``layer``
        run = HookRun(names=[z_name(layer)], record=True)  # the heads' outputs, for a mean ablation's means
        x = model.blocks_from(x, layer, layer + 1, hooks=run)
        means[layer] = run.store[z_name(layer)].mean(dim=(0, 1))  # (1, n, h, d/h) -> (h, d/h)
    base = _chunked_losses(model, x, idx[0, 1:])[0]
    per_head = np.stack([_layer_off(model, streams[l], l, mode, means[l], idx[0, 1:]) for l in range(L)])
    return base, per_head


@torch.no_grad()
def layer_head_losses(model, ids: list[int], layer: int, mode: str = "zero") -> np.ndarray:
    """(h, n-1): ``head_losses``'s rows for one layer alone (the blocks before it run with every head on), for a page
    that ranks layer by layer and shows its progress."""
    idx = _check(ids, mode)
    stream = model.blocks_from(model.embed(idx), 0, layer)
    means = head_means_from(model, stream, layer) if mode == "mean" else None
    return _layer_off(model, stream, layer, mode, means, idx[0, 1:])


def head_means_from(model, stream: torch.Tensor, layer: int) -> torch.Tensor:
    """(h, d/h) the heads of ``layer``'s mean outputs over the batch and positions of the stream entering it."""
    run = HookRun(names=[z_name(layer)], record=True)
    model.blocks_from(stream, layer, layer + 1, hooks=run)
    return run.store[z_name(layer)].mean(dim=(0, 1))  # (B, n, h, d/h) -> (h, d/h)


def rank_from_losses(base: np.ndarray, per_head: np.ndarray, positions: slice | None = None) -> list[HeadEffect]:
    """``head_losses``'s numbers as a ranking: every head by how much switching it off alone raises the mean loss
    (largest first, a NaN rise last), the mean taken over ``positions`` of the losses (default all)."""
    sel = positions or slice(None)
    ref = float(base[sel].mean())
    L, h = per_head.shape[:2]
    effects = [HeadEffect(l, k, float(per_head[l, k, sel].mean()), float(per_head[l, k, sel].mean()) - ref)
               for l in range(L) for k in range(h)]
    return sorted(effects, key=lambda e: nan_last(-e.increase))  # a NaN in a plain sort leaves the order undefined


def rank_heads(model, ids: list[int], mode: str = "zero", positions: slice | None = None) -> list[HeadEffect]:
    """Every head switched off alone, ranked by how much it raises the mean loss on the prompt (largest
    first). ``positions`` restricts the mean to some predictions (e.g. the second copy of a repeat)."""
    return rank_from_losses(*head_losses(model, ids, mode), positions)


def head_losses_cost(config, n: int) -> float:
    """What ``head_losses`` costs on n tokens, in forward passes of the whole model on them (multiply-adds of the
    linear maps, the attention's q.k and weighted values, and the output map): the pass with every head on, then
    for each layer l, h rows through blocks l..L-1 and the output map. A page multiplies it by the time of one
    forward pass to say beforehand how long the ranking takes."""
    d, L, h = config.d_model, config.n_layers, config.n_heads
    block = n * (4 * d * d + 2 * d * config.d_ff) + n * (n + 1) * d  # per sequence: linear maps + causal attention
    readout = n * d * config.vocab_size
    forward = L * block + readout
    return (forward + sum(h * ((L - l) * block + readout) for l in range(L))) / forward


def repeat_ids(ids: list[int], n_ctx: int) -> tuple[list[int], bool]:
    """``ids`` written twice, for watching an induction head at work. When two copies do not fit in the
    context, the prompt's last n_ctx // 2 tokens are repeated; the flag says whether it was cut."""
    half = max(1, n_ctx // 2)
    cut = len(ids) > half
    part = list(ids[-half:])
    return part + part, cut


def repeat_period(ids: list[int]) -> int | None:
    """T when ``ids`` is some T >= 2 tokens written twice (first half == second half), else None."""
    n = len(ids)
    half = n // 2
    if n % 2 or half < 2 or list(ids[:half]) != list(ids[half:]):
        return None
    return half


@torch.no_grad()
def copy_losses(model, probe: torch.Tensor, heads=(), mode: str = "zero") -> tuple[float, float]:
    """Mean loss on the first and on the second copy of a repeated probe (B, 2T), with ``heads`` off.
    Predictions of tokens 1..T-1 count for the first copy, of tokens T+1..2T-1 for the second (token T
    cannot be known from the first copy)."""
    first, second = copy_slices(probe.shape[1] // 2)
    logits = ablate_heads(model, probe, heads, mode).logits[:, :-1]  # (B, 2T-1, m)
    loss = F.cross_entropy(logits.transpose(1, 2), probe[:, 1:], reduction="none")  # (B, 2T-1)
    return loss[:, first].mean().item(), loss[:, second].mean().item()
