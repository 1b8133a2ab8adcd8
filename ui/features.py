"""The Features page's caches: the held-out windows of a model, the index of a unit set (its cost estimated first
and refused in words over the budget; built once per model and SAE for the server, in the compute line's long lane,
with a progress line), a unit's card, a unit switched off on a prompt, token purity; and the SAE form's pace.

A unit set is named by a spec: ("feature", SAE fingerprint) or ("neuron", layer); the page holds the SAE and hands
it over with the spec, so the caches' keys never hold a tensor."""
from __future__ import annotations

import hashlib

import streamlit as st
import torch

from core.data.held_out import corpus_text, model_held_out
from core.features.index import build_index
from core.features.browse import token_purity, unit_card, unit_off_losses
from core.features.explain import explain_neurons
from core.features.explanations import promoted_tokens
from core.features.index import index_budget, index_cost, index_refusal, pass_flops
from core.features.job import held_tokens_bound, job_seconds, memory_problem, memory_words, pace
from core.analysis.sites import Site, as_site
from core.features.train import SAESettings, memory_estimate
from core.features.units import feature_units, neuron_units
from core.nn.checkpoint import read_config
from core.serve.threads import torch_threads, training_threads
from ui.caching import model_cache
from core.serve.fmt import duration_words
from ui.compute import gated

PACE_TTL_S = 600  # an SAE step's pace is timed again after ten minutes: one taken under load must not stay

MIN_WINDOWS = 4                  # the index reads at least this many windows of any model
TOKEN_PARAMS = 2 * 10**10        # and at most about this many (tokens x parameters): 200k tokens of the shipped models


def fingerprint(sae) -> str:
    """Names an SAE's weights (two trained in different sessions under one label stay apart in the caches): sha256
    over its config and all four tensors, computed once per SAE object (when it is loaded or its training ends; a
    page rerun reads it back) and kept on it."""
    known = getattr(sae, "_te_key", None)
    if known:
        return known
    h = hashlib.sha256(repr(sae.config.to_dict()).encode())
    for t in sae.tensors().values():
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    object.__setattr__(sae, "_te_key", h.hexdigest()[:20])  # a plain attribute, not a parameter
    return sae._te_key


@st.cache_data(ttl=PACE_TTL_S, max_entries=32, show_spinner="Timing a few steps ...")
def _pace(d_in: int, d_sae: int, k: int, batch: int, threads: int) -> float:
    with torch_threads(threads):  # the job's own thread count, not the page's
        return pace(d_in, SAESettings(d_sae=d_sae, k=k, batch_size=batch))


def sae_pace(d_in: int, settings: SAESettings) -> float:
    """Seconds per optimiser step of an SAE job of ``settings``: a few steps timed at the job's threads, in the
    compute line (they are real work on the server's cores), kept for PACE_TTL_S."""
    return gated(_pace, "timing a few SAE steps")(d_in, settings.d_sae, settings.k, settings.batch_size,
                                                  training_threads())


@st.cache_data(show_spinner=False, max_entries=16, ttl=600)
def _corpus_chars(corpus: str | None) -> int:
    """The length of the corpus a model's held-out text comes from (read once per corpus and ten minutes)."""
    return len(corpus_text({"corpus": corpus})[1])


def form_estimate(model, site: Site | str, settings: SAESettings, training: dict | None) -> str | None:
    """The SAE form's memory and time estimates, said on the page; why the job may not start (None: it may)."""
    site = as_site(model.config, site)  # once: the estimates below take the Site as it is
    held = held_tokens_bound(_corpus_chars((training or {}).get("corpus")))
    need = memory_estimate(model.config, site, held, settings)
    problem = memory_problem(need, "this SAE")
    if problem:  # never timed: a few steps of an SAE too big for the server would take the page's memory
        st.error(problem, icon=":material/memory:")
        return problem
    seconds = job_seconds(model, settings, held, sae_pace(site.width, settings))
    st.caption(f"{memory_words(need)} Training should take {duration_words(seconds)} here: its steps at the pace of a "
               "few timed on this server lately, and the model's passes to read the activations and to measure the "
               "result.")
    return None


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
    ``purity(spec)``, ``neuron_explanations(layer)``, ``promoted(spec)``; ``units(spec)`` builds the unit set (cheap)
    from the page's SAE."""

    def __init__(self, key: str, entry, model, tok, sae=None):
        self.key, self.model, self.tok, self.sae = key, model, tok, sae
        training = training_record(entry)
        cap = max_tokens(model)
        self._held = model_cache(lambda: model_held_out(model, tok, training, max_tokens=cap), 4, resource=True,
                                 what="reading the held-out text", spinner="Reading the held-out text ...")
        self._index = model_cache(lambda spec: self._build(spec), 8, resource=True, what="the index of every unit",
                                  lane="long")
        self._cost = model_cache(lambda spec: index_cost(model, self.units(spec), self.held()), 16,
                                 what="sizing the index")
        self._card = model_cache(lambda spec, i: unit_card(model, tok, self.units(spec), self.index(spec), i), 64,
                                 resource=True, what="a unit's card")
        self._off = model_cache(lambda spec, i, ids: unit_off_losses(model, self.units(spec), i, ids), 32,
                                resource=True, what="your prompt with a unit off")
        self._purity = model_cache(lambda spec: token_purity(self.index(spec), self.held()), 8, resource=True,
                                   what="token purity")
        self._neurons = model_cache(lambda layer: {e["unit"]: e for e in explain_neurons(
            model, tok, layer, training, self.held())}, 8, resource=True, what="explaining a block's neurons",
            lane="long", spinner="Explaining every neuron of the block (once per server) ...")
        self._promoted = model_cache(lambda spec: promoted_tokens(model, self.units(spec).writes, tok), 16,
                                     resource=True, what="the tokens each unit promotes")

    def units(self, spec: tuple):
        if spec[0] == "feature":
            return feature_units(self.model, self.sae)
        return neuron_units(self.model, spec[1])

    def held(self):
        return self._held(self.key)

    def _build(self, spec: tuple):
        """The index, with a progress line (made inside the cached call: a cache hit replays it, already gone)."""
        bar = st.progress(0.0, text="Indexing every unit over the held-out text (once per model and SAE) ...")
        shown = [-1.0]

        def progress(share, words):
            if share - shown[0] >= 0.02 or share >= 1:
                shown[0] = share
                bar.progress(min(1.0, share), text=f"Indexing (once per model and SAE): {words} ...")
        out = build_index(self.model, self.units(spec), self.held(), progress=progress)
        bar.empty()
        return out

    def refusal(self, spec: tuple) -> str | None:
        """Why this unit set is not indexed here (its estimated memory or time over the budget), None when it is."""
        try:
            budget = index_budget()
        except ValueError as e:
            return f"No index can be built: {e}."
        cost = self._cost(self.key, spec)
        return index_refusal(cost, budget, self.model.config.n_ctx, pass_flops(self.model, self.units(spec).site),
                             "features" if spec[0] == "feature" else "neurons")

    def index(self, spec: tuple):
        return self._index(self.key, spec)

    def card(self, spec: tuple, i: int):
        return self._card(self.key, spec, i)

    def off(self, spec: tuple, i: int, ids: tuple):
        return self._off(self.key, spec, i, ids)

    def purity(self, spec: tuple):
        return self._purity(self.key, spec)

    def neuron_explanations(self, layer: int) -> dict:
        """{neuron: explanation} of block ``layer`` (core.features.explain.explain_neurons on the held-out text)."""
        return self._neurons(self.key, layer)

    def promoted(self, spec: tuple) -> dict:
        """{unit: the 5 token texts its direction promotes most}, for the search."""
        return self._promoted(self.key, spec)
