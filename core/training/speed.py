"""How fast this server trains, for the estimate the training page shows before a run starts.

Runs report the rate they reach (``observe_rate``), so the next estimate reflects the server as it is
now; before any run, a few steps of the lecture's model on synthetic text are timed once per process.
Rates are FLOP/s counted as 6·N per token (``core.analysis.cost.training_flops``).
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.analysis.cost import training_flops
from core.nn.config import LECTURE
from core.nn.params import count_parameters
from core.serve.threads import training_threads, use_threads
from core.training.recipes import TrainConfig
from core.training.trainer import Trainer
from core.analysis.induction import HeadRecorder
from core.analysis.sampling import generate
from core.nn.tokenizer import CharTokenizer
from core.nn.snapshots import snapshot_steps
from core.data.corpus import TRAIN_FRACTION
from core.serve.fmt import seconds_or_minutes
from core.analysis.scaling import fit_scaling_law, start_grid
from core.training.study_files import RUNS_CSV, SHIPPED_STUDY, read_fit, read_rows
from core.analysis.scaling_runs import MIN_RUNS
from core.training.study_grid import STARTUP_S, run_cost

_RATE: dict[str, float] = {}
_RATE_LOCK = threading.Lock()


def observe_rate(n_params: int, tokens_per_s: float | None):
    """A run reports the tokens/s it reached."""
    if tokens_per_s:
        with _RATE_LOCK:
            _RATE["observed"] = training_flops(n_params, tokens_per_s)


def measured_flop_rate() -> tuple[float | None, str]:
    """(FLOP/s, how it was measured) for training on this server: the rate the latest run reached, else a
    quick measurement (a few steps of the lecture's model, once per process). (None, the reason) if the
    quick measurement failed."""
    with _RATE_LOCK:
        if "observed" in _RATE:
            return _RATE["observed"], "the latest training run on this server"
        if "quick" not in _RATE:
            # in a thread of its own, with the threads a run gets, so the page's thread keeps its setting
            worker = threading.Thread(target=_quick_rate, name="te-rate")
            worker.start()
            worker.join()
        if "quick" not in _RATE:
            return None, "the quick test of the lecture's model failed on this server"
        return _RATE["quick"], "a quick test of the lecture's model on this server"


def _quick_rate():
    """A few steps of the lecture's model on synthetic text; stores FLOP/s (6·N per token) in _RATE."""
    use_threads(training_threads())
    g = torch.Generator().manual_seed(0)
    chars = [chr(32 + i) for i in range(LECTURE.vocab_size)]
    text = "".join(chars[i] for i in torch.randint(len(chars), (4_000,), generator=g).tolist())
    batch = 8  # small: this runs while a page renders
    tr = Trainer(text, LECTURE.to_dict(), TrainConfig(batch_size=batch, steps=100, seed=0))
    tr.step()  # the first step pays for allocations
    t0 = time.perf_counter()
    for _ in range(2):
        tr.step()
    _RATE["quick"] = training_flops(count_parameters(tr.config)["total"], 2 * batch * LECTURE.n_ctx) / (time.perf_counter() - t0)


# ----------------------------------------------------------------------------- a run's time, from its own steps
# 6ND at one FLOP rate misjudges small models by a factor of several (the optimiser, the softmax over the
# vocabulary and Python's own work per step are no part of 6ND, and they dominate at these sizes), and a rate
# measured on one shape misjudges another. So a run's estimate times a few steps of the run's own shape, batch
# and recipe on this machine (``measure_pace``), then adds what the training process does besides training:
# its start, the evaluations, snapshots, samples and induction probes it makes on its schedule, and the
# held-out loss measured at the end (``run_estimate``). Once a run has made its first steps, the time left is
# recalculated from its own pace (``time_left``: the estimate of what remains, scaled by how its work so far went
# against the estimate of that work). bench/estimates.py measures how far the estimates land from the real times.

PROCESS_START_S = 3.0     # a training process: a fresh interpreter importing torch and the trainer (bench/estimates.py)
BPE_S_PER_CHAR = 1.2e-6   # learning a byte-level BPE and encoding with it, a character (bench/results/bpe-learning.md)
PACE_STEPS = 3            # steps timed after a first, untimed one ...
PACE_BUDGET_S = 1.0       # ... or fewer, once this many seconds are spent (two at least)
PACE_TTL_S = 300.0        # a pace older than this is measured again: the server's load changes over a lesson


@dataclass(frozen=True)
class Pace:
    """Seconds of the pieces of work a training run repeats, measured on this machine."""
    step_s: float      # one optimisation step: batch, forward, backward, update
    forward_s: float   # one forward pass of a batch of (batch_size, n_ctx) without gradients: an evaluation's unit
    token_s: float     # one sampled token (a cached forward of one row)
    probe_s: float     # one measurement of every head on the induction probe


_PACES: dict[tuple, tuple[float, Pace]] = {}  # key -> (time.monotonic() when measured, the pace)
_PACE_LOCK = threading.Lock()


def median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def pace_key(shape: dict, batch_size: int, recipe: str, threads: int, repeat_fraction: float = 0.0) -> tuple:
    """What a pace depends on: the shape (its vocabulary included), the batch, the recipe, the threads and the
    share of rows given a repeated span (building those batches costs time of its own)."""
    return (tuple(sorted((k, v) for k, v in shape.items() if not isinstance(v, dict))), batch_size, recipe, threads,
            repeat_fraction)


def measure_pace(shape: dict, batch_size: int, recipe: str, threads: int, repeat_fraction: float = 0.0) -> Pace:
    """The ``Pace`` of a run of this shape (ModelConfig's fields, ``vocab_size`` included), batch, recipe and
    repeat mixture on ``threads`` threads, timed on synthetic text in a thread of its own (the caller's thread
    count is left as it is); measured once per key (``pace_key``) every PACE_TTL_S at most."""
    key = pace_key(shape, batch_size, recipe, threads, repeat_fraction)
    with _PACE_LOCK:
        if key not in _PACES or time.monotonic() - _PACES[key][0] > PACE_TTL_S:
            out: list[Pace] = []
            worker = threading.Thread(target=lambda: out.append(
                _time_pace(shape, batch_size, recipe, threads, repeat_fraction)), name="te-pace")
            worker.start()
            worker.join()
            if not out:
                raise RuntimeError("the pace of this run could not be measured")
            _PACES[key] = (time.monotonic(), out[0])
        return _PACES[key][1]


def _time_pace(shape: dict, batch_size: int, recipe: str, threads: int, repeat_fraction: float = 0.0) -> Pace:
    use_threads(threads)
    m, n_ctx = int(shape["vocab_size"]), int(shape["n_ctx"])
    chars = [chr(0x100 + i) for i in range(m)]  # m distinct characters: the run's vocabulary size
    g = torch.Generator().manual_seed(0)
    text = "".join(chars) + "".join(chars[i] for i in torch.randint(m, (max(40 * (n_ctx + 2), 4_000),),
                                                                    generator=g).tolist())
    tc = TrainConfig.recipe(recipe, batch_size=batch_size, steps=1_000_000, seed=0, heads_interval=0, snapshots=0,
                            repeat_fraction=repeat_fraction)
    tr = Trainer(text, {k: v for k, v in shape.items() if k != "vocab_size"}, tc, tokenizer=CharTokenizer(chars))
    tr.step()  # the first step pays for allocations
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < PACE_STEPS and (len(times) < 2 or time.perf_counter() - t_start < PACE_BUDGET_S):
        t0 = time.perf_counter()
        tr.step()
        times.append(time.perf_counter() - t0)
    model = tr.model.eval()
    x, y = tr.next_batch()
    with torch.no_grad():
        forwards = []
        for _ in range(2):
            t0 = time.perf_counter()
            model(x, targets=y)
            forwards.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tokens = 16
        generate(model, x[:1, :1], tokens, 0.8, generator=torch.Generator().manual_seed(0))
        token_s = (time.perf_counter() - t0) / tokens
        recorder = HeadRecorder(model, every=1, tokenizer=tr.tokenizer)
        t0 = time.perf_counter()
        recorder.record(model, 0)
        probe_s = time.perf_counter() - t0
    return Pace(step_s=median(times), forward_s=min(forwards), token_s=token_s, probe_s=probe_s)


@dataclass(frozen=True)
class RunPlan:
    """How many times a run does each piece of work up to a step, by the training process's schedule
    (core.training.training_child, core.training.trainer)."""
    steps: int
    evaluations: int   # the curve's points and the snapshots' losses: 2 x eval_batches forward passes each
    samples: int       # SAMPLE_TOKENS tokens each
    probes: int        # every head on the induction probe
    final_windows: int # windows of n_ctx tokens scored at the end (the held-out part, and as many training tokens)


def run_plan(settings, val_tokens: int, upto: int | None = None) -> RunPlan:
    """The schedule of a run of ``settings`` (a JobSettings) whose held-out part has ``val_tokens`` tokens: the
    work done up to step ``upto`` (default: the whole run, with the held-out loss measured at its end)."""
    tc = settings.train_config()
    steps, every = tc.steps, tc.eval_interval
    last = steps if upto is None else max(0, min(upto, steps))
    curve = {0, steps} | set(range(every, steps + 1, every))  # the steps the curve is evaluated at
    samples = {s for s in curve if s % (2 * every) == 0} | {0, steps}
    probes = (set(range(0, steps + 1, tc.heads_interval)) | {steps}) if tc.heads_interval else set()
    snaps = set(snapshot_steps(steps, tc.snapshots))

    def upto_last(steps_of):
        return sum(1 for s in steps_of if s <= last)

    return RunPlan(steps=last, evaluations=upto_last(curve) + upto_last(snaps), samples=upto_last(samples),
                   probes=upto_last(probes),
                   final_windows=2 * max(1, val_tokens // settings.n_ctx) if last == steps and upto is None else 0)


@dataclass(frozen=True)
class RunEstimate:
    """A run's expected wall time, in parts (seconds), from Start to finished."""
    parts: dict

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    @property
    def training(self) -> float:
        """The seconds the training process counts as the run's time (its clock): all but the start and the end."""
        return sum(v for k, v in self.parts.items() if k not in ("start", "end"))


def _parts(settings, pace: Pace, plan: RunPlan, sample_tokens: int) -> dict:
    tc = settings.train_config()
    return {"steps": plan.steps * pace.step_s,
            "evaluations": plan.evaluations * 2 * tc.eval_batches * pace.forward_s,
            "samples": plan.samples * sample_tokens * pace.token_s,
            "probes": plan.probes * pace.probe_s,
            "end": plan.final_windows * pace.forward_s / max(1, settings.batch_size)}


def run_estimate(settings, pace: Pace, corpus_chars: int, val_tokens: int | None = None,
                 sample_tokens: int = 200, upto: int | None = None) -> RunEstimate:
    """The wall time of a run of ``settings`` on a corpus of ``corpus_chars`` characters at ``pace``, in parts.
    ``val_tokens``: the held-out part's length in tokens (default: a tenth of the characters, as for a character
    model). ``upto``: only the work up to that step, without the start and the end (what the run's own clock has
    counted by then)."""
    val = val_tokens if val_tokens is not None else int(corpus_chars * (1 - TRAIN_FRACTION))
    parts = _parts(settings, pace, run_plan(settings, val, upto), sample_tokens)
    if upto is None:
        parts["start"] = PROCESS_START_S + (BPE_S_PER_CHAR * corpus_chars if settings.tokenizer == "bpe" else 0.0)
    return RunEstimate(parts=parts)


def time_left(settings, pace: Pace, corpus_chars: int, val_tokens: int | None, step: int,
              elapsed: float) -> float | None:
    """Seconds left of a run under way at ``step`` after ``elapsed`` seconds of its own clock: the estimate of
    what remains, scaled by how the run's work so far went against the estimate of it (recalibrated at every
    report). None before the first step."""
    if step <= 0:
        return None
    done = run_estimate(settings, pace, corpus_chars, val_tokens, upto=step).training
    whole = run_estimate(settings, pace, corpus_chars, val_tokens)
    factor = elapsed / done if done > 0 and elapsed > 0 else 1.0
    return max(0.0, (whole.training - done + whole.parts["end"]) * factor)


def job_time_left(settings, pace: Pace | None, corpus_chars: int, p: dict) -> float | None:
    """A training job's time left from its progress ``p`` (step, elapsed, step_losses, val_chars_per_token, as
    core.training.training_job keeps it): ``time_left`` at the pace its estimate was made at; without one, the
    remaining steps at the mean pace so far. None before the first step."""
    if not p["step_losses"]:
        return None
    if pace is None:
        return (settings.steps - p["step"]) * p["elapsed"] / len(p["step_losses"])
    val_tokens = int(corpus_chars * (1 - TRAIN_FRACTION) / max(p["val_chars_per_token"], 1e-9))
    return time_left(settings, pace, corpus_chars, val_tokens, p["step"], p["elapsed"])


def estimate_run(settings, vocab_size: int, corpus_chars: int,
                 val_tokens: int | None = None) -> tuple[RunEstimate, Pace]:
    """``run_estimate`` at this machine's pace for the run's shape (``measure_pace``), with that pace: the run
    started from the estimate recalculates its time left from it (core.training.training_job.TrainingJob)."""
    pace = measure_pace(settings.shape(max(1, vocab_size)), settings.batch_size, settings.recipe,
                        settings.threads or training_threads(), settings.repeat_fraction)
    return run_estimate(settings, pace, corpus_chars, val_tokens), pace


def form_estimate(settings, form, corpus_chars: int) -> tuple[RunEstimate | None, Pace | None, float | None]:
    """The Training page's estimate for its form (core.training.training_setup.check_form's FormCheck): (the
    estimate, the pace it was made at, the FLOP rate it amounts to: 6ND over its seconds, which the page's
    induction note reads); (None, None, None) while the form has errors (nothing that cannot start is timed)."""
    if form.errors or form.cost is None:
        return None, None, None
    estimate, pace = estimate_run(settings, form.vocab, corpus_chars, form.split_tokens and form.split_tokens[1])
    return estimate, pace, form.cost.flops / estimate.seconds


# How far a run's real time lands from its estimate: on a quiet machine 1.05-1.24 times the estimate
# (bench/results/estimates.md, load about 1 on 2 cores), on two busy cores 1.54 (issue 39: 68 s estimated, 1 min 45 s
# real). The few steps timed before Start cannot see the load of the minutes that follow, so the page says a range.
RANGE_LOW = 0.9          # real / estimate: the least measured was 1.05
RANGE_HIGH_QUIET = 1.35  # the most measured on a quiet machine was 1.24
RANGE_HIGH_BUSY = 1.7    # every core busy with others' work: 1.54 measured


def estimate_range(seconds: float, load: float | None = None, cores: int | None = None) -> tuple[float, float]:
    """(fewest, most) seconds a run estimated at ``seconds`` is likely to take, on ``cores`` cores with a 1-minute
    load average of ``load`` (default: this machine's now). The upper end grows with the load, from
    RANGE_HIGH_QUIET with a core to spare to RANGE_HIGH_BUSY with every core busy."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: assume the busy case
            load = float(cores)
    busy = min(1.0, max(0.0, load / cores))  # 0: idle, 1: as many runnable processes as cores
    return seconds * RANGE_LOW, seconds * (RANGE_HIGH_QUIET + busy * (RANGE_HIGH_BUSY - RANGE_HIGH_QUIET))


def range_words(low: float, high: float) -> str:
    """'60–95 s', '1.5–2.3 min' (minutes once the upper end reaches two)."""
    if high < 120:
        return f"{low:,.0f}–{high:,.0f} s"
    return f"{low / 60:,.1f}–{high / 60:,.1f} min"


def estimate_words(estimate: RunEstimate, load: float | None = None, cores: int | None = None) -> tuple[str, str]:
    """The Training page's "Estimated time" metric: its value (a range, ``estimate_range``) and its help."""
    p = estimate.parts
    steps, extra, ends = (seconds_or_minutes(v) for v in (
        p["steps"], p["evaluations"] + p["samples"] + p["probes"], p["start"] + p["end"]))
    low, high = estimate_range(estimate.seconds, load, cores)
    return (range_words(low, high),
            f"About {seconds_or_minutes(estimate.seconds)}: {steps} of steps (timed on a few steps of this very "
            f"model on this server), {extra} of evaluations, samples and head probes on the run's schedule, {ends} "
            "to start the process and to measure the held-out loss at the end. Other people's runs share the "
            "processor and can slow this one down, hence the range (wider when the processor is busy now); once the "
            "run has made its first steps, the time left is recalculated from its own pace.")


# ----------------------------------------------------------------------------- a scaling study's time

FIT_TIMED_REFITS = 2  # bootstrap refits timed on this machine for a study's estimate


@dataclass(frozen=True)
class StudyEstimate:
    """A study's expected wall time, in parts (seconds)."""
    start: float     # the study's process and its workers
    runs: float      # the busiest worker's runs, longest first onto the least loaded worker
    fit: float       # the fit to every run and its bootstrap refits

    @property
    def seconds(self) -> float:
        return self.start + self.runs + self.fit


_FIT_S: dict[tuple, float] = {}


def refit_seconds(widths: tuple = (), budgets: int = 0) -> float:
    """Seconds of one refit of the law as the study's bootstrap makes it (from the full fit's law and 300 starts),
    timed on this machine on resamples of the shipped study's runs most like the grid's: the widths it has of
    ``widths`` (all of them where it has none) and each width's ``budgets`` smallest budgets (0: all); once per
    process for each grid."""
    key = (tuple(widths), budgets)
    with _PACE_LOCK:
        if key not in _FIT_S:


            rows = read_rows(Path(SHIPPED_STUDY) / RUNS_CSV)
            rows = [r for r in rows if r["d_model"] in widths] or rows
            if budgets:
                rows = [r for r in rows if sorted(q["D"] for q in rows if q["d_model"] == r["d_model"]).index(r["D"])
                        < budgets]
            N, D, L = (np.array([r[k] for r in rows], dtype=float) for k in ("N", "D", "loss"))
            law = (read_fit(SHIPPED_STUDY) or {}).get("law") or {"A": 4.0, "B": 40.0, "E": 1.5, "alpha": 0.3,
                                                                   "beta": 0.3}
            start = torch.tensor([[math.log(law["A"]), math.log(law["B"]), math.log(law["E"]), law["alpha"],
                                   law["beta"]]], dtype=torch.float64)
            starts = torch.cat([start, start_grid()[::15]])  # as core.analysis.scaling.bootstrap_fit starts
            rng, times = np.random.default_rng(0), []
            for _ in range(FIT_TIMED_REFITS):
                idx = rng.integers(0, len(N), len(N))
                t0 = time.perf_counter()
                try:
                    fit_scaling_law(N[idx], D[idx], L[idx], starts=starts, polish=8)
                except Exception:  # noqa: BLE001 - a resample that pins no law costs its time all the same
                    pass
                times.append(time.perf_counter() - t0)
            _FIT_S[key] = sum(times) / len(times)
        return _FIT_S[key]


def fit_seconds(resamples: int, runs: int, grid=None) -> float:
    """The seconds of a study's fit: the full fit (about two refits' worth: 4,500 starts) and ``resamples``
    refits (timed on runs like ``grid``'s); none for fewer runs than the law's fit needs."""
    if runs < MIN_RUNS:
        return 0.0
    return (resamples + 2) * (refit_seconds(grid.widths, len(grid.tokens)) if grid is not None else refit_seconds())


def contention(workers: int, cores: int, load: float) -> float:
    """How much slower each of ``workers`` busy processes runs than one process timed alone, on ``cores`` cores
    already running ``load`` others (the 1-minute load average): its share of a core alone over its share beside
    the other workers. 1 on idle cores with no more workers than cores."""
    alone = min(1.0, cores / (load + 1))
    return alone / min(1.0, cores / (load + workers))


def study_estimate(grid, corpus_chars: int, vocab_size: int, workers: int | None, resamples: int,
                   load: float | None = None) -> StudyEstimate:
    """A study of ``grid`` on a corpus of ``corpus_chars`` characters (``vocab_size`` distinct), ``workers``
    processes of one thread each (default: every core), then its fit with ``resamples`` refits: each run timed
    from a few steps of its width on this machine, its held-out loss measured at the end, slowed by the workers
    sharing the cores with each other and with the ``load`` the machine has now (default: its load average)."""

    val_windows = 2 * max(1, int(corpus_chars * (1 - TRAIN_FRACTION)) // grid.n_ctx)  # held out, then as many trained
    costs = []
    for spec in grid.specs():
        shape = dict(vocab_size=vocab_size, n_ctx=spec.n_ctx, d_model=spec.d_model, n_heads=spec.n_heads,
                     n_layers=spec.n_layers)
        pace = measure_pace(shape, spec.batch_size, spec.recipe, 1)
        costs.append((run_cost(spec), spec.steps * pace.step_s + val_windows * pace.forward_s / spec.batch_size))
    cores = os.cpu_count() or 1
    lanes = [0.0] * max(1, workers or cores)
    for _, seconds in sorted(costs, reverse=True):  # longest first onto the least loaded worker, as the study does
        lanes[lanes.index(min(lanes))] += seconds
    slower = contention(len(lanes), cores, os.getloadavg()[0] if load is None else load)
    return StudyEstimate(start=STARTUP_S, runs=max(lanes) * slower, fit=fit_seconds(resamples, len(costs), grid))


def with_estimate(metrics: list, estimate: RunEstimate | None) -> list:
    """The form's cost metrics (core.training.training_setup.cost_metrics) with the "Estimated time" metric made
    from ``estimate`` (``estimate_words``) in place of 6ND over one FLOP rate; as they are without one."""
    if estimate is None:
        return metrics
    return [("Estimated time", *estimate_words(estimate)) if m[0] == "Estimated time" else m for m in metrics]
