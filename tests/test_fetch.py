"""core.training.fetch against a local HTTP server serving a file built here (never the real corpus, never the network):
the right file is saved whole, every failure raises FetchError with a reason and leaves nothing behind. The
pinned source is checked against the real corpus file where this machine has one."""
import hashlib
import os
import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from core.training import fetch
from core.data.corpus import DEFAULT_CORPUS, fetched_shakespeare_path, shakespeare_path
from core.training.fetch import FetchError, fetch_corpus
from tests.local_http import closed_port_url, serve

BODY = "".join(f"{i:05d} a line of text written for this test, not a corpus\n" for i in range(4000)).encode()
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with serve(BODY) as s:
        yield s


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_the_right_file_is_saved_whole(server, tmp_path):
    assert len(BODY) > 3 * fetch.CHUNK  # streamed in several pieces
    dest = tmp_path / "corpora" / "tiny.txt"
    assert fetch_corpus(server.url("/good.txt"), dest, SHA, timeout=10, max_bytes=len(BODY)) == dest
    assert dest.read_bytes() == BODY
    assert leftovers(dest.parent) == ["tiny.txt"]  # no temporary file stays behind
    # without Content-Length the body still arrives whole
    dest.unlink()
    fetch_corpus(server.url("/unsized.txt"), dest, SHA, timeout=10, max_bytes=len(BODY))
    assert dest.read_bytes() == BODY and leftovers(dest.parent) == ["tiny.txt"]


def check_refused(url, tmp_path, match, sha=SHA, timeout=10.0, max_bytes=2 * len(BODY)):
    dest = tmp_path / "corpora" / "tiny.txt"
    with pytest.raises(FetchError, match=match):
        fetch_corpus(url, dest, sha, timeout=timeout, max_bytes=max_bytes)
    assert leftovers(dest.parent) == []  # nothing half-written under any name


def test_wrong_checksum(server, tmp_path):
    check_refused(server.url("/good.txt"), tmp_path, "not the expected one", sha="0" * 64)


def test_truncated_body(server, tmp_path):
    check_refused(server.url("/truncated.txt"), tmp_path, f"stopped after {len(BODY):,} of {len(BODY) + 1000:,} bytes")


def test_server_down(tmp_path):
    check_refused(closed_port_url(), tmp_path, "cannot reach 127.0.0.1")


def test_not_found(server, tmp_path):
    check_refused(server.url("/missing.txt"), tmp_path, "answered 404")


def returns_at_all(fn, bound=60.0):
    """Run ``fn`` in a thread and fail if it is still running after ``bound`` seconds: a guard against a hang,
    not a measure of speed (the message a test matches says which bound stopped the download)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = fn()
        except BaseException as e:  # handed to the test below
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"still running after {bound:g} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def test_a_server_that_stops_sending_times_out(server, tmp_path):
    returns_at_all(lambda: check_refused(server.url("/slow.txt"), tmp_path, "took longer than 0.5 s", timeout=0.5))


def test_a_trickle_is_cut_off_at_the_total_timeout(server, tmp_path):
    """Every byte arrives within the socket timeout, but the whole download may not outlast it either."""
    returns_at_all(lambda: check_refused(server.url("/trickle.txt"), tmp_path, "took longer than 0.5 s", timeout=0.5))


@contextmanager
def serve_handler(respond):
    """A local server whose every GET is answered by ``respond(handler, release)``; ``release`` is set when the
    block ends, to free a handler that is still sending."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            try:
                respond(self, release)
            except OSError:  # the client hung up: what the deadline tests expect of it
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads, httpd.block_on_close = True, False
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def headers_a_byte_at_a_time(handler, release):
    """A status line, then one header that never ends, a byte every 50 ms: each byte well within any socket
    timeout, so only a deadline on the whole exchange stops it."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not release.wait(0.05):
        handler.wfile.write(b"a")


def test_headers_sent_a_byte_at_a_time_are_cut_off_at_the_deadline(tmp_path):
    with serve_handler(headers_a_byte_at_a_time) as base:
        returns_at_all(lambda: check_refused(base + "/good.txt", tmp_path, "did not answer within 0.5 s",
                                             timeout=0.5))


def redirect_or_body(handler, release):
    """/go?to=URL answers 302 with Location URL; any other path, the test's body."""
    query = parse_qs(urlsplit(handler.path).query)
    if "to" in query:
        handler.send_response(302)
        handler.send_header("Location", query["to"][0])
        body = b""
    else:
        handler.send_response(200)
        body = BODY
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def go(base, to):
    return f"{base}/go?to={quote(to, safe='')}"


def test_a_redirect_on_the_same_server_is_followed(tmp_path):
    dest = tmp_path / "corpora" / "tiny.txt"
    with serve_handler(redirect_or_body) as base:
        fetch_corpus(go(base, "/good.txt"), dest, SHA, timeout=10, max_bytes=len(BODY))  # a relative Location
        assert dest.read_bytes() == BODY
        dest.unlink()
        fetch_corpus(go(base, go(base, base + "/good.txt")), dest, SHA, timeout=10, max_bytes=len(BODY))
        assert dest.read_bytes() == BODY and leftovers(dest.parent) == ["tiny.txt"]


def test_a_redirect_to_another_port_is_refused(server, tmp_path):
    with serve_handler(redirect_or_body) as base:
        check_refused(go(base, server.url("/good.txt")), tmp_path, "redirected to http://127.0.0.1:")
    assert server.requests == []  # the other server was never asked


def test_a_redirect_to_another_host_is_refused(tmp_path):
    with serve_handler(redirect_or_body) as base:
        port = urlsplit(base).port
        check_refused(go(base, f"http://localhost:{port}/good.txt"), tmp_path, "redirected to http://localhost:")


def test_a_redirect_to_ftp_is_refused(tmp_path):
    with socket.socket() as listener, serve_handler(redirect_or_body) as base:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        ftp = f"ftp://127.0.0.1:{listener.getsockname()[1]}/good.txt"
        check_refused(go(base, ftp), tmp_path, "redirected to ftp://", timeout=2)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nobody knocked: no FTP connection was even tried
            listener.accept()


def test_redirects_are_bounded(tmp_path):
    with serve_handler(redirect_or_body) as base:
        url = base + "/good.txt"
        for _ in range(fetch.MAX_REDIRECTS + 1):
            url = go(base, url)
        check_refused(url, tmp_path, f"more than {fetch.MAX_REDIRECTS} redirects")


def test_a_killed_download_s_part_file_is_cleaned_on_the_next_fetch(server, tmp_path):
    """A process killed mid-download cannot remove its own .part file; the next fetch into the folder removes
    those of the same file that nobody has written to for fetch.STALE_PART_S seconds."""
    folder = tmp_path / "corpora"
    folder.mkdir()
    stale, fresh, other = folder / ".tiny.txt.k1ll3d00.part", folder / ".tiny.txt.l1v3n0w0.part", \
        folder / ".notes.txt.k1ll3d00.part"
    for p in (stale, fresh, other):
        p.write_bytes(b"half a download")
    old = time.time() - fetch.STALE_PART_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    fetch_corpus(server.url("/good.txt"), folder / "tiny.txt", SHA, timeout=10, max_bytes=len(BODY))
    # the stale one is gone; one being written now (another session's download) and another file's are kept
    assert leftovers(folder) == sorted([fresh.name, other.name, "tiny.txt"])


def test_size_bound(server, tmp_path):
    check_refused(server.url("/good.txt"), tmp_path, f"offers {len(BODY):,} bytes", max_bytes=1000)
    check_refused(server.url("/unsized.txt"), tmp_path, "sent more than 1,000 bytes", max_bytes=1000)


def test_a_failed_fetch_leaves_an_existing_file_alone(server, tmp_path):
    dest = tmp_path / "corpora" / "tiny.txt"
    dest.parent.mkdir()
    dest.write_bytes(b"the copy we had")
    with pytest.raises(FetchError):
        fetch_corpus(server.url("/truncated.txt"), dest, SHA, timeout=10, max_bytes=2 * len(BODY))
    assert dest.read_bytes() == b"the copy we had" and leftovers(dest.parent) == ["tiny.txt"]


def test_a_disk_error_is_a_fetch_error_and_leaves_nothing(server, tmp_path, monkeypatch):
    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fetch.os, "fsync", full)
    check_refused(server.url("/good.txt"), tmp_path, "cannot write .*No space left on device")


def test_only_http_addresses(tmp_path):
    (tmp_path / "local.txt").write_bytes(BODY)
    check_refused((tmp_path / "local.txt").as_uri(), tmp_path, "not an http")


def test_a_fetched_copy_is_found_from_then_on(server, tmp_path, monkeypatch):
    import core.data.corpus

    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("TE_CORPUS", str(tmp_path / "missing.txt"))
    monkeypatch.setattr(core.data.corpus, "DEFAULT_CORPUS", tmp_path / "absent.txt")
    assert shakespeare_path() is None
    dest = fetched_shakespeare_path()
    assert dest == tmp_path / "corpora" / "tinyshakespeare.txt"  # beside the models folder
    fetch_corpus(server.url("/good.txt"), dest, SHA, timeout=10, max_bytes=len(BODY))
    assert shakespeare_path() == dest
    (tmp_path / "missing.txt").write_bytes(b"x")
    assert shakespeare_path() == tmp_path / "missing.txt"  # TE_CORPUS, when it names a file, comes first


def test_the_pinned_checksum_and_size_are_those_of_the_real_corpus():
    """The pins are checked against the file itself, where this machine has it (never fetched here): a wrong
    SHA-256 would refuse every download, a size below the file's would cut every download off."""
    s = fetch.SHAKESPEARE
    path = DEFAULT_CORPUS
    if not path.is_file():
        pytest.skip(f"the real corpus is not at {path}: nothing to check the pins against")
    data = path.read_bytes()
    assert s.sha256 == hashlib.sha256(data).hexdigest()
    assert s.size == len(data)
    assert urlsplit(s.url).scheme == "https" and urlsplit(s.url).path.endswith(".txt")


@pytest.mark.parametrize("size", [1_115_394, 999_999, 2_050_000, 12_345_678])
def test_the_size_shown_is_the_byte_count_in_megabytes(size):
    s = fetch.Source(name="x", url="https://example.org/x.txt", sha256="0" * 64, size=size)
    number, unit = s.size_label.split()
    assert unit == "MB" and abs(float(number) * 1e6 - size) <= 0.05e6  # one decimal: within 50 kB of the bytes


def test_a_name_lookup_that_hangs_is_cut_off_at_the_deadline(tmp_path, monkeypatch):
    # the system's resolver cannot be interrupted: one that never answers must not hold the fetch past its deadline
    release, entered, done = threading.Event(), threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def hanging(host, *args, **kwargs):
        if host != "hangs.invalid":
            return real(host, *args, **kwargs)
        entered.set()
        release.wait(60)  # released below, once the fetch has given up (a minute at most, should that fail)
        done.set()
        raise socket.gaierror(socket.EAI_AGAIN, "released by the test")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    try:
        with pytest.raises(FetchError, match=r"hangs.invalid did not answer within 0.5 s"):
            fetch_corpus("http://hangs.invalid/corpus.txt", tmp_path / "c.txt", SHA, timeout=0.5)
        assert entered.is_set() and not done.is_set()  # it gave up while the lookup was still hanging
    finally:
        release.set()
    assert leftovers(tmp_path) == []


def test_a_name_that_does_not_resolve_is_said_so(tmp_path, monkeypatch):
    def unknown(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    with pytest.raises(FetchError, match=r"cannot reach nowhere.invalid \(.*not known"):
        fetch_corpus("http://nowhere.invalid/corpus.txt", tmp_path / "c.txt", SHA, timeout=5)
