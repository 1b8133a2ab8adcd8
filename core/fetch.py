"""Download a corpus on request: streamed into a temporary file beside its destination, bounded in size and
time, checked against its SHA-256, then renamed into place in one step. Nothing calls this by itself (the
training page's button does), and a failed or interrupted download leaves nothing behind that could be read."""
from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Source:
    name: str
    url: str
    sha256: str   # of the exact bytes; anything else is refused
    size: int     # bytes: the label on the button and the download's upper bound

    @property
    def size_label(self) -> str:
        return f"{self.size / 1e6:.1f} MB"


# Karpathy's char-rnn copy: the well-known public source of this corpus (1,115,394 bytes)
SHAKESPEARE = Source(
    name="Tiny Shakespeare",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    size=1_115_394,
)


class FetchError(Exception):
    """A download that did not produce the expected file; the message says why, in words."""


def fetch_corpus(url: str, dest, sha256: str, timeout: float = 30.0, max_bytes: int = 4 * 2**20) -> Path:
    """Download ``url`` to ``dest`` and return ``dest``; FetchError on any failure, with ``dest`` untouched.

    ``timeout`` bounds both every wait on the network and the whole download; ``max_bytes`` bounds its size
    (checked against Content-Length before the first byte and while streaming)."""
    dest = Path(dest)
    host = urlsplit(url).hostname or url
    if urlsplit(url).scheme not in ("http", "https"):
        raise FetchError(f"{url} is not an http(s) address")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as e:
        raise FetchError(f"cannot write in {dest.parent}: {e.strerror or e}") from None
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, closing(_chunks(url, host, timeout, max_bytes)) as chunks:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fchmod(out.fileno(), 0o644)  # mkstemp's 0600 would hide it from a server run as another user
            os.fsync(out.fileno())  # the bytes are on disk before the name points at them
        if digest.hexdigest() != sha256.lower():
            raise FetchError(f"the file from {host} is not the expected one (SHA-256 {digest.hexdigest()[:12]}…, "
                             f"expected {sha256[:12]}…)")
        os.replace(tmp, dest)  # atomic: readers see the old state or the whole checked file
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):  # the disk, not the network: _chunks turns network errors into FetchError
            raise FetchError(f"cannot write {dest}: {e.strerror or e}") from None
        raise
    return dest


def _chunks(url: str, host: str, timeout: float, max_bytes: int):
    """The response body, chunk by chunk; FetchError for every network failure, a size over ``max_bytes``, a
    body shorter than its Content-Length, or a download that outlasts ``timeout``."""
    deadline = time.monotonic() + timeout
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.strip().isdigit() else None
            if expected is not None and expected > max_bytes:
                raise FetchError(f"{host} offers {expected:,} bytes; at most {max_bytes:,} were expected")
            while chunk := response.read1(CHUNK):  # read1: returns what has arrived, so the deadline is checked
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(f"{host} sent more than {max_bytes:,} bytes")
                if time.monotonic() > deadline:
                    raise FetchError(f"the download from {host} took longer than {timeout:g} s")
                yield chunk  # the caller's write errors stay the caller's: they are not raised in here
    except urllib.error.HTTPError as e:
        raise FetchError(f"{host} answered {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise FetchError(f"{host} did not answer within {timeout:g} s") from None
        raise FetchError(f"cannot reach {host} ({getattr(e.reason, 'strerror', None) or e.reason})") from None
    except TimeoutError:
        raise FetchError(f"{host} sent nothing for {timeout:g} s") from None
    except (http.client.HTTPException, OSError) as e:
        raise FetchError(f"the connection to {host} failed ({type(e).__name__}: {e})") from None
    if expected is not None and size != expected:
        raise FetchError(f"the download from {host} stopped after {size:,} of {expected:,} bytes")
