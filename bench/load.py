"""Classroom load: many real sessions at once on the attention and generation pages while one trains.

    python -m bench.load --sessions 30 --reruns 3
    python -m bench.load --sessions 30 --think 5 20 --json   # students who read before typing again; one JSON line

Starts `streamlit run app.py` on a free port and connects real websocket clients that speak Streamlit's
own protocol (the protobuf messages the browser sends): each opens a page, then types new prompts.
One more session starts a training run on the Training page and keeps its connection open meanwhile.
The time of a rerun is measured from sending the new prompt to the server's "script finished".

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
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "KING:\nWhat say you, lords?", "First Citizen:\nWe are resolved.", "To sleep, perchance", "O gentle night,",
    "Where is the duke?", "Come, come, away!", "My lord, the queen", "Hear me, good friends:",
]
FINISHED = ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"  # the model every session shares
PROBE = "ROMEO:\nIs the day so young? "  # + a random nonce of letters, so no cache can hold the answer
PATTERN_TOLERANCE = 1e-5


class Session:
    """One browser tab, as far as the server can tell."""

    def __init__(self, url: str, timeout: float = 600):
        host = url.split("//", 1)[1]
        self.ws = connect(f"ws://{host}/_stcore/stream", subprotocols=["streamlit"], open_timeout=60,
                          max_size=None, origin=url).__enter__()
        self.timeout = timeout
        self.page_hash = ""
        self.elements: list = []
        self.exceptions: list[str] = []

    def run(self, page: str, widgets: dict | None = None) -> float:
        """Ask for a rerun of ``page`` with these widget values; wait until it has finished. Seconds."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.page_name = page
        cs.page_script_hash = self.page_hash
        for wid, value in (widgets or {}).items():
            w = cs.widget_states.widgets.add()
            w.id = wid
            if value is True:
                w.trigger_value = True
            elif isinstance(value, str):
                w.string_value = value
            elif isinstance(value, (int, float)):
                w.double_value = float(value)
        self.elements = []
        t0 = time.perf_counter()
        self.ws.send(msg.SerializeToString())
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv(timeout=self.timeout))
            kind = fm.WhichOneof("type")
            if kind == "new_session":
                self.page_hash = fm.new_session.page_script_hash or self.page_hash
            elif kind == "page_info_changed" or kind == "navigation":
                if kind == "navigation" and fm.navigation.page_script_hash:
                    self.page_hash = fm.navigation.page_script_hash
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                el = fm.delta.new_element
                self.elements.append(el)
                if el.WhichOneof("type") == "exception":
                    self.exceptions.append(el.exception.message)
            elif kind == "script_finished" and fm.script_finished == FINISHED:
                return time.perf_counter() - t0

    def widget_id(self, kind: str, label: str) -> str:
        for el in self.elements:
            if el.WhichOneof("type") == kind and getattr(el, kind).label == label:
                return getattr(el, kind).id
        raise LookupError(f"no {kind} labelled {label!r} on the page")

    def charts(self) -> list[str]:
        return [el.plotly_chart.spec for el in self.elements if el.WhichOneof("type") == "plotly_chart"]

    def drain(self, stop: threading.Event):
        """Keep reading (a training page's live view keeps sending) until told to stop."""
        while not stop.is_set():
            try:
                self.ws.recv(timeout=1)
            except TimeoutError:
                pass
            except Exception:
                return

    def close(self):
        self.ws.close()


def start_server(models_dir: str) -> tuple[subprocess.Popen, str]:
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
            return proc, url
        except OSError:
            time.sleep(0.2)
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
    from core.checkpoint import load_checkpoint

    model, tok = load_checkpoint(folder)
    ids = tok.encode(prompt)  # strict: the nonce uses only characters of the vocabulary
    with torch.no_grad():
        out = model(torch.tensor([ids]), return_attn=True)
    return out.attn[layer].pattern[0, head].double().numpy()


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


def student(url: str, i: int, reruns: int, timings: list, errors: list, lock: threading.Lock,
            think: tuple[float, float] | None = None):
    """One student: opens a page, then types ``reruns`` new prompts, back to back or (``think``) after reading
    for a random time between think[0] and think[1] seconds each time."""
    page, label = [("attention", "Your prompt"), ("generation", "Prompt")][i % 2]
    pause = random.Random(i)
    try:
        s = Session(url)
        first = s.run(page)
        mine = [("first", page, first)]
        box = s.widget_id("text_area", label)
        for k in range(reruns):
            if think:
                time.sleep(pause.uniform(*think))
            mine.append(("rerun", page, s.run(page, {box: f"{PROMPTS[(i + k) % len(PROMPTS)]} {i}.{k}"})))
        if s.exceptions:
            raise RuntimeError(f"exception box: {s.exceptions[0]}")
        s.close()
        with lock:
            timings.extend(mine)
    except Exception as e:  # collected: the load test fails on any
        with lock:
            errors.append(f"session {i} ({page}): {type(e).__name__}: {e}")


def run_load(sessions: int = 30, reruns: int = 3, train: bool = True, think: tuple[float, float] | None = None) -> dict:
    models = tempfile.mkdtemp(prefix="te-load-models-")
    weights_before = weights_sha256()
    proc, url = start_server(models)
    stop = threading.Event()
    trainer = None
    try:
        if train:
            trainer = Session(url)
            trainer.run("training")
            trainer.run("training", {trainer.widget_id("button", "Start training"): True})
            threading.Thread(target=trainer.drain, args=(stop,), daemon=True).start()
        timings, errors, lock = [], [], threading.Lock()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=sessions) as pool:
            for i in range(sessions):
                pool.submit(student, url, i, reruns, timings, errors, lock, think)
        wall = time.perf_counter() - t0
        fresh = fresh_forward_check(url)  # a new session, a new prompt: computed now, not served from a cache
        weights_after = weights_sha256()
    finally:
        stop.set()
        if trainer:
            trainer.close()
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
        "sessions": sessions, "reruns": len(reruns_t), "errors": errors, "wall_s": wall, "train": train,
        "think_s": list(think) if think else None,
        "p50_s": statistics.median(reruns_t) if reruns_t else float("nan"), "p95_s": pct(reruns_t, 0.95),
        "first_p50_s": statistics.median(firsts) if firsts else float("nan"), "first_p95_s": pct(firsts, 0.95),
        "by_page": by_page,
        "weights_unchanged": weights_before == weights_after,
        "server_matches_disk": fresh["ok"], "pattern_max_diff": fresh["max_diff"], "pattern_check": fresh["detail"],
        "model_unchanged": weights_before == weights_after and fresh["ok"],
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--reruns", type=int, default=3)
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--think", type=float, nargs=2, metavar=("MIN", "MAX"), default=None,
                   help="seconds each student waits before each new prompt, drawn uniformly (default: none)")
    p.add_argument("--json", action="store_true", help="also print one JSON line with the figures at the end")
    args = p.parse_args(argv)
    r = run_load(args.sessions, args.reruns, train=not args.no_train, think=tuple(args.think) if args.think else None)
    print(f"{r['sessions']} concurrent sessions ({os.cpu_count()} cores), {r['reruns']} reruns with new prompts "
          f"in {r['wall_s']:.1f} s{', while another session trains' if r['train'] else ''}")
    print(f"server time per rerun: p50 {r['p50_s'] * 1e3:.0f} ms, p95 {r['p95_s'] * 1e3:.0f} ms "
          f"(first visit of a page: p50 {r['first_p50_s'] * 1e3:.0f} ms, p95 {r['first_p95_s'] * 1e3:.0f} ms)")
    for page, (p50, p95) in r["by_page"].items():
        print(f"  {page:<11} p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms")
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
    out = {"sessions": r["sessions"], "replicas_used": r.get("replicas_used", 1), "errors": len(r["errors"]),
           "train": r["train"], "think_s": r.get("think_s"), "reruns": r["reruns"],
           "rerun_p50_s": round(r["p50_s"], 4), "rerun_p95_s": round(r["p95_s"], 4),
           "first_visit_p50_s": round(r["first_p50_s"], 4), "first_visit_p95_s": round(r["first_p95_s"], 4),
           "model_unchanged": r["model_unchanged"], "cores": os.cpu_count()}
    for page, (p50, p95) in r["by_page"].items():
        out[f"{page}_p50_s"], out[f"{page}_p95_s"] = round(p50, 4), round(p95, 4)
    return out


if __name__ == "__main__":
    main()
