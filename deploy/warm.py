"""Warm a server up before the class arrives: open every page once, on its default inputs.

    python -m deploy.warm http://127.0.0.1:8501          # after `streamlit run app.py`; prints each page's time

A fresh server pays once for what every later visit reuses: importing torch and Plotly, loading the model and
computing each page's default prompt (the Generation page's default text and continuations alone are about a
second). Whoever opens a page first waits for all of it, and a class that opens the app at the same instant
waits together (measured: first visit p95 several seconds longer on a cold server, bench/results/classroom.md).
``deploy.replicas`` warms every replica before HAProxy admits it, the container does it in its entry point
(deploy/Dockerfile), and ``bench.load`` warms its server unless told ``--cold``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from deploy.client import Session

ROOT = Path(__file__).resolve().parent.parent


def page_names() -> list[str]:
    """The pages app.py routes to, by the name Streamlit gives them (the file's stem), in the menu's order."""
    import re
    return re.findall(r'st\.Page\("pages/(\w+)\.py"', (ROOT / "app.py").read_text())


def warm(url: str, pages: list[str] | None = None, timeout: float = 900) -> dict[str, float]:
    """Open ``pages`` (default: all of them) one after another in one session; {page: seconds}. Raises if a page
    shows an exception: a server that cannot draw its default pages is not ready for a class."""
    s = Session(url, timeout=timeout)
    times = {}
    try:
        for page in pages or page_names():
            times[page] = s.run(page)
            if s.exceptions:
                raise RuntimeError(f"{page}: {s.exceptions[0]}")
    finally:
        s.close()
    return times


def wait_healthy(url: str, timeout: float = 180) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer on /_stcore/health within {timeout:.0f} s") from None
            time.sleep(0.5)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.warm", description=__doc__.splitlines()[0])
    p.add_argument("url", nargs="?", default="http://127.0.0.1:8501")
    p.add_argument("--pages", nargs="*", default=None, help="page names (default: every page of app.py)")
    p.add_argument("--wait", type=float, default=180, help="seconds to wait for the server to come up")
    args = p.parse_args(argv)
    url = args.url.rstrip("/")
    wait_healthy(url, args.wait)
    t0 = time.perf_counter()
    for page, t in warm(url, args.pages).items():
        print(f"  {page:<12} {t:6.2f} s")
    print(f"warm in {time.perf_counter() - t0:.1f} s: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
