"""Snapshots of a model through its training: the weights at a few log-spaced steps, so that every view can show
the model as it was at any of them (issue 28).

    <name>/checkpoints/step-000000.safetensors   the untrained model
    <name>/checkpoints/step-000012.safetensors   ... about 20 more, log-spaced, up to the last step

Each file is a safetensors file of the same tensors as model.safetensors, in float16 (half the bytes; a
model this small loses nothing a page can show: 1e-3 relative, where the pages print 3 digits). The losses
measured at each snapshot are in config.json's training record (``snapshots``). Loading one is
``core.nn.checkpoint.load_checkpoint(folder, step=s)``: the same checks as the final weights.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.serve.folder_files import is_inside

SNAPSHOT_DIR = "checkpoints"
DEFAULT_SNAPSHOTS = 20  # log-spaced steps after step 0: the "about 16-24 more up to the last"
_NAME = re.compile(r"step-(\d{6,9})\.safetensors")
MAX_SNAPSHOTS = 200  # a folder listing more is refused past this many (a hostile folder cannot make a page list 10^6)


def snapshot_name(step: int) -> str:
    """The file name of the snapshot at ``step``: step-000120.safetensors (six digits, more past a million)."""
    return f"step-{step:06d}.safetensors"


def snapshot_steps(total: int, count: int = DEFAULT_SNAPSHOTS) -> list[int]:
    """The steps a run of ``total`` steps keeps: 0, then ``count`` steps spaced evenly in log(step) from 1 to
    ``total`` (rounded; fewer where they round to the same step), the last always included. [] when count is 0."""
    if count <= 0 or total < 0:
        return []
    if total == 0:
        return [0]
    # log-spaced: a model changes most in its first hundred steps; evenly spaced steps would spend all but one
    # snapshot on the slow end of the run
    logs = [math.log(total) * i / max(count - 1, 1) for i in range(count)]
    steps = {0, total, *(min(total, round(math.exp(v))) for v in logs)}
    return sorted(steps)


def snapshot_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights as a snapshot stores them: float16 copies on the CPU, a tied output map stored once
    (as in model.safetensors: the reader ties it again)."""
    tied = getattr(model.config, "tie_weights", False)
    return {k: v.detach().to("cpu", torch.float16).clone() for k, v in model.state_dict().items()
            if not (tied and k == "head.weight")}


def write_snapshots(folder: Path, snapshots: dict[int, dict[str, torch.Tensor]]) -> list[Path]:
    """Write every snapshot under ``folder/checkpoints/``; the paths written (the caller fsyncs and renames)."""
    if not snapshots:
        return []
    sub = Path(folder) / SNAPSHOT_DIR
    sub.mkdir(exist_ok=True)
    paths = []
    for step, state in sorted(snapshots.items()):
        path = sub / snapshot_name(step)
        save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata={"format": "pt",
                                                                                    "step": str(step)})
        paths.append(path)
    return paths


def snapshot_folder(folder) -> Path | None:
    """``folder/checkpoints`` when it is a real folder inside ``folder`` (a link out of the model folder is refused,
    as every file of a model folder is: core.serve.folder_files); None otherwise."""
    sub = Path(folder) / SNAPSHOT_DIR
    if not sub.is_dir() or not is_inside(sub, folder) or os.path.realpath(sub) == os.path.realpath(folder):
        return None
    return sub


def checkpoint_steps(folder) -> list[int]:
    """The steps whose snapshot file ``folder`` holds, ascending; [] for a folder that kept none (today's saved
    models, GPT-2 folders). Only the names are read: a corrupt file is found, and named, when it is loaded."""
    sub = snapshot_folder(folder)
    if sub is None:
        return []
    try:
        names = os.listdir(sub)
    except OSError:  # gone or unreadable meanwhile: no snapshots to offer
        return []
    steps = sorted(int(m.group(1)) for m in map(_NAME.fullmatch, names) if m)
    return steps[:MAX_SNAPSHOTS]


def read_snapshot_states(folder) -> dict[int, dict[str, torch.Tensor]]:
    """Every readable snapshot of ``folder`` as stored (step -> tensors), to copy them into another folder (a save
    from a handed-over run); one that cannot be read is left out."""
    from core.nn.checkpoint import CheckpointError, snapshot_tensors

    out = {}
    for step in checkpoint_steps(folder):
        try:
            out[step] = snapshot_tensors(folder, step)
        except CheckpointError:
            continue
    return out


def snapshot_losses(training: dict) -> dict[int, dict]:
    """step -> {"train_loss", "val_loss"} measured when each snapshot was taken, from a checkpoint's training
    record; {} for a model without them."""
    rows = training.get("snapshots") if isinstance(training, dict) else None
    if not isinstance(rows, list):
        return {}
    out = {}
    for r in rows:
        if isinstance(r, dict) and isinstance(r.get("step"), int):
            out[r["step"]] = {k: r.get(k) for k in ("train_loss", "val_loss")
                              if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])}
    return out
