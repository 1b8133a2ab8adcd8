"""Download a corpus on request: streamed into a temporary file beside its destination, bounded in size and
time, checked against its SHA-256, then renamed into place in one step. Nothing calls this by itself (the
training page's button does), and a failed or interrupted download leaves nothing behind that could be read.

Hostile servers: a redirect is followed only if it keeps the scheme, host and port of the address asked for
(so an https download stays https, on its host; never to another port, host or scheme such as ftp), at most
MAX_REDIRECTS times; the timeout is a deadline on the whole exchange (name lookup, connect, headers, body),
enforced by a watchdog that shuts the socket when it passes, so a server that sends its headers a byte at a time
cannot stretch it, and a lookup that hangs is left behind when it passes. A process killed mid-download cannot remove its ``.part`` file: the next fetch into the same
folder removes the ones of the same file that nobody has written to for STALE_PART_S seconds (a live download
writes within its timeout, a minute from the training page, so only a dead one's file is that old)."""
from __future__ import annotations

import glob
import hashlib
import http.client
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

CHUNK = 64 * 1024
MAX_REDIRECTS = 5
STALE_PART_S = 15 * 60  # a .part file untouched this long belongs to a download whose process died


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

    ``timeout`` is a deadline on the whole exchange: name lookups, redirects, connects, headers and body;
    ``max_bytes`` bounds its size
    (checked against Content-Length before the first byte and while streaming)."""
    dest = Path(dest)
    host = urlsplit(url).hostname or url
    if urlsplit(url).scheme not in ("http", "https"):
        raise FetchError(f"{url} is not an http(s) address")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_parts(dest)
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


def _remove_stale_parts(dest: Path) -> None:
    """Remove the temporary files of earlier downloads of ``dest`` that nobody has written to for STALE_PART_S."""
    cutoff = time.time() - STALE_PART_S
    for part in dest.parent.glob(f".{glob.escape(dest.name)}.*.part"):
        try:
            if part.stat().st_mtime < cutoff:
                part.unlink()
        except OSError:  # gone already, or not ours to remove: the download itself does not depend on it
            pass


class _Deadline:
    """The time left to a whole exchange, and a watchdog that shuts every socket opened through it when none is
    left: a blocked header or body read then returns or fails at once (a connect waits no longer than the time
    left)."""

    def __init__(self, timeout: float):
        self.at = time.monotonic() + timeout
        self.fired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []  # duplicates: shutting one down ends the connection, TLS or not
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def passed(self) -> bool:
        return self.fired or time.monotonic() >= self.at

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0 or self.fired:
            raise TimeoutError("the deadline has passed")
        return left

    def resolve(self, host: str, port: int) -> list:
        """socket.getaddrinfo for a connection to ``host``, waiting no longer than the time left: the system's
        lookup cannot be interrupted, so it runs in a thread of its own, left behind (a daemon) if it outlasts the
        deadline."""
        found: dict = {}

        def lookup():
            try:
                found["infos"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            except OSError as e:  # socket.gaierror included: the name does not resolve
                found["error"] = e

        worker = threading.Thread(target=lookup, name="te-fetch-resolve", daemon=True)
        worker.start()
        worker.join(self.left())
        if worker.is_alive():
            raise TimeoutError(f"the name {host} was not resolved before the deadline")
        if "error" in found:
            raise found["error"]
        return found["infos"]

    def connect(self, address, timeout=None, source_address=None):
        """socket.create_connection, its name lookup and connects waiting no longer than the time left, its
        socket watched from then on."""
        host, port = address[0], address[1]
        errors: list[OSError] = []
        sock = None
        for family, kind, proto, _, addr in self.resolve(host, port):  # as create_connection tries each address
            left = self.left()
            candidate = socket.socket(family, kind, proto)
            try:
                candidate.settimeout(min(timeout or left, left))
                if source_address:
                    candidate.bind(source_address)
                candidate.connect(addr)
                sock = candidate
                break
            except OSError as e:
                candidate.close()
                errors.append(e)
        if sock is None:
            raise errors[0] if errors else OSError(f"getaddrinfo gave no address for {host}")
        with self._lock:
            self._socks.append(sock.dup())
            if self.fired:
                self._shut(self._socks[-1])
        return sock

    def _fire(self):
        with self._lock:
            self.fired = True
            for sock in self._socks:
                self._shut(sock)

    @staticmethod
    def _shut(sock):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # closed already
            pass

    def stop(self):
        self._timer.cancel()
        with self._lock:
            for sock in self._socks:
                sock.close()
            self._socks.clear()


def _watched(connection_class, deadline: _Deadline):
    """``connection_class`` (http.client's HTTP or HTTPS connection) opening its socket through ``deadline``."""

    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = deadline.connect  # what HTTPConnection.connect calls to open its socket

    return Watched


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.deadline), req)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.deadline), req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Leaves every redirect to _open, which checks where it leads before anything connects there."""

    def redirect_request(self, *args, **kwargs):
        return None


def _origin(url: str):
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: no origin matches it
        return None
    return parts.scheme.lower(), parts.hostname, port or {"http": 80, "https": 443}.get(parts.scheme.lower())


def _open(url: str, host: str, timeout: float, deadline: _Deadline):
    """The response to GET ``url``, after at most MAX_REDIRECTS redirects that keep its scheme, host and port."""
    opener = urllib.request.build_opener(_NoRedirect, _WatchedHTTP(deadline), _WatchedHTTPS(deadline))
    origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            return opener.open(url, timeout=timeout)
        except urllib.error.HTTPError as e:
            location = e.headers.get("Location") if 300 <= e.code < 400 and e.headers else None
            e.close()
            if location is None:
                raise
            target = urljoin(url, location)
            if _origin(target) != origin:
                asked = urlsplit(url)
                raise FetchError(f"{host} redirected to {target[:200]}; only a redirect on "
                                 f"{asked.scheme}://{asked.netloc} is followed") from None
            url = target
    raise FetchError(f"{host} sent more than {MAX_REDIRECTS} redirects")


def _chunks(url: str, host: str, timeout: float, max_bytes: int):
    """The response body, chunk by chunk; FetchError for every network failure, a redirect elsewhere, a size
    over ``max_bytes``, a body shorter than its Content-Length, or an exchange that outlasts ``timeout``."""
    deadline = _Deadline(timeout)
    answered = False  # the status line and headers arrived: what a deadline that passes cuts short

    def late() -> FetchError:
        return FetchError(f"the download from {host} took longer than {timeout:g} s" if answered
                          else f"{host} did not answer within {timeout:g} s")

    size = 0
    try:
        with _open(url, host, timeout, deadline) as response:
            if deadline.fired:  # headers cut short by the shut socket end as if complete: they are not
                raise late()
            answered = True
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.strip().isdigit() else None
            if expected is not None and expected > max_bytes:
                raise FetchError(f"{host} offers {expected:,} bytes; at most {max_bytes:,} were expected")
            while chunk := response.read1(CHUNK):  # read1: returns what has arrived, so the deadline is checked
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(f"{host} sent more than {max_bytes:,} bytes")
                if deadline.passed():
                    raise late()
                yield chunk  # the caller's write errors stay the caller's: they are not raised in here
            if deadline.fired:  # the watchdog ended the body: what arrived is not the whole of it
                raise late()
    except FetchError:
        raise
    except urllib.error.HTTPError as e:
        raise FetchError(f"{host} answered {e.code} {e.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        if deadline.passed():  # whatever the shut socket or the last timeout looked like from here
            raise late() from None
        if isinstance(e, urllib.error.URLError):
            raise FetchError(f"cannot reach {host} ({getattr(e.reason, 'strerror', None) or e.reason})") from None
        raise FetchError(f"the connection to {host} failed ({type(e).__name__}: {e})") from None
    finally:
        deadline.stop()
    if expected is not None and size != expected:
        raise FetchError(f"the download from {host} stopped after {size:,} of {expected:,} bytes")
