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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.analysis.induction import THRESHOLD

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


@dataclass(frozen=True)
class FactorSpec:
    """One run, its corpus included (so that a worker anywhere can train it)."""
    run: str
    steps: int
    seed: int = 1337
    text: str = field(default="", repr=False, compare=False)


def copy_measures(model, tok, probe, val_ids=None) -> dict:
    """``bench.induction_text``'s numbers for one set of weights: natural text written twice (second copy / first,
    and the second copy with the best induction head switched off), the random probe's best stripe and second /
    first, and with ``val_ids`` the held-out loss and bits per character."""
    from core.analysis.induction import head_scores, model_probe
    from core.analysis.interventions import copy_losses
    from core.analysis.text_probe import text_copy_losses
    from core.training.train_data import held_out_score

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
    from core.analysis.text_probe import text_probe, token_span

    cpt = len(tok.decode(val_ids.tolist())) / len(val_ids)
    return text_probe(val_ids, n_ctx, token_span(tok, chars_per_token=cpt))


def run_settings(f: Factor, steps: int, seed: int = 1337):
    """(the model's shape without its vocabulary, the TrainConfig) of run ``f``: the base recipe with its changes."""
    from core.training.recipes import TrainConfig

    train = dict(BASE_TRAIN, **f.train)
    recipe = train.pop("recipe", "muon")  # "adamw": that named recipe, the repeat mixture kept
    tc = TrainConfig.recipe(recipe, steps=steps, seed=seed, heads_interval=100, snapshots=0,
                            eval_interval=max(1, steps // 10), eval_batches=8, **train)
    return dict(BASE_SHAPE, **f.shape), tc


def train_factor(spec: FactorSpec) -> dict:
    """Train one run from its seed on one thread: its runs.csv row, its heads.csv rows under "heads"."""
    import torch

    from core.analysis.induction import formation_step
    from core.nn.params import count_parameters
    from core.serve.threads import use_threads
    from core.training.trainer import Trainer

    use_threads(1)  # one thread per worker: the same kernels, so the same numbers on either engine
    torch.set_flush_denormal(True)
    f = BY_ID[spec.run]
    t0 = time.perf_counter()
    shape, tc = run_settings(f, spec.steps, spec.seed)
    tr = Trainer(spec.text, shape, tc, bpe_vocab_size=f.vocab)
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
    from core.nn.heads_csv import write_heads_csv
    from core.serve.folder_files import write_atomic

    order = {f.id: i for i, f in enumerate(RUNS)}
    rows = sorted(rows, key=lambda r: order.get(r["run"], len(order)))
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
MAX_RUNS_CSV_BYTES = 2**20  # the shipped runs.csv is 6 KB


def outputs():
    """What the study writes into --out (core.training.cli_args.Outputs): runs.csv and heads/<run>.csv. A runs.csv
    is this study's when it has its columns (a scaling study's runs.csv has others)."""
    from core.training.cli_args import Outputs

    def ours(path: Path) -> bool:
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                return {"run", "factor", "steps"} <= set(next(csv.reader(fh), []))
        except (OSError, UnicodeDecodeError, csv.Error):
            return False

    heads = Outputs(PROG, "the study's heads", files=tuple((f"{f.id}.csv", None) for f in RUNS))
    return Outputs(PROG, "a study of python -m core.bpe_induction", files=(("runs.csv", ours),),
                   folders=(("heads", heads),), merges=True)


def read_rows(out: Path) -> list[dict]:
    """The rows of ``out``/runs.csv ([] when there is none); ValueError, in words, for a file that is not one."""
    path = out / "runs.csv"
    if not path.is_file():
        return []
    try:
        if path.stat().st_size > MAX_RUNS_CSV_BYTES:
            raise ValueError(f"{path} is larger than {MAX_RUNS_CSV_BYTES // 2**20} MiB")
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path} cannot be read ({type(e).__name__})") from None
    if rows and not {"run", "steps"} <= set(rows[0]):
        raise ValueError(f"{path} is not this study's runs.csv")
    return rows


def rows_to_keep(out: Path, steps: int, chosen: list[str]) -> list[dict]:
    """The rows of the study in ``out`` that a session running ``chosen`` keeps (as core.variants merges): every
    other run. ValueError for a study of runs of another length: one table compares runs trained alike, and
    dropping its rows silently lost the shipped study (19 runs became 1)."""
    rows = read_rows(out)
    other = sorted({str(r.get("steps")) for r in rows} - {str(steps)})
    if other:
        raise ValueError(f"--out {out} holds a study of {', '.join(other)} steps a run; --steps {steps} would put runs "
                         "of different lengths in one table: give its --steps to add or replace runs in it")
    return [r for r in rows if r["run"] not in chosen]


def _refuse(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    from core.training.cli_args import OneLineParser, out_problem, workers_problem
    from core.data.corpus import read_text_file, shakespeare_path
    from core.training.study_engines import ENGINES, make_engine
    from core.training.study_grid import StudyError
    from core.training.train_data import min_corpus_chars

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=None, help=f"steps of every run, 1 to {MAX_STEPS:,} (default 3000)")
    p.add_argument("--out", required=True, help="the study's folder (no default: bench/results/bpe-induction is the "
                   "shipped study). A study there of the same --steps is merged into: the runs named replace their "
                   "rows, the others stay; one of other steps, or a folder holding other files, is refused unless "
                   "--overwrite")
    p.add_argument("--only", default=None, help="comma-separated run ids (default: all): " + ", ".join(BY_ID))
    p.add_argument("--engine", choices=ENGINES, default=None, help="default local")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--corpus", default=None, help="the text to train on (default: Tiny Shakespeare)")
    p.add_argument("--overwrite", action="store_true", help="start the study in --out afresh: only the runs made now "
                   "are in its table (its own files only: every other file there stays as it is)")
    p.add_argument("--table", action="store_true", help="print the markdown table of the study in --out; train nothing")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.table:
        training = [f"--{k}" for k in ("steps", "only", "engine", "workers", "corpus") if getattr(args, k) is not None]
        if training or args.overwrite:
            return _refuse(f"--table trains nothing and writes nothing: {(training or ['--overwrite'])[0]} does "
                           "nothing with it")
        try:
            rows = read_rows(out)
        except ValueError as e:
            return _refuse(str(e))
        if not rows:
            return _refuse(f"no study in {args.out} (runs.csv is missing or empty)")
        print(render(rows, int(rows[0]["steps"])), end="")
        return 0
    steps = 3000 if args.steps is None else args.steps
    chosen = list(dict.fromkeys(s for s in (args.only or "").split(",") if s))  # a run named twice trains once
    unknown = [s for s in chosen if s not in BY_ID]
    if unknown:
        return _refuse(f"unknown run {', '.join(unknown)} (choose from {', '.join(BY_ID)})")
    if args.only and not chosen:  # "--only ," named nothing: not "every run", hours of CPU
        return _refuse(f"--only names no run; choose from {', '.join(BY_ID)}, or leave it out for all")
    chosen = chosen or list(BY_ID)
    if not 1 <= steps <= MAX_STEPS:
        return _refuse(f"--steps must be 1 to {MAX_STEPS:,} (got {steps:,})")
    problem = workers_problem(args.workers) or out_problem(out, outputs(), args.overwrite, inputs=[args.corpus])
    if problem:
        return _refuse(problem)
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        return _refuse("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
    try:
        text = read_text_file(corpus)
    except (OSError, ValueError) as e:
        return _refuse(f"cannot read the corpus: {e}")
    need = min_corpus_chars(BASE_SHAPE["n_ctx"])  # a token is a character at least: fewer cannot fill a window
    if len(text) < need:  # here, not as a traceback from every worker
        return _refuse(f"--corpus {corpus} is too short: {len(text):,} characters, and a run's {BASE_SHAPE['n_ctx']}-"
                       f"token window needs at least {need:,} for the training and held-out parts")
    try:  # before any run: the study there is merged into, or refused, never lost to a run of one factor
        kept = [] if args.overwrite else rows_to_keep(out, steps, chosen)
    except ValueError as e:
        return _refuse(f"{e}; or --overwrite to start the study afresh")
    specs = [FactorSpec(run, steps, text=text) for run in chosen]
    # in the order asked for: a free worker takes the next (d128 takes about five times a base run)
    rows = list(kept)
    try:
        engine = make_engine(args.engine or "local", args.workers, task=train_factor)
        engine.check()
        for row in engine.run(specs, lambda: False):
            rows.append(row)
            write_results(out, rows)  # after every run: a study cut short keeps what finished
            if args.overwrite:  # the old table is gone now: so are the heads of its runs not made again
                for f in RUNS:
                    if f.id not in {r["run"] for r in rows}:
                        (out / "heads" / f"{f.id}.csv").unlink(missing_ok=True)
            print(json.dumps({k: v for k, v in row.items() if k != "heads"}), flush=True)
    except StudyError as e:  # Ray missing or unreachable, a worker killed: in words
        return _refuse(f"{e} ({len(rows) - len(kept)} runs written to {out})")
    return 0


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
