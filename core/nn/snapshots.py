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

import collections
import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.serve.folder_files import is_inside, open_inside
from core.nn.safetensors_header import read_header

SNAPSHOT_DIR = "checkpoints"
DEFAULT_SNAPSHOTS = 20  # log-spaced steps after step 0: the "about 16-24 more up to the last"
# six digits or more (a step past a million has seven): up to 15, far past any run, so that int() stays cheap
_NAME = re.compile(r"step-(\d{6,15})\.safetensors")
MAX_SNAPSHOTS = 200  # a folder listing more is cut to this many (a hostile folder cannot make a page list 10^6)
MAX_KEPT = MAX_SNAPSHOTS - 1  # the most a run may ask for after step 0: all of them, the last included, are listed


def snapshot_name(step: int) -> str:
    """The file name of the snapshot at ``step``: step-000120.safetensors (six digits, more past a million)."""
    return f"step-{step:06d}.safetensors"


def name_step(name: str) -> int | None:
    """The step whose snapshot is called ``name``, or None: only the name ``snapshot_name`` gives a step counts
    (step-0000120 is not step 120's name), so that two files never list one step twice and the step listed is the
    file that loads."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    step = int(m.group(1))
    return step if snapshot_name(step) == name else None


def snapshot_steps(total: int, count: int = DEFAULT_SNAPSHOTS) -> list[int]:
    """The steps a run of ``total`` steps keeps: 0, then ``count`` steps spaced evenly in log(step) from 1 to
    ``total`` (rounded; fewer where they round to the same step), the last always included; one step alone is the
    last. [] when count is 0. At most ``MAX_KEPT`` after step 0, so that a folder's listing holds them all."""
    if count <= 0 or total < 0:
        return []
    if total == 0:
        return [0]
    count = min(count, MAX_KEPT)
    if count == 1:
        return [0, total]  # one snapshot after the start: the trained model
    # log-spaced: a model changes most in its first hundred steps; evenly spaced steps would spend all but one
    # snapshot on the slow end of the run
    logs = [math.log(total) * i / (count - 1) for i in range(count)]
    steps = {0, total, *(min(total, round(math.exp(v))) for v in logs)}
    return sorted(steps)


def snapshot_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights as a snapshot stores them: float16 copies on the CPU, a tied output map stored once
    (as in model.safetensors: the reader ties it again)."""
    tied = getattr(model.config, "tie_weights", False)
    return {k: v.detach().to("cpu", torch.float16).clone() for k, v in model.state_dict().items()
            if not (tied and k == "head.weight")}


def write_snapshots(folder: Path, snapshots: dict[int, dict[str, torch.Tensor] | Path]) -> list[Path]:
    """Write every snapshot under ``folder/checkpoints/``; the paths written (the caller fsyncs and renames). A
    snapshot is its tensors, or a snapshot file of another folder (``snapshot_files``), copied byte for byte."""
    if not snapshots:
        return []
    sub = Path(folder) / SNAPSHOT_DIR
    sub.mkdir(exist_ok=True)
    paths = []
    for step, state in sorted(snapshots.items()):
        path = sub / snapshot_name(step)
        if isinstance(state, (str, Path)):
            src = Path(state)
            try:
                with open_inside(src.parent, src.name) as fin, open(path, "wb") as fout:  # never through a link
                    shutil.copyfileobj(fin, fout, 1 << 20)
            except OSError:  # gone or refused meanwhile: that step is left out, as an unreadable one always was
                path.unlink(missing_ok=True)
                continue
        else:
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


MAX_NAMES = 400  # names read from a snapshot folder's listing: past that it stops (a run writes at most 200 files)
_LISTINGS: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()  # folder -> (stamp, Listing), newest last
_LISTINGS_LOCK = threading.Lock()  # every session is a thread of one server, and all of them share _LISTINGS
_LISTINGS_KEPT = 64
_SETTLED_NS = 2_000_000_000  # a folder changed less than 2 s ago is listed again (its time stamp's tick is coarse)


@dataclass(frozen=True)
class Listing:
    """What a model's snapshot folder lists. ``truncated``: it holds more than ``MAX_NAMES`` names and the listing
    stopped there, so snapshots may be missing from ``steps`` (said once, by the pages that list them)."""
    steps: tuple[int, ...] = ()
    truncated: bool = False
    stamp: tuple | None = None  # the folder's own (device, inode, mtime, ctime): changes when a name is added or removed


def snapshot_listing(folder) -> Listing:
    """The snapshot steps of ``folder`` (see ``checkpoint_steps``), read from at most ``MAX_NAMES`` names of its
    checkpoints/ folder, and kept for as long as that folder's stamp stays the same: a page run asks for them
    several times (the picker, each load), and a folder of 100,000 names once cost 110 ms a listing."""
    sub = snapshot_folder(folder)
    if sub is None:
        return Listing()
    try:
        st = os.stat(sub)
    except OSError:  # gone or unreadable meanwhile: no snapshots to offer
        return Listing()
    key, stamp = os.path.abspath(sub), (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    with _LISTINGS_LOCK:
        kept = _LISTINGS.get(key)
        if kept is not None and kept[0] == stamp:
            _LISTINGS.move_to_end(key)
            return kept[1]
    names, truncated = [], False
    try:
        with os.scandir(sub) as it:  # read lazily: stopping early never reads the rest of a huge folder
            for e in it:
                if len(names) >= MAX_NAMES:
                    truncated = True
                    break
                names.append(e.name)
    except OSError:
        return Listing()
    steps = sorted({s for s in map(name_step, names) if s is not None})  # a set: each step once
    if len(steps) > MAX_SNAPSHOTS:  # the first ones and the last: the end of training is never the part cut
        steps = steps[:MAX_SNAPSHOTS - 1] + steps[-1:]
    listing = Listing(tuple(steps), truncated, stamp)
    # a folder changed just now may change again within its time stamp's tick, unseen: kept only once settled
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _SETTLED_NS:
        with _LISTINGS_LOCK:
            _LISTINGS[key] = (stamp, listing)
            _LISTINGS.move_to_end(key)
            while len(_LISTINGS) > _LISTINGS_KEPT:
                _LISTINGS.popitem(last=False)
    return listing


def checkpoint_steps(folder) -> list[int]:
    """The steps whose snapshot file ``folder`` holds, ascending; [] for a folder that kept none (today's saved
    models, GPT-2 folders). Only the names are read, at most ``MAX_NAMES`` of them (``snapshot_listing``): a
    corrupt file is found, and named, when it is loaded."""
    return list(snapshot_listing(folder).steps)


def snapshot_files(folder) -> dict[int, Path]:
    """step -> the snapshot file of ``folder``, for every listed step: to copy them into another folder (a save from
    a handed-over run: ``write_snapshots`` copies the files, no tensor is decoded). Only the header of each is
    read: one that is not a safetensors file at all is left out (its tensors are checked when it is loaded)."""
    sub = snapshot_folder(folder)
    out = {}
    for step in checkpoint_steps(folder) if sub is not None else []:
        try:
            read_header(sub, snapshot_name(step))  # a few KB: names, shapes, offsets inside the file
        except (OSError, ValueError):
            continue
        out[step] = sub / snapshot_name(step)
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
