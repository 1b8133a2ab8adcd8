"""core.fetch against a local HTTP server serving a file built here (never the real corpus, never the network):
the right file is saved whole, every failure raises FetchError with a reason and leaves nothing behind."""
import hashlib
import time

import pytest

from core import fetch
from core.corpus import fetched_shakespeare_path, shakespeare_path
from core.fetch import FetchError, fetch_corpus
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


def test_a_server_that_stops_sending_times_out(server, tmp_path):
    start = time.monotonic()
    check_refused(server.url("/slow.txt"), tmp_path, "sent nothing for 0.5 s", timeout=0.5)
    assert time.monotonic() - start < 5


def test_a_trickle_is_cut_off_at_the_total_timeout(server, tmp_path):
    """Every byte arrives within the socket timeout, but the whole download may not outlast it either."""
    start = time.monotonic()
    check_refused(server.url("/trickle.txt"), tmp_path, "took longer than 0.5 s", timeout=0.5)
    assert time.monotonic() - start < 5


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
    import core.corpus

    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("TE_CORPUS", str(tmp_path / "missing.txt"))
    monkeypatch.setattr(core.corpus, "DEFAULT_CORPUS", tmp_path / "absent.txt")
    assert shakespeare_path() is None
    dest = fetched_shakespeare_path()
    assert dest == tmp_path / "corpora" / "tinyshakespeare.txt"  # beside the models folder
    fetch_corpus(server.url("/good.txt"), dest, SHA, timeout=10, max_bytes=len(BODY))
    assert shakespeare_path() == dest
    (tmp_path / "missing.txt").write_bytes(b"x")
    assert shakespeare_path() == tmp_path / "missing.txt"  # TE_CORPUS, when it names a file, comes first


def test_the_source_is_the_well_known_one():
    s = fetch.SHAKESPEARE
    assert s.url == "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    assert s.sha256 == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    assert s.size_label == "1.1 MB"
