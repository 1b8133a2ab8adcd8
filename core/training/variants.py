"""The lecture's transformer taken apart: one run per variant (a piece removed, or the heads or depth changed), same
data, seed, steps and recipe, and what each costs on held-out text. The "Why each piece" page reads the result.

    python -m core.variants --steps 2000 --out assets/variants [--only lecture,no-mlp] [--engine local|ray]

Writes into --out: variants.csv (one row per variant), curves.csv (each run's evaluations), and models/<id>/ for
the variants a page opens (the cheating model's attention, the leaking mask, the bag of tokens). Runs go through
the scaling study's engines (core.training.study_engines): a local process pool, or Ray. A study already in --out is
merged into (the variants run replace their rows, the others stay), provided its runs have the same steps and corpus;
anything else is refused before any run unless --overwrite replaces the whole study.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

VARIANT_FIELDS = ("variant", "title", "removed", "d_model", "n_heads", "n_layers", "params", "steps", "seconds",
                  "train_loss", "val_loss", "causal_val_loss", "sample")
CURVE_FIELDS = ("variant", "step", "train_loss", "val_loss")
KEEP_WEIGHTS = ("lecture", "no-mask", "mask-after-softmax", "no-positions")  # the ones a page's view opens
SAMPLE_PROMPT = "KING:\n"
DEEP = dict(d_model=32, n_heads=4)  # the deep stacks: narrow, so that twelve blocks train in minutes
BARE = dict(residual=False, norm="none")
PROG = "python -m core.variants"
MAX_STEPS = 100_000  # per run: the shipped 2,000-step study took about 1.8 CPU-hours, so this is already days of CPU


@dataclass(frozen=True)
class Variant:
    id: str
    title: str       # what was changed, in words
    switches: dict   # core.nn.model.ModelConfig fields set away from the lecture's (or its shape changed)


VARIANTS = [
    Variant("lecture", "the lecture's model (d=64, h=4, L=2)", {}),
    *(Variant(f"h{h}", f"{h} head{'s' if h > 1 else ''} of width {64 // h}", dict(n_heads=h)) for h in (1, 2, 8, 16)),
    Variant("no-w_o", "no W_O: the heads are concatenated, not mixed", dict(w_o=False)),
    Variant("no-mlp", "no MLP: attention only", dict(mlp=False)),
    # as many parameters as the lecture's model with attention alone: 4d^2 + 2d per block at d = 112 is 50,400
    Variant("no-mlp-wide", "no MLP, wider (d=112): as many parameters, attention only", dict(mlp=False, d_model=112)),
    Variant("no-residual", "no residual connections", dict(residual=False)),
    Variant("no-layernorm", "no LayerNorm", dict(norm="none")),
    Variant("post-norm", "LayerNorm after the residual sum (post-norm)", dict(norm="post")),
    Variant("no-positions", "no position embedding", dict(positions=False)),
    Variant("mask-after-softmax", "mask applied after the softmax", dict(mask="after_softmax")),
    Variant("no-mask", "no causal mask", dict(mask="none")),
    *(Variant(f"deep-L{L}", f"d=32, L={L}, with residual and LayerNorm", dict(DEEP, n_layers=L)) for L in (2, 6, 12)),
    *(Variant(f"deep-L{L}-bare", f"d=32, L={L}, without residual or LayerNorm", dict(DEEP, n_layers=L, **BARE))
      for L in (2, 6, 12)),
    Variant("deep-L12-post", "d=32, L=12, post-norm", dict(DEEP, n_layers=12, norm="post")),
]
BY_ID = {v.id: v for v in VARIANTS}


@dataclass(frozen=True)
class VariantSpec:
    """One run, the corpus included (so that a worker anywhere can train it), as the study's RunSpec."""
    variant: str
    steps: int
    seed: int = 1337
    recipe: str = "muon"
    keep_weights: str = ""  # a folder to save the trained model in ("" for none)
    text: str = field(default="", repr=False, compare=False)
    corpus: str = "tinyshakespeare.txt"  # the corpus file's name, for the kept models' cards


def model_shape(v: Variant) -> dict:
    """The model dict a Trainer takes (no vocabulary: the tokenizer decides it)."""
    return dict(dict(n_ctx=128, d_model=64, n_heads=4, n_layers=2), **v.switches)


def train_variant(spec: VariantSpec) -> dict:
    """Train one variant from its seed on one thread: its variants.csv row, with its curve under "curve"."""
    import torch

    from core.analysis.sampling import generate
    from core.nn.model import Transformer
    from core.nn.params import count_parameters
    from core.serve.threads import use_threads
    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer, training_record
    from core.training.train_data import windowed_loss

    use_threads(1)  # one thread per worker, as in a scaling study: the same kernels, so the same numbers
    # subnormal floats (below 1.2e-38) flushed to zero: the deep stacks without residual or LayerNorm carry such tiny
    # activations and gradients, and x86 arithmetic on them is many times slower (bench/denormals.py: deep-L6-bare
    # about twice as fast per step). Runs shipped before this line (all but deep-L6-bare) trained without it.
    torch.set_flush_denormal(True)
    v = BY_ID[spec.variant]
    t0 = time.perf_counter()
    tc = TrainConfig.recipe(spec.recipe, steps=spec.steps, seed=spec.seed, heads_interval=0, snapshots=0,
                            eval_interval=max(1, spec.steps // 20), eval_batches=8)
    tr = Trainer(spec.text, model_shape(v), tc)
    tr.log_eval()
    while not tr.done:
        tr.step()
        if tr.step_num % tc.eval_interval == 0 or tr.done:
            tr.log_eval()
    seconds = time.perf_counter() - t0
    model = tr.model.eval()
    val = windowed_loss(model, tr.val_data)  # as trained: a variant without the mask also reads the future here
    causal = val
    if model.config.mask != "scores":
        # how it must generate: the same weights under the causal mask, no future to read
        honest = Transformer(replace(model.config, mask="scores"))
        honest.load_state_dict(model.state_dict())
        causal = windowed_loss(honest.eval(), tr.val_data)
    ids = tr.tokenizer.encode(SAMPLE_PROMPT, errors="drop") or [0]  # a corpus without these characters: from id 0
    sample = tr.tokenizer.decode(generate(model, ids, 120, 0.0).tolist()[len(ids):])  # greedy: the model's best
    if spec.keep_weights:
        from core.training.cli_args import save_model

        # the model's own files replaced, anything else kept beside it (an SAE trained on it) stays
        save_model(spec.keep_weights, model, tr.tokenizer,
                   training_record(tr, spec.corpus, len(spec.text), seconds, source=f"core.variants: {v.title}"),
                   tr.log, overwrite=True)
    return {"variant": v.id, "title": v.title, "removed": ", ".join(f"{k}={val!r}" for k, val in v.switches.items()),
            "d_model": model.config.d_model, "n_heads": model.config.n_heads, "n_layers": model.config.n_layers,
            "params": count_parameters(model.config)["total"], "steps": spec.steps, "seconds": round(seconds, 1),
            "train_loss": round(windowed_loss(model, tr.train_data[: len(tr.val_data)]), 4),
            "val_loss": round(val, 4), "causal_val_loss": round(causal, 4), "sample": sample,
            "curve": [{"variant": v.id, "step": r["step"], "train_loss": round(r["train_loss"], 4),
                       "val_loss": round(r["val_loss"], 4)} for r in tr.log]}


def write_results(out: Path, rows: list[dict]) -> None:
    """variants.csv and curves.csv from the rows, in VARIANTS order (whatever order the runs finished in)."""
    from core.serve.folder_files import write_atomic

    order = {v.id: i for i, v in enumerate(VARIANTS)}
    rows = sorted(rows, key=lambda r: order.get(r["variant"], len(order)))
    table, curves = io.StringIO(), io.StringIO()
    w = csv.DictWriter(table, VARIANT_FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    w = csv.DictWriter(curves, CURVE_FIELDS)
    w.writeheader()
    for r in rows:
        w.writerows(r["curve"])
    # rewritten after every run: each file is replaced whole (temporary file, os.replace), so the page, or a study
    # killed mid-write, never sees half a table
    write_atomic(out / "variants.csv", table.getvalue())
    write_atomic(out / "curves.csv", curves.getvalue())


MAX_STUDY_CSV_BYTES = 2 * 2**20  # the shipped files are a few KB (core.views.variants_view reads no more either)


def _read_rows(path: Path, fields: tuple[str, ...]) -> list[dict]:
    """The rows of one of the study's CSV files; ValueError, in words, for a file that is not one."""
    try:
        if path.stat().st_size > MAX_STUDY_CSV_BYTES:
            raise ValueError(f"{path.name} is larger than {MAX_STUDY_CSV_BYTES // 2**20} MiB")
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path.name} cannot be read ({type(e).__name__})") from None
    if not set(fields) <= set(reader.fieldnames or ()):
        raise ValueError(f"{path.name} is not a variant study's (its columns are {reader.fieldnames})")
    return rows


def rows_to_keep(out: Path, steps: int, corpus: str, chars: int, chosen: list[str]) -> list[dict]:
    """The rows (each with its "curve") of the study already in ``out`` that this session keeps: every variant not
    in ``chosen``, which the new runs replace. [] for a folder with no study. ValueError, saying why, for a study
    these runs cannot join: one that cannot be read, runs of another length (the table compares variants trained
    alike), or kept models trained on another corpus."""
    table = out / "variants.csv"
    if not table.exists():
        return []
    rows = _read_rows(table, VARIANT_FIELDS)
    lengths = {r.get("steps") for r in rows}
    if lengths - {str(steps)}:
        other = ", ".join(sorted(str(v) for v in lengths - {str(steps)}))
        raise ValueError(f"--out {out} holds a study of {other} steps a run; --steps {steps} would put runs of "
                         "different lengths in one table: give its --steps to add or replace variants in it")
    for folder in sorted((out / "models").glob("*/config.json")):
        try:
            training = json.loads(folder.read_text(encoding="utf-8")).get("training", {})
        except (OSError, ValueError, AttributeError):
            continue  # a kept model that cannot be read says nothing about the corpus; the page names it
        if (training.get("corpus"), training.get("corpus_chars")) not in ((corpus, chars), (None, None)):
            raise ValueError(f"--out {out} holds runs on {training.get('corpus')} ({training.get('corpus_chars')} "
                             f"characters), not on {corpus} ({chars:,})")
    curves: dict[str, list[dict]] = {}
    if (out / "curves.csv").exists():
        for point in _read_rows(out / "curves.csv", CURVE_FIELDS):
            curves.setdefault(point["variant"], []).append({k: point[k] for k in CURVE_FIELDS})
    return [{**r, "curve": curves.get(r["variant"], [])} for r in rows if r["variant"] not in chosen]


def outputs():
    """What the study writes into --out (core.training.cli_args.Outputs): its two tables and its kept models."""
    from core.training.cli_args import MODEL_BY_NAME, Outputs

    models = Outputs(PROG, "a variant study", folders=tuple((vid, MODEL_BY_NAME) for vid in KEEP_WEIGHTS))
    return Outputs(PROG, "a variant study", files=(("variants.csv", None), ("curves.csv", None)),
                   folders=(("models", models),), merges=True)


def _bad_input(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return 2  # as argparse's own errors (and core.study's)


def main(argv=None) -> int:
    from core.training.cli_args import MODEL_BY_NAME, OneLineParser, out_problem, remove_own, workers_problem
    from core.data.corpus import read_text_file, shakespeare_path
    from core.training.train_data import min_corpus_chars
    from core.training.study_engines import ENGINES, make_engine
    from core.training.study_grid import StudyError

    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help=f"steps of every run (1 to {MAX_STEPS:,}; default 2000)")
    p.add_argument("--out", required=True, help="the study's folder. A study already there is merged into: the "
                   "variants run now replace their rows, the others stay (its runs must have the same --steps and "
                   "corpus); --overwrite replaces the whole study instead. A folder holding other files is refused "
                   "unless --overwrite, which leaves them as they are")
    p.add_argument("--only", default="", help="comma-separated variant ids (default: all): " + ", ".join(BY_ID))
    p.add_argument("--engine", choices=ENGINES, default="local")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--corpus", default=None)
    p.add_argument("--overwrite", action="store_true", help="start the study in --out afresh: only the variants "
                   "run now are in its table, and the kept models of the others are removed (the study's own files "
                   "only: every other file there stays as it is)")
    args = p.parse_args(argv)
    if not 1 <= args.steps <= MAX_STEPS:
        p.error(f"--steps must be a whole number from 1 to {MAX_STEPS:,} (each of the {len(VARIANTS)} variants "
                f"trains that long; the shipped study used 2,000), got {args.steps:,}")
    chosen = list(dict.fromkeys(s for s in args.only.split(",") if s))  # a variant named twice runs once
    unknown = [s for s in chosen if s not in BY_ID]
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(BY_ID)}")
    if args.only and not chosen:  # "--only ," named nothing: not "every variant", days of CPU
        p.error(f"--only names no variant; choose from {', '.join(BY_ID)}, or leave it out for all")
    chosen = chosen or list(BY_ID)
    if workers_problem(args.workers):
        p.error(workers_problem(args.workers))
    out = Path(args.out)
    # before the corpus is read: a folder of other things is refused, whatever the runs would be
    problem = out_problem(out, outputs(), args.overwrite, inputs=[args.corpus])
    if problem:
        p.error(problem)
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        p.error("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
    try:
        text = read_text_file(corpus)
    except ValueError as e:
        return _bad_input(f"--corpus: {e}")
    need = min_corpus_chars(max(model_shape(BY_ID[v])["n_ctx"] for v in chosen))
    if len(text) < need:  # here, not as a traceback from every worker
        return _bad_input(f"--corpus {corpus} is too short: {len(text):,} characters, and a variant's 128-character "
                          f"window needs at least {need:,} for the training and held-out parts")
    try:  # before any run: a study already there is merged into, or refused, never lost to a run of one variant
        kept = [] if args.overwrite else rows_to_keep(out, args.steps, Path(corpus).name, len(text), chosen)
    except ValueError as e:
        return _bad_input(f"{e}; or --overwrite to replace the whole study")
    try:
        (out / "models").mkdir(parents=True, exist_ok=True)
        if args.overwrite:  # the kept models of the variants not run now would outlive their rows
            for vid in set(KEEP_WEIGHTS) - set(chosen):
                remove_own(out / "models" / vid, MODEL_BY_NAME)  # a file of yours kept there stays
    except OSError as e:
        return _bad_input(f"--out {out}: {e.strerror or e}")
    specs = [VariantSpec(v, args.steps, keep_weights=str(out / "models" / v) if v in KEEP_WEIGHTS else "", text=text,
                         corpus=Path(corpus).name)  # the kept models' cards name the corpus they were trained on
             for v in chosen]
    # the deep ones first: the longest runs, so the pool does not end on one of them alone
    specs.sort(key=lambda s: -BY_ID[s.variant].switches.get("n_layers", 2))
    rows, t0 = [], time.perf_counter()
    try:
        engine = make_engine(args.engine, args.workers, task=train_variant)
        engine.check()
        for row in engine.run(specs, lambda: False):
            rows.append(row)
            print(f"{row['variant']:<22} val {row['val_loss']:.4f}  causal {row['causal_val_loss']:.4f}  "
                  f"train {row['train_loss']:.4f}  {row['seconds']:.0f} s", flush=True)
            write_results(out, kept + rows)  # after every run: an interrupted study keeps what finished
    except StudyError as e:  # Ray missing or unreachable, a worker killed: in words
        return _bad_input(f"{e} ({len(rows)} variants written to {out})")
    print(f"{len(rows)} variants in {time.perf_counter() - t0:.0f} s" + (f", {len(kept)} kept from the study already "
          "there" if kept else "") + "; corpus sha256 "
          f"{hashlib.sha256(text.encode()).hexdigest()[:12]}; wrote {out}/variants.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
