"""A scaling study in the background, for the app: ``python -m core.study`` in a process group of its own.

The study runs like a training run (core.training.training_job) but outside the server's process: its workers would
otherwise share the server's interpreter, and a study keeps every core busy for minutes. The page polls
``status()``, which reads the study folder (runs.csv and progress.json, both replaced atomically by the study).
Pause and resume are SIGSTOP and SIGCONT to the whole group (the runs under way freeze where they are and go on
from there, so their results do not change); stop is SIGTERM, after which the study ends its workers and keeps
the runs finished so far, and resume starts it again on the same folder, which trains only what is missing.

One study per browser session (the page keeps the handle in its session state). A study is a core.jobs.runner.Job:
it asks the server's budget (core.serve.cores) for every core jobs may hold, and trains with as many workers as it
was granted; it waits in line ("queued") while they are taken, gives them back when paused or ended, and is
abandoned (stopped) when its page stops touching it. A handle that is garbage-collected (its session ended) ends
its study, and the study itself stops when the server's process is gone.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from core.analysis import scaling_runs
from core.jobs.process import signal_name
from core.jobs.runner import BACKGROUND_NICE, Job, JobStatus
from core.serve.cores import server_budget
from core.serve.paths import REPO_ROOT
from core.training.study_grid import GRIDS, StudyError, corpus_problem, resolve_grid
from core.training.study import PARENT_ENV
from core.training.study_files import RUNS_CSV, read_progress, read_rows
from core.training.study_live import seconds_left, slowest
from core.training.speed import fit_seconds

NICE = BACKGROUND_NICE   # below the server's own work: the pages stay responsive while a study trains
BOOTSTRAP = 100          # refits for the intervals at the end (the shipped study used 200)
# every state status() gives; pausing is immediate (SIGSTOP to the group), so there is no "pausing" between
# "fitting": every run is in, and the study fits the law and refits resampled runs for its intervals (a minute or two)
STATES = ("new", "queued", "starting", "running", "fitting", "paused", "stopping", "stopped", "finished", "failed")
# "queued": waiting for the server's cores (a first start, or a resume); the process is alive in the others
ACTIVE = ("queued", "starting", "running", "fitting", "paused", "stopping")
MOVING = ("queued", "starting", "running", "fitting", "stopping")  # changes by itself: a page keeps polling


@dataclass(frozen=True, kw_only=True)
class StudyStatus(JobStatus):
    ACTIVE = ACTIVE  # JobStatus.active and .moving read these; no annotation, so they are not fields
    MOVING = MOVING
    state: str               # one of STATES
    done: int                # runs in runs.csv
    total: int               # runs in the grid
    rows: list[dict] = field(repr=False)
    message: str = ""
    problem: str = ""        # why runs.csv cannot be read (it names the file); rows is then empty
    # the run under way, step by step (progress.json's "live", core.training.study_live): the one that ends last
    # when several train; None before its first report and once no run trains. A run of minutes needs them: runs
    # and done only move when a whole run is in
    step: int | None = None
    steps: int | None = None
    loss: float | None = None  # its training loss, the mean of its latest second of steps (not the held-out result)

    @property
    def can_pause(self) -> bool:
        return self.state in ("starting", "running", "fitting")

    @property
    def can_resume(self) -> bool:
        # a failed study can resume too: runs.csv keeps what finished, and a resume trains only what is missing
        return self.state == "paused" or (self.state in ("stopped", "failed") and self.done < self.total)

    @property
    def can_stop(self) -> bool:
        return self.state in ("queued", "starting", "running", "fitting", "paused")


def _signal_group(pid: int, sig: int):
    # the whole group: the study's workers are its children, and a signal to the study alone would leave them
    # training (SIGSTOP) or orphaned (SIGKILL). The group's id is the study's pid (start_new_session)
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group has ended already; a reused number that is no longer ours is not touched


def _end(pid_box: list, folder_box: list):
    """Finaliser: end the study's process group, and remove a folder the job made for itself."""
    pid = pid_box[0]
    if pid:
        _signal_group(pid, signal.SIGCONT)  # a paused (SIGSTOPped) group cannot act on SIGTERM until it runs
        _signal_group(pid, signal.SIGTERM)
    if folder_box[0]:
        shutil.rmtree(folder_box[0], ignore_errors=True)


class StudyJob(Job):
    """Handle of one study started from the app. ``corpus_path``: the text file to train on (a built-in corpus is
    written into the study folder first by the page); ``folder``: where runs.csv goes (default: a new temporary
    folder, made only when the study starts: None until then); ``temporary``: remove the folder with the handle
    (always so for a folder made here), or as soon as a first start is refused. ``workers``: at most this many
    (default: every core the server lets jobs hold)."""
    kind = "study"

    def __init__(self, corpus_path, grid: str, folder=None, workers: int | None = None, nice: int = NICE,
                 temporary: bool = False, corpus_name: str | None = None):
        super().__init__(f"running the scaling study {grid}", workers or server_budget().job_cores)
        self.grid = resolve_grid(grid)
        self.grid_name = grid
        self.corpus_path = Path(corpus_path)
        self.corpus_name = corpus_name or self.corpus_path.name
        self.own_folder = temporary or folder is None
        self.folder: Path | None = Path(folder) if folder else None  # made by _launch when None
        self.workers, self.nice = workers, nice
        self.proc: subprocess.Popen | None = None
        # one-item lists, shared with the finaliser: it must not hold the handle itself (or the handle would
        # never be collected), yet it must see the pid and folder the handle has at the end
        self._pid = [None]  # the study's process group while it may have members; None once ended
        self._own = [str(self.folder) if self.own_folder and self.folder else None]  # for the finaliser
        self._paused = False
        self._stopping = False
        self._started = None
        weakref.finalize(self, _end, self._pid, self._own)

    @staticmethod
    def new_folder() -> Path:
        """A fresh temporary folder for a study (for a built-in corpus written there before the job starts)."""
        return Path(tempfile.mkdtemp(prefix="te-study-"))

    @property
    def runs_csv(self) -> Path | None:
        return self.folder / RUNS_CSV if self.folder else None

    def command(self) -> list[str]:
        # the command line of a study run by hand (README): the page's study and a teacher's are one program
        cmd = [sys.executable, "-m", "core.study", "--corpus", str(self.corpus_path), "--grid", self.grid_name,
               "--engine", "local", "--out", str(self.folder), "--bootstrap", str(BOOTSTRAP)]
        cmd += ["--workers", str(self.cores)]  # as many as the server granted it cores
        if self.nice:  # the study lowers its own priority, before it starts any worker: they inherit it
            cmd += ["--nice", str(self.nice)]
        return cmd

    def _alive(self) -> bool:
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            return True
        if self._pid[0]:  # just ended: end what is left of its group (the workers of a study killed outright)
            _signal_group(self._pid[0], signal.SIGKILL)
            self._pid[0] = None  # once only: the number may be reused once the group is empty
            self._free_cores()
        return False

    def holds_place(self) -> bool:
        return self.queued or self._alive()

    def _poll(self):
        self._alive()  # an ended study gives its cores back even when no page polls it

    def _launch(self):
        """Wait in line for the server's cores, then start the study's process on them."""
        self._register()
        self._stopping = False
        self._claim_cores(StudyJob._spawn)

    def _spawn(self):
        if self.queued or self._stopping or self._alive():
            return
        if self.folder is None:  # nothing is written before a study really starts (a queued one waits first)
            self.folder = self.new_folder()
            self._own[0] = str(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # appended: a resumed study keeps the log of its earlier sessions; status() reads its tail on failure
        log = open(self.folder / "study.log", "ab")
        try:
            # a session of its own: its pid names a process group holding the study and its workers, so pause,
            # resume and stop reach them all (_signal_group); PARENT_ENV: the study ends if this server dies
            self.proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, start_new_session=True,
                                         env={**os.environ, PARENT_ENV: str(os.getpid())})
        finally:
            log.close()  # the child has its own descriptor
        self._pid[0] = self.proc.pid
        self._paused = self._stopping = False
        self._started = time.time()

    def start(self):
        """Check the corpus against the grid (StudyError), then start the study. BusyError at the server's limit.
        A refused first start leaves no temporary folder (the page's corpus copy included)."""
        try:
            try:
                text = self.corpus_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise StudyError(f"the corpus cannot be read: {e}") from None
            problem = corpus_problem(self.grid, text, self.corpus_path.name)
            if problem:
                raise StudyError(problem)
            if self._alive() or self.queued:
                raise RuntimeError("this study is running already")
            self._launch()
        except BaseException:
            if self.proc is None and self.own_folder and self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self._own[0] = None
            raise

    def pause(self):
        """Freeze the study (SIGSTOP to its group) and give its cores back."""
        if self._alive() and not self._stopping and not self._paused:
            _signal_group(self.proc.pid, signal.SIGSTOP)
            self._paused = True
            self._free_cores()

    def resume(self):
        """Continue a paused study once its cores are free again, or start a stopped one again on its folder (only
        the missing runs)."""
        if self.queued:
            return
        if self._alive():
            if self._paused:  # SIGCONT: the runs under way go on from where they froze, their results unchanged
                self._claim_cores(StudyJob._thaw)
        elif self.proc is not None:  # ended: a new process on the same folder, which skips the runs in runs.csv
            self._launch()

    def _thaw(self):
        if self._paused and self._alive():
            _signal_group(self.proc.pid, signal.SIGCONT)
            self._paused = False

    def stop(self, wait: float | None = 10.0):
        """End the study; the runs finished so far stay in runs.csv. A study waiting in line leaves it."""
        if self.queued:
            self._free_cores()
        if not self._alive():
            return
        self._stopping = True
        _signal_group(self.proc.pid, signal.SIGCONT)  # a paused study must run to hear the request
        try:
            self.proc.send_signal(signal.SIGTERM)  # the study's own process: it ends its workers itself
        except ProcessLookupError:
            pass
        self._paused = False
        if wait:
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:  # not ending within ``wait``: a page's Stop must not hang it
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def log_tail(self, chars: int = 600) -> str:
        if self.folder is None:
            return ""
        try:
            text = (self.folder / "study.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def status(self) -> StudyStatus:
        problem = ""
        try:
            rows = read_rows(self.runs_csv) if self.folder else []
        except StudyError as e:
            rows, problem = [], str(e)  # said on the page rather than raised: the study's controls stay usable
        progress = (read_progress(self.folder) if self.folder else None) or {}
        total = len(self.grid.widths) * len(self.grid.tokens)
        elapsed = time.time() - self._started if self._started else 0.0
        if self.queued and not self._paused and (self.proc is None or not self._alive()):
            state, message = "queued", ""
        elif self.queued:  # a paused study waiting for its cores to go on
            state, message = "queued", ""
        elif self.proc is None:
            state, message = "stopped" if rows else "new", ""
        elif self._alive():
            # the handle knows pause and stop itself (they were its signals); starting, running or fitting is read
            # from progress.json, which the study writes once it has read its corpus and starts its runs ("running"),
            # once every run is in ("trained") and while it fits the law ("fitting")
            if self._stopping:
                state = "stopping"
            elif self._paused:
                state = "paused"
            else:
                fits = "fitting" if total >= scaling_runs.MIN_RUNS else "running"  # fewer runs are never fitted
                state = {"running": "running", "trained": fits, "fitting": "fitting"}.get(progress.get("state"),
                                                                                         "starting")
            message = ""
        else:
            code = self.proc.returncode
            if code == 0:
                state, message = "finished", ""
            elif self._stopping or code == 130:  # stopped by the handle, or by itself when the app went away
                state, message = "stopped", ""
            elif code < 0:  # killed from outside: the system out of memory, or another program
                state = "failed"
                name = signal_name(-code)
                message = (f"the study process was killed ({name}), by the system when memory ran out or by another "
                           f"program; {len(rows)} of {total} runs were kept"
                           + (": Resume trains the rest" if len(rows) < total else ""))
            else:
                state = "failed"
                tail = self.log_tail()
                # the study's own error line (argparse's and the CLI's start with "error:"), else the log's end
                message = tail.split("error:", 1)[-1].strip() if "error:" in tail else tail.strip()[-400:]
        # the runs' steps only while a run may train: a study that ended leaves no run under way
        live = (progress.get("live") or []) if state in ("running", "paused", "stopping") else []
        run = slowest(live) or {}
        eta = self._time_left(state, progress, total, len(rows), live)
        return StudyStatus(state=state, ahead=self.ahead() if state == "queued" else None, done=len(rows), total=total, rows=rows, message=message, elapsed_s=elapsed,
                           eta_s=eta, problem=problem, step=run.get("step"), steps=run.get("steps"),
                           loss=run.get("loss"))

    def _time_left(self, state: str, progress: dict, total: int, done: int, live: list[dict]) -> float | None:
        """Seconds left: while training, the study's own estimate of its runs (their pace so far) plus the fit's
        (core.training.speed.fit_seconds, timed on this machine), or once the runs under way are the last ones, the
        pace of their own steps (the study's estimate has none before a first run is in: a forecast's one run
        would show no time left at all); while fitting, what the study's estimate of its refits leaves; None
        otherwise (a paused study's estimate would go stale)."""
        eta = progress.get("eta_s")
        if state == "running" and live and total - done <= len(live):
            left = seconds_left(slowest(live))
            return None if left == float("inf") else left + fit_seconds(BOOTSTRAP, total, self.grid)
        if state == "running" and eta is not None:
            return eta + fit_seconds(BOOTSTRAP, total, self.grid)
        if state == "fitting" and eta is not None:
            return max(1.0, eta - (time.time() - progress.get("time", time.time())))
        return None


def grid_choices() -> dict[str, str]:
    """Grid name -> a label with its number of runs and sizes."""
    return {name: f"{name}: {len(g.widths)} sizes x {len(g.tokens)} budgets = {len(g.widths) * len(g.tokens)} runs"
            for name, g in GRIDS.items()}
