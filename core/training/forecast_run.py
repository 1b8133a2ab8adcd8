"""The run a forecast bets on: one model, trained in the background on the settings of the study it is forecast
from (depth, context, batch, recipe, seed, corpus), so that its point can join that study's fit.

The run is a study of one run: a grid file with one width and one budget in a fresh folder, started as
core.training.study_job.StudyJob, with its pause, stop, one-per-server limit and runs.csv. Planning maps the law's
(N, D) to what can train: the nearest width on a step of WIDTH_STEP, whole steps of the study's batch, the
Training page's limits, at most MAX_FORECAST_EPOCHS passes over the corpus, and at most MAX_FORECAST_S seconds
at the pace of the study's own runs.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from core.nn.config import ModelConfig
from core.nn.params import count_parameters
from core.data.corpus import TRAIN_FRACTION
from core.training.study_grid import Grid, StudyError, _runs_problem, corpus_sha256, estimate_seconds, non_embedding
from core.training.study_job import StudyJob

WIDTH_STEP = 8
WIDTHS = tuple(range(16, 385, WIDTH_STEP))  # d = 16 .. 384; the Training page's parameter cap stops it sooner
MAX_FORECAST_S = 900          # a run a learner waits for on the page: a quarter of an hour at the study's pace
MAX_FORECAST_EPOCHS = 32      # as the epochs grid: a forecast may bet on repetition too
GRID_KEYS = ("n_layers", "n_ctx", "batch_size", "head_width", "recipe", "seed")  # the study's settings it keeps


@dataclass(frozen=True)
class PlannedRun:
    d_model: int
    steps: int
    N: int                # non-embedding parameters, as the study counts them
    D: int                # tokens as trained: whole steps
    epochs: float         # passes over the corpus's training part
    seconds: float | None  # estimated wall time on one idle core; None without reference runs
    problem: str | None   # why it may not train; None when it may

    @property
    def compute(self) -> float:
        return 6.0 * self.N * self.D


def study_grid(meta: dict, d_model: int, tokens: int, max_epochs: int = MAX_FORECAST_EPOCHS) -> Grid:
    """A one-run grid on the settings of the study described by ``meta`` (its study.json)."""
    g = meta["grid"]
    return Grid("forecast", widths=(int(d_model),), tokens=(int(tokens),), max_epochs=max_epochs,
                **{k: g[k] for k in GRID_KEYS if k in g})


def width_params(meta: dict, d_model: int) -> int:
    """The non-embedding N of a model of width d on the study's depth."""
    g = study_grid(meta, d_model, 1)
    cfg = ModelConfig(vocab_size=65, n_ctx=g.n_ctx, d_model=d_model, n_heads=g.heads(d_model), n_layers=g.n_layers)
    return non_embedding(count_parameters(cfg))  # N leaves out the embedding: the vocabulary does not matter


def plan_run(meta: dict, N: float, D: float, reference: list[dict], d_model: int | None = None) -> PlannedRun:
    """The trainable run nearest to (N, D) (nearest in log N among WIDTHS unless ``d_model`` is given), with the
    reason it may not train, if any."""
    if d_model is None:
        d_model = min(WIDTHS, key=lambda d: abs(math.log(width_params(meta, d)) - math.log(max(N, 1.0))))
    grid = study_grid(meta, d_model, max(1, int(D)))
    steps = grid.steps(int(D))
    tokens = steps * grid.tokens_per_step
    train_chars = int(meta.get("corpus_chars", 0) * TRAIN_FRACTION)
    epochs = tokens / train_chars if train_chars else math.inf
    seconds = estimate_seconds(grid, reference, workers=1)
    problem = _runs_problem(grid)
    if problem is None and epochs > MAX_FORECAST_EPOCHS:
        problem = (f"D = {tokens:,} tokens is {epochs:.0f} passes over the corpus's training part; a forecast run "
                   f"makes at most {MAX_FORECAST_EPOCHS}")
    if problem is None and seconds is not None and seconds > MAX_FORECAST_S:
        problem = (f"this run would take about {seconds / 60:.0f} minutes at the pace of the study's own runs; a run "
                   f"trained on the page takes at most {MAX_FORECAST_S // 60}")
    return PlannedRun(d_model=d_model, steps=steps, N=width_params(meta, d_model), D=tokens, epochs=epochs,
                      seconds=seconds, problem=problem)


def start_run(meta: dict, plan: PlannedRun, corpus_path) -> StudyJob:
    """Train ``plan`` in the background on the study's corpus (checked against study.json's checksum first: the
    same text, or the point would not belong to the fit). Raises StudyError or core.training.study_job.BusyError."""

    if plan.problem:
        raise StudyError(plan.problem)
    path = Path(corpus_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StudyError(f"the study's corpus cannot be read: {e}") from None
    if meta.get("corpus_sha256") and corpus_sha256(text) != meta["corpus_sha256"]:
        raise StudyError(f"{path.name} is not the text the study was trained on (its checksum differs), so the run "
                         "would not belong to the study's fit")
    folder = StudyJob.new_folder()
    grid = study_grid(meta, plan.d_model, plan.D, max_epochs=max(1, min(MAX_FORECAST_EPOCHS, math.ceil(plan.epochs))))
    spec = {k: v for k, v in grid.to_dict().items() if k != "name"}
    (folder / "forecast.json").write_text(json.dumps({**spec, "widths": list(grid.widths),
                                                      "tokens": list(grid.tokens)}), encoding="utf-8")
    job = StudyJob(path, str(folder / "forecast.json"), folder=folder, temporary=True,
                   corpus_name=meta.get("corpus") or path.name)
    job.start()
    return job
