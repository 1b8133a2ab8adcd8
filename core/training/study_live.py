"""Where the runs of a study under way are, step by step, for a page that watches it (issue 54: a forecast run of
500 s showed a bar at 0 % from start to end, as progress.json only changed when a whole run was in).

A run trains in a worker process (core.training.study_engines), so it cannot write progress.json itself: the study's
own process does, and two writers would undo each other's lines. Each run writes its step, total steps, last loss
and pace to a small file of its own in the study folder (``StepReport``, at most every LIVE_EVERY_S); the study
gathers them into progress.json's "live" list (``LiveSteps``, as often) and removes them once the run is in.
A Ray worker on another machine has no such folder: its run trains on without reports.
"""
from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path

from core.serve.folder_files import write_atomic

LIVE_EVERY_S = 1.0       # a page polls every 2 s: more often would only cost the run writes
RATE_WINDOW_S = 30.0     # the pace is measured over this much of the latest training: steady, yet it follows the load
RATE_MIN_S = 5.0         # ... and over no less: a run's first seconds said 19 minutes left for a run of 6
LIVE_PREFIX = ".live-"   # hidden: a study folder is a dataset (runs.csv, its card), these are the run's scratch


def live_path(folder, run_id: str) -> Path:
    return Path(folder) / f"{LIVE_PREFIX}{run_id}.json"


class StepReport:
    """The worker's side: ``report(step, loss)`` after each step writes {run, step, steps, loss, rate, time} to
    ``path`` when LIVE_EVERY_S has passed since the last write, and always at the last step (the run then measures
    its held-out loss). ``loss``: the mean training loss of the steps since the last write (one batch's alone jumps
    by a tenth from step to step). ``rate``: steps per second over the last RATE_WINDOW_S on the wall clock (None
    for the first RATE_MIN_S), so a machine shared with other work shows in it. An empty ``path`` reports nothing."""

    def __init__(self, path: str, run_id: str, steps: int):
        self.path, self.run_id, self.steps = path, run_id, steps
        self.last = 0.0
        self.marks: deque[tuple[float, int]] = deque()  # (time, step) of the reports within RATE_WINDOW_S
        self.losses = [0.0, 0]  # sum and count of the losses since the last write

    def __call__(self, step: int, loss: float):
        if not self.path:
            return
        now = time.time()
        self.losses[0] += float(loss)
        self.losses[1] += 1
        if now - self.last < LIVE_EVERY_S and step < self.steps:
            return
        self.last = now
        mean, self.losses = self.losses[0] / self.losses[1], [0.0, 0]
        # the pace since an earlier report, not since the start: the first step costs ten of the others (measured: 1.9
        # s against 0.17 s; allocations, the first snapshot), and a run slowed or paused a while ago should not weigh
        # on the time left for long
        self.marks.append((now, step))
        while len(self.marks) > 2 and now - self.marks[0][0] > RATE_WINDOW_S:
            self.marks.popleft()
        t0, s0 = self.marks[0]
        rate = round((step - s0) / (now - t0), 3) if now - t0 >= RATE_MIN_S and step > s0 else None
        info = {"run": self.run_id, "step": step, "steps": self.steps, "loss": round(mean, 4),
                "rate": rate, "time": round(now, 2)}
        try:
            # sync=False: a hint rewritten every second need not reach the disk, only never be read half-written
            write_atomic(Path(self.path), json.dumps(info), sync=False)
        except OSError:  # a full disk, or a folder on another machine: the run matters, its report does not
            self.path = ""


class LiveSteps:
    """The study's side: the runs under way as their files say, read at most every LIVE_EVERY_S (``poll``)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.runs: dict[str, dict] = {}
        self.last = 0.0
        self.clear()  # a study killed outright leaves its runs' files: they are not of this session

    def poll(self) -> bool:
        """Read the runs' files if LIVE_EVERY_S has passed; True when what they say changed."""
        now = time.time()
        if now - self.last < LIVE_EVERY_S:
            return False
        self.last = now
        runs = {}
        for p in self.folder.glob(f"{LIVE_PREFIX}*.json"):
            try:
                info = json.loads(p.read_text())
            except (OSError, ValueError):  # removed as the run finished: it is no longer under way
                continue
            runs[info.get("run", p.stem)] = info
        # unchanged files, unchanged progress.json: a run slower than a step a second is not rewritten for nothing
        changed = runs != self.runs
        self.runs = runs
        return changed

    def drop(self, run_id: str):
        """A run is in: its file and its line go."""
        self.runs.pop(run_id, None)
        live_path(self.folder, run_id).unlink(missing_ok=True)

    def clear(self):
        # every file of the pattern, not only this session's runs: a killed session's runs are under way no more
        self.runs = {}
        for p in self.folder.glob(f"{LIVE_PREFIX}*.json"):
            p.unlink(missing_ok=True)

    def listed(self) -> list[dict]:
        """progress.json's "live": one line per run under way, in the order of their ids."""
        return [self.runs[k] for k in sorted(self.runs)]


def seconds_left(info: dict, now: float | None = None) -> float:
    """A run's seconds left at its own pace: the steps it has left over its steps per second, less the time since it
    last wrote. Its held-out loss at the end is left out: seconds against minutes (measured: 2.9 s after the 3 minutes
    of steps of the d = 128 forecast run on an idle core)."""
    now = time.time() if now is None else now
    rate = info.get("rate") or 0.0
    if rate <= 0:  # no pace yet (the first report): unknown, which the page shows as no time left rather than a guess
        return float("inf")
    left = max(0, info.get("steps", 0) - info.get("step", 0))  # .get: progress.json is a hint, never an error
    return max(0.0, left / rate - max(0.0, now - info.get("time", now)))


def slowest(live: list[dict], now: float | None = None) -> dict | None:
    """The run under way that ends last (the study ends with it); None when none is."""
    return max(live, key=lambda r: seconds_left(r, now), default=None)
