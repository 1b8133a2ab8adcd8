"""Classroom load: many sessions at once on the attention and generation pages while one session trains.

    python -m bench.load --sessions 30 --reruns 4

Each session is an AppTest instance in its own thread (one process, shared st.cache_resource models, as
on a real server). Every session types its own prompt, so caches help only where prompts repeat.
Reports the server time per rerun (p50/p95), errors, and whether the shared model was mutated.
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "KING:\nWhat say you, lords?", "First Citizen:\nWe are resolved.", "To sleep, perchance", "O gentle night,",
    "Where is the duke?", "Come, come, away!", "My lord, the queen", "Hear me, good friends:",
]
PAGES = {"pages/attention.py": "attn_prompt", "pages/generation.py": "gen_prompt"}


def model_fingerprint() -> str:
    """Hash of the cached shipped model's weights, as every session sees it."""
    from pages._common import SHIPPED_DIR, load_model
    from core.checkpoint import discover_models

    entry = next(e for e in discover_models(SHIPPED_DIR) if e.name == "shakespeare-char")
    model, _ = load_model(entry)
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.numpy().tobytes())
    return h.hexdigest()


def session(i: int, reruns: int, timings: list, errors: list, lock: threading.Lock):
    from streamlit.testing.v1 import AppTest

    page = list(PAGES)[i % len(PAGES)]
    key = PAGES[page]
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.run()
        at.switch_page(page)
        t = time.perf_counter()
        at.run()
        first = time.perf_counter() - t
        mine = [("first", page, first)]
        for k in range(reruns):
            box = next(w for w in at.text_area if w.key == key)
            box.input(PROMPTS[(i + k) % len(PROMPTS)] + f" {k}")
            t = time.perf_counter()
            at.run()
            mine.append(("rerun", page, time.perf_counter() - t))
            if at.exception:
                raise RuntimeError(at.exception[0].message)
        with lock:
            timings.extend(mine)
    except Exception as e:  # collected and reported, the load test fails on any
        with lock:
            errors.append(f"session {i} ({page}): {type(e).__name__}: {e}")


def trainer_session(stop: threading.Event, info: dict):
    """One user training a small model in the background for the length of the test."""
    try:
        from core.corpus import builtin_corpus_text
        text = builtin_corpus_text()
    except Exception:  # the training core may not offer a built-in corpus
        text = ("A small corpus for a background training run, written for the load test. " * 400)
    from core.train import TrainConfig, Trainer

    trainer = Trainer(text, dict(n_ctx=64, d_model=64, n_heads=4, n_layers=2), TrainConfig(batch_size=16, steps=10**6))
    steps = 0
    while not stop.is_set():
        trainer.step()
        steps += 1
    info["train_steps"] = steps


def run_load(sessions: int = 30, reruns: int = 4, train: bool = True) -> dict:
    import torch

    before = model_fingerprint()
    timings, errors, lock = [], [], threading.Lock()
    stop, info = threading.Event(), {}
    trainer = threading.Thread(target=trainer_session, args=(stop, info), daemon=True) if train else None
    if trainer:
        trainer.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=sessions) as pool:
        for i in range(sessions):
            pool.submit(session, i, reruns, timings, errors, lock)
    wall = time.perf_counter() - t0
    stop.set()
    if trainer:
        trainer.join(30)
    after = model_fingerprint()
    reruns_t = sorted(t for kind, _, t in timings if kind == "rerun")
    firsts = sorted(t for kind, _, t in timings if kind == "first")

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    return {
        "sessions": sessions, "reruns": len(reruns_t), "errors": errors, "wall_s": wall,
        "p50_s": statistics.median(reruns_t) if reruns_t else float("nan"), "p95_s": pct(reruns_t, 0.95),
        "first_p50_s": statistics.median(firsts) if firsts else float("nan"), "first_p95_s": pct(firsts, 0.95),
        "model_unchanged": before == after, "train_steps": info.get("train_steps", 0),
        "threads": torch.get_num_threads(),
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--reruns", type=int, default=4)
    p.add_argument("--no-train", action="store_true")
    args = p.parse_args(argv)
    r = run_load(args.sessions, args.reruns, train=not args.no_train)
    print(f"{r['sessions']} sessions, {r['reruns']} reruns with new prompts in {r['wall_s']:.1f} s "
          f"({r['threads']} torch thread(s)); background training made {r['train_steps']} steps")
    print(f"server time per rerun: p50 {r['p50_s'] * 1e3:.0f} ms, p95 {r['p95_s'] * 1e3:.0f} ms; "
          f"first visit of a page: p50 {r['first_p50_s'] * 1e3:.0f} ms, p95 {r['first_p95_s'] * 1e3:.0f} ms")
    print(f"errors: {len(r['errors'])}; shared model unchanged: {r['model_unchanged']}")
    for e in r["errors"][:10]:
        print("  ", e)
    return r


if __name__ == "__main__":
    main()
