"""Units: the one shape every feature view takes, so an SAE's latents and an MLP's neurons are browsed alike.

A unit reads one site of the forward pass (a hook name), has an activation per token (``encode``), writes one
direction into the residual stream (``write_direction``), and can be switched off in the forward (``off_hooks``).

    SAE latent i      encode = the SAE's encode; writes W_dec[i] (through the MLP's W2 when the SAE reads
                      mlp.hook_post); off = subtract f_i(x) W_dec[i] from the site, the SAE's error term kept
    MLP neuron i      encode = identity on mlp.hook_post; writes W2's column i; off = hook_post[..., i] = 0
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from core.analysis.sites import Site


@dataclass(frozen=True, eq=False)
class Units:
    site: Site                                  # where the units read (its hook name: site.name)
    kind: str                                   # "feature" or "neuron"
    n: int                                      # how many units
    encode: Callable[[torch.Tensor], torch.Tensor]  # (..., width) site activations -> (..., n) unit activations
    writes: torch.Tensor                        # (n, d_model) what each unit adds to the stream per unit of activation
    off_fn: Callable                            # (i, positions) -> hooks switching unit i off
    name: str                                   # in words: "SAE latents of blocks.0.hook_resid_post"

    def write_direction(self, i: int) -> torch.Tensor:
        """(d_model,) the direction unit ``i`` adds to the residual stream, per unit of its activation."""
        return self.writes[self.check(i)]

    def off_hooks(self, i: int, positions=None) -> list[tuple[str, Callable]]:
        """Hooks that switch unit ``i`` off at ``positions`` (a list of positions; None: every position)."""
        return self.off_fn(self.check(i), positions)

    def check(self, i) -> int:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n:
            raise ValueError(f"there is no {self.kind} {i!r}: they are numbered 0 to {self.n - 1}")
        return i

    @property
    def layer(self) -> int:
        return self.site.layer


def _at(positions, x: torch.Tensor) -> torch.Tensor:
    """(..., n, width) -> a (n,) boolean mask of the positions to change (all when ``positions`` is None)."""
    mask = torch.zeros(x.shape[-2], dtype=torch.bool, device=x.device)
    if positions is None:
        mask[:] = True
    else:
        keep = [p for p in positions if 0 <= p < x.shape[-2]]
        mask[keep] = True
    return mask


def feature_units(model, sae) -> Units:
    """The latents of ``sae`` as units of ``model`` (the SAE's site must be one of the model's, of its width)."""
    site = Site.of(model.config, sae.site)  # where the SAE meets the model: checked once, passed down as a Site
    if site.width != sae.config.d_in:
        raise ValueError(f"the SAE reads {sae.config.d_in} numbers at {site}, but this model has {site.width} there")
    w_dec = sae.W_dec.detach()  # (d_sae, d_in)
    if site.hook == "mlp.hook_post":
        # hidden units are not the stream: a latent's direction in them reaches the stream through W2
        writes = w_dec @ model.blocks[site.layer].mlp.w2.weight.detach().t()  # (d_sae, d_ff) @ (d_ff, d)
    else:
        writes = w_dec

    @torch.no_grad()
    def encode(acts):
        return sae.encode(acts)

    def off(i, positions):
        def hook(x, name):
            f = sae.encode(x)[..., i:i + 1]                     # (B, n, 1): the latent's activation
            cut = f * w_dec[i]                                  # (B, n, d_in): what it wrote at the site
            return x - cut * _at(positions, x)[:, None]         # the rest of x, error term included, kept
        return [(site.name, hook)]

    return Units(site, "feature", sae.config.d_sae, encode, writes, off, f"SAE latents of {site}")


def neuron_units(model, layer: int) -> Units:
    """The MLP neurons of block ``layer`` (counting from 0) as units: their activation after the nonlinearity."""
    c = model.config
    if not c.mlp:
        raise ValueError("this model's blocks have no MLP, so no neurons")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < c.n_layers:
        raise ValueError(f"there is no block {layer!r}: blocks are numbered 0 to {c.n_layers - 1}")
    site = Site(f"blocks.{layer}.mlp.hook_post", layer, "mlp.hook_post", c.d_ff)  # layer and MLP checked above
    writes = model.blocks[layer].mlp.w2.weight.detach().t()  # (d, d_ff) -> (d_ff, d): row i is W2's column i

    def off(i, positions):
        def hook(x, name):
            x = x.clone()
            mask = _at(positions, x)
            x[..., mask, i] = 0.0
            return x
        return [(site.name, hook)]

    return Units(site, "neuron", c.d_ff, lambda acts: acts, writes, off, f"MLP neurons of block {layer + 1}")
