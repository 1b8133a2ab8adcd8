"""Steering: add a fixed direction to one activation of the forward, at every position, while the model generates.

    x <- x + alpha * d        at the hook ``site`` (e.g. ``blocks.0.hook_resid_post``), d: (d_in,)

The direction is typically a sparse-autoencoder feature's decoder row W_dec[i] (unit norm): alpha then says how much
of that feature is written into the stream, in the units of the feature's own activation. Hooks only
(core.nn.hooks); the generation loop (core.analysis.sampling) takes them as ``hooks=``. alpha = 0 gives no hook at
all, so the text is the unsteered one by construction: the same code path, bit for bit.
"""
from __future__ import annotations

import math

import torch


def steer_hooks(site: str, direction, alpha: float) -> list[tuple[str, object]]:
    """[(site, fn)] adding ``alpha * direction`` to the activation at ``site`` at every position and every row;
    [] for alpha = 0 (nothing to add: the unsteered forward, untouched). ``direction``: (d_in,) matching the site's
    last dimension (checked when the hook runs: the model's ValueError names the site)."""
    alpha = float(alpha)
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be a finite number, got {alpha!r}")
    d = torch.as_tensor(direction).detach()
    if d.dim() != 1 or d.numel() == 0:
        raise ValueError(f"a steering direction is one vector (d_in,), got shape {tuple(d.shape)}")
    if not bool(torch.isfinite(d).all()):
        raise ValueError("the steering direction holds a NaN or an infinity")
    if alpha == 0:
        return []
    added = alpha * d.float()  # (d_in,): computed once, not at every step
    cast: dict = {}  # the added vector in the activation's dtype and device, made once per kind

    def add(x: torch.Tensor, name: str) -> torch.Tensor:
        if x.shape[-1] != added.shape[0]:
            raise ValueError(f"the steering direction has {added.shape[0]} entries, but {name} has {x.shape[-1]}")
        v = cast.get((x.dtype, x.device))
        if v is None:
            v = cast[(x.dtype, x.device)] = added.to(dtype=x.dtype, device=x.device)
        return x + v  # (B, n, d_in) + (d_in,): broadcast over rows and positions

    return [(site, add)]
