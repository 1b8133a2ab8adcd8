"""Peak memory of a piece of work, as Linux counts it (VmHWM, every allocator alike: torch's, numpy's, Python's).

``peak_growth(fn)`` measures in this process: enough for "nothing large was allocated", where only an upper bound
matters. ``fresh_peak(code)`` runs ``code`` in a process of its own, whose allocator has no freed memory to hand back
out unseen: what comparing an estimate with the real peak needs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _status(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def reset_peak() -> int:
    """Resets this process's peak resident memory (/proc/self/clear_refs) and returns its resident memory now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def peak_growth(fn):
    """(fn's result, how far this process's peak resident memory rose above its resident memory before, bytes)."""
    try:
        before = reset_peak()
    except OSError:
        pytest.skip("this system cannot reset the peak resident memory (/proc/self/clear_refs)")
    out = fn()
    return out, _status("VmHWM") - before


def fresh_peak(setup: str, work: str, timeout: float = 300) -> dict:
    """Runs ``setup`` then ``work`` (Python source, the repository importable, one torch thread as the app's pages
    run) in a fresh process; returns {"grew": the peak's rise during ``work`` in bytes, **what ``work`` left in a dict
    named ``out``}."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("this system cannot reset the peak resident memory (/proc/self/clear_refs)")
    code = "\n".join([
        "import json, sys, torch", f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]",
        "from tests.memory_probe import reset_peak, _status", "torch.set_num_threads(1)", "out = {}", setup,
        "before = reset_peak()", work, "out['grew'] = _status('VmHWM') - before", "print(json.dumps(out))"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
