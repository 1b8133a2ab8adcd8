"""Classroom load: many real sessions at once on the attention and generation pages while one trains.

    python -m bench.load --sessions 30 --reruns 3
    python -m bench.load --sessions 30 --think 5 20 --json   # students who read before typing again; one JSON line
    python -m bench.load --replicas 2 --sessions 40 --json   # two app processes behind HAProxy (deploy/replicas.py)

Starts `streamlit run app.py` on a free port, warms it up as a deployment does (deploy.warm opens every page once;
``--cold`` skips it), and connects real websocket clients that speak Streamlit's own protocol (deploy.client: the
protobuf messages the browser sends): all open a page at the same instant, then each types new prompts.
One more session starts a training run on the Training page and keeps its connection open meanwhile.
The time of a rerun is measured from sending the new prompt to the server's "script finished".

With ``--replicas N`` (N > 1), N app processes run behind HAProxy (deploy/replicas.py) and every session goes
through the balancer as a browser does: it loads the page and the health endpoint over HTTP, keeps the cookies it
is given (HAProxy's SERVERID naming its replica, Streamlit's XSRF token) and sends them with the websocket
handshake and with its uploads. Each session must be answered by the replica its cookie names (the X-Served-By
header of the handshake), every replica must serve sessions, and ``--uploads`` more sessions each upload a small
text file on the Training page (PUT /_stcore/upload_file/<session>/<file>, which only the replica holding the
session accepts) and must see it read back. The training session reconnects at the end with its cookie and its
session id, and must find its run where it left it: on the replica that started it.

The shared model must come out unchanged, checked two ways that no cache can answer for:
  - the shipped weights on disk hash the same before and after (sha256, tensor by tensor, sorted names);
  - after the load, a new session opens the attention page with a prompt holding a random nonce, and the
    attention pattern the server draws (layer 1, head 1) equals the one this process computes from the
    checkpoint on disk: the server's model in memory still has the weights of the file.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from streamlit.proto.Common_pb2 import FileUploaderState

from deploy.client import Session  # the protocol client, shared with deploy.warm
from deploy.warm import warm as warm_up

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "KING:\nWhat say you, lords?", "First Citizen:\nWe are resolved.", "To sleep, perchance", "O gentle night,",
    "Where is the duke?", "Come, come, away!", "My lord, the queen", "Hear me, good friends:",
]
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"  # the model every session shares
LETTERS = "abcdefghij"  # digits written as letters: the shipped character model has no digits in its vocabulary


def new_prompt(i: int, k: int) -> str:
    """Student i's k-th prompt: one of PROMPTS plus a tag that no other (student, prompt) pair shares, written
    in letters the character model knows. (Digits would be dropped as unknown characters, and then students
    whose prompts differ only there would type the same prompt and be served from the server's caches.)"""
    tag = "".join(LETTERS[int(c)] for c in str(i)) + " " + "".join(LETTERS[int(c)] for c in str(k))
    return f"{PROMPTS[(i + k) % len(PROMPTS)]} {tag}"


PROBE = "ROMEO:\nIs the day so young? "  # + a random nonce of letters, so no cache can hold the answer
PATTERN_TOLERANCE = 1e-5


class Browser:
    """The HTTP side of one browser on one site: the cookies it was given, sent back with every request (the
    websocket handshake included), like a browser. Through HAProxy, SERVERID names the replica."""

    def __init__(self, url: str):
        self.url = url
        self.cookies: dict[str, str] = {}

    def _request(self, path: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None):
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={**({"Cookie": self.cookie_header()} if self.cookies else {}),
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
                status, h = r.status, r.headers
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: HTTP {e.code} {e.read()[:300]!r}") from None
        for line in h.get_all("Set-Cookie") or []:
            name, _, value = line.split(";", 1)[0].strip().partition("=")
            self.cookies[name] = value.strip('"')
        return status, h

    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def visit(self) -> str:
        """Load the page and the health endpoint, as the browser does before opening its websocket: the
        balancer's cookie and Streamlit's XSRF cookie arrive. The replica named by the cookie ("" without one)."""
        self._request("/")
        self._request("/_stcore/health")
        return self.cookies.get("SERVERID", "")

    def session(self, existing_session: str = "") -> Session:
        return Session(self.url, cookie=self.cookie_header(), xsrf=self.cookies.get("_streamlit_xsrf", ""),
                       existing_session=existing_session)

    def upload(self, upload_url: str, name: str, data: bytes) -> str:
        """PUT one file to the uploader's URL as the browser does (multipart, the XSRF header, the cookies).
        The replica that answered (X-Served-By, "" without a balancer)."""
        boundary = uuid.uuid4().hex
        body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                f"Content-Type: text/plain\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        status, h = self._request(upload_url, "PUT", body, {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "X-Xsrftoken": self.cookies.get("_streamlit_xsrf", ""), "Origin": self.url})
        if status != 204:
            raise RuntimeError(f"upload answered {status}")
        return h.get("X-Served-By", "")


def start_server(models_dir: str, warm: bool = True) -> tuple[subprocess.Popen, str]:
    """``streamlit run app.py`` on a free port; warmed up (deploy.warm: every page opened once) unless warm=False."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env={**os.environ, "TE_MODELS_DIR": models_dir},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=1)
        except OSError:
            time.sleep(0.2)
            continue
        if warm:
            warm_up(url)
        return proc, url
    proc.kill()
    raise RuntimeError("the server did not start")


def weights_sha256(folder: Path = SHIPPED) -> str:
    """sha256 of a checkpoint's state dict: every tensor's name, dtype, shape and bytes, in sorted name order."""
    state = load_file(str(folder / "model.safetensors"), device="cpu")
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _plotly_array(z) -> np.ndarray:
    """A plotly JSON array: a nested list (null for NaN) or a typed array {"dtype", "bdata", "shape"}."""
    if isinstance(z, dict):
        shape = [int(n) for n in str(z.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(shape).astype(float)
    return np.array(z, dtype=float)


def served_pattern(url: str, prompt: str) -> np.ndarray:
    """A new session's attention page for ``prompt``: the weights a_ij of layer 1, head 1 as drawn in the first
    chart (its third heatmap, "weights a_ij after the masked softmax"; masked cells are NaN)."""
    s = Session(url)
    try:
        s.run("attention")
        s.run("attention", {s.widget_id("text_area", "Your prompt"): prompt})
        if s.exceptions:
            raise RuntimeError(f"exception box: {s.exceptions[0]}")
        spec = json.loads(s.charts()[0])
    finally:
        s.close()
    titles = [a.get("text", "") for a in spec["layout"].get("annotations", [])]
    if not any("after the masked softmax" in t for t in titles):
        raise LookupError(f"the first chart has no 'after the masked softmax' panel: {titles}")
    if "layer 1, head 1" not in spec["layout"]["title"]["text"].lower():
        raise LookupError(f"the first chart is not layer 1, head 1: {spec['layout']['title']['text']!r}")
    heatmaps = [t for t in spec["data"] if t.get("type") == "heatmap"]
    return _plotly_array(heatmaps[2]["z"])


def disk_pattern(prompt: str, layer: int = 0, head: int = 0, folder: Path = SHIPPED) -> np.ndarray:
    """The same pattern computed here, in a fresh model loaded from the checkpoint on disk."""
    from core.nn.checkpoint import load_checkpoint

    model, tok = load_checkpoint(folder)
    ids = tok.encode(prompt)  # strict: the nonce uses only characters of the vocabulary
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([ids]), names=[f"blocks.{layer}.attn.hook_pattern"])
    return cache[f"blocks.{layer}.attn.hook_pattern"][0, head].double().numpy()


def compare_patterns(served: np.ndarray, expected: np.ndarray) -> tuple[bool, float, str]:
    """(equal within PATTERN_TOLERANCE, largest difference, what differs). Masked cells must be NaN there."""
    if served.shape != expected.shape:
        return False, float("inf"), f"shape {served.shape} served, {expected.shape} expected"
    future = np.triu(np.ones(expected.shape, dtype=bool), k=1)
    if not np.array_equal(np.isnan(served), future):
        return False, float("inf"), "the masked (NaN) cells are not exactly those above the diagonal"
    diff = float(np.max(np.abs(served[~future] - expected[~future])))
    return diff <= PATTERN_TOLERANCE, diff, f"largest difference {diff:.2e} (tolerance {PATTERN_TOLERANCE:.0e})"


def fresh_forward_check(url: str) -> dict:
    """Does the server's shared model still compute what the weights on disk compute, on a prompt never seen?"""
    nonce = "".join(random.SystemRandom().choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                    for _ in range(16))
    prompt = PROBE + nonce
    try:
        served = served_pattern(url, prompt)
    except Exception as e:  # reported, and the model then counts as changed: nothing was shown to match
        return {"prompt": prompt, "ok": False, "max_diff": float("inf"), "detail": f"{type(e).__name__}: {e}"}
    ok, diff, detail = compare_patterns(served, disk_pattern(prompt))
    return {"prompt": prompt, "ok": ok, "max_diff": diff, "detail": detail}


def open_tab(url: str, balanced: bool) -> tuple[Browser, Session, str]:
    """A new browser's first tab: the page and the health endpoint over HTTP (the cookies), then the websocket
    with them. Through a balancer, the replica its cookie names must be the one that answered the handshake.
    (browser, session, the replica's name; "" without a balancer)."""
    b = Browser(url)
    replica = b.visit()
    if balanced and not replica:
        raise RuntimeError(f"the balancer set no SERVERID cookie (cookies: {sorted(b.cookies)})")
    s = b.session()
    if balanced and s.served_by != replica:
        s.close()
        raise RuntimeError(f"the cookie names {replica}, but {s.served_by or 'no replica'} answered the websocket")
    return b, s, replica


def student(url: str, i: int, reruns: int, timings: list, errors: list, lock: threading.Lock,
            think: tuple[float, float] | None = None, served: dict | None = None):
    """One student: opens a page, then types ``reruns`` new prompts, back to back or (``think``) after reading
    for a random time between think[0] and think[1] seconds each time. ``served`` (through a balancer): counts
    the sessions of each replica."""
    page, label = [("attention", "Your prompt"), ("generation", "Prompt")][i % 2]
    pause = random.Random(i)
    try:
        _, s, replica = open_tab(url, served is not None)
        first = s.run(page)
        mine = [("first", page, first)]
        box = s.widget_id("text_area", label)
        for k in range(reruns):
            if think:
                time.sleep(pause.uniform(*think))
            mine.append(("rerun", page, s.run(page, {box: new_prompt(i, k)})))
        if s.exceptions:
            raise RuntimeError(f"exception box: {s.exceptions[0]}")
        s.close()
        with lock:
            timings.extend(mine)
            if served is not None:
                served[replica] = served.get(replica, 0) + 1
    except Exception as e:  # collected: the load test fails on any
        with lock:
            errors.append(f"session {i} ({page}): {type(e).__name__}: {e}")


UPLOAD_SOURCE, UPLOAD_BOX = "Upload a .txt file", "A plain-text file, UTF-8"  # the Training page's labels


def uploader(url: str, i: int, uploads: dict, errors: list, lock: threading.Lock, balanced: bool):
    """One student who trains on a text of their own: the Training page, "Upload a .txt file", the file sent as
    the browser sends it (the server's upload URL for this session, then a PUT, which only the replica holding
    the session accepts), then a rerun with the uploader's new value: the page must read the file back (its
    character count). ``uploads`` counts the uploads each replica took."""
    name = f"student-{i}.txt"
    text = f"Notes of student {i}.\n" + "\n".join(PROMPTS) * 10
    data = text.encode("utf-8")
    try:
        b, s, replica = open_tab(url, balanced)
        s.run("training")
        s.run("training", {s.widget_id("radio", "Train on"): UPLOAD_SOURCE})
        box = s.widget_id("file_uploader", UPLOAD_BOX)
        urls = s.file_urls(name)
        if not urls.upload_url.startswith(f"/_stcore/upload_file/{s.session_id}/"):
            raise RuntimeError(f"unexpected upload URL {urls.upload_url!r}")
        took = b.upload(urls.upload_url, name, data)
        if balanced and took != replica:
            raise RuntimeError(f"the upload went to {took or 'no replica'}, the session is on {replica}")
        state = FileUploaderState()
        info = state.uploaded_file_info.add()
        info.file_id, info.name, info.size = urls.file_id, name, len(data)
        info.file_urls.CopyFrom(urls)
        s.run("training", {box: state})
        if s.exceptions:
            raise RuntimeError(f"exception box: {s.exceptions[0]}")
        chars = s.metric("Characters")
        if chars != f"{len(text):,}":
            raise RuntimeError(f"the page read back {chars} characters, {len(text):,} were uploaded")
        s.close()
        with lock:
            uploads[replica] = uploads.get(replica, 0) + 1
    except Exception as e:  # collected: the load test fails on any
        with lock:
            errors.append(f"upload {i}: {type(e).__name__}: {e}")


def trainer_comes_back(browser: Browser, trainer: Session, replica: str) -> str:
    """The training session's websocket drops and the browser reconnects, with its cookie and its session id,
    as Streamlit's frontend does: it must reach the same session on the replica that started the run, and find
    the run there (its Pause button). "" when it does, else what went wrong."""
    trainer.close()
    s = browser.session(existing_session=trainer.session_id)
    try:
        s.run("training")
        if replica and s.served_by != replica:
            return f"the reconnect reached {s.served_by or 'no replica'}, the run is on {replica}"
        if s.session_id != trainer.session_id:
            return f"the reconnect got a new session ({s.session_id}), not {trainer.session_id}"
        s.widget_id("button", "Pause")  # drawn only while this session has a run
        return ""
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        s.close()


def run_load(sessions: int = 30, reruns: int = 3, train: bool = True, think: tuple[float, float] | None = None,
             replicas: int = 1, uploads: int | None = None, warm: bool = True) -> dict:
    """``replicas`` > 1: that many app processes behind HAProxy (deploy.replicas), every session through it;
    ``uploads`` more sessions upload a file on the Training page (default: two per replica behind a balancer,
    none on one server)."""
    models = tempfile.mkdtemp(prefix="te-load-models-")
    weights_before = weights_sha256()
    balanced = replicas > 1
    uploads = (2 * replicas if balanced else 0) if uploads is None else uploads
    cluster = proc = None
    if balanced:
        from deploy.replicas import Replicas
        cluster = Replicas(replicas, models_dir=models, warm=warm).start()
        url = cluster.url
    else:
        proc, url = start_server(models, warm=warm)
    stop = threading.Event()
    trainer = drainer = None
    timings, errors, lock = [], [], threading.Lock()
    served, uploaded, trainer_replica = {}, {}, ""
    try:
        if train:
            tb, trainer, trainer_replica = open_tab(url, balanced)
            trainer.run("training")
            trainer.run("training", {trainer.widget_id("button", "Start training"): True})
            drainer = threading.Thread(target=trainer.drain, args=(stop,), daemon=True)
            drainer.start()
        t0, cpu0 = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(max_workers=sessions + uploads) as pool:
            for i in range(sessions):
                pool.submit(student, url, i, reruns, timings, errors, lock, think, served if balanced else None)
            for i in range(uploads):
                pool.submit(uploader, url, i, uploaded, errors, lock, balanced)
        wall = time.perf_counter() - t0
        client_cpu = time.process_time() - cpu0  # this process: the students' clients, which a class runs elsewhere
        if train and balanced:
            stop.set()
            drainer.join(5)
            problem = trainer_comes_back(tb, trainer, trainer_replica)
            if problem:
                errors.append(f"training session after a reconnect: {problem}")
        fresh = fresh_forward_check(url)  # a new session, a new prompt: computed now, not served from a cache
        weights_after = weights_sha256()
        if cluster:
            balancer_sessions = {name: int(row["stot"]) for name, row in cluster.stats().items()}
    finally:
        stop.set()
        if trainer:
            trainer.close()
        if cluster:
            cluster.stop()
        else:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    reruns_t = sorted(t for kind, _, t in timings if kind == "rerun")
    firsts = sorted(t for kind, _, t in timings if kind == "first")

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    by_page = {}
    for page in ("attention", "generation"):
        xs = sorted(t for kind, p, t in timings if kind == "rerun" and p == page)
        by_page[page] = (statistics.median(xs) if xs else float("nan"), pct(xs, 0.95))
    return {
        "sessions": sessions, "reruns": len(reruns_t), "errors": errors, "wall_s": wall, "client_cpu_s": client_cpu, "train": train,
        "think_s": list(think) if think else None, "warm": warm,
        "p50_s": statistics.median(reruns_t) if reruns_t else float("nan"), "p95_s": pct(reruns_t, 0.95),
        "first_p50_s": statistics.median(firsts) if firsts else float("nan"), "first_p95_s": pct(firsts, 0.95),
        "by_page": by_page,
        "weights_unchanged": weights_before == weights_after,
        "server_matches_disk": fresh["ok"], "pattern_max_diff": fresh["max_diff"], "pattern_check": fresh["detail"],
        "model_unchanged": weights_before == weights_after and fresh["ok"],
        "replicas": replicas, "replicas_used": len(served) if balanced else 1, "served_by": served,
        "uploads": sum(uploaded.values()), "uploads_by": uploaded, "trainer_replica": trainer_replica,
        "balancer_sessions": balancer_sessions if balanced else None,
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--reruns", type=int, default=3)
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--think", type=float, nargs=2, metavar=("MIN", "MAX"), default=None,
                   help="seconds each student waits before each new prompt, drawn uniformly (default: none)")
    p.add_argument("--json", action="store_true", help="also print one JSON line with the figures at the end")
    p.add_argument("--replicas", type=int, default=1,
                   help="app processes; more than one runs them behind HAProxy (deploy/replicas.py) with cookie "
                        "stickiness and drives every session through it (default: 1, no balancer)")
    p.add_argument("--uploads", type=int, default=None,
                   help="more sessions that each upload a text file on the Training page (default: two per "
                        "replica behind a balancer, none on one server)")
    p.add_argument("--cold", action="store_true",
                   help="do not warm the server up first (deploy.warm opens every page once before the class "
                        "arrives, as deploy.replicas and the container do): the first visits then pay for "
                        "imports, the model load and every default prompt")
    args = p.parse_args(argv)
    r = run_load(args.sessions, args.reruns, train=not args.no_train, think=tuple(args.think) if args.think else None,
                 replicas=args.replicas, uploads=args.uploads, warm=not args.cold)
    print(f"{r['sessions']} concurrent sessions ({os.cpu_count()} cores), {r['reruns']} reruns with new prompts "
          f"in {r['wall_s']:.1f} s{', while another session trains' if r['train'] else ''}"
          f"{'' if r['warm'] else ' (a cold server: not warmed up)'}; the clients themselves (this process, on the same "
          f"cores) used {r['client_cpu_s']:.1f} CPU-s")
    print(f"server time per rerun: p50 {r['p50_s'] * 1e3:.0f} ms, p95 {r['p95_s'] * 1e3:.0f} ms "
          f"(first visit of a page: p50 {r['first_p50_s'] * 1e3:.0f} ms, p95 {r['first_p95_s'] * 1e3:.0f} ms)")
    for page, (p50, p95) in r["by_page"].items():
        print(f"  {page:<11} p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms")
    if r["replicas"] > 1:
        print(f"{r['replicas']} replicas behind HAProxy, {r['replicas_used']} served sessions: {r['served_by']} "
              f"(connections HAProxy counted: {r['balancer_sessions']}); uploads {r['uploads']}: {r['uploads_by']}; "
              f"the training run on {r['trainer_replica'] or '-'}")
    print(f"errors: {len(r['errors'])}; shared model unchanged: {r['model_unchanged']} (weights on disk unchanged: "
          f"{r['weights_unchanged']}; server's attention on a new prompt matches them: {r['server_matches_disk']}, "
          f"{r['pattern_check']})")
    for e in r["errors"][:10]:
        print("  ", e)
    if args.json:
        print(json.dumps(summary_json(r)))
    return r


def summary_json(r: dict) -> dict:
    """The figures of a load run as one flat JSON object (the keys issue 17 names, per page too)."""
    out = {"sessions": r["sessions"], "replicas": r.get("replicas", 1), "replicas_used": r.get("replicas_used", 1),
           "served_by": r.get("served_by") or None, "uploads": r.get("uploads", 0), "errors": len(r["errors"]),
           "train": r["train"], "think_s": r.get("think_s"), "warm": r.get("warm", True), "reruns": r["reruns"],
           "rerun_p50_s": round(r["p50_s"], 4), "rerun_p95_s": round(r["p95_s"], 4),
           "first_visit_p50_s": round(r["first_p50_s"], 4), "first_visit_p95_s": round(r["first_p95_s"], 4),
           "model_unchanged": r["model_unchanged"], "cores": os.cpu_count(), "wall_s": round(r["wall_s"], 2),
           "client_cpu_s": round(r.get("client_cpu_s", float("nan")), 2)}
    for page, (p50, p95) in r["by_page"].items():
        out[f"{page}_p50_s"], out[f"{page}_p95_s"] = round(p50, 4), round(p95, 4)
    return out


if __name__ == "__main__":
    main()
