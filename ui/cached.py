"""Server caches of the pages' pure work that is not tied to the picked model (ui.caching.model_cache is for that):
the shapes counted on the meta device, the sublayer timings, the texts a class draws, the shipped scaling study and
the fits, the corpus read, checked and learned by the Training page. A page calls these; it never makes a cache."""
from __future__ import annotations

import streamlit as st

from core.analysis import cost
from core.views import scaling_view as sv
from core.nn.config import ModelConfig
from core.nn.params import breakdown_rows, build_on_meta, heads_sweep, parameter_table
from core.training import training_setup as setup
from core.training.study_files import open_study
from core.analysis.trace import trace, trace_bytes
from ui.caching import model_cache
from ui.compute import compute_slot
from core.training.forecast_study import read_forecast
from core.training.study_grid import StudyError
from core.views.scaling_use import famous_rows


@st.cache_data(show_spinner="Building the model on the meta device ...", max_entries=32)
def meta_tables(shape: tuple) -> tuple[list[dict], list[dict]]:
    """(every matrix counted, the heads sweep) of the shape ``tuple(sorted(config.to_dict().items()))``."""
    cfg = ModelConfig(**dict(shape))
    return parameter_table(build_on_meta(cfg), rows=breakdown_rows(cfg, detailed=True)), heads_sweep(cfg)


@st.cache_data(show_spinner="Timing attention and the MLP for growing n ...", max_entries=8)
def _timing(key: tuple, threads: int, _attn, _mlp) -> cost.Timing:
    return cost.time_sublayers(_attn, _mlp, key[1])  # threads: in the key, so a count of its own is timed anew


def sublayer_timing(name: str, model, threads: int, again: bool = False) -> cost.Timing:
    """The first block's attention and MLP of ``model`` (named ``name``) timed for growing n, once per server and
    thread count; ``again``: measured anew."""
    if again:
        _timing.clear()
    c, block = model.config, model.blocks[0]
    return _timing((name, c.d_model, c.n_heads, c.d_ff), threads, block.attn, block.mlp)


@st.cache_resource(max_entries=256, show_spinner=False)
def drawn_text(key: tuple) -> dict:
    """The text drawn for ``key`` on this server, shared by every session: the same model, prompt, settings and
    seed draw the same text, so a class on one prompt costs one generation. Empty until the first run asking
    for it has drawn it (a run cut short by a rerun leaves it empty: the next one draws)."""
    return {}


SMALL_TRACE = 16 * 2**20  # bytes: a trace up to this size shares a cache of 32; bigger ones a cache of 2


def traced(model):
    """``call(model_key, ids) -> core.analysis.trace.trace(model, ids)``, cached for the server, in the compute line
    when it is busy. Big traces get a cache of their own, short, so that editing a long prompt never piles up
    copies: st.cache_resource, which hands out the one object it holds (pages only read a trace), where
    st.cache_data would pickle it and unpickle a fresh copy on every rerun."""
    small = model_cache(lambda ids: trace(model, list(ids)), 32, what="the forward pass")
    big = model_cache(lambda ids: trace(model, list(ids)), 2, what="the forward pass", resource=True,
                      spinner="Running the model and keeping every step ...")
    return lambda key, ids: (small if trace_bytes(model.config, len(ids)) <= SMALL_TRACE else big)(key, ids)


def shared_draw(key: tuple, draw, repaint, slot: str = "gen_memo"):
    """(steps, seconds) of the text ``key`` names (model, prompt, settings, seed), drawn once for the server:
    kept for this session (in session state ``slot``: one per text a page shows), else taken from whoever drew it,
    else drawn now by ``draw(repaint)`` in the compute line's long lane, ``repaint(so_far)`` showing it grow."""
    memo = st.session_state.get(slot)
    if not (memo and memo["key"] == key):
        memo = drawn_text(key)  # someone on this server may have drawn exactly this text already (a class on one prompt)
    if memo.get("key") != key:
        compute_slot("your text", lane="long")
        steps, elapsed = draw(repaint)
        memo.update(steps=steps, elapsed=elapsed, key=key)  # the key last: a session reading meanwhile draws it again
    st.session_state[slot] = memo
    return memo["steps"], memo["elapsed"]


@st.cache_data(max_entries=4, show_spinner=False)
def shipped_study(folder: str, stamp: tuple):
    """(study.json, usable rows, [(row, why not)], fit.json, problems) of the shipped study (core.training.study.open_study);
    ``stamp``: the files' sizes and times, so that a new study is read anew."""
    return open_study(folder)


@st.cache_data(max_entries=16, show_spinner="Fitting: L-BFGS from every starting point ...")
def fitted_law(csv_text: str):
    """The scaling law fitted to the runs of ``csv_text`` (core.views.scaling_view.fit_csv), once per text."""
    return sv.fit_csv(csv_text)


# the Training page's corpus: core.training.training_setup decides what is read, checked or learned, and the sizes
builtin_corpus = st.cache_resource(show_spinner="Reading the corpus ...", max_entries=setup.BUILTIN_CACHE_ENTRIES)(
    setup.builtin_corpus)
checked_corpus = st.cache_resource(show_spinner="Checking the text ...", max_entries=setup.CHECKED_CACHE_ENTRIES)(
    setup.checked_corpus)
learned_bpe = st.cache_resource(show_spinner=False, max_entries=setup.BPE_CACHE_ENTRIES)(setup.learn_bpe)


@st.cache_data(max_entries=16, show_spinner="Refitting the law to 200 resamples of the runs ...")
def bootstrapped(csv_text: str):
    """The law fitted to the runs of ``csv_text`` and its bootstrap, all resamples in one batch
    (core.views.scaling_view.bootstrap_csv), once per text."""
    return sv.bootstrap_csv(csv_text)


@st.cache_data(max_entries=4, show_spinner=False)
def forecast_analysis(folder: str, stamp: tuple):
    """(the shipped forecast.json, None) or (None, why it cannot be read); ``stamp`` as for shipped_study."""
    try:
        return read_forecast(folder), None
    except StudyError as e:
        return None, str(e)


@st.cache_data(max_entries=8, show_spinner="Fitting both forms to your runs ...")
def compared_forms(csv_text: str, unique_tokens: int):
    """Both forms fitted to the smaller runs of ``csv_text`` (core.views.scaling_view.forms_csv), once per text."""
    return sv.forms_csv(csv_text, unique_tokens)


@st.cache_data(max_entries=32, show_spinner=False)
def famous_inference(law, inference_tokens: float) -> list[dict]:
    """The famous models judged with a serving volume (core.views.scaling_use.famous_rows): 18 sizings, once per
    law and volume."""
    return famous_rows(law, inference_tokens)
