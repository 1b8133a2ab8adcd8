"""The SAEs a session can use on the picked model: those saved beside its folder (``sae/<site>/``, loaded once per
server and checked) and those this session trained on the Features page. Pages ask here; none loads one itself."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from core.features.sae import SAE, SAEFileError, load_sae, read_metrics, sae_folder, saved_sites
from core.features.sites import site_width
from core.serve.folder_files import lstamp

SESSION_KEY = "te_saes"  # {model path@step: {label: SAEChoice}} of SAEs trained in this session
MAX_SESSION_SAES = 4     # per model: each new one past this drops the oldest


@dataclass(frozen=True)
class SAEChoice:
    label: str        # how a picker names it: "saved: blocks.0.hook_resid_post" or "yours: ..."
    sae: SAE
    metrics: dict     # the health numbers (metrics.json, or measured when it was trained here)
    source: str       # "saved" (beside the model) or "session" (trained on the Features page)

    @property
    def site(self) -> str:
        return self.sae.site


@st.cache_resource(max_entries=32, show_spinner=False)
def _load_saved(folder: str, stamp: tuple, d_in: int):
    """(SAE, metrics, None) or (None, {}, error words); cached per folder and its files' stamp."""
    try:
        return load_sae(folder, site=Path(folder).name, d_in=d_in), read_metrics(folder), None
    except SAEFileError as e:
        return None, {}, str(e.problem)
    except OSError as e:
        return None, {}, e.strerror or str(e)


def saved_saes(entry, model) -> tuple[list[SAEChoice], list[str]]:
    """(usable SAEs saved beside the model, one line per SAE folder that was refused and why)."""
    out, refused = [], []
    for site in saved_sites(entry.path):
        folder = sae_folder(entry.path, site)
        try:
            d_in = site_width(model.config, site)
        except ValueError as e:
            refused.append(f"sae/{site}: {e}")
            continue
        try:
            stamp = lstamp(folder)
        except OSError:
            stamp = ()
        sae, metrics, error = _load_saved(str(folder), stamp, d_in)
        if sae is None:
            refused.append(f"sae/{site}: {error}")
        else:
            out.append(SAEChoice(f"saved: {site}", sae, metrics, "saved"))
    return out, refused


def _session_key(entry) -> str:
    # an SAE trained on a training snapshot read that snapshot's activations: it belongs to that step only
    return str(entry.path) + ("" if getattr(entry, "step", None) is None else f"@{entry.step}")


def session_saes(entry) -> list[SAEChoice]:
    return list(st.session_state.get(SESSION_KEY, {}).get(_session_key(entry), {}).values())


def add_session_sae(entry, sae: SAE, metrics: dict) -> SAEChoice:
    """Keep an SAE trained in this session for the model of ``entry``; returns its choice (label numbered so two
    of one site stay apart)."""
    mine = st.session_state.setdefault(SESSION_KEY, {}).setdefault(_session_key(entry), {})
    n = 1 + sum(1 for c in mine.values() if c.site == sae.site)
    label = f"yours: {sae.site}" + (f" #{n}" if n > 1 else "")
    while label in mine:
        n += 1
        label = f"yours: {sae.site} #{n}"
    choice = SAEChoice(label, sae, dict(metrics), "session")
    mine[label] = choice
    while len(mine) > MAX_SESSION_SAES:
        mine.pop(next(iter(mine)))
    return choice


def available_saes(entry, model) -> tuple[list[SAEChoice], list[str]]:
    """Every SAE usable on the picked model (saved ones first), and the refusals to show."""
    saved, refused = saved_saes(entry, model)
    return saved + session_saes(entry), refused
