"""Probes of one prompt beside its attribution graph (core.analysis.attribution), for the Attribution graph page:
features switched off in the replacement and in the real model, one feature's activations and what its direction
writes towards the output, and where a head looks from the last position."""
from __future__ import annotations

import numpy as np
import torch

from core.analysis.attribution import _record, _replacement
from core.analysis.trace import direct_read

def switch_off(model, transcoders: dict, ids, features) -> dict:
    """The next-token distribution with the listed features ((layer, position, feature) triples) switched off: in
    the replacement (patterns and scales frozen, as the graph sees it) and in the real model (the features' writes
    taken out of their MLP's output, everything downstream free to change). Both (m,) probabilities at the last
    position, with the unchanged ones."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    was = model.training
    model.eval()
    logit_row, cache, acts, errors = _record(model, ids, transcoders)
    off = [a.clone() for a in acts]
    by_layer: dict = {}
    for l, p, f in features:
        off[l][p, f] = 0.0
        by_layer.setdefault(l, []).append((p, f, float(acts[l][p, f])))
    with torch.no_grad():
        _, _, replaced = _replacement(model, ids, transcoders, cache, off, errors, 1, False)

        def remove(y, name, l):
            y = y.clone()
            for p, f, a in by_layer[l]:
                y[:, p] -= a * transcoders[l].W_dec[f]  # the feature's write, taken out of the MLP's output
            return y
        hooks = [(f"blocks.{l}.hook_mlp_out", lambda y, name, l=l: remove(y, name, l)) for l in by_layer]
        real = model(ids[None], hooks=hooks or None).logits[0, -1]
    model.train(was)
    soft = lambda x: torch.softmax(x.double(), -1).numpy()  # noqa: E731
    return {"before": soft(logit_row), "replacement": soft(replaced[0, -1]), "real": soft(real)}


def attention_row(model, ids, layer: int, head: int) -> np.ndarray:
    """(n,) where head ``head`` of block ``layer`` looks from the last position: its attention pattern's last row."""
    name = f"blocks.{layer}.attn.hook_pattern"
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.as_tensor(ids, dtype=torch.long)[None], names=[name])
    return cache[name][0, head, -1].numpy()


def feature_profile(model, transcoders: dict, ids, layer: int, feature: int, top: int = 6) -> dict:
    """One transcoder feature on this prompt: its activation at every position, and the tokens its decoder direction
    favours most when read straight through the final LayerNorm (where the model has one) and the output map: its
    direct effect on the logits, the stream's later changes left out (core.analysis.trace.direct_read). The
    LayerNorm's scale 1/sigma is left at 1: a positive factor, it changes no token's rank."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    name = f"blocks.{layer}.hook_mlp_in"
    with torch.no_grad():
        _, cache = model.run_with_cache(ids[None], names=[name])
        acts = transcoders[layer].encode(cache[name][0])[:, feature]  # (n,)
        effect = direct_read(model, transcoders[layer].W_dec[feature])  # (m,)
    order = torch.argsort(effect, descending=True)
    return {"activations": acts.numpy(), "promotes": order[:top].tolist(), "suppresses": order[-top:].flip(0).tolist(),
            "effect": effect.numpy()}
