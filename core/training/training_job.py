"""Training in the background: one process per run, at low priority, polled by the UI.

A ``TrainingJob`` (a core.jobs.runner.Job) starts a process of its own (a spawned interpreter, core.jobs.process:
forking a threaded server is unsafe) that builds a ``core.training.trainer.Trainer`` and trains it outside the
server's GIL, at a lower priority, on the cores the server's budget granted it (core.serve.cores), so the students'
page runs get the cores first. That process's side is ``core.training.training_child``: it reports its progress over
a pipe as small messages, and obeys pause, resume, stop and save between two steps. This module is the handle a page
holds (``status()`` applies the messages that have arrived and returns a copy) and the save paths.

Each job builds its own model from its own seed, so two jobs share nothing but the CPU. A process that dies
(an exception, or killed) shows as "failed" with the reason. If the handle is garbage-collected the pipe closes
and the process ends.

Cores: a run waits in line ("queued") until its cores are free; a paused or stopped run gives them back, and a
resume waits for them again. One run per owner (a browser session; core.jobs.JobBusy past it). A run whose page has
stopped touching it (core.jobs.runner's heartbeat), or whose session has ended, is abandoned: its process is ended
and its weights discarded (only its session could have saved them). Every wait on a process has a time limit: a
process that is stopped (SIGSTOP) or starved makes a save fail in words after SAVE_TIMEOUT_S, and the run stays
savable.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from core.nn.checkpoint import load_checkpoint
from core.nn.model_card import read_heads, read_log, read_training
from core.nn.model_store import save_checkpoint, user_model_folder
from core.jobs.process import SPAWN, exit_words, start as start_process
from core.jobs.runner import Job, JobStatus, jobs
from core.nn.snapshots import snapshot_files
from core.training.job_settings import JobSettings
from core.training.quota import remove_unused_retired, reserve_model_slot
from core.training import speed
from core.serve.threads import training_threads
from core.training.training_child import LISTS, _train_in_process, save_failure

SAVE_TIMEOUT_S = 20.0           # a save the training process has not answered by then is given up, in words
MAX_PROCESSES = 6               # live training processes per server; beyond it the oldest stopped run is retired

# queued -> preparing -> running <-> paused, then stopped or finished (or failed); "pausing" and "stopping" are a
# request the process has not acted on yet (it finishes the step under way first); "queued": waiting for cores
ACTIVE_STATES = ("queued", "preparing", "running", "pausing", "paused", "stopping")  # may go on by itself
MOVING_STATES = ("queued", "preparing", "running", "pausing", "stopping")            # worth polling
SAVABLE_STATES = ("paused", "stopped", "finished")
COMPUTING = ("preparing", "running")  # the states in which the run holds its cores


@dataclass(frozen=True, kw_only=True)
class TrainingStatus(JobStatus):
    """A consistent copy of a run's progress; safe to read from any thread."""
    ACTIVE = ACTIVE_STATES  # JobStatus.active and .moving read these; no annotation, so they are not fields
    MOVING = MOVING_STATES
    step: int
    total_steps: int
    tokens_seen: int
    tokens_per_s: float | None   # recent optimisation steps only
    step_losses: list[float] = field(repr=False)   # the batch loss of every step
    evals: list[dict] = field(repr=False)          # Trainer.log rows: step, train_loss, val_loss, tokens_per_s
    samples: list[tuple[int, str]] = field(repr=False)
    sample_prompt: str = ""
    n_params: int = 0
    vocab_size: int = 0
    heads: list[dict] = field(default_factory=list, repr=False)  # heads.csv rows measured so far
    units: str = "characters"    # what a token is, in the page's words ("characters" or "tokens")
    val_chars_per_token: float = 1.0  # of the held-out part: nats per token / ln 2 / this = bits per character
    precision: str = ""           # the matrix products' (core.nn.precision), once the process has chosen it
    resumable: bool = True       # False once the run's process has been retired (its weights are kept for saving)

    @property
    def can_pause(self) -> bool:
        return self.state in ("preparing", "running")

    @property
    def can_stop(self) -> bool:
        return self.state in ("queued", "preparing", "running", "pausing", "paused")

    @property
    def can_start(self) -> bool:
        """A new run may replace this one: it is not training (a paused run must be stopped first)."""
        return not self.active

    @property
    def can_save(self) -> bool:
        return self.state in SAVABLE_STATES and self.step > 0

    @property
    def can_resume(self) -> bool:
        return self.state in ("paused", "stopped") and self.step < self.total_steps and self.resumable

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / max(1, self.total_steps))


def _training_jobs() -> list["TrainingJob"]:
    return [j for j in jobs("training") if isinstance(j, TrainingJob)]


def _retired_in_use() -> set[str]:
    """The handed-over folders some live handle may still save from (every handle's messages read first)."""
    used = set()
    for job in _training_jobs():
        job._pump()
        if job._p["retired"]:
            used.add(str(Path(job._p["retired"]).parent))
    return used


class TrainingJob(Job):
    """Handle of one background training run. Create, ``start()``, then poll ``status()``."""
    kind = "training"

    def __init__(self, text: str, corpus_name: str, settings: JobSettings | None = None, sample_prompt: str = "The ",
                 owner: str | None = None, session: str | None = None, alive=None, pace: "speed.Pace | None" = None):
        """``owner``: who the run counts against (one run per owner). ``session``: the id of the browser session
        that holds this handle, and ``alive``: a function telling whether a session id still lives; with them, the
        run is abandoned once its page stops touching it (core.jobs.runner). ``pace``: the one its estimate was
        made at (core.training.speed.estimate_run), for its time left."""
        self._settings = settings or JobSettings()
        super().__init__(f"training a model on {corpus_name}", self._settings.threads or training_threads(), owner)
        if session is not None:
            self.watch(session, alive)
        self._text, self._corpus_name, self._sample_prompt = text, corpus_name, sample_prompt
        self._tc, self._pace = self._settings.train_config(), pace
        # what the process has reported so far; the lists grow by the parts it sends
        self._p = dict(state="preparing", message=None, step=0, tokens_seen=0, tokens_per_s=None, elapsed=0.0,
                       sample_prompt=sample_prompt, n_params=0, vocab_size=0, reply=None, val_chars_per_token=1.0,
                       precision="",
                       units="tokens" if self._settings.tokenizer == "bpe" else "characters", retired=None,
                       **{k: [] for k in LISTS})
        self._stop, self._go = False, True  # requests not yet acknowledged show as "stopping" / "pausing"
        self._launched = False              # asked to start (it may still wait in line for its cores)
        self._proc = self._conn = None
        self._started = time.monotonic()  # the oldest stopped run is the first retired (MAX_PROCESSES)
        self._lock = threading.RLock()      # guards _p and the pipe
        self._save_lock = threading.Lock()  # one save at a time: they share the reply slot
        self._saves = 0                     # numbers each save, so that a late reply is never taken for the next's
        self._finalizer = None              # _close, once a process has started

    @property
    def settings(self) -> JobSettings:
        return self._settings

    @property
    def corpus_name(self) -> str:
        return self._corpus_name

    @property
    def threads(self) -> int:
        return self.cores

    @property
    def train_config(self):
        return self._tc

    def status(self) -> TrainingStatus:
        self._pump()
        with self._lock:
            p, steps = self._p, self._tc.steps
            state = p["state"]
            if self.queued and not self._stop:
                state = "queued"
            elif state in ("preparing", "running", "paused") and self._stop:
                state = "stopping"
            elif state in ("preparing", "running") and not self._go:
                state = "pausing"
            return TrainingStatus(
                state=state, ahead=self.ahead() if state == "queued" else None, message=p["message"], step=p["step"], total_steps=steps, tokens_seen=p["tokens_seen"],
                tokens_per_s=p["tokens_per_s"], elapsed_s=p["elapsed"],
                eta_s=speed.job_time_left(self._settings, self._pace, len(self._text), p),
                step_losses=list(p["step_losses"]), evals=[dict(r) for r in p["evals"]], samples=list(p["samples"]),
                sample_prompt=p["sample_prompt"], n_params=p["n_params"], vocab_size=p["vocab_size"],
                heads=list(p["heads"]), units=p["units"], val_chars_per_token=p["val_chars_per_token"],
                precision=p["precision"], resumable=p["retired"] is None,
            )

    def start(self):
        """Start the run, or queue it until the server has cores for it; JobBusy when its owner has a run."""
        if self._launched:
            raise RuntimeError("this job was started already; use resume()")
        self._launch()

    def holds_place(self) -> bool:
        return self._launched and (self.queued or self._state() in ACTIVE_STATES)

    def pause(self):
        """Stop after the current step and wait; the process and the optimiser state stay, its cores are given
        back (a resume waits for them again)."""
        if self._state() in ("preparing", "running") and not self._stop and not self.queued:
            self._go = False
            self._send("pause")
            self._free_cores()

    def resume(self):
        """Continue a paused run, or a stopped one from the step where it stopped, once its cores are free (it
        waits in line for them meanwhile)."""
        state = self._state()
        if self.queued or (self._stop and state != "stopped"):
            return  # waiting for cores already, or still stopping: resume once it has stopped
        if state == "paused" or (state in ("preparing", "running") and not self._go):
            self._go = True
            self._claim_cores(lambda job: job._send("resume"))
        elif state == "stopped" and self._p["step"] < self._tc.steps and self._p["retired"] is None:
            self._launch()

    def stop(self, wait: float | None = 30.0) -> bool:
        """End the run after the current step; the weights trained so far are kept. ``wait``: seconds to
        wait for it to end (None: return at once; the status says "stopping" until it has). True if it has ended.
        A run still waiting for its cores ends at once."""
        if self.queued:
            self._free_cores()
            with self._lock:
                if self._proc is None:  # never started: nothing to wait for
                    self._p["state"] = "stopped"
                    return True
        self._stop, self._go = True, True
        self._send("stop")
        return self.join(wait) if wait else self._state() not in ACTIVE_STATES

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the run has stopped, finished or failed (a paused run has not); True if it has."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._proc is not None and self._state() in ACTIVE_STATES and not self.queued:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return False
            self._pump(wait=left)
        return True

    def save(self, models_dir, name: str, protected=(), overwrite: bool = False, owner: str | None = None,
             timeout: float = SAVE_TIMEOUT_S) -> Path:
        """Write the current weights as a checkpoint folder ``models_dir/<sanitised name>`` (atomically),
        recording ``owner`` (a browser session's id): only the same owner may later replace it.
        Only a paused, stopped or finished run can be saved. ValueError with the reason otherwise (a saved-model
        quota reached included: core.training.quota); an OSError in words when the write fails, TimeoutError when the
        training process has not answered within ``timeout`` seconds (it then writes nothing), ChildProcessError
        when it has died. The run stays savable after any of them but the last."""
        if self._state() not in SAVABLE_STATES:
            raise ValueError("pause or stop the run (or let it finish) before saving it")
        folder = user_model_folder(models_dir, name, protected, overwrite, owner=owner)
        remove_unused_retired(_retired_in_use())
        # the quota checked and this model's place reserved in one step: two saves at once cannot both take the last
        with reserve_model_slot(models_dir, folder, owner), self._save_lock:
            if self._p["retired"] is None:
                path = self._save_in_process(folder, overwrite, owner, timeout)
                if path is not None:
                    return path
            # the process has ended, before this save or while it waited (another session's start retired it):
            # save from the checkpoint it handed over
            src = Path(self._p["retired"])
            try:
                model, tok = load_checkpoint(src)
                return save_checkpoint(folder, model, tok, read_training(src), read_log(src), overwrite=overwrite,
                                       owner=owner, heads=read_heads(src) or [], snapshots=snapshot_files(src))
            except Exception as e:  # noqa: BLE001 - one message for a failed write, whichever process writes
                raise save_failure(e) from e

    def _save_in_process(self, folder: Path, overwrite: bool, owner: str | None, timeout: float) -> Path | None:
        """Ask the process to save: the path, or None if it handed its weights over instead."""
        self._saves += 1
        token, deadline = self._saves, time.monotonic() + timeout
        self._send("save", str(folder), overwrite, owner, time.time() + timeout, token)
        while True:
            reply = self._p["reply"]
            if reply is not None and reply[0] == token:
                break
            if self._p["retired"] is not None:
                return None  # it retired before reading the command: the command will never be answered
            if self._conn is None:
                raise ChildProcessError(f"{self._p['message'] or 'the training process has ended'}; "
                                        "nothing was saved")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the training process is not answering (it may be stopped or overloaded); "
                                   f"nothing was saved after {timeout:g} s, try again in a moment")
            self._pump(wait=min(0.1, left))
        _, kind, value = reply
        if kind == "error":
            raise value
        return value

    # --- the pipe ------------------------------------------------------------------------------------
    def _launch(self):
        self._register()  # JobBusy when the owner has a run already
        self._launched = True
        _retire_oldest_stopped(keep=MAX_PROCESSES - 1, exclude=self)
        with self._lock:
            self._stop, self._go = False, True
            self._p["state"] = "preparing" if self._proc is None else self._p["state"]
        self._claim_cores(TrainingJob._run_on_cores)

    def _run_on_cores(self):
        """Its cores are granted: start the process, or tell a stopped one to go on."""
        if self._proc is not None:
            with self._lock:
                self._p["state"] = "running"
            self._send("resume")
            return
        remove_unused_retired(_retired_in_use())  # temporary folders of runs nobody can save any more
        # the corpus goes through a file: a large argument would hold this thread until the process reads it
        fd, corpus = tempfile.mkstemp(prefix="te-corpus-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(self._text)
        with self._lock:
            self._conn, child_end = SPAWN.Pipe()
            self._proc = SPAWN.Process(target=_train_in_process, name="te-training", daemon=True, args=(
                child_end, corpus, self._corpus_name, self._settings, self._sample_prompt, self.cores))
            start_process(self._proc)
            child_end.close()  # the process has its own copy; ours would hide its end from us
        # the session that owned this handle is gone: closing the pipe ends the process
        self._finalizer = weakref.finalize(self, _close, self._conn, corpus, self._p)

    def _poll(self):
        self._pump()

    def _abandon(self, why: str = "its browser session ended"):
        """The run's session has ended: end its process at once (it may be stopped, or mid-step) and discard what
        it trained, handed-over folder included; the run shows as failed, with the reason."""
        self._free_cores()
        with self._lock:
            proc, conn, self._conn = self._proc, self._conn, None
            self._launched = False
            self._p.update(state="failed", message=f"{why}, so the run was stopped and its weights discarded")
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)
        if self._finalizer is not None:
            self._finalizer()  # closes the pipe, removes the handed-over folder and an unread corpus file
        elif conn is not None:
            conn.close()

    def _state(self) -> str:
        """The state the process last reported, after reading what has arrived."""
        self._pump()
        return self._p["state"]

    def _send(self, *command):
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.send(command)
                except OSError:
                    pass  # the process has died: the next _pump says so

    def _pump(self, wait: float = 0.0):
        """Apply the messages the process has sent, waiting up to ``wait`` seconds for the first; a run that
        computes no more gives its cores back (outside the lock: the next in line may start on this thread)."""
        ended = False
        with self._lock:
            try:
                while self._conn is not None and self._conn.poll(wait):
                    wait = 0.0
                    msg = self._conn.recv()
                    if msg.get("retired"):  # a retired run's process ends right after this message
                        self._p["retired"] = msg["retired"]
                    for key, value in msg.items():
                        if key in LISTS:
                            self._p[key] += value
                        else:
                            self._p[key] = value
                    for row in msg.get("evals", ()):
                        speed.observe_rate(self._p["n_params"], row["tokens_per_s"])  # for the next run's estimate
                    ended |= msg.get("state") in ("stopped", "finished", "failed") and not self.queued
            except (EOFError, OSError):  # the process has ended: while its handle lives, only by dying
                self._conn.close()
                self._conn = None
                self._proc.join(5)
                if self._p["state"] != "failed" and self._p["retired"] is None:
                    self._p.update(state="failed", message=f"the training process ended ({exit_words(self._proc.exitcode)})")
                ended = True
        if ended:
            self._free_cores()


def _retire_oldest_stopped(keep: int, exclude=None):
    """With ``keep`` or more training processes alive, ask the oldest stopped run's process to hand over its
    weights and end (each idle process holds a few hundred MB). Its run can still be saved, not resumed."""
    live = sorted((job for job in _training_jobs() if job._conn is not None and job is not exclude),
                  key=lambda job: job._started)
    stopped = [job for job in live if job._state() == "stopped"]
    for job in stopped[:max(0, len(live) - keep)]:
        job._send("retire")


def _close(conn, corpus: str, progress: dict):
    conn.close()
    if progress.get("retired"):  # the handed-over checkpoint: nobody can save it any more
        shutil.rmtree(Path(progress["retired"]).parent, ignore_errors=True)
    Path(corpus).unlink(missing_ok=True)  # the process died before reading it
