"""The one forward with hook points against the code before it (issue 41), measured in the same run.

    python -m bench.hooks                   # against the commit before core/nn/hooks.py was added
    python -m bench.hooks --base ea1776a --quick

The peer is this repository at ``--base`` (checked out into a temporary git worktree). Each measurement runs in a fresh
process in one tree, then in the other, round after round (alternating, so that the machine's load falls on both
alike); the ratio is of the medians, base / ours (above 1: ours is faster). Measured: the plain forward (the fused
path, no hook asked for), the trace, the residual patching grid (a new prompt pair each time, so no run is reused) at
64 tokens on the lecture's model and on GPT-2 small's shape, and the Attention and Inside pages' reruns (AppTest).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# runs inside one tree (its own code on sys.path): prints {name: median seconds}; written against the API both trees
# share (Transformer.forward, core.analysis.trace.trace, core.analysis.patching.patch_residual, AppTest)
WORKER = r'''
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
from core.nn.model import ModelConfig, Transformer
from core.analysis.trace import trace
from core.analysis.patching import Metric, patch_residual
reps, which = int(sys.argv[1]), sys.argv[2].split(",")
out = {}

def med(fn, reps):
    fn()
    ts = []
    for i in range(reps):
        t = time.perf_counter(); fn(i); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

torch.manual_seed(0)
lecture = Transformer(ModelConfig(vocab_size=65, n_ctx=128, d_model=64, n_heads=4, n_layers=2)).eval()
gpt2 = None
if any(w.endswith("gpt2") for w in which):
    gpt2 = Transformer(ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_heads=12, n_layers=12, bias=True,
                                   activation="gelu_tanh", tie_weights=True)).eval()
ids = torch.randint(0, 65, (1, 128), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    if "forward" in which:
        out["forward"] = med(lambda i=0: lecture(ids), reps * 20)
    if "trace" in which:
        out["trace"] = med(lambda i=0: trace(lecture, ids), reps * 10)
    for name, model, m in (("patching", lecture, 65), ("patching_gpt2", gpt2, 50257)):
        if name in which:
            clean = torch.randint(0, m, (64,), generator=torch.Generator().manual_seed(2)).tolist()
            def grid(i=0, clean=clean, model=model, m=m):
                corrupt = list(clean)
                corrupt[40] = (clean[40] + 1 + i) % m  # a new pair each time: nothing reused
                patch_residual(model, clean, corrupt, Metric(clean[-1], (clean[-1] + 1) % m))
            out[name] = med(grid, max(1, reps // (4 if gpt2 is model else 1)))
pages = [w for w in which if w.startswith("page:")]
if pages:
    from streamlit.testing.v1 import AppTest
    for w in pages:
        page = w[5:]
        at = AppTest.from_file("app.py", default_timeout=120)
        at.run(); at.switch_page(page); at.run()
        if at.exception:
            raise SystemExit(f"{page}: {at.exception[0].message}")
        out[w] = med(lambda i=0: at.run(), reps)
print("RESULT " + json.dumps(out))
'''

WHAT = ["forward", "trace", "patching", "patching_gpt2", "page:pages/attention.py", "page:pages/inside.py"]
NAMES = {"forward": "plain forward, 128 tokens, lecture model", "trace": "trace, 128 tokens, lecture model",
         "patching": "residual patching grid, 64 tokens, lecture model",
         "patching_gpt2": "residual patching grid, 64 tokens, GPT-2 small shape",
         "page:pages/attention.py": "Attention page rerun", "page:pages/inside.py": "Inside page rerun"}


def default_base() -> str:
    """The commit before core/nn/hooks.py was added."""
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", "core/nn/hooks.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    if not added:
        raise SystemExit("core/nn/hooks.py is not in this repository's history: give --base")
    return added[-1] + "^"


def run_in(tree: Path, reps: int, which: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), TE_TORCH_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", WORKER, str(reps), ",".join(which)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1800)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the run in {tree} failed:\n{proc.stderr[-2000:]}")
    return json.loads(line[7:])


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m bench.hooks", description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the commit to compare with (default: the one before core/nn/hooks.py)")
    p.add_argument("--quick", action="store_true", help="fewer rounds and repetitions (noisier)")
    p.add_argument("--only", nargs="*", choices=WHAT, default=WHAT)
    args = p.parse_args(argv)
    base = args.base or default_base()
    rounds, reps = (2, 3) if args.quick else (4, 5)
    samples = {"base": {w: [] for w in args.only}, "ours": {w: [] for w in args.only}}
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), base], cwd=ROOT, check=True)
        try:
            for r in range(rounds):
                for who, tree in (("base", old), ("ours", ROOT)) if r % 2 == 0 else (("ours", ROOT), ("base", old)):
                    for w, t in run_in(tree, reps, args.only).items():
                        samples[who][w].append(t)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    rows = []
    print(f"against {base} ({rounds} rounds, each a fresh process per tree; ratio = base / ours, above 1: faster)")
    for w in args.only:
        b, o = statistics.median(samples["base"][w]), statistics.median(samples["ours"][w])
        rows.append({"benchmark": f"hooks: {NAMES[w]}", "ours": o, "peer": b, "unit": "s", "ratio": b / o,
                     "target": 0.95, "met": b / o >= 0.95})
        print(f"  {NAMES[w]:<52} base {b * 1e3:9.2f} ms  ours {o * 1e3:9.2f} ms  ratio {b / o:5.2f}x "
              f"{'✓' if b / o >= 0.95 else '✗'} (target: no slower, >= 0.95x within noise)")
    return rows


if __name__ == "__main__":
    main()
