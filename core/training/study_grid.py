"""The grid of a scaling study and its runs: which models (widths d) on which amounts of text (budgets D), what one
run needs (``RunSpec``), and ``train_one(spec) -> row``, the plain function every engine schedules. No engine and no
file here (core.training.study_engines, core.training.study_files).

N is the non-embedding parameter count (Kaplan et al. 2020): every parameter except the token embedding, the
position table and the output map. Hoffmann et al. (2022) count every parameter; runs.csv keeps that count too
(``N_total``). At these sizes the two differ by up to a factor of two (the 65-character vocabulary's embedding
and output map are a large share of a d = 16 model) and the embedding tables do little of the modelling that
the capacity term describes; Kaplan et al. found the non-embedding count gives the cleaner power law.
D is the number of training tokens (characters) seen: steps x batch x n_ctx. The loss is the validation loss
over every full n_ctx window of the held-out last 10 % of the corpus, in nats per character. flops = 6ND.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.data.corpus import TRAIN_FRACTION, read_text_file
from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.nn.config import ModelConfig
from core.nn.params import count_parameters
from core.nn.precision import run_precision
from core.serve.threads import use_threads
from core.training.job_settings import JobSettings, MAX_STEPS, validate_settings
from core.training.recipes import RECIPES, TrainConfig
from core.training.study_live import StepReport
from core.training import trainer  # as a module: Trainer is looked up at each run (tests replace it)
from core.training.train_data import windowed_loss

# Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models", arXiv:2305.16264): up to about four passes
# over the same text cost little against fresh text; beyond that a run measures repetition rather than data.
MAX_EPOCHS = 4
STARTUP_S = 8.0                 # starting Python, torch and the workers before the first step (measured: 5-10 s)
N_CONVENTION = ("N counts every parameter except the token embedding, the position table and the output map "
                "(the non-embedding count of Kaplan et al. 2020); N_total counts them all (Hoffmann et al. 2022)")


class StudyError(ValueError):
    """A study that cannot run as asked; the message says why and what to do."""


# ---------------------------------------------------------------- the grid

@dataclass(frozen=True)
class Grid:
    """Model widths x token budgets, at fixed depth, context, batch and recipe."""
    name: str
    widths: tuple[int, ...]     # d of each model size; h = d / head_width heads
    tokens: tuple[int, ...]     # D of each budget, rounded to whole steps of batch_size x n_ctx tokens
    n_layers: int = 2
    n_ctx: int = 64
    batch_size: int = 16        # 16 x 64 tokens a step: at these budgets more steps beat bigger batches (measured:
                                # d = 32 on 300K tokens reached 2.25 with 16, 2.37 with 32)
    head_width: int = 16
    recipe: str = "muon"        # a name of core.training.trainer.RECIPES
    seed: int = 1337            # every run: the same seed, so runs of one size share their start and batches
    # how many passes over the training part its largest budget may make: MAX_EPOCHS for a study of L(N, D); more
    # only for a study *of* repetition (the "epochs" grid), whose runs the page fits with effective data D'
    max_epochs: int = MAX_EPOCHS

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.n_ctx  # one step reads batch_size windows of n_ctx tokens

    def heads(self, d: int) -> int:
        """The most heads of at least head_width dimensions each that divide d (at least one)."""
        # h must divide d (each head gets d / h dimensions); a wider model gets more heads, not wider ones
        return max(h for h in range(1, max(1, d // self.head_width) + 1) if d % h == 0)

    def steps(self, tokens: int) -> int:
        # the nearest whole number of steps, and at least one: a budget under one batch still trains on one
        return max(1, round(tokens / self.tokens_per_step))

    @property
    def max_tokens(self) -> int:
        # the largest budget as trained (whole steps), not as asked: what the corpus must be able to feed
        return max(self.steps(t) for t in self.tokens) * self.tokens_per_step

    def specs(self, text: str = "") -> list["RunSpec"]:
        # no text: specs only to list or cost the runs (the CLI's summary, estimate_seconds), not to train them
        sha = corpus_sha256(text) if text else ""
        out = []
        for d in self.widths:
            for t in self.tokens:
                steps = self.steps(t)
                # the id names the size and the budget as trained: a continued study matches rows to specs by it
                out.append(RunSpec(run_id=f"d{d}-D{steps * self.tokens_per_step}", d_model=d, n_heads=self.heads(d),
                                   n_layers=self.n_layers, n_ctx=self.n_ctx, batch_size=self.batch_size, steps=steps,
                                   recipe=self.recipe, seed=self.seed, corpus_sha256=sha, text=text))
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["max_epochs"] == MAX_EPOCHS:  # the default is left out: study.json files written before it still match
            del d["max_epochs"]
        return d


GRIDS: dict[str, Grid] = {
    # a smoke test: 6 runs, too few for the five constants of the law, but the points show the trend
    "tiny": Grid("tiny", widths=(16, 32, 64), tokens=(100_000, 300_000)),
    # enough runs to fit: 4 sizes x 3 budgets spanning 10x
    "small": Grid("small", widths=(16, 32, 48, 64), tokens=(150_000, 500_000, 1_500_000)),
    # the shipped study: 6 sizes (N spans 35x) x 4 budgets spanning 10x
    "full": Grid("full", widths=(16, 24, 32, 48, 64, 96), tokens=(300_000, 600_000, 1_200_000, 3_000_000)),
    # repetition: three sizes of the full grid on 6, 12 and 24 passes over Tiny Shakespeare's training part, the
    # range where Muennighoff et al. (2023) see a repeated token lose most of its worth (issue 45)
    "epochs": Grid("epochs", widths=(16, 32, 64), tokens=(6_000_000, 12_000_000, 24_000_000), max_epochs=32),
}


MAX_GRID_FILE_BYTES = 64 * 2**10  # a grid is a few lines of JSON; a bigger file is not one
MAX_GRID_RUNS = 100               # the shipped study is 24 runs; each run is minutes of CPU
# field -> its least value
GRID_INTS = {"n_layers": 1, "n_ctx": 1, "batch_size": 1, "head_width": 1, "seed": 0, "max_epochs": 1}


def grid_from_file(path) -> Grid:
    """A grid of one's own: a JSON object with Grid's fields (name, widths and tokens at least), every one checked
    (StudyError, in one line, for anything else), and every run held to the Training page's limits for a live
    run: its shape, parameters, tokens a step, steps and memory (core.training.job_settings)."""
    where = f"--grid {path}"
    try:
        raw = read_text_file(path, MAX_GRID_FILE_BYTES)  # a regular file, and a small one
    except ValueError as e:  # the message names the file
        raise StudyError(f"--grid: {e}") from None
    try:
        data = json.loads(raw)
    except RecursionError:  # json's decoder recurses once per level: [[[[... 100,000 deep
        raise StudyError(f"{where}: nested too deep to be a grid; give tiny, small, full or a JSON object with "
                         "widths and tokens") from None
    except ValueError as e:
        raise StudyError(f"{where}: not JSON ({e})") from None
    problem = _grid_problem(data)
    if problem:
        raise StudyError(f"{where}: {problem}")
    # JSON gives lists; the frozen (hashable) Grid holds tuples
    grid = Grid(**{"name": Path(path).stem, **data, "widths": tuple(data["widths"]), "tokens": tuple(data["tokens"])})
    problem = _runs_problem(grid)
    if problem:
        raise StudyError(f"{where}: {problem}")
    return grid


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _grid_problem(data) -> str | None:
    """Why ``data`` (a grid file's JSON) is no grid; None when its fields have the right types and ranges."""
    if not isinstance(data, dict):
        return f"a grid is a JSON object with widths and tokens, not a {type(data).__name__}"
    fields = {f.name for f in Grid.__dataclass_fields__.values()}
    unknown = sorted(set(data) - fields)
    if unknown:
        return f"unknown field(s) {', '.join(map(repr, unknown))}; a grid has {', '.join(sorted(fields))}"
    for key in ("widths", "tokens"):
        values = data.get(key)
        if not isinstance(values, list) or not values or not all(_whole(v) and v >= 1 for v in values):
            return f"{key} must be a non-empty list of positive whole numbers (got {str(values)[:80]})"
    if len(data["widths"]) * len(data["tokens"]) > MAX_GRID_RUNS:
        return (f"{len(data['widths'])} widths x {len(data['tokens'])} budgets is "
                f"{len(data['widths']) * len(data['tokens']):,} runs; a study has at most {MAX_GRID_RUNS}")
    for key, least in GRID_INTS.items():
        if key in data and not (_whole(data[key]) and least <= data[key] < 2**63):
            return f"{key} must be a whole number of at least {least} (got {str(data[key])[:40]})"
    if "recipe" in data and data["recipe"] not in RECIPES:
        return f"recipe must be one of {', '.join(RECIPES)} (got {str(data['recipe'])[:40]})"
    if "name" in data and not (isinstance(data["name"], str) and 0 < len(data["name"]) <= 60
                               and data["name"].isprintable()):
        return "name must be a line of text of at most 60 characters"
    return None


def _runs_problem(grid: Grid) -> str | None:
    """Why a run of ``grid`` may not train (the largest width, the largest budget): the Training page's limits."""
    steps = max(grid.steps(t) for t in grid.tokens)
    if steps > MAX_STEPS:
        return (f"its largest budget is {steps:,} steps of {grid.tokens_per_step:,} tokens; a run has at most "
                f"{MAX_STEPS:,}")
    for d in sorted(grid.widths, reverse=True):
        s = JobSettings(d_model=d, n_heads=grid.heads(d), n_layers=grid.n_layers, n_ctx=grid.n_ctx,
                        batch_size=grid.batch_size, steps=steps, seed=grid.seed, recipe=grid.recipe)
        # no corpus yet: its length is judged by corpus_problem once read ("long enough" here); m of 1 at least
        errors = validate_settings(s, 0, 1, (2**62, 2**62))
        if errors:
            return f"the run at d = {d}: " + "; ".join(dict.fromkeys(errors.values()))
    return None


def resolve_grid(name: str) -> Grid:
    if name in GRIDS:
        return GRIDS[name]
    if name.endswith(".json"):
        return grid_from_file(name)
    raise StudyError(f"unknown grid {name!r}; choose one of {', '.join(GRIDS)} (or give a .json grid file)")


def corpus_sha256(text: str) -> str:
    # what makes two sessions' corpora the same (study.json keeps it), whatever the file is called
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def corpus_problem(grid: Grid, text: str, name: str = "the corpus") -> str | None:
    """Why ``text`` cannot feed ``grid`` (None if it can): the largest budget may read the training part at most
    grid.max_epochs times (MAX_EPOCHS but for a study of repetition), and each part needs a full window."""
    train_chars = int(len(text) * TRAIN_FRACTION)
    epochs = grid.max_epochs
    need = math.ceil(grid.max_tokens / epochs / TRAIN_FRACTION)  # characters: that many passes over its 90 %
    if grid.max_tokens > epochs * train_chars:
        # a grid of L(N, D) to suggest instead (not the epochs grid, whose point is many passes)
        fits = [g for g in GRIDS.values() if g.max_epochs == MAX_EPOCHS and g.max_tokens <= MAX_EPOCHS * train_chars]
        other = f" or --grid {fits[-1].name}" if fits else ""  # GRIDS runs small to large: the largest that fits
        return (f"{name} is too small for the {grid.name} grid: its largest budget is D = {grid.max_tokens:,} tokens, "
                f"and the training part ({TRAIN_FRACTION:.0%}, {train_chars:,} characters) may be read at most "
                f"{epochs} times ({epochs * train_chars:,} tokens). Beyond about {MAX_EPOCHS} passes a run "
                f"measures repetition rather than data (Muennighoff et al. 2023). Use a text of at least {need:,} "
                f"characters{other}.")
    # a window is n_ctx + 1 characters (the targets are the inputs shifted by one); one more for the split's rounding
    if len(text) * (1 - TRAIN_FRACTION) < grid.n_ctx + 2:
        return f"{name} is too short: its held-out part needs at least one window of {grid.n_ctx + 1} characters"
    return None


# ---------------------------------------------------------------- one run

@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, the corpus included (so that a worker anywhere can train it)."""
    run_id: str
    d_model: int
    n_heads: int
    n_layers: int
    n_ctx: int
    batch_size: int
    steps: int
    recipe: str
    seed: int
    corpus_sha256: str = ""
    # the text is no part of a run's identity (its checksum is), and a megabyte has no place in a repr or a log
    text: str = field(default="", repr=False, compare=False)
    # where the run writes its step for a page watching (core.training.study_live; run_study sets it): no part of
    # the run, which trains the same with or without it
    live_file: str = field(default="", repr=False, compare=False)

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.n_ctx  # D as trained: whole steps

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(vocab_size=vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                           n_layers=self.n_layers)


# runs.csv's columns; every one but the last two is the same for the same spec whichever engine trained it
ROW_FIELDS = ("run_id", "d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "steps", "N", "N_total", "D", "loss",
              "train_loss", "flops", "seed", "recipe", "wall_s", "cpu_s")
TIMING_FIELDS = ("wall_s", "cpu_s")
# the types read_rows gives each column back (csv holds only text); the rest stay strings
INT_FIELDS = {"d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "steps", "N", "N_total", "D", "seed"}
FLOAT_FIELDS = {"loss", "train_loss", "flops", "wall_s", "cpu_s"}


def non_embedding(counts: dict) -> int:
    """N as this study counts it: the blocks and the final LayerNorm (see the module's docstring)."""
    return counts["blocks"] + counts["final_norm"]


def train_one(spec: RunSpec) -> dict:
    """Train one model of ``spec`` from its seed on one thread and measure it: a runs.csv row, and under
    "precision" the matrix products' (core.nn.precision: bf16 only where a probe measured it faster at this shape;
    not a runs.csv column, run_study keeps it in the session's record)."""
    use_threads(1)  # one thread per worker, whatever the engine: the same kernels, so the same numbers
    if not spec.text:
        raise StudyError(f"run {spec.run_id}: the spec carries no corpus")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    # measured once, at the end (eval_interval = steps), with no induction recording (heads_interval = 0): the
    # row needs neither, and both cost time
    tc = TrainConfig.recipe(spec.recipe, steps=spec.steps, batch_size=spec.batch_size, seed=spec.seed,
                            heads_interval=0, eval_interval=spec.steps)
    tr = trainer.Trainer(spec.text, dict(n_ctx=spec.n_ctx, d_model=spec.d_model, n_heads=spec.n_heads,
                                         n_layers=spec.n_layers), tc, precision=run_precision())
    report = StepReport(spec.live_file, spec.run_id, spec.steps)
    while not tr.done:
        out = tr.step()
        report(out["step"], out["loss"])  # at most once a second: a page's bar moves while the run trains
    val = windowed_loss(tr.model, tr.val_data)
    # the training loss over as many characters as the held-out part: the two are comparable, a gap is overfitting
    train = windowed_loss(tr.model, tr.train_data[: len(tr.val_data)])
    counts = count_parameters(tr.config)
    n = non_embedding(counts)
    return {"run_id": spec.run_id, "d_model": spec.d_model, "n_heads": spec.n_heads, "n_layers": spec.n_layers,
            "n_ctx": spec.n_ctx, "batch_size": spec.batch_size, "steps": spec.steps, "N": n,
            "N_total": counts["total"], "D": tr.tokens_seen, "loss": round(val, 6), "train_loss": round(train, 6),
            "flops": float(FLOPS_PER_PARAM_TOKEN * n * tr.tokens_seen), "seed": spec.seed, "recipe": spec.recipe,
            # seconds; the only columns an engine or a busy machine may change (TIMING_FIELDS)
            "wall_s": round(time.perf_counter() - wall0, 2), "cpu_s": round(time.process_time() - cpu0, 2),
            "precision": tr.precision}


def run_cost(spec: RunSpec) -> float:
    """A run's relative cost, for scheduling: 6ND plus a per-step overhead that dominates tiny models."""
    n = 12 * spec.n_layers * spec.d_model ** 2  # the blocks' weights: 4d^2 attention + 8d^2 MLP per layer
    # 30,000 flop-equivalents per token: what 6ND leaves out (embedding, output map, the loop's own work)
    return spec.tokens * (FLOPS_PER_PARAM_TOKEN * n + 30_000)


def estimate_seconds(grid: Grid, reference: list[dict], workers: int | None = None) -> float | None:
    """Rough wall time of ``grid`` on ``workers`` idle cores, from the CPU seconds of reference runs (the shipped
    study's) per unit of run_cost; None without reference runs."""
    ref = [r for r in reference if r.get("cpu_s")]
    if not ref:
        return None
    per_cost = sum(r["cpu_s"] for r in ref) / sum(run_cost(_spec_of(r)) for r in ref)  # CPU seconds per unit of cost
    costs = sorted((run_cost(s) * per_cost for s in grid.specs()), reverse=True)
    lanes = [0.0] * max(1, workers or os.cpu_count() or 1)  # seconds of work queued on each worker
    for c in costs:  # longest first onto the least loaded worker, as the pool schedules them
        lanes[lanes.index(min(lanes))] += c
    return STARTUP_S + max(lanes)  # the study ends when its busiest worker does


def _spec_of(row: dict) -> RunSpec:
    # enough of a spec to cost a finished run (no corpus: it is never trained again)
    return RunSpec(run_id=row["run_id"], d_model=row["d_model"], n_heads=row["n_heads"], n_layers=row["n_layers"],
                   n_ctx=row["n_ctx"], batch_size=row["batch_size"], steps=row["steps"], recipe=row["recipe"],
                   seed=row["seed"])
