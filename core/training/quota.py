"""What the server keeps for its users: saved models, per person and in all, and the temporary folders of
retired training runs (core.training.training_job) that nobody can save any more.

The model limits are checked before a save writes anything, and the check reserves the new model's place
(``reserve_model_slot``): under a lock every process sharing the models folder takes, it counts the saved models and
the places other saves under way have reserved, and leaves a reservation of its own until its save is done. Two saves
at the same moment therefore cannot both pass the last free place.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from core.nn.model_store import checkpoint_owner
from core.nn.model_store import models_folder_lock

MODELS_PER_USER_ENV = "TE_MAX_MODELS_PER_USER"
MODELS_ENV = "TE_MAX_MODELS"
DEFAULT_MODELS_PER_USER = 5     # a student's experiments; replacing one of them is always allowed
DEFAULT_MODELS = 100            # the whole class gallery, about 35 MB each for the largest models the page trains

RESERVATION_PREFIX = ".te-quota-"  # + pid + "-" + a random id + ".json": a place held by a save under way (hidden)
RESERVATION_STALE_S = 3600      # older than the longest save (seconds): a reservation its process forgot
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


def reservations(models_dir) -> list[dict]:
    """The places reserved by saves under way in ``models_dir`` (name, owner, pid, time), those whose model has
    not yet appeared; a reservation whose process has ended, or older than RESERVATION_STALE_S, is removed."""
    base = Path(models_dir)
    try:
        paths = [p for p in base.iterdir() if p.name.startswith(RESERVATION_PREFIX) and p.name.endswith(".json")]
    except OSError:
        return []
    out, now = [], time.time()
    for p in paths:
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
            stale = (not isinstance(r, dict) or now - float(r.get("time", 0)) > RESERVATION_STALE_S
                     or not _pid_alive(int(r.get("pid", -1))))
        except (OSError, ValueError, TypeError):  # half-written or unreadable: nobody's reservation
            stale = True
        if stale:
            try:
                p.unlink()
            except OSError:
                pass
            continue
        if not os.path.lexists(base / str(r.get("name", ""))):  # saved already: the folder itself counts now
            out.append(r)
    return out


def check_model_quota(models_dir, folder, owner: str | None, reserved: list[dict] | None = None) -> None:
    """QuotaError if saving into ``folder`` (a direct child of ``models_dir``) would pass a limit. Replacing a
    folder that exists adds no model and always passes; a save with no owner (the command line) counts only
    against the total. ``reserved``: the places other saves under way hold (``reservations``), counted as models."""
    if os.path.lexists(folder):
        return
    reserved = reserved or []
    per_user, total = model_limits()
    if owner is not None:
        mine = len(models_of(models_dir, owner)) + sum(1 for r in reserved if r.get("owner") == owner)
        if mine >= per_user:
            raise QuotaError(
                f"you have {mine} saved model{'s' if mine != 1 else ''}, the most one person may keep here "
                f"({per_user}); replace one of yours (save under its name with replacing allowed) or ask the "
                "teacher to remove one")
    held = len(model_folders(models_dir)) + len(reserved)
    if held >= total:
        raise QuotaError(f"the server holds {held} saved models, as many as it keeps ({total}); replace one of yours "
                         "(save under its name with replacing allowed) or ask the teacher to make room")


@contextmanager
def reserve_model_slot(models_dir, folder, owner: str | None):
    """``check_model_quota`` and a reservation of the place, as one step: under the lock every process sharing
    ``models_dir`` takes for its saves (core.nn.model_store.models_folder_lock), the saved models and the places
    reserved by saves under way are counted, and a reservation of this save's place is written; it is removed when
    the block ends (saved or not). QuotaError, before anything is reserved, when no place is left."""
    base = Path(models_dir)
    base.mkdir(parents=True, exist_ok=True)
    path = None
    with models_folder_lock(base):
        check_model_quota(base, folder, owner, reservations(base))
        if not os.path.lexists(folder):  # a replacement adds no model: nothing to reserve
            path = base / f"{RESERVATION_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.json"
            path.write_text(json.dumps({"name": Path(folder).name, "owner": owner, "pid": os.getpid(),
                                        "time": time.time()}), encoding="utf-8")
    try:
        yield
    finally:
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass


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
