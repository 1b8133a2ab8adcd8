"""Hook points of the one forward pass, named as TransformerLens names them, and the cache a run records.

The block is written once (core.nn.model). Everything that reads or changes an activation asks that forward for it
by name: ``Transformer.run_with_cache`` keeps the named activations, ``Transformer.run_with_hooks`` lets a function
read, replace or add to one. Shapes are TransformerLens's (batch first; per-head tensors (batch, pos, head, d_head),
attention (batch, head, query, key)), so a TransformerLens user reads our cache without a dictionary.

Every hook point is called on every forward, as in TransformerLens. A run with no hook is ``NO_HOOKS``, whose hook
points hand their input back and which wants nothing, so the model takes its fused paths (attention, LayerNorm, an
in-place ReLU). Unlike TransformerLens, hooks are not attached to the modules but travel with one call (a ``HookRun``):
one model object serves every session of the app at once, and a hook on the module would reach them all.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import torch

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]

# Per block, in the order the forward meets them (the names after "blocks.{l}."). Which of them a model has depends
# on its block (block_hook_names).
ATTN_HOOKS = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern",
              "attn.hook_z", "attn.hook_result")
# the attention hooks that need the scores written out (the fused kernel never forms them)
NEEDS_SCORES = ("attn.hook_attn_scores", "attn.hook_pattern")


def block_hook_names(config) -> list[str]:
    """The hook names one block of ``config`` has, without the "blocks.{l}." prefix, in the forward's order. A variant
    has the hooks its block has: no MLP, no ``mlp.*`` (and no ``hook_resid_mid``: the stream after attention is the
    block's output, as in TransformerLens's attention-only models); no LayerNorm, no ``hook_scale``."""
    names = ["hook_resid_pre"]
    ln = config.norm != "none"
    if ln and config.norm == "pre":
        names.append("ln1.hook_scale")
    names += list(ATTN_HOOKS) + ["hook_attn_out"]
    if ln and config.norm == "post":  # post-norm: LN(x + attention) sits after the sum
        names.append("ln1.hook_scale")
    if config.mlp:
        names.append("hook_resid_mid")
        if ln and config.norm == "pre":
            names.append("ln2.hook_scale")
        names += ["hook_mlp_in", "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out"]
        if ln and config.norm == "post":
            names.append("ln2.hook_scale")
    names.append("hook_resid_post")
    return names


def hook_names(config) -> list[str]:
    """Every hook name a model of ``config`` has, in the order its forward meets them."""
    names = ["hook_embed"] + (["hook_pos_embed"] if config.positions else [])
    for layer in range(config.n_layers):
        names += [f"blocks.{layer}.{name}" for name in block_hook_names(config)]
    if config.norm == "pre":
        names.append("ln_final.hook_scale")
    return names


_LAYER = re.compile(r"^blocks\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """The block a hook name belongs to (``blocks.3.attn.hook_z`` -> 3), None for the embedding and final hooks."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


class ActivationCache(Mapping):
    """The activations one run recorded, by hook name: ``cache["blocks.0.attn.hook_pattern"]`` is a tensor. Only the
    names the run was asked for are there; asking for another says which were kept."""

    def __init__(self, store: dict[str, torch.Tensor], known: Iterable[str] = ()):
        self._store = store
        self._known = frozenset(known)

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            return self._store[name]
        except KeyError:
            if self._known and name not in self._known:
                raise KeyError(f"this model has no hook {name!r} (model.hook_names() lists its hooks)") from None
            kept = ", ".join(list(self._store)[:6]) + (" ..." if len(self._store) > 6 else "")
            raise KeyError(f"{name!r} was not recorded in this run: pass it in names= (kept: {kept or 'nothing'})") \
                from None

    def __iter__(self):
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} activations: {', '.join(list(self._store)[:4])}{' ...' if len(self) > 4 else ''})"

    def layer(self, name: str, n_layers: int) -> list[torch.Tensor]:
        """``name`` (after "blocks.{l}.") of every block, as a list: ``cache.layer("hook_attn_out", L)``."""
        return [self[f"blocks.{l}.{name}"] for l in range(n_layers)]


def _predicate(names) -> Callable[[str], bool]:
    if names is None:
        return lambda name: True
    if callable(names):
        return names
    if isinstance(names, str):
        names = [names]
    wanted = frozenset(names)
    return wanted.__contains__


class HookRun:
    """The hooks of one forward pass: which activations to keep (``names``: a list of hook names, a predicate on a
    name, None for every one, or nothing kept when ``record`` is False) and which functions to run on which hook.
    The model calls ``run(name, tensor)`` at each hook point it has and continues with what comes back."""

    __slots__ = ("fns", "keep", "store", "_wants", "_any", "_record", "_kept")

    def __init__(self, hooks: Iterable[tuple[str, HookFn]] = (), names=None, record: bool = False):
        self.fns: dict[str, list[HookFn]] = {}
        for name, fn in hooks:
            if not isinstance(name, str) or not callable(fn):
                raise TypeError(f"a hook is a (name, function) pair, got {(name, fn)!r}")
            self.fns.setdefault(name, []).append(fn)
        self.keep = _predicate(names) if record else (lambda name: False)
        self._record = record
        self.store: dict[str, torch.Tensor] = {}
        self._wants: dict[str, bool] = {}
        self._any: dict[tuple, bool] = {}  # wants_any's answers: asked per block on every forward of a generation
        self._kept: dict[str, bool] = {}  # keep's answers (a predicate is a Python call at every hook point)

    def wants(self, name: str) -> bool:
        """Whether anything reads or changes ``name`` in this run (the model skips work nobody asked for)."""
        w = self._wants.get(name)
        if w is None:
            w = self._wants[name] = name in self.fns or bool(self.keep(name))
        return w

    def wants_any(self, prefix: str, names: Iterable[str]) -> bool:
        """Whether anything reads or changes ``prefix + name`` for any of ``names``; a tuple of names is answered once
        per run (one lookup after that, where each name would be a string built and looked up)."""
        if not isinstance(names, tuple):
            return any(self.wants(prefix + name) for name in names)
        w = self._any.get((prefix, names))
        if w is None:
            w = self._any[(prefix, names)] = any(self.wants(prefix + name) for name in names)
        return w

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        fns = self.fns.get(name)
        if fns is not None:
            for fn in fns:
                out = fn(x, name)
                if out is not None:
                    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
                        raise ValueError(f"the hook on {name} returned {getattr(out, 'shape', type(out).__name__)}; "
                                         f"it must return a tensor of the shape it was given, {tuple(x.shape)} "
                                         "(or None)")
                    x = out
        if self._record:  # a run that records nothing asks no predicate
            kept = self._kept.get(name)
            if kept is None:
                kept = self._kept[name] = bool(self.keep(name))
            if kept:
                self.store[name] = x
        return x

    def check_names(self, known: Iterable[str]):
        """ValueError naming a hook the model does not have (a typo would otherwise do nothing, silently)."""
        known = known if isinstance(known, frozenset) else frozenset(known)
        unknown = sorted(set(self.fns) - known)
        if unknown:
            raise ValueError(f"this model has no hook {unknown[0]!r} (model.hook_names() lists its {len(known)} hooks)")


class NoHooks:
    """The run of a forward no hook reads or changes: every hook point returns its input unchanged (TransformerLens's
    HookPoint with no hook attached), and nothing is wanted, so no work is done for a hook."""

    __slots__ = ()

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x

    def wants(self, name: str) -> bool:
        return False

    def wants_any(self, prefix: str, names: Iterable[str]) -> bool:
        return False

    def __repr__(self) -> str:
        return "NO_HOOKS"


NO_HOOKS = NoHooks()


def as_run(hooks, known: Callable[[], Iterable[str]]) -> HookRun | NoHooks:
    """The run a forward gets from its ``hooks`` argument: a HookRun (or NO_HOOKS) as it is; (name, fn) pairs as a new
    HookRun whose names are checked against ``known()`` (the model's hook names); None or no pairs: NO_HOOKS."""
    if isinstance(hooks, (HookRun, NoHooks)):
        return hooks
    if not hooks:  # None or []: a plain forward builds no HookRun
        return NO_HOOKS
    run = HookRun(hooks)
    if not run.fns:  # an iterator that gave no pair
        return NO_HOOKS
    run.check_names(known())
    return run
