"""The model store: who owns a saved model, what it may be called, and saving and replacing it atomically.

config.json's top-level "owner" names who saved the model from the app (an opaque per-session id; null for a
model saved by the command line): one person cannot replace another's model (``user_model_folder``).

Replacing a model swaps two folders with two renames (``_swap_into_place``); a process killed between them
leaves the old model under ``.<name>.old``, which ``recover_interrupted_saves`` puts back. Every swap and every
recovery holds ``_swap_lock``, so that processes sharing one models folder never interleave them.
"""
from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import tempfile
import threading
import time
import unicodedata
import zipfile
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import torch
from safetensors.torch import save_file

try:
    import fcntl
except ImportError:  # Windows: saves are serialised within the process only
    fcntl = None

from core.nn.checkpoint import (CARD_FILE, CONFIG_FILE, FORMAT_VERSION, LOG_FILE, TIED_NAME, WEIGHTS_FILE,
                             CheckpointError, _read_config)
from core.serve.folder_files import open_inside
from core.nn.heads_csv import HEADS_CSV, write_heads_csv
from core.nn.model import Transformer
from core.nn.model_card import format_log, model_card
from core.nn.snapshots import SNAPSHOT_DIR, snapshot_folder, write_snapshots
from core.nn.tokenizer_base import Tokenizer

OWNER_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # plain and short: stored and compared as it is, nothing in it to escape
STALE_TMP_S = 3600  # a temporary save folder this old belongs to no save still running
MAX_NAME_CHARS = 64  # a folder name every file system takes, short enough for the picker


# -------------------------------------------------------------------------------------------------- owners and names
def check_owner(owner) -> str | None:
    """``owner`` unchanged if it is None or a short printable id (1 to 64 of A-Z a-z 0-9 '_' '-'); else ValueError."""
    if owner is None or (isinstance(owner, str) and OWNER_RE.fullmatch(owner)):
        return owner
    raise ValueError("a model owner must be 1 to 64 letters, digits, '_' or '-'")


def checkpoint_owner(path) -> str | None:
    """The owner recorded in a checkpoint folder's config.json; None when there is none or it cannot be read."""
    try:
        data = _read_config(Path(path))
    except CheckpointError:  # unreadable: recorded as no one's, so no owner passed by the app can replace it
        return None
    owner = data.get("owner")
    return owner if isinstance(owner, str) and owner else None


def _someone_elses(name: str) -> str:
    return f"a model called '{name}' already exists and belongs to someone else; choose another name"


def sanitise_model_name(raw: str) -> str:
    """A folder name made from what the user typed: ASCII letters, digits, '-', '_' and '.' only (anything
    else, path separators included, becomes '-'), no leading dot, at most MAX_NAME_CHARS. ValueError if nothing
    usable is left."""
    # accents fall away ('é' -> 'e'); other non-ASCII letters are dropped
    name = unicodedata.normalize("NFKD", raw or "").encode("ascii", "ignore").decode("ascii").strip()
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name)   # '/', '\\', spaces, ':' ... all become '-'
    # no leading dot (a hidden folder, and the prefix of the store's own .<name>.old and .tmp folders), no '..'
    name = re.sub(r"-{2,}", "-", name).strip("-._")[:MAX_NAME_CHARS].strip("-._")
    if not name:
        raise ValueError("give the model a name made of letters, digits, '-', '_' or '.'")
    return name


def name_key(name: str) -> str:
    """What makes two model names the same name: letter case and Unicode's compatibility forms do not count
    ('case-Test', 'CASE-test'; a folder another tool made with an 'ﬁ' ligature and one with 'fi')."""
    # on a case-insensitive file system (macOS, Windows) two such names are one folder: treat them so everywhere
    return unicodedata.normalize("NFKC", name).casefold()


def same_name(models_dir, name: str) -> str:
    """The name of the folder in ``models_dir`` that is the same name as ``name`` (``name_key``), spelled as it
    already is on disk; ``name`` itself when there is none."""
    key = name_key(name)
    try:  # a scan, not a stat: on a case-sensitive disk a stat of the other spelling finds nothing
        with os.scandir(models_dir) as it:
            for e in it:
                if not e.name.startswith(".") and e.name != name and name_key(e.name) == key:
                    return e.name
    except OSError:  # no folder yet (or unreadable): no other spelling to find
        pass
    return name


def user_model_folder(models_dir, raw_name: str, protected=(), overwrite: bool = False,
                      owner: str | None = None, heads: list[dict] | None = None,
                    snapshots: dict | None = None) -> Path:
    """Where a user's model called ``raw_name`` is saved: always a direct child of ``models_dir``.
    Refuses (ValueError) a name that sanitises to nothing, one of the ``protected`` (shipped) names in any
    letter case, a folder outside models_dir (a symlink), a bad ``owner`` (see ``check_owner``), an existing
    folder recorded as someone else's even with ``overwrite`` (a model with no recorded owner, saved by the
    command line, belongs to no one who passes an owner), and any other existing folder unless ``overwrite``."""
    name = sanitise_model_name(raw_name)
    check_owner(owner)
    if name_key(name) in {name_key(p) for p in protected}:
        raise ValueError(f"'{name}' is the name of a shipped model; choose another name")
    base = Path(models_dir).resolve()
    # 'Mine' typed, 'mine' on disk: the name becomes 'mine', so the checks below are about that folder
    name = same_name(base, name)
    folder = base / name
    if folder.resolve().parent != base:  # a symlink under the name would send the save elsewhere
        raise ValueError(f"'{name}' points outside {base}; choose another name")
    if os.path.lexists(folder):  # lexists: a dangling link is there too, and must not be written through
        if folder.is_symlink() or not folder.is_dir():
            raise ValueError(f"'{name}' exists in {base} and is not a model folder; choose another name")
        if checkpoint_owner(folder) != owner:  # before overwrite: someone else's model is refused either way
            raise ValueError(_someone_elses(name))
        if not overwrite:
            raise ValueError(f"you already have a model called '{name}'; choose another name or replace it")
    return folder


def default_model_name(corpus_name: str, now: datetime | None = None, rng: random.Random | None = None) -> str:
    """A default name to save a model under, unlikely to be anyone else's: a short slug of the corpus name
    (its extension dropped, at most 20 characters of a-z, 0-9 and '-'; "model" when nothing is left), then
    month-day, hour-minute and 4 random hex digits, e.g. ``shakespeare-1130-0912-7f3a``. ``sanitise_model_name``
    leaves it unchanged."""
    base = re.split(r"[\\/]", corpus_name or "")[-1]  # an upload's name may carry a Windows or POSIX path
    base = re.sub(r"\.[A-Za-z0-9]{1,5}$", "", base)  # 'shakespeare.txt' -> 'shakespeare'
    slug = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")[:20].strip("-") or "model"
    now = now or datetime.now()
    rng = rng or random.SystemRandom()  # the system's randomness: the random module's state may have been seeded
    return f"{slug}-{now:%m%d-%H%M}-{rng.getrandbits(16):04x}"


# ----------------------------------------------------------------------------------- the lock, the swap and recovery
# Serialises, within this process (the Streamlit server, where every session is a thread), the folder swap of
# a save and the recovery of interrupted swaps, so that recovery never mistakes a swap in progress for one
# that was interrupted. Other processes (replicas of the app sharing one models folder) are serialised by
# _swap_lock's lock on the folder itself.
_SWAP_LOCK = threading.Lock()


@contextmanager
def _swap_lock(parent: Path):
    """Hold _SWAP_LOCK and, where the system allows it, an exclusive ``flock`` on the folder ``parent`` itself,
    so that processes sharing a models folder (replicas of the app, in containers on one host too, and the
    command line) never interleave a swap with another swap or a recovery. No lock file is created. Where the
    folder cannot be locked (Windows, a network file system without flock) only this process is serialised;
    a save is still atomic there, but a replica's recovery could then undo another replica's swap in progress
    and make that save fail (never leave a half-written model)."""
    with _SWAP_LOCK:  # this process's threads first: it holds even where flock does not
        fd = None
        if fcntl is not None:
            try:
                # the folder itself, not a lock file: nothing is created, nothing is left behind
                fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other process's swap or recovery is done
            except OSError:  # no flock here (a network file system): this process's lock only, as documented
                if fd is not None:
                    os.close(fd)
                fd = None
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # closing the only descriptor releases the flock


models_folder_lock = _swap_lock  # the same lock, for core.training.quota's check-and-reserve of a save's place


def _remove_quietly(path: Path) -> None:
    """Remove a folder (or a link, never what it points to); failing is harmless to the caller."""
    try:
        if path.is_symlink() or path.is_file():  # a link is unlinked itself: rmtree refuses links
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def _restore_locked(parent: Path, name: str) -> bool:
    """Put ``parent/.<name>.old`` back as ``parent/<name>`` if a swap was interrupted between its two renames
    (the old folder is there and nothing is under the name). Caller holds _swap_lock. True if restored."""
    if not name or name.startswith(".") or "/" in name or os.sep in name:
        return False  # a plain, visible name only (the command line may save names the app would not choose)
    old, target = parent / f".{name}.old", parent / name
    # something under the name means the swap finished (or a new save did): the .old folder is a leftover then
    if old.is_symlink() or not old.is_dir() or os.path.lexists(target):
        return False
    os.rename(old, target)  # atomic within one file system: the model is back whole or not at all
    return True


def _swap_into_place(tmp: Path, folder: Path) -> None:
    """Replace the complete folder ``folder`` by the complete folder ``tmp``. Caller holds _swap_lock.

    1. rename folder -> .<name>.old   (fails: nothing moved)
    2. rename tmp -> folder           (fails: the old folder is renamed back, and the error re-raised)
    3. remove .<name>.old             (fails: harmless, a leftover that the next replacement removes)
    Between 1 and 2 only the hidden name holds the model; a process killed there leaves exactly the state
    that ``recover_interrupted_saves`` (run by discover_models) and the next save to the same name undo."""
    old = folder.with_name(f".{folder.name}.old")
    if os.path.lexists(old):  # left by a replacement whose step 3 failed; ``folder`` is complete
        _remove_quietly(old)
    # two renames and no copy: each is atomic (same parent folder, so the same file system), and a reader sees
    # either the whole old model, nothing (between them), or the whole new one, never a mixture of files
    os.rename(folder, old)
    try:
        os.rename(tmp, folder)
    except BaseException:  # BaseException: a KeyboardInterrupt here too must put the old model back
        try:
            os.rename(old, folder)
        except OSError:
            pass  # still recoverable: .<name>.old with nothing under the name
        raise
    _remove_quietly(old)


def recover_interrupted_saves(models_dir, stale_tmp_s: float = STALE_TMP_S) -> list[str]:
    """Undo what a process killed in the middle of a save left in ``models_dir``, a folder that holds only
    models (the app's user folder; not an arbitrary parent folder such as a command-line --out's):

    * every folder ``.<name>.old`` with nothing called ``<name>`` beside it is renamed back to ``<name>``
      (a replacement killed between its two renames);
    * every temporary folder ``.<name>.<random>.tmp`` not modified for ``stale_tmp_s`` seconds (an hour by
      default) is removed. Younger ones are kept: they may belong to a save still writing, in another thread
      or process, and a save takes seconds.

    Links are never followed, renamed or removed through: only real folders directly inside ``models_dir``
    are touched. Errors on one entry are ignored. Returns the restored names."""
    base = Path(models_dir)
    restored: list[str] = []
    if not base.is_dir():
        return restored
    now = time.time()  # wall clock, not monotonic: it is compared with the folders' modification times
    with _swap_lock(base):  # a swap holds it between its renames: a .old folder seen here is really abandoned
        try:
            entries = list(os.scandir(base))
        except OSError:
            return restored
        for entry in entries:
            try:
                # only the store's own hidden folders; a link is never one of them (follow_symlinks=False)
                if not entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                if entry.name.endswith(".old"):
                    name = entry.name[1:-len(".old")]
                    if _restore_locked(base, name):
                        restored.append(name)
                elif re.fullmatch(r"\..+\.[A-Za-z0-9_]+\.tmp", entry.name):  # mkdtemp's .<name>.<random>.tmp
                    if now - entry.stat(follow_symlinks=False).st_mtime > stale_tmp_s:
                        shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:  # one entry gone or unreadable meanwhile: the others are still recovered
                continue
    return restored


# ------------------------------------------------------------------------------------------------ saving and packing
def save_checkpoint(path, model: Transformer, tokenizer: Tokenizer, training: dict | None = None,
                    log: list[dict] | None = None, card: str | None = None, overwrite: bool = False,
                    owner: str | None = None, heads: list[dict] | None = None,
                    snapshots: dict | None = None) -> Path:
    """Write a checkpoint folder atomically: everything goes to a temporary folder beside the target,
    which is renamed into place only once complete, so a crash never leaves a half-written model.

    ``owner`` (None, or an id accepted by ``check_owner``) is recorded in config.json. Replacing an existing
    folder (``overwrite``) keeps the old model until the new one is in place (``_swap_into_place``); with an
    ``owner``, a folder recorded as someone else's is never replaced (ValueError). A replacement of this same
    folder that was killed half-way is undone first. ``snapshots`` (step -> float16 tensors, core.nn.snapshots)
    are written under checkpoints/."""
    folder = Path(path)
    check_owner(owner)
    if folder.parent.is_dir():  # a killed replacement left the old model hidden: restore it before deciding anything
        with _swap_lock(folder.parent):
            try:
                _restore_locked(folder.parent, folder.name)
            except OSError:  # could not restore: this save goes ahead as if there were no old model
                pass
    if folder.exists() and not overwrite:  # checked early to fail before seconds of writing; checked again below
        raise FileExistsError(f"{folder} already exists")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError("tokenizer and model disagree on the vocabulary size")
    folder.parent.mkdir(parents=True, exist_ok=True)
    training = dict(training or {})
    # beside the target, so the final rename stays within one file system (os.rename cannot cross two)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes a private folder; a checkpoint is an ordinary readable one
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()
                 if not (model.config.tie_weights and k == TIED_NAME)}  # a tied matrix is stored once
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})  # transformers refuses a file without it
        for name, text in tokenizer.files().items():  # a BPE's tokenizer.json; nothing for characters
            (tmp / name).write_text(text, encoding="utf-8")
        config = {
            "format_version": FORMAT_VERSION,
            "model": model.config.to_dict(),
            "tokenizer": tokenizer.to_dict(),
            "training": training,
            "owner": owner,
        }
        # ensure_ascii=False: a character tokenizer's vocabulary stays readable in the file
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        (tmp / LOG_FILE).write_text(format_log(log or []), encoding="utf-8")
        if heads:  # only runs that probed their heads have heads.csv; readers treat its absence as "none"
            write_heads_csv(tmp / HEADS_CSV, heads)
        (tmp / CARD_FILE).write_text(card if card is not None else model_card(folder.name, model.config, training,
                                                                                    tokenizer),
                                     encoding="utf-8")
        write_snapshots(tmp, snapshots or {})
        for f in [*tmp.iterdir(), *(tmp / SNAPSHOT_DIR).glob("*")]:  # flush to disk before the rename shows the folder
            if f.is_dir():
                f.chmod(0o755)
                continue
            f.chmod(0o644)
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        with _swap_lock(folder.parent):  # checked again here: another save (thread or process) may have finished
            twin = same_name(folder.parent, folder.name)
            if twin != folder.name:  # saved meanwhile under the same name in other letters
                raise FileExistsError(f"{folder.parent / twin} already exists (the same name as {folder.name})")
            if os.path.lexists(folder):
                if not overwrite:
                    raise FileExistsError(f"{folder} already exists")
                # read again under the lock: someone else may have saved under this name since the page checked it
                if owner is not None and checkpoint_owner(folder) != owner:
                    raise ValueError(_someone_elses(folder.name))
                _swap_into_place(tmp, folder)
            else:
                try:
                    os.rename(tmp, folder)
                except OSError as e:  # made meanwhile by a process that _swap_lock could not hold off
                    if os.path.lexists(folder):
                        raise FileExistsError(f"{folder} already exists") from e
                    raise
    except BaseException:  # a full disk, a refusal, an interrupt: no temporary folder is left for recovery to find
        _remove_quietly(tmp)
        raise
    return folder


def checkpoint_zip(path) -> bytes:
    """The checkpoint folder as a zip archive in memory, files under '<name>/' so it unpacks to one folder; its
    snapshots through training (checkpoints/) under '<name>/checkpoints/'."""
    folder = Path(path)
    buf = io.BytesIO()  # in memory: a saved model is a few MB, and the page hands the bytes to a download button
    sub = snapshot_folder(folder)  # None for a link out of the folder, which is never followed
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for base, prefix in ((folder, folder.name), *(((sub, f"{folder.name}/{SNAPSHOT_DIR}"),) if sub else ())):
            for f in sorted(base.iterdir()):
                if f.is_symlink() or not f.is_file():
                    continue  # links are never packed, not even to a file of the folder
                try:
                    with open_inside(base, f.name) as fh:  # checked again at the open: a link swapped in is refused
                        zf.writestr(f"{prefix}/{f.name}", fh.read())
                except OSError:
                    continue  # gone or refused meanwhile
    return buf.getvalue()
