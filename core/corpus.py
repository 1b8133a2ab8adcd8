"""Where training text comes from. The Tiny Shakespeare file is never part of the repository:
it is found through the TE_CORPUS environment variable or beside the project in ../shared/data."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_ENV = "TE_CORPUS"
DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def shakespeare_path() -> Path | None:
    """Path of the Tiny Shakespeare corpus if it can be found, else None."""
    candidate = os.environ.get(CORPUS_ENV)
    path = Path(candidate).expanduser() if candidate else DEFAULT_CORPUS
    return path if path.is_file() else None


def read_text_file(path) -> str:
    """Read a UTF-8 corpus; raises ValueError with a clear reason for anything else."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    return decode_text(raw, str(path))


def decode_text(raw: bytes, name: str = "the text") -> str:
    if b"\x00" in raw:
        raise ValueError(f"{name} looks binary (it contains NUL bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name} is not UTF-8 text (bad byte at position {e.start})") from None
    if not text.strip():
        raise ValueError(f"{name} is empty")
    return text


def split_train_val(ids, train_fraction: float = 0.9):
    """First 90% for training, the last 10% held out, as nanoGPT splits this corpus."""
    n = int(len(ids) * train_fraction)
    return ids[:n], ids[n:]
