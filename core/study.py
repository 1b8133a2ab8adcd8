"""A scaling study: a grid of small models (several sizes N) trained on several amounts of text (token budgets D),
each once, with the project's own training loop; the runs go into ``runs.csv`` and Hoffmann et al.'s L(N, D) is
fitted to them.

- ``train_one(spec) -> row`` is a plain function: one model, one budget, one seed, one torch thread.
- An engine only schedules it: ``LocalEngine`` (a process pool on this machine, the default) or ``RayEngine``
  (Ray tasks on RAY_ADDRESS's cluster, or on a local Ray instance with this machine's cores). The same specs give
  the same rows on either: every run builds its model and draws its batches from its own seed, on one thread.
- ``run_study`` writes every finished run into runs.csv by rewriting the whole file (a temporary file beside it,
  fsync, rename), so the file never holds a partial row; started again on the same folder it trains only the
  runs that are missing.

N is the non-embedding parameter count (Kaplan et al. 2020): every parameter except the token embedding, the
position table and the output map. Hoffmann et al. (2022) count every parameter; runs.csv keeps that count too
(``N_total``). At these sizes the two differ by up to a factor of two (the 65-character vocabulary's embedding
and output map are a large share of a d = 16 model) and the embedding tables do little of the modelling that
the capacity term describes; Kaplan et al. found the non-embedding count gives the cleaner power law.
D is the number of training tokens (characters) seen: steps x batch x n_ctx. The loss is the validation loss
over every full n_ctx window of the held-out last 10 % of the corpus, in nats per character. flops = 6ND.

Command line: ``python -m core.study --corpus FILE --grid tiny|small|full --engine local|ray --out DIR``.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import platform
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from core.corpus import TRAIN_FRACTION, read_text_file, split_description
from core.cost import FLOPS_PER_PARAM_TOKEN
from core.model import ModelConfig
from core.params import count_parameters
from core.paths import REPO_ROOT

RUNS_CSV = "runs.csv"
STUDY_JSON = "study.json"       # what the study is (grid, corpus, convention) and how long its sessions took
PROGRESS_JSON = "progress.json"  # how far the session under way is; read by the page
FIT_JSON = "fit.json"           # the fit and its bootstrap intervals, once every run is in
CARD = "README.md"
ENGINES = ("local", "ray")
# Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models", arXiv:2305.16264): up to about four passes
# over the same text cost little against fresh text; beyond that a run measures repetition rather than data.
MAX_EPOCHS = 4
STARTUP_S = 8.0                 # starting Python, torch and the workers before the first step (measured: 5-10 s)
MIN_FREE_BYTES = 1_000_000      # runs.csv, study.json, fit.json and a card: a few kilobytes
N_CONVENTION = ("N counts every parameter except the token embedding, the position table and the output map "
                "(the non-embedding count of Kaplan et al. 2020); N_total counts them all (Hoffmann et al. 2022)")
SHIPPED_STUDY = REPO_ROOT / "assets" / "studies" / "shakespeare-char"  # the study the scaling page opens with
PARENT_ENV = "TE_STUDY_PARENT"  # set by core.study_job: the study stops when the app that started it is gone


class StudyError(ValueError):
    """A study that cannot run as asked; the message says why and what to do."""


class StudyStopped(RuntimeError):
    """The study was asked to stop; the runs finished so far are in runs.csv."""


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
    recipe: str = "muon"        # a name of core.train.RECIPES
    seed: int = 1337            # every run: the same seed, so runs of one size share their start and batches

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.n_ctx

    def heads(self, d: int) -> int:
        """The most heads of at least head_width dimensions each that divide d (at least one)."""
        return max(h for h in range(1, max(1, d // self.head_width) + 1) if d % h == 0)

    def steps(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_step))

    @property
    def max_tokens(self) -> int:
        return max(self.steps(t) for t in self.tokens) * self.tokens_per_step

    def specs(self, text: str = "") -> list["RunSpec"]:
        sha = corpus_sha256(text) if text else ""
        out = []
        for d in self.widths:
            for t in self.tokens:
                steps = self.steps(t)
                out.append(RunSpec(run_id=f"d{d}-D{steps * self.tokens_per_step}", d_model=d, n_heads=self.heads(d),
                                   n_layers=self.n_layers, n_ctx=self.n_ctx, batch_size=self.batch_size, steps=steps,
                                   recipe=self.recipe, seed=self.seed, corpus_sha256=sha, text=text))
        return out

    def to_dict(self) -> dict:
        return asdict(self)


GRIDS: dict[str, Grid] = {
    # a smoke test: 6 runs, too few for the five constants of the law, but the points show the trend
    "tiny": Grid("tiny", widths=(16, 32, 64), tokens=(100_000, 300_000)),
    # enough runs to fit: 4 sizes x 3 budgets spanning 10x
    "small": Grid("small", widths=(16, 32, 48, 64), tokens=(150_000, 500_000, 1_500_000)),
    # the shipped study: 6 sizes (N spans 35x) x 4 budgets spanning 10x
    "full": Grid("full", widths=(16, 24, 32, 48, 64, 96), tokens=(300_000, 600_000, 1_200_000, 3_000_000)),
}


def grid_from_file(path) -> Grid:
    """A grid of one's own: a JSON object with Grid's fields (name, widths and tokens at least)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["widths"], data["tokens"] = tuple(int(v) for v in data["widths"]), tuple(int(v) for v in data["tokens"])
        grid = Grid(**{"name": Path(path).stem, **data})
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise StudyError(f"--grid {path}: not a grid file ({type(e).__name__}: {e}); give tiny, small, full or a "
                         "JSON file with widths and tokens") from None
    if not grid.widths or not grid.tokens or min(grid.widths + grid.tokens) < 1:
        raise StudyError(f"--grid {path}: widths and tokens must be lists of positive whole numbers")
    return grid


def resolve_grid(name: str) -> Grid:
    if name in GRIDS:
        return GRIDS[name]
    if name.endswith(".json"):
        return grid_from_file(name)
    raise StudyError(f"unknown grid {name!r}; choose one of {', '.join(GRIDS)} (or give a .json grid file)")


def corpus_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def corpus_problem(grid: Grid, text: str, name: str = "the corpus") -> str | None:
    """Why ``text`` cannot feed ``grid`` (None if it can): the largest budget may read the training part at most
    MAX_EPOCHS times, and each part needs a full window."""
    train_chars = int(len(text) * TRAIN_FRACTION)
    need = math.ceil(grid.max_tokens / MAX_EPOCHS / TRAIN_FRACTION)
    if grid.max_tokens > MAX_EPOCHS * train_chars:
        fits = [g for g in GRIDS.values() if g.max_tokens <= MAX_EPOCHS * train_chars]
        other = f" or --grid {fits[-1].name}" if fits else ""
        return (f"{name} is too small for the {grid.name} grid: its largest budget is D = {grid.max_tokens:,} tokens, "
                f"and the training part ({TRAIN_FRACTION:.0%}, {train_chars:,} characters) may be read at most "
                f"{MAX_EPOCHS} times ({MAX_EPOCHS * train_chars:,} tokens). Beyond about {MAX_EPOCHS} passes a run "
                f"measures repetition rather than data (Muennighoff et al. 2023). Use a text of at least {need:,} "
                f"characters{other}.")
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
    text: str = field(default="", repr=False, compare=False)

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.n_ctx

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(vocab_size=vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                           n_layers=self.n_layers)


# runs.csv's columns; every one but the last two is the same for the same spec whichever engine trained it
ROW_FIELDS = ("run_id", "d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "steps", "N", "N_total", "D", "loss",
              "train_loss", "flops", "seed", "recipe", "wall_s", "cpu_s")
TIMING_FIELDS = ("wall_s", "cpu_s")
INT_FIELDS = {"d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "steps", "N", "N_total", "D", "seed"}
FLOAT_FIELDS = {"loss", "train_loss", "flops", "wall_s", "cpu_s"}


def non_embedding(counts: dict) -> int:
    """N as this study counts it: the blocks and the final LayerNorm (see the module's docstring)."""
    return counts["blocks"] + counts["final_norm"]


def train_one(spec: RunSpec) -> dict:
    """Train one model of ``spec`` from its seed on one thread and measure it: a runs.csv row."""
    from core.threads import use_threads
    from core.train import Trainer, TrainConfig, windowed_loss

    use_threads(1)  # one thread per worker, whatever the engine: the same kernels, so the same numbers
    if not spec.text:
        raise StudyError(f"run {spec.run_id}: the spec carries no corpus")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    tc = TrainConfig.recipe(spec.recipe, steps=spec.steps, batch_size=spec.batch_size, seed=spec.seed,
                            heads_interval=0, eval_interval=spec.steps)
    trainer = Trainer(spec.text, dict(n_ctx=spec.n_ctx, d_model=spec.d_model, n_heads=spec.n_heads,
                                      n_layers=spec.n_layers), tc)
    while not trainer.done:
        trainer.step()
    val = windowed_loss(trainer.model, trainer.val_data)
    train = windowed_loss(trainer.model, trainer.train_data[: len(trainer.val_data)])
    counts = count_parameters(trainer.config)
    n = non_embedding(counts)
    return {"run_id": spec.run_id, "d_model": spec.d_model, "n_heads": spec.n_heads, "n_layers": spec.n_layers,
            "n_ctx": spec.n_ctx, "batch_size": spec.batch_size, "steps": spec.steps, "N": n,
            "N_total": counts["total"], "D": trainer.tokens_seen, "loss": round(val, 6), "train_loss": round(train, 6),
            "flops": float(FLOPS_PER_PARAM_TOKEN * n * trainer.tokens_seen), "seed": spec.seed, "recipe": spec.recipe,
            "wall_s": round(time.perf_counter() - wall0, 2), "cpu_s": round(time.process_time() - cpu0, 2)}


def run_cost(spec: RunSpec) -> float:
    """A run's relative cost, for scheduling: 6ND plus a per-step overhead that dominates tiny models."""
    n = 12 * spec.n_layers * spec.d_model ** 2
    return spec.tokens * (FLOPS_PER_PARAM_TOKEN * n + 30_000)


# ---------------------------------------------------------------- engines

ShouldStop = Callable[[], bool]


class LocalEngine:
    """A pool of worker processes on this machine, one torch thread each, as many as there are cores."""
    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)

    def check(self):
        pass

    def run(self, specs: list[RunSpec], should_stop: ShouldStop) -> Iterator[dict]:
        import multiprocessing as mp
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        if not specs:
            return
        # spawn, not fork: the parent may be a threaded server, and a forked torch can deadlock
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(specs)), mp_context=mp.get_context("spawn"),
                                   initializer=_worker_init, initargs=(os.getpid(),))
        pending = {pool.submit(train_one, s) for s in specs}
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in done:
                    try:
                        row = f.result()
                    except BrokenProcessPool:
                        raise StudyError("a worker process died (out of memory, or killed); the runs finished "
                                         "before it are kept: run the same command again to continue") from None
                    yield row
                if pending and should_stop():
                    raise StudyStopped()
        finally:
            for f in pending:
                f.cancel()
            if pending:  # stopped or failed: end the runs under way now rather than after they finish
                for p in list((getattr(pool, "_processes", None) or {}).values()):
                    p.terminate()
            pool.shutdown(wait=True, cancel_futures=True)


def _worker_init(parent: int | None = None):
    # Ctrl-C reaches the whole process group: only the parent acts on it (and ends its workers)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        die_with_parent(parent)


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when its parent dies (Linux's PR_SET_PDEATHSIG), so that a study
    killed outright (SIGKILL, out of memory) leaves no worker training on for minutes. ``parent``: the pid the
    parent had, in case it died before this call. False where the platform has no such call (the app's handle
    then ends the study's process group when it sees the study gone)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the call took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def _train_with_text(spec: RunSpec, text: str) -> dict:
    """A Ray task: the corpus travels once through the object store, not inside every spec."""
    return train_one(replace(spec, text=text))


def _ray_module():
    try:
        import ray
    except ImportError:
        raise StudyError("the ray engine needs Ray, which is not installed: pip install ray==2.60.0 (it is in "
                         "requirements-dev.txt), or use --engine local") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address like "10.0.0.5:6379" or "ray://head:10001"; None for "auto" and the like."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def ray_runtime_env() -> dict:
    """What Ray's workers need: this project's ``core`` package (uploaded to the cluster, so its machines need only
    the requirements installed) and one OpenMP thread. Give it to ray.init when initialising Ray yourself."""
    return {"py_modules": [str(REPO_ROOT / "core")], "env_vars": {"OMP_NUM_THREADS": "1"}}


class RayEngine:
    """The same runs as Ray tasks (one CPU each). With an address (or RAY_ADDRESS) it joins that cluster; without
    one it starts a local Ray instance with this machine's cores and shuts it down afterwards. A Ray session
    already initialised in this process (a test's) is used as it is."""
    name = "ray"

    def __init__(self, address: str | None = None, cpus: int | None = None, connect_timeout: float = 5.0):
        self.address = address if address is not None else (os.environ.get("RAY_ADDRESS") or None)
        self.cpus = cpus or os.cpu_count() or 1
        self.connect_timeout = connect_timeout

    def check(self):
        ray = _ray_module()
        if self.address and not ray.is_initialized():
            hp = _host_port(self.address)
            if hp is not None:
                try:
                    socket.create_connection(hp, timeout=self.connect_timeout).close()
                except OSError as e:
                    raise StudyError(
                        f"cannot reach the Ray cluster at {self.address} (RAY_ADDRESS): {e.strerror or e}. Start it "
                        "(ray start --head) or correct the address; unset RAY_ADDRESS to use a local Ray instance "
                        "with this machine's cores.") from None

    def _connect(self, ray) -> bool:
        """Initialise Ray unless it is; True if this call did (and so shuts it down)."""
        if ray.is_initialized():
            return False
        env = ray_runtime_env()
        try:
            if self.address:
                ray.init(address=self.address, runtime_env=env, log_to_driver=False)
            else:
                ray.init(num_cpus=self.cpus, include_dashboard=False, log_to_driver=False, runtime_env=env,
                         object_store_memory=100 * 2**20)
        except Exception as e:  # noqa: BLE001 - Ray raises several kinds; the user needs the message
            raise StudyError(f"Ray could not start or connect ({self.address or 'a local instance'}): "
                             f"{type(e).__name__}: {e}") from None
        return True

    def run(self, specs: list[RunSpec], should_stop: ShouldStop) -> Iterator[dict]:
        if not specs:
            return
        ray = _ray_module()
        started = self._connect(ray)
        pending = []
        try:
            text_ref = ray.put(specs[0].text)  # every spec of a study carries the same corpus
            task = ray.remote(num_cpus=1, max_retries=0)(_train_with_text)
            pending = [task.remote(replace(s, text=""), text_ref) for s in specs]
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in done:
                    yield ray.get(ref)
                if pending and should_stop():
                    raise StudyStopped()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def make_engine(name: str, workers: int | None = None, address: str | None = None):
    if name == "local":
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(address, cpus=workers)
    raise StudyError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


# ---------------------------------------------------------------- runs.csv, atomically

def _fsync_dir(folder: Path):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str):
    """Replace ``path`` with ``data`` or leave it as it was: a temporary file beside it, fsync, rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def format_rows(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (repr(float(r[k])) if k == "flops" else r[k]) for k in ROW_FIELDS})
    return buf.getvalue()


def read_rows(path) -> list[dict]:
    """runs.csv's rows with their types; [] when there is no file. StudyError for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StudyError(f"{path} cannot be read: {e}") from None
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != ROW_FIELDS:
        raise StudyError(f"{path} is not a study's runs.csv (its columns are {reader.fieldnames}); choose another "
                         "--out folder")
    rows = []
    for i, raw in enumerate(reader, start=2):
        try:
            rows.append({k: int(v) if k in INT_FIELDS else float(v) if k in FLOAT_FIELDS else v
                         for k, v in raw.items()})
        except (TypeError, ValueError):
            raise StudyError(f"{path}, line {i}: not a complete run ({raw})") from None
    return rows


def rows_to_arrays(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, D, loss) of the rows as float arrays."""
    return tuple(np.array([float(r[k]) for r in rows], dtype=float) for k in ("N", "D", "loss"))


def _row_problem(row: dict) -> str | None:
    """Why the fit cannot use this run (None if it can): the law takes the logarithm of N, D and the loss."""
    loss = float(row["loss"])
    if math.isnan(loss):
        return "its loss is NaN (the run diverged)"
    if math.isinf(loss):
        return "its loss is infinite (the run diverged)"
    if loss <= 0:
        return f"its loss is {loss:g}, and a cross-entropy is positive"
    for key in ("N", "D"):
        v = float(row[key])
        if not (math.isfinite(v) and v > 0):
            return f"its {key} is {v:g}, not a positive count"
    return None


def usable_rows(rows: list[dict]) -> tuple[list[dict], list[tuple[dict, str]]]:
    """(the rows the fit can use, [(row, why not)] for the others): a run that diverged (a loss of NaN or
    infinity) or one with a loss, N or D that is not positive is set aside, and the rest are fitted."""
    good, bad = [], []
    for r in rows:
        why = _row_problem(r)
        if why is None:
            good.append(r)
        else:
            bad.append((r, why))
    return good, bad


def dropped_note(bad: list[tuple[dict, str]]) -> str:
    """One sentence naming each run that usable_rows set aside, with its N and D and why ('' for none)."""
    def count(v) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{float(v):g}"

    if not bad:
        return ""
    each = "; ".join(f"run {r.get('run_id', '?')} (N = {count(r['N'])}, D = {count(r['D'])}): {why}" for r, why in bad)
    return f"{len(bad)} run{'s are' if len(bad) > 1 else ' is'} left out of the fit: {each}."


# ---------------------------------------------------------------- the study

def machine_description() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def study_meta(grid: Grid, text: str, corpus_name: str) -> dict:
    """What makes two sessions the same study: the grid and the corpus."""
    return {"grid": grid.to_dict(), "corpus": corpus_name, "corpus_chars": len(text),
            "corpus_sha256": corpus_sha256(text), "split": split_description(), "N_convention": N_CONVENTION,
            "loss": f"validation loss, nats per character, over every full {grid.n_ctx}-character window of the "
                    f"held-out {1 - TRAIN_FRACTION:.0%}"}


def _check_same_study(meta: dict, old: dict, folder: Path):
    for key, what in (("corpus_sha256", "corpus"), ("grid", "grid")):
        if old.get(key) != json.loads(json.dumps(meta[key])):  # as study.json holds it: tuples become lists
            name = old.get("corpus") if what == "corpus" else old.get("grid", {}).get("name")
            raise StudyError(f"{folder} holds a study of another {what} ({name}); give a new --out folder, or the "
                             "same corpus and grid to continue it")


def prepare_folder(folder: Path):
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        raise StudyError(f"cannot write in {folder}: {e.strerror or e}") from None
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise StudyError(f"the disk holding {folder} is full ({free:,} bytes free); free some space and run again")


@dataclass
class Progress:
    total: int               # runs in the grid
    done: int                # runs in runs.csv
    new: int                 # of those, finished in this session
    cost_total: float        # run_cost of the grid
    cost_done: float         # run_cost of the runs in runs.csv
    cost_at_start: float     # ... when this session started
    started: float           # time.time() at the start of this session
    row: dict | None = None  # the run that just finished

    @property
    def elapsed(self) -> float:
        return time.time() - self.started

    @property
    def eta(self) -> float | None:
        """Seconds left, at this session's pace so far (None before its first run is in)."""
        spent = self.cost_done - self.cost_at_start
        if self.new == 0 or spent <= 0:
            return None
        return round(self.elapsed * (self.cost_total - self.cost_done) / spent, 1)


def run_study(grid: Grid, text: str, corpus_name: str, out_dir, engine, *, command: str = "",
              progress: Callable[[Progress], None] | None = None, should_stop: ShouldStop | None = None,
              note: str = "") -> list[dict]:
    """Train every run of ``grid`` that ``out_dir/runs.csv`` lacks with ``engine``; returns all rows. Checks
    everything it can before the first run (corpus, folder, engine), so bad input never leaves a row."""
    folder = Path(out_dir)
    problem = corpus_problem(grid, text, corpus_name)
    if problem:
        raise StudyError(problem)
    specs = grid.specs(text)
    prepare_folder(folder)
    meta = study_meta(grid, text, corpus_name)
    meta_path = folder / STUDY_JSON
    old = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    rows = read_rows(folder / RUNS_CSV)
    if old is not None:
        _check_same_study(meta, old, folder)
    elif rows:
        raise StudyError(f"{folder / RUNS_CSV} has runs but no {STUDY_JSON}: choose another --out folder")
    ids = {s.run_id for s in specs}
    strangers = [r["run_id"] for r in rows if r["run_id"] not in ids]
    if strangers:
        raise StudyError(f"{folder / RUNS_CSV} holds runs of another grid ({', '.join(strangers[:3])}); give a new "
                         "--out folder")
    engine.check()
    have = {r["run_id"] for r in rows}
    todo = sorted((s for s in specs if s.run_id not in have), key=run_cost, reverse=True)  # longest first
    sessions = (old or {}).get("sessions", [])
    session = {"engine": engine.name, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_description(),
               "command": command, "runs_before": len(rows), "runs_after": len(rows), "wall_s": 0.0,
               "load_start": _load()}
    if note:
        session["note"] = note
    sessions.append(session)
    t0 = time.time()

    def save_meta():
        session["wall_s"] = round(time.time() - t0, 1)
        session["runs_after"] = len(rows)
        session["load_end"] = _load()
        write_atomic(meta_path, json.dumps({**meta, "sessions": sessions}, indent=1) + "\n")

    def save_progress(state: str, message: str = ""):
        write_atomic(folder / PROGRESS_JSON, json.dumps(
            {"state": state, "total": len(specs), "done": len(rows), "message": message, "pid": os.getpid(),
             "engine": engine.name, "elapsed_s": round(time.time() - t0, 1), "eta_s": p.eta, "time": time.time()}))

    cost = {s.run_id: run_cost(s) for s in specs}
    done_cost = sum(cost[r["run_id"]] for r in rows)
    p = Progress(total=len(specs), done=len(rows), new=0, cost_total=sum(cost.values()), cost_done=done_cost,
                 cost_at_start=done_cost, started=t0)
    try:
        save_meta()
        save_progress("running")
        for row in engine.run(todo, should_stop or (lambda: False)):
            write_atomic(folder / RUNS_CSV, format_rows(rows + [row]))
            rows.append(row)
            p.done, p.new, p.row = len(rows), p.new + 1, row
            p.cost_done += cost[row["run_id"]]
            save_meta()
            save_progress("running")
            if progress:
                progress(p)
    except StudyStopped:
        _quietly(save_meta)
        _quietly(lambda: save_progress("stopped", f"stopped with {len(rows)} of {len(specs)} runs done"))
        raise
    except OSError as e:
        msg = (f"could not write in {folder}: {e.strerror or e}. runs.csv keeps the {len(rows)} "
               f"run{'' if len(rows) == 1 else 's'} finished before this; free some space and run the same command "
               "again to continue")
        _quietly(lambda: save_progress("failed", msg))
        raise StudyError(msg) from None
    except BaseException as e:
        failure = f"{type(e).__name__}: {e}"
        _quietly(save_meta)
        _quietly(lambda: save_progress("failed", failure))
        raise
    _quietly(lambda: save_progress("trained", "every run is in"))
    return rows


def _load() -> float | None:
    """The machine's 1-minute load average: how shared it was (a study on 2 idle cores shows about 2)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _quietly(fn):
    try:
        fn()
    except OSError:
        pass


# ---------------------------------------------------------------- the fit of a finished study

def fit_study(rows: list[dict], resamples: int = 200, seed: int = 0) -> dict:
    """The Hoffmann et al. fit of L(N, D) to the rows, with bootstrap intervals over runs (core.scaling)."""
    from core.scaling import bootstrap_fit, fit_scaling_law

    good, bad = usable_rows(rows)  # a diverged run is left out, and named in "dropped"
    N, D, loss = rows_to_arrays(good)
    law = fit_scaling_law(N, D, loss)
    boot = bootstrap_fit(N, D, loss, law, resamples=resamples, seed=seed)
    return {"runs": len(good), "law": asdict(law), "r2_log": law.r2_log(N, D, loss),
            "rms_log": law.rms_log_error(N, D, loss), "bootstrap": boot, "N_convention": N_CONVENTION,
            "dropped": [{"run_id": r.get("run_id"), "reason": why} for r, why in bad]}


COMPARED = (("alpha", "α (capacity exponent)"), ("beta", "β (data exponent)"),
            ("a", "β/(α+β): N_opt ∝ C to this power"), ("E", "E (the floor)"), ("A", "A"), ("B", "B"))


def comparison_rows(law, intervals: dict | None = None) -> list[dict]:
    """The fitted constants (a ScalingLaw or its dict) with their intervals beside Chinchilla's and Epoch's."""
    from core.scaling import CHINCHILLA, EPOCH_2024, ScalingLaw

    law = law if isinstance(law, ScalingLaw) else ScalingLaw(**law)

    def value(l: ScalingLaw, key: str) -> float:
        return l.N_exponent if key == "a" else getattr(l, key)

    rows = []
    for key, name in COMPARED:
        lo, hi = (intervals or {}).get(key, (math.nan, math.nan))
        rows.append({"constant": name, "key": key, "this study": value(law, key), "95% low": lo, "95% high": hi,
                     "Chinchilla 2022": value(CHINCHILLA, key), "Epoch 2024": value(EPOCH_2024, key)})
    return rows


def estimate_seconds(grid: Grid, reference: list[dict], workers: int | None = None) -> float | None:
    """Rough wall time of ``grid`` on ``workers`` idle cores, from the CPU seconds of reference runs (the shipped
    study's) per unit of run_cost; None without reference runs."""
    ref = [r for r in reference if r.get("cpu_s")]
    if not ref:
        return None
    per_cost = sum(r["cpu_s"] for r in ref) / sum(run_cost(_spec_of(r)) for r in ref)
    costs = sorted((run_cost(s) * per_cost for s in grid.specs()), reverse=True)
    lanes = [0.0] * max(1, workers or os.cpu_count() or 1)
    for c in costs:  # longest first onto the least loaded worker, as the pool schedules them
        lanes[lanes.index(min(lanes))] += c
    return STARTUP_S + max(lanes)


def _spec_of(row: dict) -> RunSpec:
    return RunSpec(run_id=row["run_id"], d_model=row["d_model"], n_heads=row["n_heads"], n_layers=row["n_layers"],
                   n_ctx=row["n_ctx"], batch_size=row["batch_size"], steps=row["steps"], recipe=row["recipe"],
                   seed=row["seed"])


def write_card(folder, meta: dict, rows: list[dict], fit: dict | None) -> str:
    """The study's card (README.md): what was trained, how, on what, how long it took, and the fit."""
    from core.scaling import CHINCHILLA, EPOCH_2024

    g = meta["grid"]
    sessions = meta.get("sessions", [])
    wall = sum(s.get("wall_s", 0) for s in sessions)
    cpu = sum(r["cpu_s"] for r in rows)
    lines = [f"# Scaling study: {meta['corpus']}, grid {g['name']}", "",
             f"{len(rows)} runs: widths d = {', '.join(map(str, g['widths']))} at depth L = {g['n_layers']} "
             f"(heads of {g['head_width']} dimensions), each trained on D = "
             f"{', '.join(f'{t:,}' for t in sorted({r['D'] for r in rows}))} characters "
             f"(batch {g['batch_size']} x n_ctx {g['n_ctx']}, recipe {g['recipe']}, seed {g['seed']}, one torch thread "
             f"per run), on {meta['corpus']} ({meta['corpus_chars']:,} characters, {meta['split']}; the corpus is not "
             "in the repository).", "",
             f"- N: {meta['N_convention']}.",
             "- D: training characters seen (steps x batch x n_ctx); one character is one token.",
             f"- loss: {meta['loss']}.", "- flops: 6ND.", ""]
    lines += ["## How it was made", ""]
    for s in sessions:
        lines.append(f"- `{s['command']}`: engine {s['engine']}, runs {s['runs_before']} to {s['runs_after']}, "
                     f"wall time {s['wall_s'] / 60:.1f} min, started {s['started']}, on {s['machine']}; load average "
                     f"{s.get('load_start')} at the start, {s.get('load_end')} at the end"
                     + (f". {s['note']}" if s.get("note") else ""))
    lines += ["", f"Wall time {wall / 60:.1f} min in all; the runs' CPU time adds up to {cpu / 60:.1f} min.", ""]
    if fit is not None:
        law, b = fit["law"], fit["bootstrap"]
        ci = b["intervals"]
        lines += ["## The fit", "",
                  "Hoffmann et al.'s L(N, D) = A/N^α + B/D^β + E, fitted as they did (Huber loss on log L, L-BFGS from "
                  "their grid of 4,500 starts). Intervals: the 2.5th and 97.5th percentiles over "
                  f"{b['resamples'] - b['failed']} bootstrap refits on runs drawn with replacement "
                  f"({b['failed']} of {b['resamples']} resamples gave no law of this form).", "",
                  "| constant | this study | 95% interval | Chinchilla (2022) | Epoch (2024) |", "|---|---|---|---|---|"]
        for key, name in (("alpha", "α"), ("beta", "β"), ("E", "E (nats/char here, nats/token there)"),
                          ("A", "A"), ("B", "B")):
            lo, hi = ci[key]
            lines.append(f"| {name} | {law[key]:.4g} | {lo:.4g} to {hi:.4g} | {getattr(CHINCHILLA, key):.4g} | "
                         f"{getattr(EPOCH_2024, key):.4g} |")
        a = law["beta"] / (law["alpha"] + law["beta"])
        lo, hi = ci["a"]
        lines += ["", f"R² of log loss: {fit['r2_log']:.4f}; RMS error of log loss: {fit['rms_log']:.4f} "
                  f"(about {100 * (math.exp(fit['rms_log']) - 1):.1f} % of the loss).",
                  f"Compute-optimal N grows as C^{a:.2f} (95% interval {lo:.2f} to {hi:.2f}); Chinchilla's constants "
                  f"say C^{CHINCHILLA.beta / (CHINCHILLA.alpha + CHINCHILLA.beta):.2f}, Epoch's "
                  f"C^{EPOCH_2024.beta / (EPOCH_2024.alpha + EPOCH_2024.beta):.2f}.", "",
                  "Files: `runs.csv` (one row per run), `study.json` (grid, corpus checksum, sessions), `fit.json` "
                  "(the fit, the bootstrap intervals)."]
    text = "\n".join(lines) + "\n"
    write_atomic(Path(folder) / CARD, text)
    return text


def finish_study(folder, resamples: int = 200) -> dict | None:
    """Once every run is in: fit.json and the card. Returns the fit (None when the runs pin down no law)."""
    from core.scaling import FitError
    from core.scaling_runs import MIN_RUNS

    folder = Path(folder)
    meta = json.loads((folder / STUDY_JSON).read_text())
    rows = read_rows(folder / RUNS_CSV)
    fit = None
    if len(usable_rows(rows)[0]) >= MIN_RUNS:
        try:
            fit = fit_study(rows, resamples=resamples)
        except FitError as e:
            fit = None
            meta["fit_error"] = str(e)
    if fit is not None:
        write_atomic(folder / FIT_JSON, json.dumps(fit, indent=1) + "\n")
    write_card(folder, meta, rows, fit)
    return fit


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise StudyError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path} is not a study's {path.name}: it holds a {type(data).__name__}, not an object")
    return data


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def read_meta(folder) -> dict:
    """study.json of a study folder, with the grid and corpus the page and the card describe it by. StudyError
    naming the file when it cannot be read or lacks them."""
    path = Path(folder) / STUDY_JSON
    meta = _read_json(path)
    g = meta.get("grid")
    if not (isinstance(g, dict) and all(isinstance(g.get(k), list) and g[k] and all(map(_positive, g[k]))
                                        for k in ("widths", "tokens")) and _positive(g.get("n_layers"))):
        raise StudyError(f"{path} is not a study's study.json: it has no grid with widths, tokens and n_layers")
    if not (isinstance(meta.get("corpus"), str) and _positive(meta.get("corpus_chars"))
            and isinstance(meta.get("sessions", []), list)
            and all(isinstance(x, dict) for x in meta.get("sessions", []))):
        raise StudyError(f"{path} is not a study's study.json: it has no corpus, corpus_chars or list of sessions")
    return meta


def read_fit(folder) -> dict | None:
    """fit.json of a study folder; None when there is none (the study has not finished). StudyError naming the
    file when it cannot be read or lacks the law and its bootstrap intervals."""
    from dataclasses import fields

    from core.scaling import ScalingLaw

    path = Path(folder) / FIT_JSON
    if not path.is_file():
        return None
    fit = _read_json(path)
    law, boot = fit.get("law"), fit.get("bootstrap")
    constants = [f.name for f in fields(ScalingLaw)]
    if not (isinstance(law, dict) and set(law) == set(constants) and all(_positive(law[k]) for k in constants)):
        raise StudyError(f"{path} is not a study's fit.json: it has no law with positive {', '.join(constants)}")
    ci = boot.get("intervals") if isinstance(boot, dict) else None
    if not (isinstance(ci, dict) and all(isinstance(boot.get(k), int) for k in ("resamples", "failed"))
            and all(isinstance(ci.get(k), list) and len(ci[k]) == 2
                    and all(isinstance(v, (int, float)) and math.isfinite(v) for v in ci[k])
                    for k in (*constants, "a"))):
        raise StudyError(f"{path} is not a study's fit.json: it has no bootstrap with resamples, failed and the "
                         "intervals of every constant")
    return fit


def read_study(folder) -> tuple[dict, list[dict], dict | None]:
    """(study.json, rows, fit.json or None) of a study folder. StudyError naming the file that cannot be read."""
    folder = Path(folder)
    return read_meta(folder), read_rows(folder / RUNS_CSV), read_fit(folder)


def open_study(folder) -> tuple[dict | None, list[dict], list[tuple[dict, str]], dict | None, list[str]]:
    """What a page can show of a study folder: (study.json, the rows the fit can use, [(row, why not)] for the
    others (usable_rows), fit.json, problems). A study.json or runs.csv that cannot be read loses the study,
    (None, [], [], None, [why]); a fit.json that cannot be read, or that was fitted to other runs than the usable
    ones, loses only the fit. Each problem names its file and says why."""
    folder = Path(folder)
    try:
        meta, rows = read_meta(folder), read_rows(folder / RUNS_CSV)
    except StudyError as e:
        return None, [], [], None, [str(e)]
    good, bad = usable_rows(rows)
    try:
        fit = read_fit(folder)
    except StudyError as e:
        return meta, good, bad, None, [str(e)]
    if fit is not None and fit.get("runs") != len(good):
        return meta, good, bad, None, [f"{folder / FIT_JSON} was fitted to {fit.get('runs')} runs, not to the "
                                       f"{len(good)} usable ones in {RUNS_CSV}"]
    return meta, good, bad, fit, []


def read_progress(folder) -> dict | None:
    try:
        return json.loads((Path(folder) / PROGRESS_JSON).read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- command line

def _bar(p: Progress):
    width = 28
    filled = int(width * p.done / max(1, p.total))
    eta = "" if p.eta is None else f", ETA {p.eta / 60:.1f} min"
    last = "" if p.row is None else f" | {p.row['run_id']}: loss {p.row['loss']:.4f}"
    sys.stderr.write(f"\r[{'#' * filled}{'-' * (width - filled)}] {p.done}/{p.total} runs{last} | "
                     f"{p.elapsed / 60:.1f} min{eta} ")
    sys.stderr.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.study",
                                description="Train a grid of small models (sizes x token budgets) and fit L(N, D).")
    p.add_argument("--corpus", required=True, help="UTF-8 text file (Tiny Shakespeare for the shipped study)")
    p.add_argument("--grid", default="tiny", help=f"{' | '.join(GRIDS)} | a .json file with widths and tokens "
                                                  "(default tiny)")
    p.add_argument("--engine", default="local", help="local: a process pool on this machine (default); ray: Ray "
                                                     "tasks on RAY_ADDRESS's cluster or on a local Ray instance")
    p.add_argument("--out", required=True, help="study folder: runs.csv, study.json, fit.json, README.md; a folder "
                                                "holding part of the same study is continued")
    p.add_argument("--workers", type=int, default=None, help="processes (local) or CPUs (a local Ray instance); "
                                                             "default: every core")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap refits for the intervals (default 200)")
    p.add_argument("--nice", type=int, default=0, help="lower this study's CPU priority (what the app does)")
    p.add_argument("--note", default="", help="a sentence for the card (the machine was shared, say)")
    args = p.parse_args(argv)
    argv_used = argv if argv is not None else sys.argv[1:]
    command = "python -m core.study " + shlex.join(str(a) for a in argv_used)

    stop = threading.Event()
    parent = os.environ.get(PARENT_ENV)

    def should_stop() -> bool:
        # started by the app: stop when the app's process is gone (this process is then adopted by another)
        return stop.is_set() or (parent is not None and str(os.getppid()) != parent)

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.nice:
        os.nice(args.nice)
    try:
        if args.engine not in ENGINES:
            raise StudyError(f"unknown engine {args.engine!r}; choose one of {', '.join(ENGINES)}")
        grid = resolve_grid(args.grid)
        try:
            text = read_text_file(args.corpus)
        except ValueError as e:
            raise StudyError(f"--corpus: {e}") from None
        engine = make_engine(args.engine, args.workers)
        specs = grid.specs()
        print(f"study: grid {grid.name}, {len(specs)} runs (d = {', '.join(map(str, grid.widths))}; D = "
              f"{', '.join(f'{grid.steps(t) * grid.tokens_per_step:,}' for t in grid.tokens)}), engine {engine.name}, "
              f"out {args.out}")
        print(f"N: {N_CONVENTION}")
        rows = run_study(grid, text, Path(args.corpus).name, args.out, engine, command=command, progress=_bar,
                         should_stop=should_stop, note=args.note)
        sys.stderr.write("\n")
        print(f"{len(rows)} runs in {Path(args.out) / RUNS_CSV}")
        fit = finish_study(args.out, resamples=args.bootstrap)
        if fit is not None:
            law, ci = fit["law"], fit["bootstrap"]["intervals"]
            print("fit: " + ", ".join(f"{k} = {law[k]:.4g} [{ci[k][0]:.4g}, {ci[k][1]:.4g}]"
                                      for k in ("alpha", "beta", "E", "A", "B")) + f"; R² (log loss) {fit['r2_log']:.4f}")
        print(f"card: {Path(args.out) / CARD}")
        return 0
    except StudyError as e:
        sys.stderr.write(f"\nerror: {e}\n")
        return 2
    except StudyStopped:
        done = len(read_rows(Path(args.out) / RUNS_CSV))
        sys.stderr.write(f"\nstopped: {done} runs are in {Path(args.out) / RUNS_CSV}; run the same command again to "
                         "continue\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
