"""Issue 60's precision rows: a training run in bf16 (attention kept fp32: core.nn.model.sdpa) against the same run in
fp32, at the lecture's shape (d 64) and at d 128, on the shipped character model's corpus: step time (alternating
rounds on a fixed batch, the bench's own method) and the held-out loss both reach after the same steps from the same
weights and batches; and the precision ``Trainer(precision="auto")``'s probe chooses at each shape (it must keep
fp32 where bf16 is not faster). Target: d >= 128 at least 1.5x with the held-out loss within 0.5 %; the lecture shape
no slower than fp32 (the probe keeps fp32 if so).

    python -m bench.run --only precision [--threads 2] [--quick]
"""
from __future__ import annotations

import copy
import os
import tempfile

import torch

from core.nn.config import LECTURE
from core.nn.precision import BF16, FP32, autocast, has_bf16_units

SHAPES = {"lecture (d 64)": LECTURE.to_dict(), "d 128": {**LECTURE.to_dict(), "d_model": 128, "d_ff": 512}}


def corpus() -> str:
    """The character model's corpus (core.data.corpus); synthetic characters where it is absent (the smoke test)."""
    from core.data.corpus import shakespeare_path

    path = shakespeare_path()
    if path is not None:
        return path.read_text()[:400_000]
    g = torch.Generator().manual_seed(0)
    return "".join(chr(32 + i) for i in torch.randint(64, (40_000,), generator=g).tolist())


def trainer(shape: dict, steps: int, precision: str = FP32):
    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer

    shape = {k: v for k, v in shape.items() if k != "vocab_size"}
    tc = TrainConfig(batch_size=32, steps=steps, seed=0, eval_batches=8, heads_interval=0, snapshots=0)
    return Trainer(corpus(), shape, tc, precision=precision)


def step_times(tr, rounds: int, reps: int) -> dict:
    """Median seconds of a training step in each precision (copies of the same model; a fixed batch)."""
    from bench.run import interleaved
    from core.training.recipes import make_optimizers

    x, y = tr.next_batch()
    fns = {}
    for p in (FP32, BF16):
        model = copy.deepcopy(tr.model)
        opts = make_optimizers(model, tr.tc)

        def step(model=model, opts=opts, p=p):
            with autocast(p):
                loss = model(x, targets=y).loss
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for o in opts:
                o.step()
        fns[p] = step
    return interleaved(fns, rounds=rounds, reps=reps)


def held_out_after(shape: dict, steps: int, precision: str) -> float:
    tr = trainer(shape, steps)
    tr.precision = precision  # the same weights and batches, one precision imposed (the probe is measured apart)
    for _ in range(steps):
        tr.step()
    return tr.evaluate()["val_loss"]


def main(quick: bool = False, record=None):
    if record is None:
        from bench.run import record
    if not has_bf16_units():
        print("\n(precision rows skipped: this CPU has no bf16 units, so bf16 is never chosen)")
        return
    steps = 20 if quick else 150
    load = "load %.2f %.2f %.2f" % os.getloadavg()
    print(f"\nTraining precision: bf16 products, attention fp32, vs fp32; batch 32, AdamW, "
          f"{torch.get_num_threads()} threads; held-out loss after {steps} steps")
    for name, shape in SHAPES.items():
        t = step_times(trainer(shape, steps), rounds=2 if quick else 5, reps=2 if quick else 5)
        l32, l16 = held_out_after(shape, steps, FP32), held_out_after(shape, steps, BF16)
        with tempfile.TemporaryDirectory() as tmp:  # a fresh cache: the probe runs
            old = os.environ.get("TE_MODELS_DIR")
            os.environ["TE_MODELS_DIR"] = tmp
            try:
                chosen = trainer(shape, steps, precision="auto").precision_probe
            finally:
                os.environ.pop("TE_MODELS_DIR") if old is None else os.environ.__setitem__("TE_MODELS_DIR", old)
        record(f"training step, {name}: bf16 (attention fp32) vs fp32", 1 / t[BF16], 1 / t[FP32], "steps/s",
               target=1.5 if shape["d_model"] >= 128 else None,
               note=f"(held-out loss bf16 {l16:.4f} vs fp32 {l32:.4f}, {100 * (l16 - l32) / l32:+.2f} %; the probe "
                    f"chose {chosen.get('precision')} ({chosen.get('fp32_s')} s vs {chosen.get('bf16_s')} s); {load})")
