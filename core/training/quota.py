"""What the server keeps for its users: saved models, per person and in all, and the temporary folders of
retired training runs (core.training.training_job) that nobody can save any more.

The model limits are checked before a save writes anything. Two saves at the same moment may both pass the
check and leave one model over the limit; the next save is refused again.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from core.nn.checkpoint import checkpoint_owner

MODELS_PER_USER_ENV = "TE_MAX_MODELS_PER_USER"
MODELS_ENV = "TE_MAX_MODELS"
DEFAULT_MODELS_PER_USER = 5     # a student's experiments; replacing one of them is always allowed
DEFAULT_MODELS = 100            # the whole class gallery, about 35 MB each for the largest models the page trains

RETIRED_PREFIX = "te-retired-run-"  # + the server's pid + "-": written by a run's process when it is retired
RETIRED_GRACE_S = 600           # younger unreferenced folders may be a hand-over whose message is still on its way
RETIRED_STALE_S = 24 * 3600     # a folder of another live server process (a replica) is removed only this old


class QuotaError(ValueError):
    """A save would pass a limit on saved models."""


def _limit(env: str, default: int) -> int:
    try:
        value = int(os.environ.get(env, default))
    except ValueError:
        return default
    return value if value >= 0 else default


def model_limits() -> tuple[int, int]:
    """(per person, in all): TE_MAX_MODELS_PER_USER and TE_MAX_MODELS, 5 and 100 unless set (a value that is not a
    whole number of 0 or more counts as unset)."""
    return _limit(MODELS_PER_USER_ENV, DEFAULT_MODELS_PER_USER), _limit(MODELS_ENV, DEFAULT_MODELS)


def model_folders(models_dir) -> list[Path]:
    """The saved models' folders: real folders directly in ``models_dir``, hidden ones (saves under way) left out."""
    base = Path(models_dir)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def models_of(models_dir, owner: str | None) -> list[str]:
    """Names of the models in ``models_dir`` recorded as ``owner``'s."""
    if owner is None:
        return []
    return [p.name for p in model_folders(models_dir) if checkpoint_owner(p) == owner]


def check_model_quota(models_dir, folder, owner: str | None) -> None:
    """QuotaError if saving into ``folder`` (a direct child of ``models_dir``) would pass a limit. Replacing a
    folder that exists adds no model and always passes; a save with no owner (the command line) counts only
    against the total."""
    if os.path.lexists(folder):
        return
    per_user, total = model_limits()
    if owner is not None:
        mine = len(models_of(models_dir, owner))
        if mine >= per_user:
            raise QuotaError(
                f"you have {mine} saved model{'s' if mine != 1 else ''}, the most one person may keep here "
                f"({per_user}); replace one of yours (save under its name with replacing allowed) or ask the "
                "teacher to remove one")
    held = len(model_folders(models_dir))
    if held >= total:
        raise QuotaError(f"the server holds {held} saved models, as many as it keeps ({total}); replace one of yours "
                         "(save under its name with replacing allowed) or ask the teacher to make room")


def _server_pid(name: str) -> int | None:
    head = name[len(RETIRED_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


def remove_unused_retired(in_use: set[str], tmp_dir=None, now: float | None = None) -> list[str]:
    """Remove, oldest first, the retired runs' folders in ``tmp_dir`` (the system's temporary folder) that no
    handle of this process refers to (``in_use``: their paths): this server's and those of server processes
    that have ended (and of the older unnamed kind) once RETIRED_GRACE_S old, another live server's only once
    RETIRED_STALE_S old. Returns the paths removed; errors on one folder are ignored."""
    base = Path(tmp_dir or tempfile.gettempdir())
    now = time.time() if now is None else now
    me, used = os.getpid(), {os.path.realpath(p) for p in in_use}
    try:
        found = [p for p in base.iterdir() if p.name.startswith(RETIRED_PREFIX)]
    except OSError:
        return []
    aged = []
    for p in found:
        try:
            if p.is_dir() and not p.is_symlink():
                aged.append((p.stat().st_mtime, p))
        except OSError:
            continue
    removed = []
    for mtime, p in sorted(aged):
        if os.path.realpath(p) in used:
            continue
        pid = _server_pid(p.name)
        wait = RETIRED_STALE_S if pid not in (None, me) and _pid_alive(pid) else RETIRED_GRACE_S
        if now - mtime > wait:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    return removed
