"""What the two kinds of background job share: a training run (core.training.training_job) and a scaling study
(core.training.study_job). Both run in a process of their own at a lower priority, hold a server slot while active, and
report a status the same job controls read (``ui.jobs.job_controls``: Pause, Resume, Stop, and whether to keep
polling). Each keeps its own states and rules; the words and the helpers they have in common live here."""
from __future__ import annotations

import signal

# added to a background job's niceness: the students' page runs, at normal priority, get the cores first and
# the pages stay responsive while a run or a study keeps the rest busy
BACKGROUND_NICE = 10


class JobBusyError(RuntimeError):
    """The server runs as many jobs of this kind as it allows. Each kind raises its own subclass (a training run's
    ``core.training.training_job.BusyError``, a study's ``core.training.study_job.BusyError``), so a page catches only its own."""


class JobState:
    """The part of a job's status that the controls read the same way for both kinds: ``active`` (the job holds
    its slot: it trains, or may go on by itself) and ``moving`` (its state will change without anyone asking, so
    a page keeps polling), from the subclass's ACTIVE and MOVING tuples of state names."""
    ACTIVE: tuple[str, ...] = ()
    MOVING: tuple[str, ...] = ()
    state: str

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def moving(self) -> bool:
        return self.state in self.MOVING


def about(seconds: float) -> str:
    """A wait in round words: "under a minute", "about 4 min", "about 1.5 h"."""
    # an estimate from a few steps' pace: more digits would promise a precision it does not have
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def signal_name(number: int) -> str:
    """"SIGKILL" for 9; "signal 40" for a number without a name (Linux's real-time signals have none)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_words(code: int | None) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it, as Python reports it)."""
    if code is not None and code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exit code {code}"
