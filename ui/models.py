"""The model picker: discovery of model folders, cached loading, and the model the sidebar selected."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import streamlit as st

from core.nn.checkpoint import CheckpointError, load_checkpoint, read_config
from core.nn.model_discovery import ModelEntry, discover_models
from core.nn.snapshots import snapshot_folder, snapshot_name
from core.serve.folder_files import lstamp
from core.serve.paths import user_models_dir  # TE_MODELS_DIR is read in core (the corpus lookup needs it too)
from ui.frame import ROOT, ensure_frame

SHIPPED_DIR = ROOT / "assets" / "models"  # read at call time below: tests point it at a folder of their own
DEFAULT_MODEL = "shakespeare-char"


def _stamp(path: Path) -> int:
    """Changes whenever the checkpoint is rewritten, so the cache reloads a retrained model (links are read for
    what they are, never followed: core.serve.folder_files.lstamp)."""
    try:
        return hash(lstamp(path))
    except OSError:  # the folder is mid-swap or gone: a stamp of its own, and the load says what is wrong
        return 0


# a few models at once: each costs its weights in float32 (the shipped ones 1 MB, a GPT-2 small 0.5 GB), and a
# class saving models would otherwise keep sixteen of them (measured: 34 MB more per save of a d=256 model)
@st.cache_resource(show_spinner="Loading model ...", max_entries=6)
def _load(path: str, stamp: int):
    """((model, tokenizer), None), or (None, the CheckpointError): a refusal is kept like a model, for as long
    as the folder does not change, so that a model with NaN weights is not read again on every rerun."""
    try:
        return load_checkpoint(path), None  # the model is in eval mode with gradients off; never mutate it
    except CheckpointError as e:
        return None, e


# a model's snapshots through training (core.nn.snapshots): dragging the step slider must not reread files, and the
# Over training page uses up to 24 at once. 24 holds a shipped model's 21 (its 115k-238k parameters in float32:
# 10-20 MB in all). A larger model's snapshots (past SMALL_STEP_BYTES each) go to a cache of their own that keeps
# BIG_STEPS_KEPT: 24 of a 9.5 M-parameter model would be 0.9 GB, and the Over training page reads them one at a time
SMALL_STEP_BYTES = 16 * 2**20  # float32 weights of a snapshot the step cache keeps 24 of (its file: half of it)
BIG_STEPS_KEPT = 2


@st.cache_resource(show_spinner="Loading the model at that step ...", max_entries=24)
def _load_step(path: str, stamp: int, step: int):
    try:
        return load_checkpoint(path, step=step), None
    except CheckpointError as e:
        return None, e


@st.cache_resource(show_spinner=False, max_entries=BIG_STEPS_KEPT)
def _load_big_step(path: str, stamp: int, step: int):
    try:
        return load_checkpoint(path, step=step), None
    except CheckpointError as e:
        return None, e


def _big_step(entry: ModelEntry) -> bool:
    """Whether the snapshot ``entry`` names is past SMALL_STEP_BYTES in float32 (twice its float16 file); a file
    that cannot be seen is small (its load says what is wrong)."""
    sub = snapshot_folder(entry.path)
    try:
        return sub is not None and 2 * os.lstat(sub / snapshot_name(entry.step)).st_size > SMALL_STEP_BYTES
    except (OSError, ValueError):
        return False


def steps_held(entry: ModelEntry, model) -> int:
    """How many snapshot models of ``entry`` (whose final weights are ``model``) the step caches keep at once,
    one being read included: what the Over training page's memory estimate counts."""
    params = sum(p.numel() for p in model.parameters())
    return 24 if 4 * params <= SMALL_STEP_BYTES else BIG_STEPS_KEPT + 1


def shipped_names() -> list[str]:
    """Names no user model may take: the shipped models' folders."""
    return [p.name for p in SHIPPED_DIR.iterdir() if p.is_dir()] if SHIPPED_DIR.is_dir() else []


def model_key(entry: ModelEntry) -> str:
    """Names a model's current weights, for caches: it changes when the checkpoint is rewritten, and names the
    training step of a snapshot (every page cache then keeps each step's results apart)."""
    return f"{entry.path}:{_stamp(entry.path)}" + ("" if entry.step is None else f"@{entry.step}")


def load_model(entry: ModelEntry):
    """(model, tokenizer) for an entry, at its ``step`` when it names one; raises CheckpointError."""
    if entry.step is None:
        loaded, error = _load(str(entry.path), _stamp(entry.path))
    else:
        load = _load_big_step if _big_step(entry) else _load_step
        loaded, error = load(str(entry.path), _stamp(entry.path), entry.step)
    if error is not None:
        raise error
    return loaded


def load_folder(path) -> tuple:
    """(model, tokenizer) of a checkpoint folder that is no picker entry (a study's kept model), cached as the
    picker's are; raises CheckpointError."""
    loaded, error = _load(str(path), _stamp(Path(path)))
    if error is not None:
        raise error
    return loaded


def at_step(entry: ModelEntry, step: int | None) -> ModelEntry:
    """The same model at training step ``step`` (None: its final weights)."""
    return dataclasses.replace(entry, step=step)


def scan_models() -> tuple[list[ModelEntry], list[ModelEntry]]:
    """(loadable, broken): every model folder is checked (config and weight header, not the weights), a
    broken one never hides the others. Only the model picked in the sidebar is loaded."""
    good, bad = [], []
    for entry in discover_models(SHIPPED_DIR, user_models_dir()):
        (bad if entry.error else good).append(entry)
    return good, bad


def current():
    """(entry, model, tokenizer) of the model picked in the sidebar, or (None, None, None)."""
    ensure_frame()  # a page opened alone has no picker yet: into the frame first
    return st.session_state.get("te_current", (None, None, None))


def model_label(entry: ModelEntry, me: str) -> str:
    """How the picker names a model: shipped, yours (saved by the session ``me``) or a classmate's."""
    if entry.shipped:
        return entry.name
    return f"{entry.name} ({'yours' if entry.owner == me else 'a classmate’s'})"


def shipped_config():
    """(config, training metadata) of the shipped default model, read from its folder (no weights); with a
    warning on the page and (None, {}) when that folder is broken, so a page never crashes on it."""
    try:
        config, _, training = read_config(SHIPPED_DIR / DEFAULT_MODEL)
    except CheckpointError as e:
        st.warning(f"The shipped model's configuration could not be read: {e}", icon="⚠️")
        return None, {}
    return config, training
