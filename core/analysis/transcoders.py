"""Where a model's transcoders live and how they are read back (issue 46's layout): ``transcoders/layer-{l}/`` beside
the model, each an SAE folder (core.analysis.sae's checks) whose site is the MLP output it writes and whose ``reads``
is the MLP input. Here, below the packages that train them (core.features.transcoder), so that the analyses that
only read them (the attribution graph's grading on the answer keys) import downwards."""
from __future__ import annotations

from pathlib import Path

from core.analysis.sae import SAEFileError, load_sae

TRANSCODER_DIR = "transcoders"


def reads(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_in"


def writes(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


def transcoder_folder(model_folder, layer: int) -> Path:
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < 1000:
        raise ValueError(f"a layer is a whole number from 0, got {layer!r}")
    return Path(model_folder) / TRANSCODER_DIR / f"layer-{layer}"


def load_transcoders(model_folder, config, trained_on: str | None = None) -> dict:
    """{layer: transcoder} of every layer that has one beside the model, each checked as an SAE is (safetensors
    only, shapes, finite values, inside the model's folder: no linked folder leading out) and against the model (it
    writes that block's MLP output, d_model wide; with ``trained_on``, a model fingerprint, it was trained on those
    weights); a broken one raises SAEFileError naming its file. {} when there are none."""
    out = {}
    for layer in range(config.n_layers):
        folder = transcoder_folder(model_folder, layer)
        if not folder.is_dir():
            continue
        tc = load_sae(folder, site=writes(layer), d_in=config.d_model, trained_on=trained_on,
                      root=model_folder, what="transcoder")
        if tc.config.reads not in (None, reads(layer)):  # None: saved before the field, when it was always this
            raise SAEFileError(folder / "config.json", f"it reads {tc.config.reads}, not {reads(layer)}")
        out[layer] = tc
    return out


def missing_layers(transcoders: dict, config) -> list[int]:
    return [l for l in range(config.n_layers) if l not in transcoders]
