"""Search for a training setup in which the lecture's model grows an induction head.

    python -m bench.induction --label adamw-f50 --fraction 0.5 --steps 3000
    python -m bench.induction --report assets/models/shakespeare-induction   # the ablation target

Trains on Tiny Shakespeare with a share of rows holding a repeated span (core.analysis.induction.add_repeats), and
every --every steps measures each head on the fixed probe (8 rows of 50 distinct random characters written
twice): the best induction score, the best previous-token score and the in-context gain. Appends the curve
to bench/results/induction-search.csv and prints one line per measurement.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.data.corpus import read_text_file, shakespeare_path  # noqa: E402
from core.analysis.induction import HeadRecorder, add_repeats  # noqa: E402
from core.serve.threads import use_threads  # noqa: E402
from core.training.recipes import TrainConfig  # noqa: E402
from core.training.trainer import Trainer  # noqa: E402
from core.training.train_data import get_windows, windowed_loss  # noqa: E402


class SearchTrainer(Trainer):
    def __init__(self, *a, schedule=None, span=(8, 40), random_share=1.0, synthetic_until=0, **k):
        super().__init__(*a, **k)
        self.schedule = schedule
        self.span = span
        self.random_share = random_share
        self.synthetic_until = synthetic_until

    def next_batch(self):
        g = self.batch_gen
        w = get_windows(self.train_data, self.config.n_ctx, self.tc.batch_size, g)  # (B, n+1)
        if self.step_num < self.synthetic_until:  # rows of pure random characters
            w = torch.randint(self.config.vocab_size, w.shape, generator=g)
        frac = self.schedule(self.step_num)
        w = add_repeats(w, frac, g, self.config.vocab_size, *self.span, random_share=self.random_share)
        return w[:, :-1], w[:, 1:]


def report(folder: str, mode: str = "zero") -> dict:
    """The issue's ablation target on a saved model: second-copy loss on the probe with the best induction head
    switched off, against every other head of its layer switched off alone (and the same for the two best)."""
    from itertools import combinations

    from core.analysis.induction import head_scores, probe_period, repeat_probe
    from core.analysis.interventions import copy_losses
    from core.nn.checkpoint import load_checkpoint

    model, _ = load_checkpoint(folder)
    c = model.config
    probe = repeat_probe(c.vocab_size, period=probe_period(c.n_ctx, c.vocab_size))
    s = head_scores(model, probe)
    layer, head = s.best_head()
    first, second = copy_losses(model, probe)
    print(f"{folder}: best induction head L{layer}H{head} score {s.induction[layer, head]:.3f}; "
          f"probe loss first copy {first:.3f}, second copy {second:.3f} (ratio {second / first:.3f})")
    out = {"best": (layer, head), "score": float(s.induction[layer, head]), "first": first, "second": second}
    for k in (1, 2):
        ranked = sorted(((layer, h) for h in range(c.n_heads)), key=lambda lh: -s.induction[lh])
        target = ranked[:k]
        rise = copy_losses(model, probe, target, mode)[1] - second
        others = [copy_losses(model, probe, list(g), mode)[1] - second
                  for g in combinations([lh for lh in ranked if lh not in target], k)]
        worst_other = max(others) if others else float("nan")
        print(f"  {mode} ablation of {k} head(s) {target}: second-copy loss +{rise:.3f} nats; other sets of {k} in "
              f"layer {layer}: at most {worst_other:+.3f}"
              + (f" (ratio {rise / worst_other:.1f}x)" if worst_other > 0 else " (none raises it)"))
        out[f"rise_{k}"], out[f"other_{k}"] = rise, worst_other
    return out


def main(argv=None):
    if argv is None and "--report" in sys.argv:
        i = sys.argv.index("--report")
        for mode in ("zero", "mean"):
            report(sys.argv[i + 1], mode)
        return
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--recipe", default="muon")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--fraction", type=float, default=0.5, help="share of rows with a repeated span")
    p.add_argument("--early-fraction", type=float, default=None, help="share during the first --early-steps")
    p.add_argument("--early-steps", type=int, default=0)
    p.add_argument("--synthetic-until", type=int, default=0, help="rows of random characters before this step")
    p.add_argument("--random-share", type=float, default=1.0)
    p.add_argument("--span", type=int, nargs=2, default=(8, 40))
    p.add_argument("--n-ctx", type=int, default=128)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", nargs="*", default=[], help="TrainConfig overrides key=value")
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args(argv)
    use_threads(a.threads)
    overrides = {}
    for kv in a.set:
        k, v = kv.split("=")
        d = getattr(TrainConfig(), k)
        overrides[k] = type(d)(v) if d is not None else int(v)
    tc = TrainConfig.recipe(a.recipe, steps=a.steps, seed=a.seed, **overrides)
    early = a.fraction if a.early_fraction is None else a.early_fraction
    schedule = lambda s: early if s < a.early_steps else a.fraction  # noqa: E731
    text = read_text_file(shakespeare_path())
    t = SearchTrainer(text, dict(n_ctx=a.n_ctx), tc, schedule=schedule, span=tuple(a.span),
                      random_share=a.random_share, synthetic_until=a.synthetic_until)
    rec = HeadRecorder(t.model, every=a.every)
    out = ROOT / "bench" / "results" / "induction-search.csv"
    new = not out.exists()
    t0 = time.perf_counter()
    losses = []
    with open(out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["label", "args", "step", "wall_s", "train_loss", "best_induction", "best_head",
                        "best_previous_token", "first_copy_loss", "second_copy_loss", "val_loss"])
        while not t.done:
            losses.append(t.step()["loss"])
            if rec.due(t.step_num) or t.done:
                s = rec.record(t.model, t.step_num)
                val = windowed_loss(t.model, t.val_data) if t.done or t.step_num % (10 * a.every) == 0 else None
                row = [a.label, " ".join(argv or sys.argv[1:]), t.step_num, round(time.perf_counter() - t0, 1),
                       round(sum(losses[-a.every:]) / len(losses[-a.every:]), 4), round(float(s.induction.max()), 4),
                       "L%dH%d" % s.best_head(), round(float(s.previous_token.max()), 4),
                       round(s.first_copy_loss, 3), round(s.second_copy_loss, 3),
                       None if val is None else round(val, 4)]
                w.writerow(row)
                f.flush()
                print(*row[2:], flush=True)


if __name__ == "__main__":
    main()
