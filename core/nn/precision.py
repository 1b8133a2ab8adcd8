"""Which precision a run's matrix products use: bfloat16 only where it is measured faster on this CPU, at this run's
own shape, with the same loss; float32 otherwise.

A CPU with bf16 units (the ``avx512_bf16`` or ``amx_bf16`` flag) multiplies bf16 matrices 4x faster than fp32 ones;
one without them emulates bf16 and runs it 44-499x *slower* (pytorch#146508), and even with them some kernels are
slower in bf16 (the CPU flash-attention backward: 5x). So no flag decides: ``choose`` first checks the CPU flag
(no flag: float32, nothing run), then times a few steps of the run in each precision on copies of its tensors
(``probe(precision) -> (seconds of a step, loss)``) and picks bf16 only when it is at least ``MIN_GAIN`` faster and its loss is
within ``LOSS_TOL`` of fp32's. The choice is kept in a small JSON file (``precision.json``, under the folder the
caller names: the models folder) keyed by the CPU, torch's version and the run's shape, so the next run of that
shape reads it instead of probing again. A file that cannot be read (truncated, edited by hand, not JSON) counts as
empty and is rewritten whole; a write that fails (a read-only folder, a full disk) loses the cache, not the run.

Which runs probe: the app's runs (training, a study's runs, the variants, SAE and transcoder jobs and their command
lines) ask for ``run_precision()``: "auto" unless ``TE_PRECISION=float32`` (read here and nowhere else; the test
suite sets it, so every parity, oracle and shipped-number test stays fp32). A probe of ``s`` steps of each precision
costs about 2 (s + 1) of the run's steps, so ``worth_probing`` lets it run only where that is at most
``PROBE_SHARE`` (5 %) of the run: a shorter run reads a choice cached for its shape, and without one trains in fp32
(the probe would cost more than bf16 could save it).

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
PROBE_SHARE = 0.05  # a probe may cost at most this share of the run's own steps (see worth_probing)
ENV = "TE_PRECISION"  # "auto" (default) or "float32": the precision the app's runs ask for (run_precision)


def run_precision() -> str:
    """What the app's runs ask for: ``TE_PRECISION`` ("auto" when unset; "float32" keeps every product fp32, as the
    tests do). Never "bfloat16": only a measured probe chooses it. ValueError naming the setting otherwise."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", FP32):
        raise ValueError(f"{ENV} must be auto or float32, got {value!r}")
    return value


def worth_probing(run_steps: int, probe_steps: int) -> bool:
    """True when a probe of ``probe_steps`` timed steps of each precision (plus one untimed each) costs at most
    PROBE_SHARE of a run of ``run_steps``: at best bf16 saves about 3/4 of a step's time, so a probe longer than a
    few percent of the run cannot pay for itself once fp32 wins, and a cached choice is free anyway."""
    return 2 * (probe_steps + 1) <= PROBE_SHARE * run_steps


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
    """The cache's entries; {} for a missing, truncated, hand-edited or hostile file (no traceback: probed anew)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; RecursionError: "[[[[..."
        return {}


def _write(path: Path, data: dict):
    """Atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # no stray temporary file left beside the cache
        raise


def choose(shape: str, probe: Callable[[str], tuple[float, float]], cache_dir=None,
           bf16_units: bool | None = None, may_probe: bool = True) -> dict:
    """The precision for a run of ``shape`` (a string naming what sets its cost, e.g. "sae d_in=64 d_sae=512 k=12
    batch=2048"): {"precision", "fp32_s", "bf16_s", "fp32_loss", "bf16_loss", "probed"}. ``probe(precision)`` runs a
    few steps on copies and returns (seconds, loss). With ``cache_dir`` the choice is read from and written to its
    precision.json (``probed`` False when read). ``bf16_units`` overrides the CPU flag check (tests). Without
    ``may_probe`` (a run too short to pay for it: worth_probing) only a cached choice can give bf16."""
    units = has_bf16_units() if bf16_units is None else bf16_units
    if not units:  # emulated bf16 is many times slower: never probed, never chosen
        return {"precision": FP32, "probed": False, "reason": "the CPU has no bf16 units"}
    key = f"{cpu_key()}|{shape}"
    path = Path(cache_dir) / CACHE_NAME if cache_dir is not None else None
    if path is not None:
        known = _read(path).get(key)
        if isinstance(known, dict) and known.get("precision") in (FP32, BF16):
            return {**known, "probed": False}
    if not may_probe:
        return {"precision": FP32, "probed": False, "reason": "the run is too short to pay for a probe"}
    t32, l32 = probe(FP32)
    t16, l16 = probe(BF16)
    same_loss = abs(l16 - l32) <= LOSS_TOL * max(abs(l32), 1e-12)
    pick = BF16 if t32 >= MIN_GAIN * t16 and same_loss else FP32
    out = {"precision": pick, "fp32_s": round(t32, 4), "bf16_s": round(t16, 4), "fp32_loss": l32, "bf16_loss": l16}
    if path is not None:
        data = _read(path)
        data[key] = out
        try:
            _write(path, data)
        except OSError:
            pass  # a read-only or full models folder: the next run probes again, this one trains on
    return {**out, "probed": True}
