"""Issue 54: who the Class page counts. The client address (only a trusted proxy's X-Forwarded-For is believed), one
voter per browser (the token inside Streamlit's XSRF cookie, whose mask changes at every page load), the teacher key,
and the join address as the browser reached the server. st.context is replaced by a stand-in holding what a browser
would send; the expected values are worked out here by hand."""
import hashlib
import os

import pytest

import pages.classroom.identity as I


class Headers:
    def __init__(self, pairs):
        self.pairs = pairs

    def get_all(self, key):
        return [v for k, v in self.pairs if k.lower() == key.lower()]


class Context:
    def __init__(self, ip=None, headers=(), cookies=None, url=None):
        self.ip_address, self.headers, self.cookies, self.url = ip, Headers(list(headers)), cookies or {}, url


@pytest.fixture
def ctx(monkeypatch):
    def use(**kw):
        monkeypatch.setattr(I.st, "context", Context(**kw))
    monkeypatch.delenv("TE_TRUSTED_PROXY", raising=False)
    return use


def _xsrf(token: bytes, mask: bytes) -> str:
    return f"2|{mask.hex()}|{bytes(b ^ mask[i % 4] for i, b in enumerate(token)).hex()}|1765000000"


def test_an_untrusted_peer_is_counted_by_its_own_address(ctx):
    ctx(ip="203.0.113.7", headers=[("X-Forwarded-For", "10.9.9.9")])
    assert I.client_address() == "203.0.113.7"  # a student's own header buys nothing
    ctx(ip=None)
    assert I.client_address() == "127.0.0.1"  # Streamlit's None for a loopback peer


def test_a_trusted_proxy_names_the_client_by_the_last_address_it_added(ctx, monkeypatch):
    monkeypatch.setenv("TE_TRUSTED_PROXY", "10.0.0.0/8, 192.0.2.5")
    ctx(ip="10.1.2.3", headers=[("X-Forwarded-For", "6.6.6.6, 198.51.100.4")])
    assert I.client_address() == "198.51.100.4"
    ctx(ip="192.0.2.5", headers=[("X-Forwarded-For", "1.1.1.1"), ("X-Forwarded-For", "198.51.100.9")])
    assert I.client_address() == "198.51.100.9"
    ctx(ip="192.0.2.5", headers=[("X-Forwarded-For", "not an address")])
    assert I.client_address() == "192.0.2.5"
    ctx(ip="192.0.2.6", headers=[("X-Forwarded-For", "198.51.100.9")])
    assert I.client_address() == "192.0.2.6"  # one address off the list: not trusted
    monkeypatch.setenv("TE_TRUSTED_PROXY", "localhost")  # a host name, resolved
    ctx(ip=None, headers=[("X-Forwarded-For", "198.51.100.1")])
    assert I.client_address() == "198.51.100.1"


def test_one_browser_is_one_voter_whatever_its_cookie_mask(ctx):
    token = os.urandom(16)
    ctx(cookies={"_streamlit_xsrf": _xsrf(token, b"\x01\x02\x03\x04")})
    first = I.voter_id("K7M2QX9P")
    ctx(cookies={"_streamlit_xsrf": _xsrf(token, b"\xaa\xbb\xcc\xdd")})  # a reload: the same token, a new mask
    assert I.voter_id("K7M2QX9P") == first
    assert first == hashlib.sha256(f"te-voter:K7M2QX9P:{token.hex()}".encode()).hexdigest()[:32]
    assert I.voter_id("ABCDEFGH") != first  # another class: ids that cannot be matched
    ctx(cookies={"_streamlit_xsrf": _xsrf(os.urandom(16), b"\x01\x02\x03\x04")})
    assert I.voter_id("K7M2QX9P") != first  # another browser


def test_a_browser_without_the_cookie_is_a_voter_per_session(ctx, monkeypatch):
    state = {}
    monkeypatch.setattr(I.st, "session_state", state)
    ctx(cookies={})
    a = I.voter_id("K7M2QX9P")
    assert I.voter_id("K7M2QX9P") == a and state[I.VOTER] == a
    ctx(cookies={"_streamlit_xsrf": "2|zz|yy|1"})  # not hex: no token, the session's id
    assert I.voter_id("K7M2QX9P") == a


def test_the_teacher_key(monkeypatch):
    monkeypatch.delenv("TE_TEACHER_KEY", raising=False)
    assert not I.key_ok("") and not I.key_ok("anything")  # no key set: nobody "has" it
    monkeypatch.setenv("TE_TEACHER_KEY", "correct horse")
    assert I.key_ok("correct horse") and I.key_ok(" correct horse ")
    for wrong in ("", "correct", "correct horse!", None):
        assert not I.key_ok(wrong)


def test_links_are_made_from_the_address_the_browser_reached(ctx):
    ctx(url="https://class.example.org/te/classroom")
    assert I.student_link("K7M2QX9P") == "https://class.example.org/te/classroom?class=K7M2QX9P"
    assert I.teacher_link("K7M2QX9P", "s3cret") == "https://class.example.org/te/classroom?class=K7M2QX9P&teacher=s3cret"
    ctx(url=None)
    assert I.student_link("K7M2QX9P") == "/classroom?class=K7M2QX9P"
