"""Where training text comes from. The Tiny Shakespeare file is never part of the repository:
it is found through the TE_CORPUS environment variable or beside the project in ../shared/data, or, once a
user has fetched it (core.training.fetch, on the training page's button), in the corpora folder beside the models.
Python's own reference documentation (``pydoc_data.topics``) ships with every interpreter, so a
fresh machine always has a corpus; uploaded or pasted text is checked by ``check_corpus_bytes``."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from core.data.budget import corpus_cap
from core.serve.fmt import binary_bytes
from core.serve.paths import REPO_ROOT, corpora_dir

CORPUS_ENV = "TE_CORPUS"
SHAKESPEARE_FILE = "tinyshakespeare.txt"
DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "data" / SHAKESPEARE_FILE
MAX_VOCAB = 1000               # the output layer scores every character at every position of every batch
PYDOC_NAME = "Python reference documentation (pydoc_data.topics)"
# C0 and C1 control characters except tab, line feed, form feed and carriage return
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")


def fetched_shakespeare_path() -> Path:
    """Where the training page's fetch saves Tiny Shakespeare: the corpora folder beside the models."""
    return corpora_dir() / SHAKESPEARE_FILE


def shakespeare_candidates() -> list[Path]:
    """Where Tiny Shakespeare is looked for, in order: TE_CORPUS (or, unset, ../shared/data), then the copy a
    user fetched. A fetched copy was checked against its SHA-256 before it got its name, so it is whole."""
    candidate = os.environ.get(CORPUS_ENV)
    return [Path(candidate).expanduser() if candidate else DEFAULT_CORPUS, fetched_shakespeare_path()]


def shakespeare_path() -> Path | None:
    """Path of the Tiny Shakespeare corpus if it can be found, else None."""
    return next((path for path in shakespeare_candidates() if path.is_file()), None)


def read_text_file(path, max_bytes: int | None = None) -> str:
    """Read a UTF-8 corpus of at most ``max_bytes`` bytes (None: ``core.data.budget.corpus_cap()``, the
    largest text a run's memory budget holds); raises ValueError with a clear reason for anything else: a file
    too large, or one that is not a regular file (a device such as /dev/zero never ends, a FIFO blocks)."""
    path = Path(path)
    if max_bytes is None:
        max_bytes, why = corpus_cap()
    else:
        why = None
    try:
        # O_NONBLOCK: opening a FIFO with no writer would wait forever; fstat then judges the file actually opened
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{path} is {'a folder' if stat.S_ISDIR(mode) else 'a device, pipe or socket'}, not a text file")
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(max_bytes + 1)  # one byte over: enough to know it is too large, never the whole of it
        except OSError as e:
            raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise ValueError(f"{path} is larger than {binary_bytes(max_bytes)}" + (f", {why}" if why else ""))
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


TRAIN_FRACTION = 0.9  # the first 90% trains, the last 10% is held out, as nanoGPT splits this corpus


def split_description(train_fraction: float = TRAIN_FRACTION) -> str:
    return f"first {train_fraction:.0%} train, last {1 - train_fraction:.0%} validation"


def train_length(n: int, train_fraction: float = TRAIN_FRACTION) -> int:
    """How many of ``n`` characters (or tokens) the training part takes; rounded down, the held-out rest."""
    return int(n * train_fraction)


def split_train_val(ids, train_fraction: float = TRAIN_FRACTION):
    """The first ``train_fraction`` for training, the rest held out."""
    n = train_length(len(ids), train_fraction)
    return ids[:n], ids[n:]


def pydoc_text() -> str:
    """The language reference topics that ship inside every Python install, joined in a fixed order."""
    from pydoc_data.topics import topics  # local: a large module, read only when Python's documentation is the text

    return "\n\n".join(topics[k].strip("\n") for k in sorted(topics)) + "\n"


def check_corpus_bytes(raw: bytes, name: str, max_bytes: int) -> str:
    """Decoded text of an uploaded or pasted corpus; ValueError with the reason for anything unusable:
    over ``max_bytes`` (the server's upload cap, ``server.maxUploadSize`` in .streamlit/config.toml, the one
    home of that number), binary, not UTF-8, empty, or with more distinct characters than MAX_VOCAB."""
    if len(raw) > max_bytes:
        raise ValueError(f"{name} is {len(raw) / 2**20:.1f} MiB; the limit is {max_bytes / 2**20:.0f} MiB")
    text = decode_text(raw, name)
    # control characters other than tab, newline, form feed and carriage return mean a binary file
    control = len(_CONTROL.findall(text))
    if control > max(2, len(text) // 1000):
        raise ValueError(f"{name} looks binary ({control:,} control characters), not plain text")
    vocab = len(set(text))
    if vocab > MAX_VOCAB:
        raise ValueError(f"{name} uses {vocab:,} distinct characters; a character model here allows at most "
                         f"{MAX_VOCAB:,} (each one is a row of the embedding and a column of the output layer)")
    return text


@dataclass(frozen=True)
class CorpusInfo:
    name: str
    chars: int          # length in characters, which is the number of tokens for a character model
    bytes: int          # UTF-8 size
    vocab: list[str]    # the distinct characters, sorted: the tokenizer's vocabulary
    sample: str         # a short passage to show


def describe_corpus(text: str, name: str, sample_chars: int = 400) -> CorpusInfo:
    """Size, vocabulary and a sample from the middle of the text (the start is often a title page)."""
    start = max(0, len(text) // 2 - sample_chars // 2)
    nl = text.find("\n", start, start + sample_chars // 2)  # begin on a fresh line where one is near
    start = nl + 1 if nl >= 0 else start
    return CorpusInfo(name=name, chars=len(text), bytes=len(text.encode("utf-8")), vocab=sorted(set(text)),
                      sample=text[start:start + sample_chars])
