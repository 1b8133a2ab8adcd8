"""The training process's side of a run: what ``core.training.training_job.TrainingJob`` starts in a fresh interpreter.

``_train_in_process`` is the process's main function (multiprocessing finds it by this module and name): it
builds a ``core.training.trainer.Trainer`` in ``_Run``, steps it between the parent's commands (pause, resume, stop, save,
retire) and reports over the pipe as small messages, a thread of its own forwarding them (``_forward``). A save
is written here, atomically, and its path or its error in words (``save_failure``) goes back as the reply. A run
with nothing left to train hands its weights over as a checkpoint in a temporary folder (``retire``) and ends.
"""
from __future__ import annotations

import collections
import errno
import os
import queue
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch

from core.nn.model_store import save_checkpoint
from core.analysis.induction import induction_summary
from core.jobs.process import lower_priority
from core.training.job_settings import JobSettings
from core.nn.params import count_parameters
from core.nn.precision import run_precision
from core.training.quota import RETIRED_PREFIX
from core.analysis.sampling import generate
from core.serve.threads import use_threads
from core.nn.tokenizer import Prompt
from core.training.trainer import Trainer, training_record

SAMPLE_TOKENS = 200             # length of each periodic sample, in tokens (characters on a character model)
SAMPLE_TEMPERATURE = 0.8
LISTS = ("step_losses", "evals", "samples", "heads")  # progress that grows: the process sends only what is new


@torch.no_grad()
def sample_text(model, prompt_ids: list[int], n_new: int, temperature: float, seed: int) -> list[int]:
    """n_new token ids drawn after prompt_ids with the app's own sampler (core.analysis.sampling.generate).
    Its own generator: the same seed at every checkpoint, so changes in the text are the weights' doing."""
    gen = torch.Generator().manual_seed(seed)
    out = generate(model, torch.tensor([prompt_ids], dtype=torch.long), n_new, temperature, generator=gen)
    return out[0, len(prompt_ids):].tolist()


def _train_in_process(conn, corpus_path: str, corpus_name: str, settings: JobSettings, sample_prompt: str,
                      threads: int):
    """Main function of a run's process: train, obey the parent's commands, report through ``conn``."""
    lower_priority(os.getpid(), os.getpriority(os.PRIO_PROCESS, os.getppid()))  # the parent did, unless it could not
    use_threads(threads)  # the cores the run was granted (core.serve.cores): the pages and other jobs keep the rest
    outbox = queue.SimpleQueue()  # sent by a thread of its own: the run never waits for a page to poll
    sender = threading.Thread(target=_forward, args=(outbox, conn), daemon=True)
    sender.start()
    try:
        text = Path(corpus_path).read_text(encoding="utf-8")
        os.unlink(corpus_path)  # the file was only the way in: no copy of the corpus per run stays behind
        _Run(text, corpus_name, settings, sample_prompt, threads, conn, outbox.put).serve()
    except EOFError:
        pass  # the parent closed the pipe: the handle is gone, nobody is watching
    except Exception as e:  # noqa: BLE001 - reported to the UI
        outbox.put({"state": "failed", "message": f"{type(e).__name__}: {e}"})
    outbox.put(None)  # after the last message (failed, retired): the sender delivers everything before it ends
    sender.join()


def _forward(outbox: queue.SimpleQueue, conn):
    # a pipe's send blocks once the pipe is full, and it fills whenever the parent is slow to poll: this thread
    # waits then, the training does not
    try:
        while (msg := outbox.get()) is not None:
            conn.send(msg)
    except OSError:
        pass  # the parent has gone; the run notices at its next look for commands


class _Run:
    """The process's side of a job: a Trainer, stepped between the parent's commands."""

    def __init__(self, text, corpus_name, settings: JobSettings, sample_prompt, threads, conn, send):
        self.text, self.corpus_name, self.threads, self.conn, self.send = text, corpus_name, threads, conn, send
        self.tc = settings.train_config()
        # m comes from the tokenizer: the corpus's characters, or a BPE learned here from the training part
        # bf16 products only where a probe at this shape measures them faster (core.nn.precision; TE_PRECISION)
        self.trainer = tr = Trainer(text, settings.shape(0), self.tc, bpe_vocab_size=settings.bpe_vocab_size,
                                    precision=run_precision())
        # a prompt of characters the corpus never uses is empty: start from its first character
        self.prompt_ids = Prompt(tr.tokenizer, sample_prompt, tr.config.n_ctx).ids or tr.tokenizer.encode(text[0])
        self.state, self.stopping = "running", False
        self.step_losses: list[float] = []
        self.samples: list[tuple[int, str]] = []
        self.recent = collections.deque(maxlen=50)  # (tokens, seconds) of recent steps
        self.elapsed = 0.0
        self.sent = dict.fromkeys(LISTS, 0)  # how many items of each list the parent has been sent
        self.retired = False

    def serve(self):
        """Train and obey until the run is retired (it has finished, or the parent asks): returns then."""
        tr = self.trainer
        t0 = time.perf_counter()
        self.checkpoint()  # step 0: the untrained model's loss and its gibberish
        # on the run's clock: the time left is recalibrated from this clock against the estimate of the same work,
        # and that estimate counts step 0's evaluation and sample (left off, the first steps read as too fast)
        self.elapsed += time.perf_counter() - t0
        self.report(sample_prompt=tr.tokenizer.decode(self.prompt_ids), vocab_size=tr.tokenizer.vocab_size,
                    n_params=count_parameters(tr.config)["total"], units=tr.tokenizer.units,
                    val_chars_per_token=tr.val_chars / max(1, len(tr.val_data)), precision=tr.precision)
        while not self.retired:
            self.obey(wait=self.state != "running")  # paused or stopped: block on the pipe, no loop spinning a core
            if self.retired:
                break
            if self.state == "running" and (tr.done or self.stopping):
                self.end()
            elif self.state == "running":
                self.step()

    def obey(self, wait: bool):
        """Carry out the commands that have arrived; with ``wait``, wait for one. EOFError: the parent is gone."""
        # only between two steps: a step is never cut half-way, so the weights are always those of whole steps
        while wait or self.conn.poll():
            wait = False
            cmd, *args = self.conn.recv()
            extra = {}
            if cmd == "pause" and self.state == "running":
                self.state = "paused"
            # a stopped run goes on where it stopped: its optimiser state is still in this process
            elif cmd == "resume" and (self.state == "paused" or self.state == "stopped" and not self.trainer.done):
                self.state = "running"
            elif cmd == "stop" and self.state in ("running", "paused"):
                self.state, self.stopping = "running", True  # end() draws the last point and says "stopped"
            elif cmd == "save":
                extra["reply"] = self.answer_save(*args)
            elif cmd == "retire" and self.state in ("stopped", "finished"):  # never a paused run: it may resume
                self.retire()
                return
            self.report(**extra)

    def step(self):
        tr = self.trainer
        t0 = time.perf_counter()
        m = tr.step()
        self.step_losses.append(m["loss"])
        self.recent.append((self.tc.batch_size * tr.config.n_ctx, time.perf_counter() - t0))
        if tr.step_num % self.tc.eval_interval == 0 or tr.done:
            self.checkpoint()
        self.elapsed += time.perf_counter() - t0  # evaluations included: the page's clock is the run's time
        self.report()  # every step, the new items only: the page's curve has every point, each message stays small

    def end(self):
        t0 = time.perf_counter()
        if self.trainer.log[-1]["step"] != self.trainer.step_num:  # a stopped run still ends its curve there
            self.checkpoint()
        self.elapsed += time.perf_counter() - t0
        self.state, self.stopping = ("finished" if self.trainer.done else "stopped"), False
        if self.state == "finished":
            self.retire()  # nothing left to train: hand the weights over and free the memory
        else:
            self.report()

    def retire(self):
        """Write the run as a checkpoint in a private temporary folder, report its path as ``retired``, and end
        the process. The parent saves from that folder from then on; the run cannot be resumed any more."""
        # the server's pid in the name: core.training.quota tells a folder of this server from another's (a replica's)
        folder = Path(tempfile.mkdtemp(prefix=f"{RETIRED_PREFIX}{os.getppid()}-")) / "run"
        kind, value = self.save(str(folder), False, None)
        if kind == "error":
            shutil.rmtree(folder.parent, ignore_errors=True)
            self.report(message=f"could not hand over the weights: {value}")
            return  # keep serving: the run can still be saved or resumed
        self.retired = True
        self.report(retired=str(folder))

    def rate(self) -> float | None:
        tokens, seconds = sum(t for t, _ in self.recent), sum(s for _, s in self.recent)
        return tokens / seconds if seconds > 0 else None

    def checkpoint(self):
        """An evaluation row, plus a sample when one is due."""
        tr = self.trainer
        tr.log_eval(self.rate())
        # every other evaluation, and the last: a sample costs a forward pass per token it draws
        if tr.step_num % (2 * self.tc.eval_interval) == 0 or tr.done or self.stopping:
            if not self.samples or self.samples[-1][0] != tr.step_num:  # end() may come back to the same step
                ids = sample_text(tr.model, self.prompt_ids, SAMPLE_TOKENS, SAMPLE_TEMPERATURE, self.tc.seed)
                self.samples.append((tr.step_num, tr.tokenizer.decode(ids)))

    def report(self, **extra):
        """Send the parent the new items of every list and the current value of everything else."""
        tr = self.trainer
        lists = dict(step_losses=self.step_losses, evals=tr.log, samples=self.samples,
                     heads=tr.heads.rows if tr.heads else [])
        msg = {k: v[self.sent[k]:] for k, v in lists.items() if len(v) > self.sent[k]}
        self.sent.update((k, len(v)) for k, v in lists.items())
        self.send(dict(msg, state=self.state, step=tr.step_num, tokens_seen=tr.tokens_seen, elapsed=self.elapsed,
                       tokens_per_s=self.rate(), **extra))

    def answer_save(self, folder: str, overwrite: bool, owner: str | None, deadline: float, token: int):
        """The reply to the parent's save number ``token``: (token, "saved", path) or (token, "error", exception).
        Past ``deadline`` (time.time()) the parent has given up waiting (this process was stopped or starved):
        nothing is written then, so a save the page reported as failed never appears later."""
        if time.time() > deadline:
            return token, "error", TimeoutError("the save was given up before the training process could do it")
        return (token, *self.save(folder, overwrite, owner))

    def save(self, folder: str, overwrite: bool, owner: str | None) -> tuple[str, object]:
        """("saved", path) or ("error", the exception, in words: ``save_failure``); written atomically."""
        tr = self.trainer
        heads = list(tr.heads.rows) if tr.heads else []
        extra = {"induction": induction_summary(heads)} if heads else {}
        try:
            record = training_record(
                tr, self.corpus_name, len(self.text), self.elapsed, source="Training page of Transformer Explorer",
                planned_steps=self.tc.steps, stopped_early=not tr.done, threads=self.threads, **extra,
            )
            return "saved", save_checkpoint(Path(folder), tr.model, tr.tokenizer, record, tr.log, overwrite=overwrite,
                                            owner=owner, heads=heads, snapshots=tr.snapshots)
        except Exception as e:  # noqa: BLE001 - e.g. safetensors' own error when the disk is full
            return "error", save_failure(e)


def save_failure(e: Exception) -> Exception:
    """What a failed write of a checkpoint reaches the page as, whichever process wrote it: a refusal (ValueError)
    or an OSError as it is, a full disk in one sentence, and anything else (safetensors' own error, an unreadable
    handed-over checkpoint) as an OSError naming it. save_checkpoint writes atomically, so nothing is half-written."""
    if getattr(e, "errno", None) == errno.ENOSPC or "No space left" in str(e):
        return OSError("No space left on device: the disk is full, so nothing was saved; the run is kept and can "
                       "be saved once there is room (ask the teacher)")
    if isinstance(e, (OSError, ValueError)):
        return e
    return OSError(f"the model could not be written ({type(e).__name__}: {e}); nothing was saved")
