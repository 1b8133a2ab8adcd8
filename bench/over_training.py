"""The Over training page on hostile model folders (issue 40): time and peak memory of the page's work.

    python -m bench.over_training            # the bench.run row's cases: shipped (21 snapshots), 9.5 M / 21
    python -m bench.over_training --hostile  # also 9.5 M / 200 snapshots and 100,000 empty snapshot files

Each folder is built under a temporary folder (hard links: one snapshot file, many names; nothing is kept) and each
case runs in a process of its own: the frame's first run (the sidebar loads the final model) is the idle server,
then the process's peak is reset (/proc/self/clear_refs) and the page's first run is timed, its peak resident
memory read over the resident memory before it (VmHWM - VmRSS). Then a new prompt, the same way. The folder
builders are also the tests' (tests/test_page_over_training_bounds.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
PAGE = "pages/over_training.py"
TARGET_S, TARGET_MB = 2.0, 600
# 9.55 M parameters (the Training page allows 10 M): the hostile model, deep enough to cost a trace
BIG_SHAPE = dict(vocab_size=65, n_ctx=256, d_model=256, n_heads=8, n_layers=12)
PROMPT = "The old man walked slowly to the river and sat down by the water.\n" * 2


def spread_steps(total: int, count: int) -> list[int]:
    """``count`` distinct steps from 0 to ``total``: a run's own log-spaced ones, filled evenly where they collide."""
    from core.nn.snapshots import MAX_KEPT, snapshot_steps

    steps = set(snapshot_steps(total, min(count - 1, MAX_KEPT)))
    i = 1
    while len(steps) < count:  # evenly spaced steps between, until there are enough
        steps.add(round(i * total / (count + 1)))
        i += 1
    return sorted(steps)[:count - 1] + [total] if count > 1 else [0]


def build_model_folder(folder, shape: dict | None = None, snapshots: int = 21, total: int = 12000,
                       seed: int = 0) -> Path:
    """A model folder of the shipped character tokenizer and a random model of ``shape`` (the shipped model's by
    default), trained for ``total`` steps on paper, with ``snapshots`` snapshot names: one file, hard-linked."""
    import torch

    from core.nn.checkpoint import load_checkpoint
    from core.nn.model_store import save_checkpoint
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    from core.nn.snapshots import SNAPSHOT_DIR, snapshot_name, snapshot_state

    final, tok = load_checkpoint(SHIPPED)
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**shape)).eval() if shape else final
    folder = Path(folder)
    steps = spread_steps(total, snapshots)
    save_checkpoint(folder, model, tok, training={"steps": total, "loss_unit": "char"},
                    snapshots={steps[0]: snapshot_state(model)})
    sub = folder / SNAPSHOT_DIR
    for s in steps[1:]:
        os.link(sub / snapshot_name(steps[0]), sub / snapshot_name(s))
    return folder


def add_empty_snapshots(folder, count: int) -> None:
    """Empty files under snapshot names, up to ``count`` names in the snapshot folder (those there stay)."""
    from core.nn.snapshots import SNAPSHOT_DIR, snapshot_name

    sub = Path(folder) / SNAPSHOT_DIR
    sub.mkdir(exist_ok=True)
    have = set(os.listdir(sub))
    step = 0
    while len(have) < count:
        name = snapshot_name(step)
        if name not in have:
            (sub / name).touch()
            have.add(name)
        step += 1


def _status(field: str) -> int:
    """kB of /proc/self/status's ``field`` (VmRSS, VmHWM)."""
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to VmRSS (Linux 4.0+)
        return True
    except OSError:
        return False


def _timed_run(at, act=None) -> tuple[float, float]:
    """(seconds, peak MB over the resident memory before) of one run of ``at`` (after ``act(at)``)."""
    import gc

    gc.collect()
    _reset_peak()
    before = _status("VmRSS")
    if act:
        act(at)
    t = time.perf_counter()
    at.run()
    dt = time.perf_counter() - t
    if at.exception:
        raise RuntimeError(f"{PAGE}: {at.exception[0].message}")
    return dt, (_status("VmHWM") - before) / 1024


def child(models_dir: str, name: str) -> dict:
    """One case, in this process: the idle frame, the page's first run, and a new prompt."""
    os.environ["TE_MODELS_DIR"] = models_dir
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["te_model_name"] = name
    at.session_state["over_prompt"] = PROMPT
    at.run()  # the frame: the sidebar loads the final model; the idle server, as far as this page is concerned
    idle = _status("VmRSS") / 1024
    at.switch_page(PAGE)
    first, first_mb = _timed_run(at)
    new, new_mb = _timed_run(at, lambda a: a.text_area(key="over_prompt").input(PROMPT.replace("river", "stream")))
    notes = [m.value for m in [*at.info, *at.warning]]
    charts = len(at.get("plotly_chart"))
    return {"idle_mb": round(idle, 1), "first_s": round(first, 3), "first_peak_mb": round(first_mb, 1),
            "new_prompt_s": round(new, 3), "new_prompt_peak_mb": round(new_mb, 1), "charts": charts,
            "notes": notes}


def run_case(models_dir: Path, name: str, threads: int = 1) -> dict:
    env = {**os.environ, "TE_TORCH_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "bench.over_training", "--child", str(models_dir), name],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cases(tmp: Path, hostile: bool) -> list[tuple[str, Path, str]]:
    """(label, TE_MODELS_DIR, model name) of each case, its folder built under ``tmp``."""
    out = [("shipped shakespeare-char, 21 snapshots", tmp / "none", "shakespeare-char")]
    (tmp / "none").mkdir()
    build_model_folder(tmp / "big21" / "big21", BIG_SHAPE, snapshots=21)
    out.append(("9.5 M parameters, 21 snapshots", tmp / "big21", "big21"))
    if hostile:
        build_model_folder(tmp / "big200" / "big200", BIG_SHAPE, snapshots=200)
        out.append(("9.5 M parameters, 200 snapshots (hard links)", tmp / "big200", "big200"))
        empty = tmp / "empty" / "empty"
        shutil.copytree(SHIPPED, empty)
        add_empty_snapshots(empty, 100_000)
        out.append(("shipped model + empty files, 100,000 snapshot names", tmp / "empty", "empty"))
    return out


def main(argv=None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], argv[2])))
        return []
    hostile = "--hostile" in argv
    from core.nn.config import ModelConfig
    from core.nn.params import count_parameters

    print(f"\nOver training page, one thread; a 9.5 M model is {count_parameters(ModelConfig(**BIG_SHAPE))['total']:,} "
          f"parameters; targets <= {TARGET_S} s and <= {TARGET_MB} MB over the idle server")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, models_dir, name in cases(Path(tmp), hostile):
            got = run_case(models_dir, name)
            met = got["first_s"] <= TARGET_S and got["first_peak_mb"] <= TARGET_MB
            rows.append({"benchmark": f"over training page, {label}", "ours": got["first_s"], "unit": "s",
                         "target_s": TARGET_S, "peak_mb": got["first_peak_mb"], "target_mb": TARGET_MB, "met": met,
                         **got})
            print(f"  {label:<54} first run {got['first_s']:6.2f} s +{got['first_peak_mb']:6.1f} MB peak; "
                  f"new prompt {got['new_prompt_s']:6.2f} s +{got['new_prompt_peak_mb']:6.1f} MB "
                  f"(idle {got['idle_mb']:.0f} MB, {got['charts']} charts) {'✓' if met else '✗'}", flush=True)
            for note in got["notes"]:
                print(f"      {note[:160]}")
    return rows


if __name__ == "__main__":
    main()
