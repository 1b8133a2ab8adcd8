"""Seconds per 1,000 steps of a variant of the study (core.training.variants) with and without flushing subnormal
floats to zero (torch.set_flush_denormal), on one thread: the deep stacks without residual or LayerNorm carry tiny
activations and gradients, and arithmetic on subnormal floats is many times slower on x86 CPUs.

    nice -n 10 python -m bench.denormals [--variant deep-L6-bare] [--steps 300]

Each setting trains the variant from its seed (the study's recipe and batches) for --steps steps, timed per segment of
100 steps; the rows go to stdout (and the caller copies them into bench/results/denormals.md).
"""
from __future__ import annotations

import argparse
import time


def time_steps(variant: str, steps: int, flush: bool, text: str) -> list[float]:
    import torch

    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer
    from core.training.variants import BY_ID, model_shape

    torch.set_num_threads(1)
    torch.set_flush_denormal(flush)
    try:
        # the study's settings (core.training.variants.train_variant), the study's 2,000 steps for the schedule
        tc = TrainConfig.recipe("muon", steps=2000, seed=1337, heads_interval=0, snapshots=0, eval_interval=100,
                                eval_batches=8)
        tr = Trainer(text, model_shape(BY_ID[variant]), tc)
        out, t0 = [], time.perf_counter()
        for i in range(1, steps + 1):
            tr.step()
            if i % 100 == 0:
                out.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
        return out
    finally:
        torch.set_flush_denormal(False)


def main(argv=None) -> int:
    from core.data.corpus import read_text_file, shakespeare_path

    p = argparse.ArgumentParser(prog="python -m bench.denormals")
    p.add_argument("--variant", default="deep-L6-bare")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--corpus", default=None)
    args = p.parse_args(argv)
    text = read_text_file(args.corpus or shakespeare_path())
    for flush in (False, True):
        segs = time_steps(args.variant, args.steps, flush, text)
        per_1000 = 1000 * sum(segs) / (100 * len(segs))
        print(f"{args.variant} flush_denormal={flush}: {per_1000:.1f} s per 1,000 steps "
              f"(segments of 100 steps: {', '.join(f'{s:.1f}' for s in segs)} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
