"""Why no induction head forms in the sub-word model: short runs that each change one thing from the shipped BPE
recipe, and what each does to the circuit and to plain-text loss. ``python -m core.bpe_induction`` runs them.

    python -m core.bpe_induction --steps 3000 --out DIR [--only base,h2] [--engine local|ray] [--overwrite]

Every run has the same budget (steps of batch 32), seed and corpus; it learns its own byte-level BPE from the training
part. For each it records the best stripe seen on the random-token probe (measured every 100 steps, as the training
log does), the step it first reached 0.30, and at the end the natural-text measure of ``bench.induction_text``
(held-out spans written twice: second copy / first), the random probe's second copy / first, and bits per character
on the held-out 10%. Writes runs.csv, heads/<id>.csv and the table bench/results/bpe-induction.md reads from.
"""
from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.analysis.induction import THRESHOLD, formation_step, head_scores, model_probe
from core.analysis.interventions import copy_losses
from core.analysis.text_probe import text_copy_losses, text_probe, token_span
from core.nn.heads_csv import write_heads_csv
from core.nn.params import count_parameters
from core.serve.folder_files import write_atomic
from core.serve.threads import use_threads
from core.training.cli_args import Outputs, study_parser, study_problem
from core.training.recipes import TrainConfig
from core.training.study_table import TableSpec, TableStudy
from core.training import trainer  # as a module: Trainer is looked up at each run (tests replace it)
from core.training.train_data import held_out_score

# the BPE recipe shipped before issue 43 (assets/models/shakespeare-bpe then): what every run starts from
BASE_SHAPE = dict(n_ctx=128, d_model=64, n_heads=4, n_layers=2, d_ff=256)
BASE_VOCAB = 1024
BASE_TRAIN = dict(repeat_first_steps=2000, repeat_fraction=0.5, repeat_random_share=0.5, repeat_min_span=20,
                  repeat_max_span=50)
# the shipped model's recipe since issue 43 (assets/models/shakespeare-bpe): the base with what the study found, the
# token pool for as long as every row holds a span, and half the peak rates (they overfit less over 7,000 steps)
SHIPPED_CHANGES = dict(steps=7000, lr=3e-3, muon_lr=0.01, repeat_first_steps=3000, repeat_pool=64,
                       repeat_pool_steps=3000)
FIELDS = ("run", "factor", "title", "vocab", "d_model", "n_heads", "d_head", "mlp", "params", "steps", "seconds",
          "best_stripe", "best_stripe_step", "formed_at", "final_stripe", "best_head", "text_first", "text_second",
          "text_ratio", "text_second_off", "random_ratio", "val_loss", "bits_per_char", "chars_per_token")


@dataclass(frozen=True)
class Factor:
    id: str
    factor: str          # which of the factors it changes
    title: str           # what was changed, in words
    shape: dict = field(default_factory=dict)   # ModelConfig fields set away from BASE_SHAPE
    train: dict = field(default_factory=dict)   # TrainConfig fields set away from BASE_TRAIN and the muon recipe
    vocab: int = BASE_VOCAB


RUNS = [
    Factor("base", "none", "the recipe shipped before issue 43: d=64, h=4 (heads 16 wide), 1,024 tokens"),
    Factor("h2", "head width", "h=2: heads 32 wide (same parameters)", shape=dict(n_heads=2)),
    Factor("h1", "head width", "h=1: one head 64 wide (same parameters)", shape=dict(n_heads=1)),
    Factor("d128", "head width", "d=128, h=4: heads 32 wide, 4x the block parameters",
           shape=dict(d_model=128, d_ff=512)),
    Factor("v256", "vocabulary", "256 tokens (the bytes: no merges)", vocab=256),
    Factor("v512", "vocabulary", "512 tokens", vocab=512),
    Factor("span-short", "span length", "repeated spans of 5-15 tokens", train=dict(repeat_min_span=5,
                                                                                  repeat_max_span=15)),
    Factor("span-long", "span length", "repeated spans of 40-64 tokens", train=dict(repeat_min_span=40,
                                                                                  repeat_max_span=64)),
    Factor("all-rows", "mixture share", "every row holds a repeat for the whole run",
           train=dict(repeat_first_steps=3000, repeat_fraction=1.0)),
    Factor("random-only", "mixture share", "every repeated span random tokens (none of the row's own text)",
           train=dict(repeat_random_share=1.0)),
    Factor("no-repeats", "mixture share", "no repeat mixture at all", train=dict(repeat_first_steps=0,
                                                                               repeat_fraction=0.0)),
    Factor("pool-64", "token pool", "random tokens from the 64 most frequent tokens (the whole run)",
           train=dict(repeat_pool=64)),
    Factor("pool-64-first", "token pool", "random tokens from the 64 most frequent for the first 2,000 steps, then all",
           train=dict(repeat_pool=64, repeat_pool_steps=2000)),
    Factor("pool-128-first", "token pool", "random tokens from the 128 most frequent for the first 2,000 steps, then all",
           train=dict(repeat_pool=128, repeat_pool_steps=2000)),
    Factor("pool-256-first", "token pool", "random tokens from the 256 most frequent for the first 2,000 steps, then all",
           train=dict(repeat_pool=256, repeat_pool_steps=2000)),
    Factor("lr-half", "learning rate", "half the peak rates (AdamW 0.003, Muon 0.01)", train=dict(lr=3e-3, muon_lr=0.01)),
    Factor("cosine", "learning rate", "cosine decay instead of warmup-stable-decay", train=dict(schedule="cosine")),
    Factor("adamw", "learning rate", "AdamW on every matrix (no Muon), its cosine recipe", train=dict(recipe="adamw")),
    Factor("attn-only", "attention only", "no MLP: attention-only blocks", shape=dict(mlp=False)),
]
BY_ID = {f.id: f for f in RUNS}


def copy_measures(model, tok, probe, val_ids=None) -> dict:
    """``bench.induction_text``'s numbers for one set of weights: natural text written twice (second copy / first,
    and the second copy with the best induction head switched off), the random probe's best stripe and second /
    first, and with ``val_ids`` the held-out loss and bits per character."""
    first, second = text_copy_losses(model, probe)
    s = head_scores(model, tokenizer=tok)
    best = s.best_head()
    _, off = text_copy_losses(model, probe, heads=[best])
    rfirst, rsecond = copy_losses(model, model_probe(model, tok))
    row = dict(text_first=first, text_second=second, text_ratio=second / first, text_second_off=off,
               best_head=f"L{best[0] + 1} H{best[1] + 1}", stripe=float(s.induction.max()),
               random_ratio=rsecond / rfirst)
    if val_ids is not None:
        v = held_out_score(model, tok, val_ids)
        row.update(val_loss=v["loss"], bits_per_char=v["bits_per_char"], unit=tok.unit,
                   chars_per_token=v["chars_per_token"])
    return row


def natural_probe(tok, val_ids, n_ctx: int):
    """The natural-text probe of ``bench.induction_text`` for a tokenizer: spans of about 40-60 characters of the
    held-out ids, in tokens by the tokenizer's characters per token there."""
    cpt = len(tok.decode(val_ids.tolist())) / len(val_ids)
    return text_probe(val_ids, n_ctx, token_span(tok, chars_per_token=cpt))


def run_settings(f: Factor, steps: int, seed: int = 1337):
    """(the model's shape without its vocabulary, the TrainConfig) of run ``f``: the base recipe with its changes."""
    train = dict(BASE_TRAIN, **f.train)
    recipe = train.pop("recipe", "muon")  # "adamw": that named recipe, the repeat mixture kept
    tc = TrainConfig.recipe(recipe, steps=steps, seed=seed, heads_interval=100, snapshots=0,
                            eval_interval=max(1, steps // 10), eval_batches=8, **train)
    return dict(BASE_SHAPE, **f.shape), tc


def train_factor(spec: TableSpec) -> dict:
    """Train one run from its seed on one thread: its runs.csv row, its heads.csv rows under "heads"."""
    use_threads(1)  # one thread per worker: the same kernels, so the same numbers on either engine
    torch.set_flush_denormal(True)
    f = BY_ID[spec.run]
    t0 = time.perf_counter()
    shape, tc = run_settings(f, spec.steps, spec.seed)
    tr = trainer.Trainer(spec.text, shape, tc, bpe_vocab_size=f.vocab)
    while not tr.done:
        tr.step()
    seconds = time.perf_counter() - t0
    model = tr.model.eval()
    rows = tr.heads.rows
    best = max(rows, key=lambda r: r["induction"])
    m = copy_measures(model, tr.tokenizer, natural_probe(tr.tokenizer, tr.val_data, model.config.n_ctx),
                      tr.val_data)
    c = model.config
    return {"run": f.id, "factor": f.factor, "title": f.title, "vocab": c.vocab_size, "d_model": c.d_model,
            "n_heads": c.n_heads, "d_head": c.d_model // c.n_heads, "mlp": c.mlp,
            "params": count_parameters(c)["total"], "steps": spec.steps, "seconds": round(seconds, 1),
            "best_stripe": round(best["induction"], 4), "best_stripe_step": best["step"],
            "formed_at": formation_step(rows, THRESHOLD), "final_stripe": round(m["stripe"], 4),
            "best_head": m["best_head"], **{k: round(m[k], 4) for k in (
                "text_first", "text_second", "text_ratio", "text_second_off", "random_ratio", "val_loss",
                "bits_per_char", "chars_per_token")},
            "heads": rows}


def write_results(out: Path, rows: list[dict]) -> None:
    """runs.csv (in RUNS order, whatever order the runs finished in) and heads/<run>.csv."""
    rows = STUDY.ordered(rows)
    table = io.StringIO()
    w = csv.DictWriter(table, FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "runs.csv", table.getvalue())
    for r in rows:
        if r.get("heads"):
            (out / "heads").mkdir(exist_ok=True)
            write_heads_csv(out / "heads" / f"{r['run']}.csv", r["heads"])


PROG = "python -m core.bpe_induction"
MAX_STEPS = 100_000


def _ours(path: Path) -> bool:
    # a runs.csv is this study's when it has its columns (a scaling study's runs.csv has others)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return {"run", "factor", "steps"} <= set(next(csv.reader(fh), []))
    except (OSError, UnicodeDecodeError, csv.Error):
        return False


class FactorStudy(TableStudy):
    """The BPE-induction study on the table-study framework: runs.csv and heads/<run>.csv."""
    prog, what, title, key, table = PROG, "run", "a study of python -m core.bpe_induction", "run", "runs.csv"
    ids = tuple(f.id for f in RUNS)
    fields = FIELDS
    steps = 3000
    max_steps = MAX_STEPS
    n_ctx = BASE_SHAPE["n_ctx"]

    def task(self):
        return train_factor  # looked up now: a test puts a stand-in in its place

    def outputs(self):
        """What the study writes into --out (core.training.cli_args.Outputs): runs.csv and heads/<run>.csv."""
        heads = Outputs(PROG, "the study's heads", files=tuple((f"{f.id}.csv", None) for f in RUNS))
        return Outputs(PROG, self.title, files=(("runs.csv", _ours),), folders=(("heads", heads),), merges=True)

    def write(self, out, rows, overwrite):
        write_results(out, rows)
        if overwrite:  # the old table is gone now: so are the heads of its runs not made again
            made = {r["run"] for r in rows}
            for f in RUNS:
                if f.id not in made:
                    (out / "heads" / f"{f.id}.csv").unlink(missing_ok=True)

    def line(self, row):
        return json.dumps({k: v for k, v in row.items() if k != "heads"})


STUDY = FactorStudy()


def main(argv=None) -> int:
    p = study_parser(PROG, __doc__.split("\n\n")[0], runs=STUDY.ids, steps=STUDY.steps, max_steps=MAX_STEPS,
                     out_help="the study's folder (no default: bench/results/bpe-induction is the shipped study). A "
                     "study there of the same --steps is merged into: the runs named replace their rows, the others "
                     "stay; one of other steps, or a folder holding other files, is refused unless --overwrite",
                     overwrite_help="start the study in --out afresh: only the runs made now are in its table (its own "
                     "files only: every other file there stays as it is)")
    p.add_argument("--table", action="store_true", help="print the markdown table of the study in --out; train nothing")
    args = p.parse_args(argv)
    if args.table:
        training = [f"--{k}" for k in ("steps", "only", "engine", "workers", "corpus") if getattr(args, k) is not None]
        if training or args.overwrite:
            return STUDY.refuse(f"--table trains nothing and writes nothing: {(training or ['--overwrite'])[0]} does "
                                "nothing with it")
        try:
            rows = STUDY.read(Path(args.out))
        except ValueError as e:
            return STUDY.refuse(str(e))
        if not rows:
            return STUDY.refuse(f"no study in {args.out} (runs.csv is missing or empty)")
        print(render(rows, int(rows[0]["steps"])), end="")
        return 0
    problem = study_problem(args, STUDY.ids, MAX_STEPS)
    if problem:
        return STUDY.refuse(problem)
    return STUDY.run(args)


def render(rows: list[dict], steps: int, verdict: str = "") -> str:
    """The markdown table of bench/results/bpe-induction.md, one line per run (rows as read back from runs.csv)."""
    def num(v, spec=".3f"):
        return "" if v in (None, "") else format(float(v), spec)

    lines = ["| run | factor | what changed | d_head | params | stripe best (step) | formed at (stripe >= 0.30) | "
             "text 2nd / 1st | random 2nd / 1st | bits / char | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        formed = r.get("formed_at")
        lines.append(f"| {r['run']} | {r['factor']} | {r['title']} | {r['d_head']} | {int(r['params']):,} | "
                     f"{num(r['best_stripe'])} ({int(r['best_stripe_step']):,}) | "
                     f"{'never' if formed in (None, '') else f'{int(formed):,}'} | {num(r['text_ratio'])} | "
                     f"{num(r['random_ratio'])} | {num(r['bits_per_char'])} | {num(r['seconds'], '.0f')} |")
    head = (f"Each run: {steps:,} steps of batch 32 (128-token windows), seed 1337, one thread, its own byte-level BPE "
            "learned from the training 90%; everything else as the BPE recipe shipped before issue 43 (Muon + AdamW, "
            "warmup-stable-decay, the repeat mixture: every row for 2,000 steps, then half the rows, spans of 20-50 "
            "tokens, half of them random tokens). Stripe: the best head's induction score on the random-token probe, "
            "measured every 100 steps; text 2nd / 1st: held-out spans written twice (bench.induction_text's measure); "
            "bits per character on the held-out 10%.")
    return "\n".join([head, "", *lines, "", verdict]).rstrip() + "\n"
