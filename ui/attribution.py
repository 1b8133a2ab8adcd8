"""The Attribution graph page's caches: a model's transcoders, read from beside it once per server and read again
when their files change (core.features.transcoder checks them as it loads)."""
from __future__ import annotations

import streamlit as st

from core.features.sae import SAEFileError
from core.features.transcoder import TRANSCODER_DIR, load_transcoders, missing_layers
from core.serve.folder_files import lstamp


def _stamp(path) -> tuple:
    try:
        return lstamp(path)
    except OSError:
        return ()


@st.cache_resource(max_entries=4, show_spinner="Reading the transcoders ...")
def _load(path: str, stamp: tuple, _config):
    try:
        return load_transcoders(path, _config), None
    except SAEFileError as e:
        return {}, str(e)


def transcoders_of(entry, config) -> tuple[dict, str | None]:
    """({layer: transcoder}, None) when every block of the model has one; ({}, why not) otherwise."""
    from pathlib import Path

    folder = Path(entry.path) / TRANSCODER_DIR
    tcs, problem = _load(str(entry.path), _stamp(folder), config)
    if problem:
        return {}, f"A transcoder beside this model cannot be used: {problem}."
    missing = missing_layers(tcs, config)
    if missing:
        blocks = ", ".join(str(l + 1) for l in missing)
        return {}, (f"This model has no transcoder for block{'s' if len(missing) > 1 else ''} {blocks}. "
                    f"`python -m core.features --model {entry.path} --transcoder` trains one per block beside it "
                    "(about a minute each on one core).")
    return tcs, None
