"""Where an autoencoder reads a model: the hook points of the one forward pass (core.nn.hooks), TransformerLens's
names. A site is one activation vector per token: the residual stream at one of its three points in a block, what
the MLP writes into it, or the MLP's hidden units.

A site name arrives as a string (a picker's choice, a saved SAE's config.json, a folder name, a command line) and is
checked once, where it arrives: ``Site.of(config, name)`` parses it, checks the model has it and reads its width.
What is passed down is that ``Site``; a function below takes it as it is (``as_site`` turns a string that still comes
in into one, and passes a Site through untouched), so one press of *Train the SAE* no longer re-parses the name at
every floor. Files keep the string: config.json's ``site`` and the ``sae/<site>/`` folder are ``Site.name``."""
from __future__ import annotations

import re
from dataclasses import dataclass

from core.nn.hooks import block_hook_names

# the per-block hooks an SAE may read, in the forward's order (the names after "blocks.{l}.")
SITE_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_mlp_out", "mlp.hook_post", "hook_resid_post")
_SITE = re.compile(r"^blocks\.(\d{1,3})\.(hook_resid_pre|hook_resid_mid|hook_mlp_out|mlp\.hook_post|hook_resid_post)")


@dataclass(frozen=True)
class Site:
    """One site of one model, checked: make it with ``Site.of(config, name)`` (the constructor itself checks nothing).
    ``name`` is what hooks, folders and files say; ``str(site)`` is the same."""
    name: str    # "blocks.{layer}.{hook}", TransformerLens's hook name
    layer: int   # the block, counted from 0
    hook: str    # the hook inside the block: one of SITE_HOOKS
    width: int   # numbers in one activation vector: d_ff for the MLP's hidden units, d_model elsewhere

    @classmethod
    def of(cls, config, name) -> "Site":
        """The site ``name`` of a model of ``config``; ValueError in words when it is not a site, or not this
        model's (a block it lacks, or an MLP hook of a model without MLPs)."""
        layer, hook = parse_site(name)
        if layer >= config.n_layers:
            raise ValueError(f"{name}: the model has {config.n_layers} blocks, numbered 0 to {config.n_layers - 1}")
        if hook not in block_hook_names(config):
            raise ValueError(f"this model has no {name} (its sites: {', '.join(sites(config))})")
        return cls(name, layer, hook, config.d_ff if hook == "mlp.hook_post" else config.d_model)

    def __str__(self) -> str:
        return self.name

    @property
    def words(self) -> str:
        return _words(self.layer, self.hook)


def as_site(config, site: "Site | str") -> Site:
    """``site`` as a Site of a model of ``config``: a Site as it is (it was checked when it was made), a name checked
    now. The entry of a core function that may still be handed a name (a caller not yet passing Sites)."""
    return site if isinstance(site, Site) else Site.of(config, site)


def sites(config) -> list[str]:
    """Every site of a model of ``config`` an SAE can be trained on, block by block (a model without an MLP has no
    ``hook_resid_mid``, ``hook_mlp_out`` or ``mlp.hook_post``)."""
    have = set(block_hook_names(config))
    return [f"blocks.{l}.{name}" for l in range(config.n_layers) for name in SITE_HOOKS if name in have]


def parse_site(site) -> tuple[int, str]:
    """(layer, hook after "blocks.{l}.") of a site name; ValueError naming what is wrong otherwise. Only the name's
    form: whether a model has it is ``Site.of``'s question."""
    # fullmatch, not match with '$': '$' also matches before a final newline, and 'blocks.0.hook_resid_post\n'
    # would pass as a site (and name a folder)
    m = _SITE.fullmatch(site) if isinstance(site, str) else None
    if not m:
        raise ValueError(f"{str(site)[:80]!r} is not a site: use blocks.L.HOOK with HOOK one of {', '.join(SITE_HOOKS)}")
    return int(m.group(1)), m.group(2)


def check_site(config, site: "Site | str") -> Site:
    """``site`` as a Site if the model has it; ValueError listing the model's sites otherwise."""
    return as_site(config, site)


def site_width(config, site: "Site | str") -> int:
    """The length of one activation vector at ``site``: d_ff for the MLP's hidden units, d_model elsewhere."""
    return as_site(config, site).width


def site_words(site: "Site | str") -> str:
    """A site in a learner's words: "the residual stream after block 1" (blocks counted from 1, as the screen counts)."""
    return site.words if isinstance(site, Site) else _words(*parse_site(site))


def _words(layer: int, hook: str) -> str:
    b = layer + 1
    return {"hook_resid_pre": f"the residual stream entering block {b}",
            "hook_resid_mid": f"the residual stream between block {b}'s attention and its MLP",
            "hook_resid_post": f"the residual stream leaving block {b}",
            "hook_mlp_out": f"what block {b}'s MLP writes into the stream",
            "mlp.hook_post": f"block {b}'s MLP hidden units (after the nonlinearity)"}[hook]
