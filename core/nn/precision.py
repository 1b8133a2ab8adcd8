"""Which precision a run's matrix products use: bfloat16 only where it is measured faster on this CPU, at this run's
own shape, with the same loss; float32 otherwise.

A CPU with bf16 units (the ``avx512_bf16`` or ``amx_bf16`` flag) multiplies bf16 matrices 4x faster than fp32 ones;
one without them emulates bf16 and runs it 44-499x *slower* (pytorch#146508), and even with them some kernels are
slower in bf16 (the CPU flash-attention backward: 5x). So no flag decides: ``choose`` first checks the CPU flag
(no flag: float32, nothing run), then times a few steps of the run in each precision on copies of its tensors
(``probe(precision) -> (seconds of a step, loss)``) and picks bf16 only when it is at least ``MIN_GAIN`` faster and its loss is
within ``LOSS_TOL`` of fp32's. The choice is kept in a small JSON file (``precision.json``, under the folder the
caller names: the models folder) keyed by the CPU, torch's version and the run's shape, so the next run of that
shape reads it instead of probing again.

Autocast is entered around each forward, never around a whole loop: an autocast block that spans optimiser steps
keeps its first bf16 copies of the weights and trains on stale ones."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch

FP32, BF16 = "float32", "bfloat16"
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_GAIN = 1.1      # bf16 must be this many times faster: a near tie keeps fp32's exactness
LOSS_TOL = 0.005    # |loss_bf16 - loss_fp32| / |loss_fp32| at most this after the probe's steps (0.5 %)
CACHE_NAME = "precision.json"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo; an empty set where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_bf16_units() -> bool:
    """True when the CPU computes bf16 products in hardware (not emulated, which is far slower)."""
    return bool(cpu_flags() & set(BF16_FLAGS))


def cpu_key() -> str:
    """Names this CPU and torch: a choice measured on one is not reused on another."""
    text = f"{platform.machine()}|{platform.processor()}|{sorted(cpu_flags())}|{os.cpu_count()}|{torch.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def autocast(precision: str):
    """The context for one forward in ``precision``: bf16 autocast, or nothing for fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == BF16 else nullcontext()


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def choose(shape: str, probe: Callable[[str], tuple[float, float]], cache_dir=None,
           bf16_units: bool | None = None) -> dict:
    """The precision for a run of ``shape`` (a string naming what sets its cost, e.g. "sae d_in=64 d_sae=512 k=12
    batch=2048"): {"precision", "fp32_s", "bf16_s", "fp32_loss", "bf16_loss", "probed"}. ``probe(precision)`` runs a
    few steps on copies and returns (seconds, loss). With ``cache_dir`` the choice is read from and written to its
    precision.json (``probed`` False when read). ``bf16_units`` overrides the CPU flag check (tests)."""
    units = has_bf16_units() if bf16_units is None else bf16_units
    if not units:  # emulated bf16 is many times slower: never probed, never chosen
        return {"precision": FP32, "probed": False, "reason": "the CPU has no bf16 units"}
    key = f"{cpu_key()}|{shape}"
    path = Path(cache_dir) / CACHE_NAME if cache_dir is not None else None
    if path is not None:
        known = _read(path).get(key)
        if isinstance(known, dict) and known.get("precision") in (FP32, BF16):
            return {**known, "probed": False}
    t32, l32 = probe(FP32)
    t16, l16 = probe(BF16)
    same_loss = abs(l16 - l32) <= LOSS_TOL * max(abs(l32), 1e-12)
    pick = BF16 if t32 >= MIN_GAIN * t16 and same_loss else FP32
    out = {"precision": pick, "fp32_s": round(t32, 4), "bf16_s": round(t16, 4), "fp32_loss": l32, "bf16_loss": l16}
    if path is not None:
        data = _read(path)
        data[key] = out
        _write(path, data)
    return {**out, "probed": True}
