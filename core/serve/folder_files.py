"""Reading the files of a model folder without being led out of it.

A model folder may come from anywhere (an unzipped download, a GPT-2 folder an admin copied in), and symlinks
survive unzip and tar: ``README.md -> /proc/self/environ`` would show the server's environment to every
session. So every file the app reads from a model folder goes through ``open_inside``:

* the name is one plain file name (no '/', no '..');
* the path is resolved (links followed), and the real file must lie inside the folder's own real path:
  a link to another file of the same folder is fine, a link that leaves it is refused;
* it must be a regular file (a FIFO would block the reading thread forever; a device never ends);
* on Linux the opened descriptor's own path (``/proc/self/fd/N``) is checked again after the open, so a link
  swapped in between the check and the open is caught too.

Refusals raise ``OutsideFolder``, an OSError, so that every reader's existing ``except OSError`` treats a link
out of the folder like a file that cannot be read, and its message says why.
"""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from core.serve.fmt import binary_bytes

_PROC_FD = Path("/proc/self/fd")


class OutsideFolder(OSError):
    """A model folder's file is a link leading out of the folder, or not a regular file."""


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or os.sep in name or "\0" in name:
        raise OutsideFolder(f"{name!r} is not a plain file name")


def real_folder(folder) -> Path:
    """The folder's real path (links followed); FileNotFoundError when it is missing, NotADirectoryError when it is
    no folder."""
    real = Path(os.path.realpath(folder))
    if not real.is_dir():
        if not real.exists():
            raise FileNotFoundError(f"{folder} does not exist")
        raise NotADirectoryError(f"{folder} is not a folder")
    return real


def is_inside(path, folder) -> bool:
    """True when the real path of ``path`` is ``folder``'s real path or lies below it."""
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def inside(folder, name: str) -> Path:
    """The real path of ``folder/name``, checked: inside the folder's real path and a regular file.
    FileNotFoundError when there is no such file; OutsideFolder when it is a link out of the folder or not a
    regular file."""
    _check_name(name)
    base = real_folder(folder)
    path = Path(folder) / name
    real = Path(os.path.realpath(path))
    if real == base or not is_inside(real, base):
        raise OutsideFolder(f"{name} is a link to a file outside its model folder ({Path(folder).name}); "
                            "this app reads only files inside the folder (copy the real file in, e.g. cp -L)")
    try:
        st = real.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutsideFolder(f"{name} is not a regular file")
    return real


def _opened_inside(fd: int, base: Path) -> bool:
    """Where /proc is there, the path the descriptor really has must lie in ``base`` (catches a link swapped in
    after ``inside`` checked the name). Without /proc (not Linux), ``inside``'s check stands alone."""
    try:
        target = os.readlink(_PROC_FD / str(fd))
    except OSError:
        return True
    return target.startswith(str(base).rstrip(os.sep) + os.sep)


def open_inside(folder, name: str) -> io.BufferedReader:
    """``folder/name`` opened for reading in binary, after ``inside``'s checks; the caller closes it."""
    real = inside(folder, name)
    base = real_folder(folder)
    # O_NOFOLLOW: the resolved path has no link left in its last part; O_NONBLOCK: a FIFO put there after the check
    # does not block the open (the fstat below refuses it)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(real, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not _opened_inside(fd, base):
            raise OutsideFolder(f"{name} is not a regular file inside its model folder")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def size_inside(folder, name: str) -> int:
    """The size in bytes of ``folder/name`` (after ``inside``'s checks)."""
    return inside(folder, name).stat().st_size


def read_bytes_inside(folder, name: str, max_bytes: int) -> bytes:
    """The bytes of ``folder/name``; OSError (OutsideFolder) when it is larger than ``max_bytes``."""
    with open_inside(folder, name) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OutsideFolder(f"{name} is larger than {binary_bytes(max_bytes)}")
    return data


def read_text_inside(folder, name: str, max_bytes: int) -> str:
    """``read_bytes_inside`` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_bytes_inside(folder, name, max_bytes).decode("utf-8")


def lstamp(folder) -> tuple:
    """What changes when anything in ``folder`` is added, removed, renamed or rewritten: the folder's own inode and
    modification time, then every entry's name, inode, size and modification time, links not followed (a link is
    read for what it is, never for what it points to)."""
    st = os.stat(folder)
    entries = []
    with os.scandir(folder) as it:
        for e in it:
            try:
                s = e.stat(follow_symlinks=False)
            except OSError:
                continue  # gone while listed
            entries.append((e.name, s.st_ino, s.st_size, s.st_mtime_ns))
    return (st.st_ino, st.st_mtime_ns, tuple(sorted(entries)))


def file_stamp(path) -> str:
    """What changes when the file ``path`` is rewritten or replaced (its inode, size and modification time); ""
    when it cannot be read (gone meanwhile), so that a cache keyed on it reads the file again and says why."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{path}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


# a study's files and a job's progress: replaced whole or not at all, never seen half-written
def _fsync_dir(folder: Path):
    # a rename is on disk only once the folder's entry is: without this a crash may bring the old file back
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open a folder: the data is on disk, only the rename may not be
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse to fsync a folder; as above
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str, sync: bool = True):
    """Replace ``path`` with ``data`` or leave it as it was: a temporary file beside it, fsync, rename.
    ``sync=False`` skips both fsyncs: for a hint rewritten every second (a run's step), which a crash may lose but a
    reader must still never see half of; the rename alone gives that."""
    path = Path(path)
    # beside the target, so the rename stays on one file system (and is atomic); the pid keeps writers apart
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:  # newline="": csv's own "\n", on every platform
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())  # the data on disk before its name: a crash must not leave the name on no data
        os.replace(tmp, path)
    except BaseException:  # a full disk, or Ctrl-C mid-write: the old file stays whole and no temporary is left
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    if sync:
        _fsync_dir(path.parent)
