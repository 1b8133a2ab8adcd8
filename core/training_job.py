"""Training in the background: one worker thread per job, polled by the UI.

A ``TrainingJob`` owns a ``core.train.Trainer`` and a daemon thread that calls ``trainer.step()`` until the
planned steps are done or someone pauses or stops it. The UI never touches the trainer while it runs: it
reads ``status()``, a copy of the metrics taken under a lock, and calls pause / resume / stop / save.
Each job builds its own model from its own seed, so two jobs (two browser sessions) share nothing but
the CPU, and the cached models of the sidebar are never involved.

If the handle is garbage-collected (its browser session ended) the worker stops by itself.
"""
from __future__ import annotations

import collections
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.checkpoint import save_checkpoint, user_model_folder
from core.induction import induction_summary
from core.job_settings import JobSettings
from core.params import count_parameters
from core.sampling import generate
from core.speed import observe_rate
from core.threads import training_threads, use_threads
from core.tokenizer import Prompt
from core.train import Trainer, training_record

MAX_RUNNING_JOBS = 4            # concurrent runs per server process; more would only share the same cores
SAMPLE_CHARS = 200              # length of each periodic sample
SAMPLE_TEMPERATURE = 0.8

# preparing -> running <-> paused, then stopped or finished (or failed); "pausing" and "stopping" are a
# request the worker has not acted on yet (it finishes the step under way first)
ACTIVE_STATES = ("preparing", "running", "pausing", "paused", "stopping")  # the thread is alive
MOVING_STATES = ("preparing", "running", "pausing", "stopping")            # worth polling
SAVABLE_STATES = ("paused", "stopped", "finished")

_WORKERS: "weakref.WeakSet[_Worker]" = weakref.WeakSet()
_SLOTS_LOCK = threading.Lock()  # the check "fewer than MAX_RUNNING_JOBS train" and the start are one step


class BusyError(RuntimeError):
    """Too many runs are training in this server process already."""


@torch.no_grad()
def sample_text(model, prompt_ids: list[int], n_new: int, temperature: float, seed: int) -> list[int]:
    """n_new token ids drawn after prompt_ids with the app's own sampler (core.sampling.generate).
    Its own generator: the same seed at every checkpoint, so changes in the text are the weights' doing."""
    gen = torch.Generator().manual_seed(seed)
    out = generate(model, torch.tensor([prompt_ids], dtype=torch.long), n_new, temperature, generator=gen)
    return out[0, len(prompt_ids):].tolist()


@dataclass(frozen=True)
class JobStatus:
    """A consistent copy of a job's progress; safe to read from any thread."""
    state: str
    message: str | None
    step: int
    total_steps: int
    tokens_seen: int
    tokens_per_s: float | None   # recent optimisation steps only
    elapsed_s: float             # time spent training, pauses excluded
    eta_s: float | None
    step_losses: list[float] = field(repr=False)   # the batch loss of every step
    evals: list[dict] = field(repr=False)          # Trainer.log rows: step, train_loss, val_loss, tokens_per_s
    samples: list[tuple[int, str]] = field(repr=False)
    sample_prompt: str = ""
    n_params: int = 0
    vocab_size: int = 0
    heads: list[dict] = field(default_factory=list, repr=False)  # heads.csv rows measured so far
    units: str = "characters"    # what a token is, in the page's words ("characters" or "tokens")
    val_chars_per_token: float = 1.0  # of the held-out part: nats per token / ln 2 / this = bits per character

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def moving(self) -> bool:
        """The state will change without anyone asking: a page should keep polling."""
        return self.state in MOVING_STATES

    @property
    def can_pause(self) -> bool:
        return self.state in ("preparing", "running")

    @property
    def can_stop(self) -> bool:
        return self.state in ("preparing", "running", "pausing", "paused")

    @property
    def can_start(self) -> bool:
        """A new run may replace this one: it is not training (a paused run must be stopped first)."""
        return not self.active

    @property
    def can_save(self) -> bool:
        return self.state in SAVABLE_STATES and self.step > 0

    @property
    def can_resume(self) -> bool:
        return self.state in ("paused", "stopped") and self.step < self.total_steps

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / max(1, self.total_steps))


class _Worker:
    """Everything the thread touches. The public handle holds it; the thread never holds the handle."""

    def __init__(self, text: str, corpus_name: str, settings: JobSettings, sample_prompt: str):
        self.text, self.corpus_name, self.settings = text, corpus_name, settings
        self.tc = settings.train_config()
        self.sample_prompt_text = sample_prompt
        self.trainer: Trainer | None = None
        self.prompt_ids: list[int] = []
        self.lock = threading.Lock()        # guards the metrics below
        self.model_lock = threading.Lock()  # held while the weights change (a step) or are read (eval, save)
        self.stop_event = threading.Event()
        self.go = threading.Event()         # cleared = paused
        self.go.set()
        self.thread: threading.Thread | None = None
        self.state, self.message = "preparing", None
        self.step_losses: list[float] = []
        self.samples: list[tuple[int, str]] = []
        self.recent = collections.deque(maxlen=50)  # (tokens, seconds) of recent steps
        self.elapsed = 0.0
        self.n_params = 0
        self.threads = settings.threads or training_threads()

    # --- called from the worker thread -------------------------------------------------------------
    def _set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)

    def _checkpoint_row(self):
        """An evaluation row, plus a sample when one is due. Caller holds model_lock."""
        tr = self.trainer
        with self.lock:
            tokens, seconds = sum(t for t, _ in self.recent), sum(s for _, s in self.recent)
        row = tr.log_eval(tokens / seconds if seconds > 0 else None)
        observe_rate(self.n_params, row["tokens_per_s"])
        sample_every = 2 * self.tc.eval_interval
        if tr.step_num % sample_every == 0 or tr.done or self.stop_event.is_set():
            if not self.samples or self.samples[-1][0] != tr.step_num:
                ids = sample_text(tr.model, self.prompt_ids, SAMPLE_CHARS, SAMPLE_TEMPERATURE, self.tc.seed)
                with self.lock:
                    self.samples.append((tr.step_num, tr.tokenizer.decode(ids)))
        return row

    def run(self):
        try:
            use_threads(self.threads)  # this thread's own setting
            if self.trainer is None:
                # m comes from the tokenizer: the corpus's characters, or a BPE learned here from the training part
                trainer = Trainer(self.text, self.settings.shape(0), self.tc,
                                  bpe_vocab_size=self.settings.bpe_vocab_size)
                prompt = Prompt(trainer.tokenizer, self.sample_prompt_text, trainer.config.n_ctx)
                # a prompt of characters the corpus never uses is empty: start from its first character
                self.prompt_ids = prompt.ids or trainer.tokenizer.encode(self.text[0])
                self.sample_prompt_text = trainer.tokenizer.decode(self.prompt_ids)
                self.trainer = trainer
                self.n_params = count_parameters(trainer.config)["total"]
                with self.model_lock:
                    self._checkpoint_row()  # step 0: the untrained model's loss and its gibberish
            tr = self.trainer
            self._set(state="running")
            while not tr.done and not self.stop_event.is_set():
                if not self.go.is_set():
                    self._set(state="paused")
                    self.go.wait()
                    if not self.stop_event.is_set():
                        self._set(state="running")
                    continue
                t0 = time.perf_counter()
                with self.model_lock:
                    m = tr.step()
                    dt = time.perf_counter() - t0
                    with self.lock:
                        self.step_losses.append(m["loss"])
                        self.recent.append((self.tc.batch_size * tr.config.n_ctx, dt))
                    if tr.step_num % self.tc.eval_interval == 0 or tr.done:
                        self._checkpoint_row()
                with self.lock:
                    self.elapsed += time.perf_counter() - t0
            with self.model_lock:
                t0 = time.perf_counter()
                if tr.log[-1]["step"] != tr.step_num:  # a stopped run still ends its curve where it stopped
                    self._checkpoint_row()
                with self.lock:
                    self.elapsed += time.perf_counter() - t0
            self._set(state="finished" if tr.done else "stopped")
        except Exception as e:  # noqa: BLE001 - reported to the UI, never raised into a thread's void
            self._set(state="failed", message=f"{type(e).__name__}: {e}")

    # --- called from the UI thread ----------------------------------------------------------------
    def status(self) -> JobStatus:
        with self.lock:
            tr = self.trainer
            step = tr.step_num if tr else 0
            tokens, seconds = sum(t for t, _ in self.recent), sum(s for _, s in self.recent)
            per_step = self.elapsed / len(self.step_losses) if self.step_losses else None
            eta = (self.tc.steps - step) * per_step if per_step is not None else None
            state = self.state
            if state in ("preparing", "running", "paused") and self.stop_event.is_set():
                state = "stopping"
            elif state == "running" and not self.go.is_set():
                state = "pausing"
            return JobStatus(
                state=state, message=self.message, step=step, total_steps=self.tc.steps,
                tokens_seen=tr.tokens_seen if tr else 0,
                tokens_per_s=tokens / seconds if seconds > 0 else None,
                elapsed_s=self.elapsed, eta_s=eta,
                step_losses=list(self.step_losses),
                evals=[dict(r) for r in tr.log] if tr else [],
                samples=list(self.samples), sample_prompt=self.sample_prompt_text, n_params=self.n_params,
                vocab_size=tr.tokenizer.vocab_size if tr else 0,
                heads=list(tr.heads.rows) if tr and tr.heads else [],
                units=tr.tokenizer.units if tr else ("tokens" if self.settings.tokenizer == "bpe" else "characters"),
                val_chars_per_token=tr.val_chars / max(1, len(tr.val_data)) if tr else 1.0,
            )


def running_jobs() -> int:
    return sum(1 for w in list(_WORKERS) if w.state in ("preparing", "running"))


class TrainingJob:
    """Handle of one background training run. Create, ``start()``, then poll ``status()``."""

    def __init__(self, text: str, corpus_name: str, settings: JobSettings | None = None, sample_prompt: str = "The "):
        self._w = _Worker(text, corpus_name, settings or JobSettings(), sample_prompt)
        # the session that owned this handle is gone: stop the thread rather than train for nobody
        weakref.finalize(self, _wake_to_stop, self._w.stop_event, self._w.go)

    @property
    def settings(self) -> JobSettings:
        return self._w.settings

    @property
    def corpus_name(self) -> str:
        return self._w.corpus_name

    @property
    def threads(self) -> int:
        return self._w.threads

    @property
    def train_config(self):
        return self._w.tc

    def status(self) -> JobStatus:
        return self._w.status()

    @staticmethod
    def _check_slot():
        # paused runs hold a slot too: resuming them must not push the server past the limit
        if sum(1 for w in list(_WORKERS) if w.state in ACTIVE_STATES) >= MAX_RUNNING_JOBS:
            raise BusyError(f"{MAX_RUNNING_JOBS} runs are already training on this server; "
                            "wait for one to finish or stop one")

    def _launch(self):
        w = self._w
        with _SLOTS_LOCK:
            self._check_slot()
            w.stop_event.clear()
            w.go.set()
            w._set(state="preparing" if w.trainer is None else "running")
            _WORKERS.add(w)
        w.thread = threading.Thread(target=w.run, name="te-training", daemon=True)
        w.thread.start()

    def start(self):
        if self._w.thread is not None:
            raise RuntimeError("this job was started already; use resume()")
        self._launch()

    def pause(self):
        """Stop after the current step and wait; the thread and the optimiser state stay."""
        if self._w.state in ("preparing", "running") and not self._w.stop_event.is_set():
            self._w.go.clear()

    def resume(self):
        """Continue a paused run, or a stopped one from the step where it stopped. Raises BusyError when
        a stopped run would exceed the server's limit of concurrent runs."""
        w = self._w
        if w.stop_event.is_set() and w.state != "stopped":
            return  # still stopping: resume once it has stopped
        if w.state == "paused" or (w.state == "running" and not w.go.is_set()):
            w.go.set()
        elif w.state == "stopped" and w.trainer is not None and not w.trainer.done:
            self.join()
            self._launch()

    def stop(self, wait: float | None = 30.0):
        """End the run after the current step; the weights trained so far are kept. ``wait``: seconds to
        wait for the thread to end (None: return at once; the status says "stopping" until it has)."""
        w = self._w
        w.stop_event.set()
        w.go.set()  # wake a paused worker so it can leave
        if wait:
            self.join(wait)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        t = self._w.thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True

    def save(self, models_dir, name: str, protected=(), overwrite: bool = False, owner: str | None = None) -> Path:
        """Write the current weights as a checkpoint folder ``models_dir/<sanitised name>`` (atomically),
        recording ``owner`` (a browser session's id): only the same owner may later replace it.
        Only a paused, stopped or finished run can be saved. ValueError with the reason otherwise."""
        w = self._w
        if w.state not in SAVABLE_STATES or w.trainer is None:
            raise ValueError("pause or stop the run (or let it finish) before saving it")
        folder = user_model_folder(models_dir, name, protected, overwrite, owner=owner)
        with w.model_lock:  # a resume in the meantime waits here for the save to finish
            tr = w.trainer
            heads = list(tr.heads.rows) if tr.heads else []
            extra = {"induction": induction_summary(heads)} if heads else {}
            record = training_record(
                tr, w.corpus_name, len(w.text), w.elapsed, source="Training page of Transformer Explorer",
                planned_steps=w.tc.steps, stopped_early=not tr.done, threads=w.threads, **extra,
            )
            return save_checkpoint(folder, tr.model, tr.tokenizer, record, tr.log, overwrite=overwrite, owner=owner,
                                   heads=heads)


def _wake_to_stop(stop_event: threading.Event, go: threading.Event):
    stop_event.set()
    go.set()


