"""Who is on the Class page (issue 54): the client's address as the balancer saw it, one voter per browser, the
teacher key, and the teacher's private link back into a class after a reload."""
from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import time

import streamlit as st

TEACHER_KEY_ENV = "TE_TEACHER_KEY"      # set on a class server: only who gives it starts a class
TRUSTED_PROXY_ENV = "TE_TRUSTED_PROXY"  # the balancer's address(es): only its X-Forwarded-For is believed
XSRF_COOKIE = "_streamlit_xsrf"         # Streamlit's own per-browser cookie (a browser session's, shared by tabs)
VOTER = "class_voter"                   # session state: the voter id where the browser sends no cookie


def teacher_key() -> str:
    return os.environ.get(TEACHER_KEY_ENV, "").strip()


def key_ok(given: str) -> bool:
    want = teacher_key()
    return bool(want) and hmac.compare_digest(str(given or "").strip().encode(), want.encode())


@functools.lru_cache(maxsize=64)
def _resolved(name: str, minute: int) -> tuple[str, ...]:
    # a host name (a compose service, say) resolved at most once a minute: its address may change on a restart
    try:
        return tuple({a[4][0] for a in socket.getaddrinfo(name, None)})
    except OSError:
        return ()


def _trusted(addr: str, setting: str) -> bool:
    """Whether ``addr`` is one of the comma-separated addresses, networks (10.0.0.0/8) or host names in ``setting``."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    for item in (x.strip() for x in setting.split(",")):
        if not item:
            continue
        try:
            if ip in ipaddress.ip_network(item, strict=False):
                return True
        except ValueError:
            if addr in _resolved(item, int(time.time() // 60)):
                return True
    return False


def client_address() -> str:
    """The address the class limits count by: the socket's peer, or, when that peer is a trusted proxy
    (TE_TRUSTED_PROXY), the client address it put last in X-Forwarded-For. Never a header from anyone else: a
    student's own X-Forwarded-For would otherwise buy a fresh address per request."""
    peer = st.context.ip_address
    if not isinstance(peer, str) or not peer:  # None for a loopback peer; no browser at all (a test) counts as one
        peer = "127.0.0.1"
    setting = os.environ.get(TRUSTED_PROXY_ENV, "")
    if setting and _trusted(peer, setting):
        sent = st.context.headers.get_all("X-Forwarded-For")
        last = sent[-1].split(",")[-1].strip() if sent else ""
        try:
            return str(ipaddress.ip_address(last))
        except ValueError:
            pass
    return peer


def _browser_token() -> str:
    """The random token of Streamlit's XSRF cookie (format 2|mask|masked token|time: the mask changes with every page
    load, the token does not), or "" where the browser sends none."""
    raw = (st.context.cookies.get(XSRF_COOKIE) or "").strip("\"'")
    parts = raw.split("|")
    if len(parts) == 4 and parts[0] == "2":
        try:
            mask, masked = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
        except ValueError:
            return ""
        return bytes(b ^ mask[i % 4] for i, b in enumerate(masked)).hex() if len(mask) == 4 else ""
    return raw if 16 <= len(raw) <= 200 else ""


def voter_id(code: str) -> str:
    """One voter per browser: a new tab, a reload or a new session of the same browser is the same student, so their
    later vote replaces the earlier one. Hashed with the class code: the store keeps no cookie, and one browser's ids
    in two classes cannot be matched. A browser that sends no cookie is a voter per session."""
    token = _browser_token()
    if token:
        return hashlib.sha256(f"te-voter:{code}:{token}".encode()).hexdigest()[:32]
    return st.session_state.setdefault(VOTER, secrets.token_hex(8))


def server_address() -> str | None:
    """The server's address as this browser reached it (scheme, host, port, and any base path), or None."""
    url = st.context.url
    if not url:
        return None
    url = url.split("?")[0].split("#")[0].rstrip("/")
    return url.removesuffix("/classroom")  # this page's own path: the server's address is what comes before it


def student_link(code: str) -> str:
    base = server_address()
    return f"{base}/classroom?class={code}" if base else f"/classroom?class={code}"


def teacher_link(code: str, secret: str) -> str:
    base = server_address()
    return f"{base or ''}/classroom?class={code}&teacher={secret}"
