"""Cold start: from `streamlit run app.py` to the Home page's first heading in a real browser.

    python -m bench.cold_start                 # 3 starts, each a fresh server process
    python -m bench.cold_start --runs 5 --port 8634
    git show HEAD~1:app.py > _before.py && python -m bench.cold_start --compare _before.py; rm _before.py

Each start launches `streamlit run app.py` headless on a port of 8631-8639 and, with Debian's Chromium driven by
Playwright (already running, so its own start is not counted), opens the server's root URL as soon as the health
check answers, then waits until the Home page's first heading (its st.title, an h1) is in the DOM. Reported per
start: seconds from the launch to the health check answering, to the heading, and to the page settling (no
script running), and the server's CPU seconds (user + system) at the heading. The file cache is warm after the
first start (the project's files and the libraries are read from memory); the process is always new, so every
import and the model load are paid each time. Target: the heading within 6 s on 2 cores. Results go to bench/results/cold-start.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "cold-start.md"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PORTS = range(8631, 8640)
TARGET_S = 6.0


def _healthy(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/_stcore/health", timeout=1)
        return True
    except OSError:
        return False


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far, from /proc (nan where there is none). Less
    sensitive than wall time to other work on a shared machine: the imports and the page run cost the same CPU."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    except (OSError, ValueError, IndexError):
        return float("nan")


def one_start(browser, port: int, timeout: float = 120, script: str = "app.py") -> dict:
    env = {**os.environ, "TE_MODELS_DIR": tempfile.mkdtemp(prefix="te-cold-models-")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", script, "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--server.headless", "true"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}")
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError("the server did not answer its health check")
            time.sleep(0.05)
        healthy = time.perf_counter() - t0
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="commit")
        page.wait_for_selector("h1", state="attached", timeout=timeout * 1000)
        heading = time.perf_counter() - t0
        heading_cpu = _cpu_s(proc.pid)
        title = page.locator("h1").first.inner_text()
        # settled: no script running for 1 s (the status widget appears only while a script runs)
        quiet = 0
        while quiet < 10 and time.perf_counter() - t0 < timeout:
            busy = page.locator('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]').count()
            quiet = 0 if busy else quiet + 1
            time.sleep(0.1)
        settled = time.perf_counter() - t0 - 1.0
        page.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"healthy_s": round(healthy, 2), "heading_s": round(heading, 2), "settled_s": round(settled, 2),
            "heading_cpu_s": round(heading_cpu, 2), "heading": title}


def table(rows: list[dict], label: str) -> list[str]:
    keys = ("healthy_s", "heading_s", "settled_s", "heading_cpu_s")
    med = {k: round(statistics.median(r[k] for r in rows), 2) for k in keys}
    return [f"**{label}**", "", "| start | health check (s) | first heading (s) | settled (s) | server CPU to the heading (s) |",
            "|---|---|---|---|---|", *[f"| {i + 1} | " + " | ".join(str(r[k]) for k in keys) + " |" for i, r in enumerate(rows)],
            "| median | " + " | ".join(str(med[k]) for k in keys) + " |", ""]


def main(argv=None):
    from playwright import sync_api

    p = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--port", type=int, default=8631, choices=list(PORTS))
    p.add_argument("--compare", default=None, metavar="SCRIPT",
                   help="another app script in the repository's root (a copy of an older app.py, say): started in "
                        "turn with app.py, each start of one followed by one of the other, and both reported")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    scripts = ["app.py"] + ([args.compare] if args.compare else [])
    rows: dict[str, list[dict]] = {s: [] for s in scripts}
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for i in range(args.runs):
                for script in reversed(scripts):  # the older one first in each pair
                    rows[script].append(one_start(browser, args.port, script=script))
                    print(f"{script}, start {i + 1}: {rows[script][-1]}", flush=True)
        finally:
            browser.close()
    load = os.getloadavg()[0]
    lines = ["# Cold start", "",
             f"`python -m bench.cold_start --runs {args.runs}{' --compare ' + args.compare if args.compare else ''}` "
             f"on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')} (1-minute load average {load:.2f} at the "
             "end: other work shared the machine): seconds from `streamlit run` to the health check, to the Home "
             f"page's first heading in Chromium's DOM, and to the page settling; and the CPU seconds the server process had used "
             f"when the heading appeared (other work on the machine stretches wall time far more). Target: heading ≤ "
             f"{TARGET_S:.0f} s. "
             "The file cache is warm (the libraries are read from memory); every start is a new process.", ""]
    for script in reversed(scripts):
        lines += table(rows[script], script if script == "app.py" else f"{script} (compared)")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
