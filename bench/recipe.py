"""Training recipes compared in one run: the usual AdamW recipe against the Muon recipe (core.training.trainer.RECIPES).

    python -m bench.recipe                      # 1,200 steps, seeds 1337 1338 1339, target 1.80
    python -m bench.recipe --quick              # one seed
    python -m bench.recipe --candidate "muon:muon_lr=0.03,cooldown_frac=0.3"   # try a variant

Every recipe trains the lecture's model on Tiny Shakespeare from the same seed (same initial weights, same
batches). The runs are interleaved, a chunk of steps each in turn, so that whatever else the machine does
slows them alike. Every --eval-every steps each model's validation loss is measured over all full windows
of the held-out 10% (the shipped model's measure; this time is excluded from the wall clock). Reported per
recipe and seed: the first evaluated step at or below --target and the training wall time to it, the final
validation loss, and the mean time of one step (the optimiser's overhead is the ratio of step times).
Ratios are the baseline's (the first recipe) over the candidate's: above 1 means the candidate is faster.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.data.corpus import read_text_file, shakespeare_path  # noqa: E402
from core.nn.config import LECTURE  # noqa: E402
from core.serve.threads import training_threads, use_threads  # noqa: E402
from core.training.recipes import TrainConfig  # noqa: E402
from core.training.trainer import Trainer  # noqa: E402
from core.training.train_data import windowed_loss  # noqa: E402


def parse_candidate(text: str) -> tuple[str, str, dict]:
    """'muon:muon_lr=0.03,warmup=50' -> (label, recipe, overrides)."""
    recipe, _, rest = text.partition(":")
    overrides = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        default = getattr(TrainConfig(), key.strip())
        value = value.strip()
        overrides[key.strip()] = (None if value == "None" else type(default)(value) if default is not None
                                  else int(value))
    return text, recipe, overrides


def run_seed(text: str, candidates, steps: int, seed: int, target: float, eval_every: int, chunk: int) -> list[dict]:
    trainers = []
    for label, recipe, overrides in candidates:
        tc = TrainConfig.recipe(recipe, steps=steps, seed=seed, **overrides)
        trainers.append({"label": label, "tr": Trainer(text, LECTURE.to_dict(), tc), "wall": 0.0, "hit": None,
                         "curve": [], "step_times": []})
    while not all(t["tr"].done for t in trainers):
        for t in trainers:  # interleaved: a chunk of steps each in turn
            tr = t["tr"]
            for _ in range(chunk):
                if tr.done:
                    break
                t0 = time.perf_counter()
                tr.step()
                dt = time.perf_counter() - t0
                t["wall"] += dt
                t["step_times"].append(dt)
                if tr.step_num % eval_every == 0 or tr.done:
                    val = windowed_loss(tr.model, tr.val_data)
                    t["curve"].append((tr.step_num, val))
                    if t["hit"] is None and val <= target:
                        t["hit"] = (tr.step_num, t["wall"])
    return [{"label": t["label"], "seed": seed, "steps_to_target": t["hit"][0] if t["hit"] else None,
             "wall_to_target_s": t["hit"][1] if t["hit"] else None, "final_val": t["curve"][-1][1],
             "step_ms": 1000 * statistics.median(t["step_times"]), "wall_s": t["wall"], "curve": t["curve"]}
            for t in trainers]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.recipe", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", help="Tiny Shakespeare (default: $TE_CORPUS or ../shared/data)")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338, 1339])
    p.add_argument("--target", type=float, default=1.80)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--chunk", type=int, default=25, help="steps each run takes in turn")
    p.add_argument("--baseline", default="adamw", help="recipe[:field=value,...] everything is compared with")
    p.add_argument("--candidate", action="append", help="recipe[:field=value,...] (repeatable; default: muon)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: half the cores, as a run)")
    p.add_argument("--quick", action="store_true", help="the first seed only")
    p.add_argument("--json", help="also write every result (with curves) to this file")
    args = p.parse_args(argv)
    use_threads(args.threads or training_threads())
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        p.error("Tiny Shakespeare not found: pass --corpus or set TE_CORPUS")
    text = read_text_file(corpus)
    candidates = [parse_candidate(c) for c in [args.baseline] + (args.candidate or ["muon"])]
    seeds = args.seeds[:1] if args.quick else args.seeds
    print(f"{len(candidates)} recipes x {len(seeds)} seeds, {args.steps} steps, target {args.target} "
          f"(validation over every full window of the held-out 10%), {torch.get_num_threads()} threads")
    results = []
    for seed in seeds:
        rows = run_seed(text, candidates, args.steps, seed, args.target, args.eval_every, args.chunk)
        results += rows
        base = rows[0]
        for r in rows:
            hit = (f"{r['steps_to_target']:>5} steps, {r['wall_to_target_s']:6.1f} s" if r["steps_to_target"]
                   else "   not reached     ")
            ratio = ""
            if r is not base and r["steps_to_target"] and base["steps_to_target"]:
                ratio = (f"  {base['steps_to_target'] / r['steps_to_target']:.2f}x fewer steps, "
                         f"{base['wall_to_target_s'] / r['wall_to_target_s']:.2f}x less wall")
            print(f"seed {seed}  {r['label']:<45} to {args.target}: {hit}  final {r['final_val']:.4f}  "
                  f"step {r['step_ms']:.1f} ms ({r['step_ms'] / base['step_ms'] - 1:+.1%}){ratio}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
