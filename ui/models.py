"""The model picker: discovery of model folders, cached loading, and the model the sidebar selected."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from core.nn.checkpoint import CheckpointError, ModelEntry, discover_models, load_checkpoint, read_config
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


def shipped_names() -> list[str]:
    """Names no user model may take: the shipped models' folders."""
    return [p.name for p in SHIPPED_DIR.iterdir() if p.is_dir()] if SHIPPED_DIR.is_dir() else []


def model_key(entry: ModelEntry) -> str:
    """Names a model's current weights, for caches: it changes when the checkpoint is rewritten."""
    return f"{entry.path}:{_stamp(entry.path)}"


def load_model(entry: ModelEntry):
    """(model, tokenizer) for an entry; raises CheckpointError."""
    loaded, error = _load(str(entry.path), _stamp(entry.path))
    if error is not None:
        raise error
    return loaded


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


def require_model(why: str = "") -> tuple:
    """(entry, model, tokenizer) of the selected model, or stop the page with a message (``why`` says what
    the page would have shown)."""
    entry, model, tok = current()
    if model is None:
        st.info(f"No model is loaded{why}. Pick one in the sidebar (or see there why none could be loaded).")
        st.stop()
    return entry, model, tok


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
