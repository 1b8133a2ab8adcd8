"""The lecture's transformer taken apart: one run per variant (a piece removed, or the heads or depth changed), same
data, seed, steps and recipe, and what each costs on held-out text. The "Why each piece" page reads the result.

    python -m core.variants --steps 2000 --out assets/variants [--only lecture,no-mlp] [--engine local|ray]

Writes into --out: variants.csv (one row per variant), curves.csv (each run's evaluations), and models/<id>/ for
the variants a page opens (the cheating model's attention, the leaking mask, the bag of tokens). A table study
(core.training.study_table): its runs go through the scaling study's engines (a local process pool, or Ray), and a
study already in --out is merged into (the variants run replace their rows, the others stay), provided its runs have
the same steps and corpus; anything else is refused before any run unless --overwrite replaces the whole study.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core.analysis.sampling import generate
from core.nn.model import Transformer
from core.nn.params import count_parameters
from core.nn.precision import run_precision
from core.serve.folder_files import write_atomic
from core.serve.threads import use_threads
from core.training.cli_args import MODEL_BY_NAME, Outputs, remove_own, save_model, study_parser, study_problem
from core.training.recipes import TrainConfig
from core.training import trainer  # as a module: Trainer is looked up at each run (tests replace it)
from core.training.study_table import TableSpec, TableStudy, read_table
from core.training.train_data import windowed_loss

VARIANT_FIELDS = ("variant", "title", "removed", "d_model", "n_heads", "n_layers", "params", "steps", "seconds",
                  "train_loss", "val_loss", "causal_val_loss", "sample")
CURVE_FIELDS = ("variant", "step", "train_loss", "val_loss")
KEEP_WEIGHTS = ("lecture", "no-mask", "mask-after-softmax", "no-positions")  # the ones a page's view opens
SAMPLE_PROMPT = "KING:\n"
DEEP = dict(d_model=32, n_heads=4)  # the deep stacks: narrow, so that twelve blocks train in minutes
BARE = dict(residual=False, norm="none")
PROG = "python -m core.variants"
RECIPE = "muon"  # every variant trains on the same recipe
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


def model_shape(v: Variant) -> dict:
    """The model dict a Trainer takes (no vocabulary: the tokenizer decides it)."""
    return dict(dict(n_ctx=128, d_model=64, n_heads=4, n_layers=2), **v.switches)


def train_variant(spec: TableSpec) -> dict:
    """Train one variant from its seed on one thread: its variants.csv row, with its curve under "curve"."""
    use_threads(1)  # one thread per worker, as in a scaling study: the same kernels, so the same numbers
    # subnormal floats (below 1.2e-38) flushed to zero: the deep stacks without residual or LayerNorm carry such tiny
    # activations and gradients, and x86 arithmetic on them is many times slower (bench/denormals.py: deep-L6-bare
    # about twice as fast per step). Runs shipped before this line (all but deep-L6-bare) trained without it.
    torch.set_flush_denormal(True)
    v = BY_ID[spec.run]
    t0 = time.perf_counter()
    tc = TrainConfig.recipe(RECIPE, steps=spec.steps, seed=spec.seed, heads_interval=0, snapshots=0,
                            eval_interval=max(1, spec.steps // 20), eval_batches=8)
    tr = trainer.Trainer(spec.text, model_shape(v), tc, precision=run_precision())  # bf16 only where measured faster
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
        # the model's own files replaced, anything else kept beside it (an SAE trained on it) stays
        save_model(spec.keep_weights, model, tr.tokenizer,
                   trainer.training_record(tr, spec.corpus, len(spec.text), seconds,
                                           source=f"core.variants: {v.title}"),
                   tr.log, overwrite=True)
    return {"variant": v.id, "title": v.title, "removed": ", ".join(f"{k}={val!r}" for k, val in v.switches.items()),
            "d_model": model.config.d_model, "n_heads": model.config.n_heads, "n_layers": model.config.n_layers,
            "params": count_parameters(model.config)["total"], "steps": spec.steps, "seconds": round(seconds, 1),
            "train_loss": round(windowed_loss(model, tr.train_data[: len(tr.val_data)]), 4),
            "val_loss": round(val, 4), "causal_val_loss": round(causal, 4), "sample": sample,
            "precision": tr.precision,  # not a variants.csv column; a kept model's card records it
            "curve": [{"variant": v.id, "step": r["step"], "train_loss": round(r["train_loss"], 4),
                       "val_loss": round(r["val_loss"], 4)} for r in tr.log]}


def write_results(out: Path, rows: list[dict]) -> None:
    """variants.csv and curves.csv from the rows, in VARIANTS order (whatever order the runs finished in)."""
    rows = STUDY.ordered(rows)
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


class VariantStudy(TableStudy):
    """The variant study on the table-study framework: variants.csv, curves.csv and models/<id>/ of KEEP_WEIGHTS."""
    prog, what, title, key, table = PROG, "variant", "a variant study", "variant", "variants.csv"
    ids = tuple(v.id for v in VARIANTS)
    fields = VARIANT_FIELDS
    steps = 2000
    max_steps = MAX_STEPS
    n_ctx = max(model_shape(v)["n_ctx"] for v in VARIANTS)

    def task(self):
        return train_variant  # looked up now: a test puts a stand-in in its place

    def outputs(self):
        """What the study writes into --out (core.training.cli_args.Outputs): its two tables and its kept models."""
        models = Outputs(PROG, self.title, folders=tuple((vid, MODEL_BY_NAME) for vid in KEEP_WEIGHTS))
        return Outputs(PROG, self.title, files=(("variants.csv", None), ("curves.csv", None)),
                       folders=(("models", models),), merges=True)

    def write(self, out, rows, overwrite):
        write_results(out, rows)

    def read(self, out):
        rows = super().read(out)
        curves: dict[str, list[dict]] = {}
        if rows and (out / "curves.csv").exists():
            for point in read_table(out / "curves.csv", CURVE_FIELDS, self.title):
                curves.setdefault(point["variant"], []).append({k: point[k] for k in CURVE_FIELDS})
        return [{**r, "curve": curves.get(r["variant"], [])} for r in rows]

    def rows_to_keep(self, out, steps, corpus, chars, chosen):
        kept = super().rows_to_keep(out, steps, corpus, chars, chosen)
        for folder in sorted((out / "models").glob("*/config.json")):  # kept models trained on another corpus
            try:
                training = json.loads(folder.read_text(encoding="utf-8")).get("training", {})
            except (OSError, ValueError, AttributeError):
                continue  # a kept model that cannot be read says nothing about the corpus; the page names it
            if (training.get("corpus"), training.get("corpus_chars")) not in ((corpus, chars), (None, None)):
                raise ValueError(f"--out {out} holds runs on {training.get('corpus')} "
                                 f"({training.get('corpus_chars')} characters), not on {corpus} ({chars:,})")
        return kept

    def prepare(self, out, chosen, overwrite):
        (out / "models").mkdir(parents=True, exist_ok=True)
        if overwrite:  # the kept models of the variants not run now would outlive their rows
            for vid in set(KEEP_WEIGHTS) - set(chosen):
                remove_own(out / "models" / vid, MODEL_BY_NAME)  # a file of yours kept there stays

    def spec(self, run, steps, text, corpus, out):
        # the kept models' cards name the corpus they were trained on
        return TableSpec(run, steps, keep_weights=str(out / "models" / run) if run in KEEP_WEIGHTS else "",
                         text=text, corpus=corpus)

    def order(self, specs):
        # the deep ones first: the longest runs, so the pool does not end on one of them alone
        return sorted(specs, key=lambda s: -BY_ID[s.run].switches.get("n_layers", 2))

    def line(self, row):
        return (f"{row['variant']:<22} val {row['val_loss']:.4f}  causal {row['causal_val_loss']:.4f}  "
                f"train {row['train_loss']:.4f}  {row['seconds']:.0f} s")

    def summary(self, rows, kept, seconds, text, out):
        return (f"{len(rows)} variants in {seconds:.0f} s" + (f", {len(kept)} kept from the study already there"
                if kept else "") + f"; corpus sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}; wrote "
                f"{out}/variants.csv")


STUDY = VariantStudy()


def main(argv=None) -> int:
    p = study_parser(PROG, __doc__.splitlines()[0], runs=STUDY.ids, steps=STUDY.steps, max_steps=MAX_STEPS,
                     out_help="the study's folder. A study already there is merged into: the variants run now replace "
                     "their rows, the others stay (its runs must have the same --steps and corpus); --overwrite "
                     "replaces the whole study instead. A folder holding other files is refused unless --overwrite, "
                     "which leaves them as they are",
                     overwrite_help="start the study in --out afresh: only the variants run now are in its table, and "
                     "the kept models of the others are removed (the study's own files only: every other file there "
                     "stays as it is)")
    args = p.parse_args(argv)
    problem = study_problem(args, STUDY.ids, MAX_STEPS, "variant")
    if problem:
        p.error(problem)
    return STUDY.run(args)


if __name__ == "__main__":
    sys.exit(main())
