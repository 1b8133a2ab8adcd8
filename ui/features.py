"""The Features page's caches: the held-out windows of a model, the index of a unit set (built once per model
and SAE for the server, in the compute line), a unit's card, a unit switched off on a prompt, token purity.

A unit set is named by a spec: ("feature", SAE fingerprint) or ("neuron", layer); the page holds the SAE and hands
it over with the spec, so the caches' keys never hold a tensor."""
from __future__ import annotations

import hashlib

import streamlit as st

from core.features.activations import model_held_out
from core.features.browse import build_index, token_purity, unit_card, unit_off_losses
from core.features.units import feature_units, neuron_units
from core.nn.checkpoint import read_config
from ui.caching import model_cache

MIN_WINDOWS = 4                  # the index reads at least this many windows of any model
TOKEN_PARAMS = 2 * 10**10        # and at most about this many (tokens x parameters): 200k tokens of the shipped models


def fingerprint(sae) -> str:
    """Names an SAE's weights (two trained in different sessions under one label stay apart in the caches)."""
    h = hashlib.sha1(repr(sae.config.to_dict()).encode())
    for t in (sae.W_dec[:4096], sae.b_enc, sae.b_dec):  # the first rows suffice to tell two runs apart
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def training_record(entry) -> dict | None:
    """The model's training record (config.json), None for a folder that has none (a GPT-2 folder)."""
    try:
        return read_config(entry.path)[2]
    except Exception:  # noqa: BLE001 - any unreadable record: the held-out text falls back to Python's docs
        return None


def max_tokens(model) -> int:
    params = sum(p.numel() for p in model.parameters())
    return max(MIN_WINDOWS * model.config.n_ctx, TOKEN_PARAMS // max(params, 1))


class Browser:
    """The cached feature work on one page run's model: ``index(spec)``, ``card(spec, i)``, ``off(spec, i, ids)``,
    ``purity(spec)``; ``units(spec)`` builds the unit set (cheap) from the page's SAE."""

    def __init__(self, key: str, entry, model, tok, sae=None):
        self.key, self.model, self.tok, self.sae = key, model, tok, sae
        training = training_record(entry)
        cap = max_tokens(model)
        self._held = model_cache(lambda: model_held_out(model, tok, training, max_tokens=cap), 4, resource=True,
                                 what="reading the held-out text", spinner="Reading the held-out text ...")
        self._index = model_cache(lambda spec: build_index(model, self.units(spec), self.held()), 8, resource=True,
                                  what="the index of every unit", lane="long",
                                  spinner="Indexing every unit over the held-out text (once per model and SAE) ...")
        self._card = model_cache(lambda spec, i: unit_card(model, tok, self.units(spec), self.index(spec), i), 64,
                                 resource=True, what="a unit's card")
        self._off = model_cache(lambda spec, i, ids: unit_off_losses(model, self.units(spec), i, ids), 32,
                                resource=True, what="your prompt with a unit off")
        self._purity = model_cache(lambda spec: token_purity(self.index(spec), self.held()), 8, resource=True,
                                   what="token purity")

    def units(self, spec: tuple):
        if spec[0] == "feature":
            return feature_units(self.model, self.sae)
        return neuron_units(self.model, spec[1])

    def held(self):
        return self._held(self.key)

    def index(self, spec: tuple):
        return self._index(self.key, spec)

    def card(self, spec: tuple, i: int):
        return self._card(self.key, spec, i)

    def off(self, spec: tuple, i: int, ids: tuple):
        return self._off(self.key, spec, i, ids)

    def purity(self, spec: tuple):
        return self._purity(self.key, spec)
