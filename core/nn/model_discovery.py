"""Discovery: the model folders under the shipped and the user models folders, as the sidebar's picker lists them.

Every folder is checked without reading its weights (core.nn.checkpoint's ``_check``), on every page run of every
session; what makes that cheap is a cache of each folder's check, kept while nothing in the folder changes.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.nn.checkpoint import CheckpointError, _check, _os_problem
from core.serve.folder_files import is_inside, lstamp
from core.nn.model_store import recover_interrupted_saves


@dataclass
class ModelEntry:  # one line of the picker
    name: str      # the folder's name, as the picker shows it
    path: Path
    shipped: bool  # from the shipped folder (read-only, the same for everyone) rather than the user folder
    error: str | None = None  # why it cannot be loaded (CheckpointError.shown); None when it can
    owner: str | None = None  # who saved it from the app (config.json's "owner"); None if no one recorded
    hf: bool = False  # a Hugging Face GPT-2 folder (read as it is; never written by this app)
    step: int | None = None  # the training step whose snapshot the pages use (core.nn.snapshots); None: the final weights


MAX_MODEL_FOLDERS = 200   # folders read per models folder; past that the picker says how many were left out
RECOVER_EVERY_S = 60.0    # recovery of interrupted saves: when the folder changed, else at most this often
# Discovery runs on every page run of every session: each folder's check is kept for as long as nothing in the
# folder changes (core.serve.folder_files.lstamp: names, inodes, sizes, times), so a folder is read once, not per run.
# A folder of 1,000 broken models, or one with a 54 MB weights header, then costs a stat per file and run.
_SEEN: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()  # (path, shipped) -> (stamp, entry)
_SEEN_LOCK = threading.Lock()  # every session is a thread of one server, and all of them share _SEEN
_RECOVERED: dict[str, tuple] = {}  # models folder -> (its stamp, time) of the last recovery


def discover_models(shipped_dir, user_dir=None) -> list[ModelEntry]:
    """Every checkpoint folder under the shipped and user folders, each checked without reading its
    weights (``check_checkpoint``). A broken folder is listed with its error instead of hiding the others;
    any failure to read one (even an unexpected one) stays that folder's error. A folder that is a link is
    listed only if it leads to a folder inside the same models folder. At most MAX_MODEL_FOLDERS per models
    folder are read; an entry with an error says how many more were left out. Saves into the user folder that
    were killed half-way are undone first (``recover_interrupted_saves``)."""
    if user_dir is not None:  # only the user folder: the app never saves into the shipped one
        _recover_now_and_then(Path(user_dir))
    entries = []
    for base, shipped in ((shipped_dir, True), (user_dir, False)):
        if base is None:
            continue
        base = Path(base)
        try:
            with os.scandir(base) as it:  # d_type from the listing: no stat per entry
                names = sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
        except OSError:  # no such folder (yet): nothing to list from it, the other folder still is
            continue
        for name in names[:MAX_MODEL_FOLDERS]:  # sorted first, so the same folders are read on every run
            entry = _discovered(base / name, shipped, base)
            if entry is not None:  # None: removed while this run listed it
                entries.append(entry)
        if len(names) > MAX_MODEL_FOLDERS:  # said in the list itself, where the person looking for a model looks
            left = len(names) - MAX_MODEL_FOLDERS
            entries.append(ModelEntry(name=f"({left:,} more folders)", path=base, shipped=shipped,
                                      error=f"{base.name} holds {len(names):,} folders; the picker reads the first "
                                            f"{MAX_MODEL_FOLDERS} by name and left {left:,} out"))
    return entries


def _recover_now_and_then(user_dir: Path) -> None:
    """``recover_interrupted_saves`` when the folder's own entries changed since the last time (a killed save
    leaves a renamed folder, which changes them) or RECOVER_EVERY_S has passed (old temporary folders)."""
    try:
        st = os.stat(user_dir)  # a folder's own mtime changes when an entry in it is added, removed or renamed
    except OSError:
        return
    key, stamp, now = str(user_dir), (st.st_ino, st.st_mtime_ns), time.monotonic()
    last = _RECOVERED.get(key)
    # unchanged and recent: nothing new to undo, and this page run takes no swap lock
    if last is not None and last[0] == stamp and now - last[1] < RECOVER_EVERY_S:
        return
    try:
        recover_interrupted_saves(user_dir)
        st = os.stat(user_dir)  # recovery may have renamed something itself
        _RECOVERED[key] = ((st.st_ino, st.st_mtime_ns), now)
    except OSError:  # not recorded: tried again on the next page run
        pass


def _discovered(folder: Path, shipped: bool, base: Path | None = None, tries: int = 3) -> ModelEntry | None:
    """``folder``'s entry, checked, or the one kept from the last check while the folder has not changed.
    Another replica may replace the folder while it is read (a save swaps a whole new folder in under the name): a
    file that vanished mid-check means "read it again", and a folder that is gone is not listed. None when it is
    gone."""
    # a link out of the models folder would let a folder's files come from anywhere on the server
    if base is not None and folder.is_symlink() and not is_inside(folder, base):
        return ModelEntry(name=folder.name, path=folder, shipped=shipped,
                          error=f"{folder.name} is a link to a folder outside {base.name}; this app lists only "
                                "folders inside the models folder")
    for _ in range(tries):  # a swap is two renames: read again at once, the folder is usually whole
        try:
            stamp = lstamp(folder)  # before the check: a stamp taken after could describe a newer folder
        except FileNotFoundError:
            return None
        except OSError as e:
            return ModelEntry(name=folder.name, path=folder, shipped=shipped, error=f"{folder.name}: {_os_problem(e)}")
        key = (str(folder), shipped)  # shipped is in the key: the entry records it
        with _SEEN_LOCK:
            seen = _SEEN.get(key)
            if seen is not None and seen[0] == stamp:
                _SEEN.move_to_end(key)  # least recently used goes first when the cache is full
                return dataclasses.replace(seen[1])  # a copy: callers may not change the shared one
        entry = _check_entry(folder, shipped)  # outside the lock: other sessions need not wait on this folder's files
        if entry is None:
            continue  # a file vanished mid-check: the folder is being replaced, read it again
        try:
            if lstamp(folder) != stamp:
                continue  # changed while it was checked: what was read may mix two versions
        except OSError:
            return None
        with _SEEN_LOCK:
            _SEEN[key] = (stamp, entry)
            while len(_SEEN) > 4 * MAX_MODEL_FOLDERS:  # a bound, with room for several models folders
                _SEEN.popitem(last=False)
        return dataclasses.replace(entry)
    # still changing after every try: listed with a reason rather than waited on (the page run must go on)
    return ModelEntry(name=folder.name, path=folder, shipped=shipped,
                      error="it was being replaced while this page read it; it will be listed again on the next page run")


def _check_entry(folder: Path, shipped: bool) -> ModelEntry | None:
    """One check of ``folder`` (config and weight header only): its entry, with the reason when it cannot be
    loaded; None when a file vanished while it was read."""
    entry = ModelEntry(name=folder.name, path=folder, shipped=shipped)
    try:
        info = _check(folder, with_tokenizer=False)  # the config and the weights' header: no tensor is read
        entry.owner, entry.hf = info.owner, info.hf
    except CheckpointError as e:
        entry.error = e.shown
    except FileNotFoundError:  # a file vanished mid-check: the folder is being replaced (see _discovered)
        return None
    except Exception as e:  # noqa: BLE001 - one odd folder must never break the picker for everyone
        entry.error = f"{folder.name}: could not be read ({type(e).__name__}: {str(e)[:200]})"
    return entry
