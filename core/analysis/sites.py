"""Where an autoencoder reads a model: the hook points of the one forward pass (core.nn.hooks), TransformerLens's
names. A site is one activation vector per token: the residual stream at one of its three points in a block, what
the MLP writes into it, or the MLP's hidden units."""
from __future__ import annotations

import re

from core.nn.hooks import block_hook_names

# the per-block hooks an SAE may read, in the forward's order (the names after "blocks.{l}.")
SITE_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_mlp_out", "mlp.hook_post", "hook_resid_post")
_SITE = re.compile(r"^blocks\.(\d{1,3})\.(hook_resid_pre|hook_resid_mid|hook_mlp_out|mlp\.hook_post|hook_resid_post)")


def sites(config) -> list[str]:
    """Every site of a model of ``config`` an SAE can be trained on, block by block (a model without an MLP has no
    ``hook_resid_mid``, ``hook_mlp_out`` or ``mlp.hook_post``)."""
    have = set(block_hook_names(config))
    return [f"blocks.{l}.{name}" for l in range(config.n_layers) for name in SITE_HOOKS if name in have]


def parse_site(site) -> tuple[int, str]:
    """(layer, hook after "blocks.{l}.") of a site name; ValueError naming what is wrong otherwise."""
    # fullmatch, not match with '$': '$' also matches before a final newline, and 'blocks.0.hook_resid_post\n'
    # would pass as a site (and name a folder)
    m = _SITE.fullmatch(site) if isinstance(site, str) else None
    if not m:
        raise ValueError(f"{str(site)[:80]!r} is not a site: use blocks.L.HOOK with HOOK one of {', '.join(SITE_HOOKS)}")
    return int(m.group(1)), m.group(2)


def check_site(config, site: str) -> str:
    """``site`` if the model has it; ValueError listing the model's sites otherwise."""
    layer, _ = parse_site(site)
    if site not in sites(config):
        if layer >= config.n_layers:
            raise ValueError(f"{site}: the model has {config.n_layers} blocks, numbered 0 to {config.n_layers - 1}")
        raise ValueError(f"this model has no {site} (its sites: {', '.join(sites(config))})")
    return site


def site_width(config, site: str) -> int:
    """The length of one activation vector at ``site``: d_ff for the MLP's hidden units, d_model elsewhere."""
    check_site(config, site)
    return config.d_ff if site.endswith("mlp.hook_post") else config.d_model


def site_words(site: str) -> str:
    """A site in a learner's words: "the residual stream after block 1" (blocks counted from 1, as the screen counts)."""
    layer, hook = parse_site(site)
    b = layer + 1
    return {"hook_resid_pre": f"the residual stream entering block {b}",
            "hook_resid_mid": f"the residual stream between block {b}'s attention and its MLP",
            "hook_resid_post": f"the residual stream leaving block {b}",
            "hook_mlp_out": f"what block {b}'s MLP writes into the stream",
            "mlp.hook_post": f"block {b}'s MLP hidden units (after the nonlinearity)"}[hook]
