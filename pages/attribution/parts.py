"""The Attribution graph page's parts: the learner's supernodes (graph_groups), and its caches: a model's transcoders, read from beside it once per server and read again
when their files change (core.features.transcoder checks them as it loads: shapes, the model weights they were
trained on, no linked folder leading out of the model's), with the fingerprint that names them in every graph cache."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch

from core.analysis.supernodes import AGREE
from core.analysis.sae import SAEFileError, model_fingerprint
from core.features.explanations import load_explanations, short_words
from core.features.rules import UNEXPLAINED
from core.analysis.transcoders import TRANSCODER_DIR, load_transcoders, missing_layers, transcoder_folder
from core.serve.folder_files import lstamp
from core.serve.fmt import md_escape
from core.serve.paths import REPO_ROOT


@dataclass(frozen=True)
class Transcoders:
    tcs: dict              # {layer: transcoder}; {} when they cannot be used
    key: str               # names their weights: part of every graph cache's key ("" when none)
    problem: str | None    # why they cannot be used, in words naming folders from the models folder


def _stamp(path) -> tuple:
    try:
        return lstamp(path)
    except OSError:
        return ()


def weights_key(tcs: dict) -> str:
    """sha256 over every transcoder's config and tensors, layer by layer: a retrained transcoder is another graph."""
    h = hashlib.sha256()
    for layer in sorted(tcs):
        h.update(f"{layer}|{tcs[layer].config.to_dict()}".encode())
        for t in tcs[layer].tensors().values():
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()[:20]


@st.cache_resource(max_entries=4, show_spinner="Reading the transcoders ...")
def _load(path: str, stamp: tuple, trained_on: str, _config):
    """(transcoders, their key, None) or ({}, "", the refusal); the key is computed here, once per load."""
    try:
        tcs = load_transcoders(path, _config, trained_on=trained_on)
    except SAEFileError as e:
        return {}, "", e.words(Path(path).parent)
    return tcs, weights_key(tcs), None


def command_folder(path) -> str:
    """A model folder as a command run from the repository would name it; "$TE_MODELS_DIR/NAME" outside it (the
    server's own paths are not shown)."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return f"$TE_MODELS_DIR/{Path(path).name}"


def transcoders_of(entry, model) -> Transcoders:
    """The model's transcoders when every block has one trained on these weights; otherwise why not."""
    folder = Path(entry.path) / TRANSCODER_DIR
    tcs, key, problem = _load(str(entry.path), _stamp(folder), model_fingerprint(model), model.config)
    if problem:
        at_step = (f" This page shows the model at step {entry.step:,}, and transcoders describe the weights they "
                   "were trained on (its final ones): drag the step to final." if entry.step is not None else "")
        return Transcoders({}, "", f"A transcoder beside this model cannot be used: {problem}.{at_step}")
    missing = missing_layers(tcs, model.config)
    if missing:
        blocks = ", ".join(str(l + 1) for l in missing)
        # where some blocks have one, --layer names the missing ones (the command refuses to touch the others)
        every = len(missing) == model.config.n_layers
        only = "" if every else " --layer N"
        return Transcoders({}, "", (
            f"This model has no transcoder for block{'s' if len(missing) > 1 else ''} {blocks}. `python -m "
            f"core.features --model {command_folder(entry.path)} --transcoder{only}` trains "
            + ("one per block beside it" if every else f"the missing one{'s' if len(missing) > 1 else ''} (N = "
               f"{', '.join(map(str, missing))}, counted from 0; one run each)")
            + " (about a minute each on one core)."))
    return Transcoders(tcs, key, None)


def graph_groups(graph_key, feats: list[int], label, proposals: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """The learner's supernodes of this graph (core.analysis.supernodes): kept features grouped under a name, kept
    in the session per graph (``graph_key``); the page's proposals offered one button each. Returns the groups as
    (name, member nodes)."""
    groups = st.session_state.setdefault("attr_groups", {}).setdefault(graph_key, [])

    def add(name, members):
        # a name is drawn on the graph (Plotly reads <b>, <a> in its text) and written in Markdown: one short line,
        # no angle brackets, escaped where it is printed
        name = " ".join(str(name).replace("<", "‹").replace(">", "›").split())[:40]
        taken = {n for n, _ in groups}
        # an unnamed group takes the first free "group k" (a learner may have named one so already)
        name = name or next(f"group {k}" for k in range(len(groups) + 1, len(groups) + 2 + len(taken))
                            if f"group {k}" not in taken)
        if members and name not in taken:
            groups.append((name, sorted(int(m) for m in members)))

    with st.expander(f"Group features into supernodes ({len(groups)} now)"):
        c1, c2, c3 = st.columns([3, 2, 1], vertical_alignment="bottom")
        c1.multiselect("Features to group", feats, format_func=label, key="attr_group_members")
        c2.text_input("Group name", key="attr_group_name", placeholder=f"group {len(groups) + 1}")
        # the callback reads the boxes as they are at the press (a name typed and not yet sent comes with it)
        c3.button("Group", key="attr_group", on_click=lambda: add(st.session_state.get("attr_group_name", "").strip(),
                                                                  st.session_state.get("attr_group_members", [])))
        for k, (proposed, found) in enumerate(proposals):
            p1, p2 = st.columns([5, 1], vertical_alignment="center")
            # a proposal's name and labels hold token text ("*", "$", "[" on a character model): escaped
            p1.caption(f"Proposed, **{md_escape(proposed)}**: " + ", ".join(md_escape(label(i)) for i in found)
                       + f" (one block, decoder directions with cosine ≥ {AGREE})")
            p2.button("Group these", key=f"attr_propose_{k}", on_click=lambda n=proposed, f=found: add(n, f))
        if groups:
            st.caption("Groups: " + "; ".join(f"**{md_escape(n)}** ({len(m)} features)" for n, m in groups))
            st.button("Ungroup all", key="attr_ungroup", on_click=groups.clear)
    return groups


def with_words(entry, n_layers: int, nodes: list[dict], g) -> dict:
    """The graph's feature nodes with their explanation (issue 58, the explanations.json beside each transcoder) in
    their hover text; unchanged where a block has none, or a broken one (the Features page names a broken file).
    Returns {node: words} of the explained ones, for the proposed groups."""
    said, explained = {}, {}
    for layer in range(n_layers):
        folder = transcoder_folder(entry.path, layer)
        try:  # read once per version of the folder, not on every rerun (each file holds hundreds of units)
            said[layer] = _explanations(str(folder), lstamp(folder)) if folder.is_dir() else {}
        except (OSError, ValueError):
            said[layer] = {}
    for n in nodes:
        if n["kind"] == "features":
            l, _, f = (int(v) for v in g.features[n["node"]])
            e = said[l].get(f)
            if words := short_words(e, 60):
                n["label"] = f"{n['label']}: {words}"
            if e is not None and e["rule"] is not None and e["words"] != UNEXPLAINED:
                explained[n["node"]] = e["words"]
    return explained


@st.cache_data(max_entries=16, show_spinner=False)
def _explanations(folder: str, stamp: tuple) -> dict:
    """{unit: explanation} of one transcoder folder as it is at ``stamp`` (core.serve.folder_files.lstamp)."""
    return {e["unit"]: e for e in load_explanations(folder) or []}
