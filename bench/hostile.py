"""Hostile model folders, timed: what each crafted folder costs the server now that it is refused early.

    python -m bench.hostile

Each case is built in a temporary folder (nothing is kept) and timed end to end, with the peak memory of this
process; the figures the issue measured before the fix are quoted beside them in bench/results/hostile-input.md.
"""
from __future__ import annotations

import json
import math
import resource
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from safetensors.torch import load_file, save_file  # noqa: E402

from core.nn.checkpoint import CheckpointError, check_checkpoint, load_checkpoint  # noqa: E402

SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
BPE = ROOT / "assets" / "models" / "shakespeare-bpe"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(label: str, fn) -> dict:
    before = _rss_mb()
    t0 = time.perf_counter()
    try:
        fn()
        outcome = "loaded"
    except CheckpointError as e:
        outcome = e.problem[:90]
    seconds = time.perf_counter() - t0
    row = {"case": label, "seconds": round(seconds, 4), "peak_rss_growth_mb": round(_rss_mb() - before, 1),
           "outcome": outcome}
    print(f"  {label:<44} {seconds:8.3f} s  +{row['peak_rss_growth_mb']:6.1f} MB peak  {outcome}", flush=True)
    return row


def main() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        layers = tmp / "layers"
        shutil.copytree(SHIPPED, layers)
        cfg = json.loads((layers / "config.json").read_text())
        cfg["model"]["n_layers"] = 100_000
        (layers / "config.json").write_text(json.dumps(cfg))
        rows.append(timed("config with n_layers = 100,000", lambda: check_checkpoint(layers)))
        cfg["model"]["n_layers"] = 100
        (layers / "config.json").write_text(json.dumps(cfg))
        rows.append(timed("config with n_layers = 100 (within the cap)", lambda: check_checkpoint(layers)))

        fat = tmp / "fat"
        shutil.copytree(SHIPPED, fat)
        header = json.dumps({f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                             for i in range(800_000)}).encode()
        (fat / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
        rows.append(timed(f"weights header of {len(header) / 1e6:.0f} MB, 800,000 entries",
                          lambda: check_checkpoint(fat)))

        nan = tmp / "nan"
        shutil.copytree(SHIPPED, nan)
        state = load_file(str(nan / "model.safetensors"))
        state["head.weight"][0, 0] = math.nan
        save_file(state, str(nan / "model.safetensors"))
        rows.append(timed("NaN weights (the one read; reruns reuse it)", lambda: load_checkpoint(nan)))

        vocab = tmp / "vocab"
        shutil.copytree(BPE, vocab)
        spec = json.loads((vocab / "tokenizer.json").read_text())
        base = len(spec["model"]["vocab"])
        spec["model"]["vocab"].update({f"tok{i}": base + i for i in range(2_000_000)})
        (vocab / "tokenizer.json").write_text(json.dumps(spec))
        size = (vocab / "tokenizer.json").stat().st_size
        rows.append(timed(f"tokenizer.json of 2M tokens ({size / 1e6:.0f} MB)", lambda: load_checkpoint(vocab)))
        spec["model"]["vocab"] = {k: v for k, v in spec["model"]["vocab"].items() if v < 300_000}
        (vocab / "tokenizer.json").write_text(json.dumps(spec))
        rows.append(timed("tokenizer.json of 300k tokens (under 16 MiB)", lambda: load_checkpoint(vocab)))

        panic = tmp / "panic"
        shutil.copytree(BPE, panic)
        spec = json.loads((panic / "tokenizer.json").read_text())
        spec["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated",
                                 "invert": False}
        (panic / "tokenizer.json").write_text(json.dumps(spec))
        rows.append(timed("pre-tokenizer regex (a|aa)+$", lambda: load_checkpoint(panic)))
    return rows


if __name__ == "__main__":
    main()
