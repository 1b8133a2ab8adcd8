"""UI glue shared by app.py and the pages: model discovery, cached loading, the current selection."""
from __future__ import annotations

import os
from pathlib import Path

import pandas  # noqa: F401  imported up front: Streamlit imports it lazily, and sessions racing on that
import streamlit as st  # first import could see a half-initialised module (seen under classroom load)
import torch

from core.checkpoint import ModelEntry, discover_models, load_checkpoint

ROOT = Path(__file__).resolve().parent
SHIPPED_DIR = ROOT / "assets" / "models"
MODELS_ENV = "TE_MODELS_DIR"
DEFAULT_MODEL = "shakespeare-char"


# One torch thread per operation by default. A classroom server runs many sessions at once, and this
# model's operations are too small for a second thread to pay off: with the cores oversubscribed, one-token
# decoding steps ran about 40x slower with two threads than with one. TE_TORCH_THREADS overrides it.
PAGE_THREADS = max(1, int(os.environ.get("TE_TORCH_THREADS", "1") or 1))
torch.set_num_threads(PAGE_THREADS)


def user_models_dir() -> Path:
    path = Path(os.environ.get(MODELS_ENV, "models")).expanduser()
    return path if path.is_absolute() else ROOT / path


def _stamp(path: Path) -> float:
    """Changes whenever the checkpoint is rewritten, so the cache reloads a retrained model."""
    try:
        return max(f.stat().st_mtime_ns for f in path.iterdir())
    except (OSError, ValueError):
        return 0.0


@st.cache_resource(show_spinner="Loading model ...", max_entries=16)
def _load(path: str, stamp: float):
    return load_checkpoint(path)  # the returned model is in eval mode with gradients off; never mutate it


def model_key(entry: ModelEntry) -> str:
    """Names a model's current weights, for caches: it changes when the checkpoint is rewritten."""
    return f"{entry.path}:{_stamp(entry.path)}"


def load_model(entry: ModelEntry):
    """(model, tokenizer) for an entry; raises CheckpointError."""
    return _load(str(entry.path), _stamp(entry.path))


def scan_models() -> tuple[list[ModelEntry], list[ModelEntry]]:
    """(loadable, broken): every model folder is checked (config and weight header, not the weights), a
    broken one never hides the others. Only the model picked in the sidebar is loaded."""
    good, bad = [], []
    for entry in discover_models(SHIPPED_DIR, user_models_dir()):
        (bad if entry.error else good).append(entry)
    return good, bad


def ensure_frame():
    """Make sure this page runs inside app.py's frame (router, sidebar, model picker).

    Streamlit treats a folder named pages/ beside the entry script as a legacy multipage app until some
    session calls st.navigation. If the very first request after a server start opens a page's URL
    directly (a bookmark), that page runs alone, without app.py. We then switch the legacy mode off
    and rerun, which runs app.py and routes to the same page. Every page calls this first."""
    if "te_current" in st.session_state:
        return
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    tries = st.session_state.get("te_frame_reruns", 0)
    if tries < 2:
        st.session_state["te_frame_reruns"] = tries + 1
        st.rerun()


def current():
    """(entry, model, tokenizer) of the model picked in the sidebar, or (None, None, None)."""
    ensure_frame()
    return st.session_state.get("te_current", (None, None, None))


def prompt_input(label: str, default: str, key: str, tokenizer, n_ctx: int, height: int = 100):
    """A prompt box that never fails: returns a core.tokenizer.Prompt after showing its warnings.
    Callers check ``prompt.empty`` and show a hint instead of a chart."""
    from core.tokenizer import Prompt

    text = st.text_area(label, value=default, key=key, height=height, max_chars=10_000)
    prompt = Prompt(tokenizer, text, n_ctx)
    for message in prompt.messages(n_ctx):
        st.warning(message, icon="⚠️")
    return prompt


def require_model():
    """(entry, model, tokenizer) of the selected model, or stop the page with a message."""
    entry, model, tok = current()
    if model is None:
        st.info("No model is loaded. Pick one in the sidebar (or see there why none could be loaded).")
        st.stop()
    return entry, model, tok
