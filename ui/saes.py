"""The SAEs a session can use on the picked model: those saved beside its folder (``sae/<site>/``, loaded once per
server and checked: the weights they were trained on, no linked folder out of the model's) and those this session
trained on the Features page (kept within a memory bound). Pages ask here; none loads one itself."""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from core.analysis.sae import (SAE, SAEFileError, check_trained_on, linked_out, load_sae, model_fingerprint,
                               read_metrics, relative_words, sae_folder, saved_sites)
from core.analysis.sites import Site
from core.serve.fmt import binary_bytes
from core.serve.folder_files import lstamp
from ui.features import fingerprint
from ui.models import at_step, load_model

SESSION_KEY = "te_saes"  # {model path@step: {label: SAEChoice}} of SAEs trained in this session
ORDER_KEY = "te_saes_order"  # [(model path@step, label)] of those, oldest first
NOT_KEPT_KEY = "te_sae_not_kept"  # why the SAE this session just trained was not kept, said once
PICK_KEY = "te_sae_pick"  # the label of an SAE this session just trained: the Features page's picker moves to it
MAX_SESSION_SAES = 4     # per session, every model together: each new one past this drops the oldest
SESSION_BYTES = 256 * 2**20  # and at most this many bytes of them per session (one SAE of the largest size)
SERVER_BYTES = 2**30     # SAEs trained in sessions, every session of this server together
_LIVE: "weakref.WeakSet[SAE]" = weakref.WeakSet()  # the session SAEs alive in this server (gone with their session)


@dataclass(frozen=True)
class SAEChoice:
    label: str        # how a picker names it: "saved: blocks.0.hook_resid_post" or "yours: ..."
    sae: SAE
    metrics: dict     # the health numbers (metrics.json, or measured when it was trained here)
    source: str       # "saved" (beside the model) or "session" (trained on the Features page)

    @property
    def site(self) -> str:
        return self.sae.site

    @property
    def key(self) -> str:
        """Names its weights for the caches: hashed once, when it was loaded or trained (ui.features.fingerprint
        keeps it on the SAE), read back on every rerun."""
        return fingerprint(self.sae)


def sae_bytes(sae: SAE) -> int:
    return sum(t.numel() * t.element_size() for t in sae.tensors().values())


@st.cache_resource(max_entries=32, show_spinner=False)
def _load_saved(folder: str, stamp: tuple, d_in: int, trained_on: str, root: str):
    """(SAE, metrics, None) or (None, {}, error words); cached per folder, its files' stamp and the model weights it
    must have been trained on. Its weights are hashed here, once (``fingerprint``)."""
    try:
        sae = load_sae(folder, site=Path(folder).name, d_in=d_in, trained_on=trained_on, root=root)
        fingerprint(sae)
        return sae, read_metrics(folder), None
    except SAEFileError as e:
        return None, {}, e.words(Path(root).parent)
    except OSError as e:
        return None, {}, relative_words(e.strerror or str(e), Path(root).parent)


def _final_fingerprint(entry, model) -> str:
    """The fingerprint of the weights an SAE saved beside the model describes: its final ones (the page may show a
    training step, and says so)."""
    if getattr(entry, "step", None) is None:
        return model_fingerprint(model)
    return model_fingerprint(load_model(at_step(entry, None))[0])


def saved_saes(entry, model) -> tuple[list[SAEChoice], list[str]]:
    """(usable SAEs saved beside the model, one line per SAE folder that was refused and why)."""
    name = Path(entry.path).name
    out, refused = [], [f"{name}/{link}: a link leading out of the model's folder; this app reads only what lies "
                        "inside it (copy the real files in)" for link in linked_out(entry.path)]
    trained_on = None
    for found in saved_sites(entry.path):
        try:
            site = Site.of(model.config, found)  # a folder's name meets the model here, once
        except ValueError as e:
            refused.append(f"{name}/sae/{found}: {e}")
            continue
        folder = sae_folder(entry.path, site)
        try:
            stamp = lstamp(folder)
        except OSError:
            stamp = ()
        trained_on = trained_on or _final_fingerprint(entry, model)
        sae, metrics, error = _load_saved(str(folder), stamp, site.width, trained_on, str(entry.path))
        if sae is None:
            refused.append(error)
        else:
            out.append(SAEChoice(f"saved: {site}", sae, metrics, "saved"))
    return out, refused


def _session_key(entry) -> str:
    # an SAE trained on a training snapshot read that snapshot's activations: it belongs to that step only
    return str(entry.path) + ("" if getattr(entry, "step", None) is None else f"@{entry.step}")


def session_saes(entry) -> list[SAEChoice]:
    return list(st.session_state.get(SESSION_KEY, {}).get(_session_key(entry), {}).values())


def _same_weights(choices: list[SAEChoice], model) -> tuple[list[SAEChoice], list[str]]:
    """(the SAEs trained on ``model``'s weights, a refusal per other one: trained before the model was retrained)."""
    fp, out, refused = model_fingerprint(model) if choices else "", [], []  # hashed only when there is one to check
    for choice in choices:
        try:
            check_trained_on(choice.sae.config, choice.label, fp)
        except SAEFileError as e:
            refused.append(f"{choice.label}: {e.problem}")
        else:
            out.append(choice)
    return out, refused


def add_session_sae(entry, sae: SAE, metrics: dict) -> SAEChoice | None:
    """Keep an SAE trained in this session for the model of ``entry`` and have the picker move to it; returns its
    choice (label numbered so two of one site stay apart), or None with the reason on the page when the server holds
    too many session SAEs. Each session keeps MAX_SESSION_SAES and SESSION_BYTES at most, its oldest dropped first."""
    every = st.session_state.setdefault(SESSION_KEY, {})
    mine = every.setdefault(_session_key(entry), {})
    n = 1 + sum(1 for c in mine.values() if c.site == sae.site)
    label = f"yours: {sae.site}" + (f" #{n}" if n > 1 else "")
    while label in mine:
        n += 1
        label = f"yours: {sae.site} #{n}"
    size = sae_bytes(sae)
    # the oldest dropped first, over every model of this session: it holds these SAEs for as long as it lives
    kept = [(k, lab) for k, lab in st.session_state.get(ORDER_KEY, []) if lab in every.get(k, {})]
    while kept and (len(kept) >= MAX_SESSION_SAES or
                    sum(sae_bytes(every[k][lab].sae) for k, lab in kept) + size > SESSION_BYTES):
        k, lab = kept.pop(0)
        _LIVE.discard(every[k].pop(lab).sae)
    held = sum(sae_bytes(s) for s in list(_LIVE))
    if held + size > SERVER_BYTES:  # said on the page's next run (this one is the job's fragment, rerun at once)
        st.session_state[NOT_KEPT_KEY] = (f"yours on {sae.site}: not kept, as this server holds {binary_bytes(held)} "
                                          f"of SAEs trained in sessions and keeps {binary_bytes(SERVER_BYTES)} at "
                                          "most; try again when other sessions end")
        return None
    fingerprint(sae)  # hashed once, now
    choice = SAEChoice(label, sae, dict(metrics), "session")
    mine[label] = choice
    st.session_state[ORDER_KEY] = kept + [(_session_key(entry), label)]
    _LIVE.add(sae)
    st.session_state[PICK_KEY] = label  # read by the page before its picker is drawn (a widget's value cannot be
    return choice                       # set once it is drawn, and this runs in the job's fragment)


def available_saes(entry, model) -> tuple[list[SAEChoice], list[str]]:
    """Every SAE usable on the picked model (saved ones first), and the refusals to show."""
    saved, refused = saved_saes(entry, model)
    mine, gone = _same_weights(session_saes(entry), model)
    note = st.session_state.pop(NOT_KEPT_KEY, None)
    return saved + mine, refused + gone + ([note] if note else [])
