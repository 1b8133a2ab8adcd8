"""Would one batched inference worker pay? The Generation page's work for N students at once, run one after
another (what N script threads sharing one GIL amount to) against one batch of N rows (what a worker that
gathers concurrent requests would run), on the shipped model.

    python -m bench.batching [--students 1 4 15 30] [--new 200] [--json]
    python -m bench.batching --page [--students 4 15] [--json]

Each student draws ``--new`` tokens after the page's default prompt at T = 1 with a generator seeded with their
own number. The batch passes a list of temperatures and generators (core.analysis.sampling.stream), so row r draws what
student r draws alone: the tokens are compared, and must be identical. Two phases are timed apart: steps that
read one new token with the key/value cache, and steps after the text outgrew n_ctx, when the window slides and
every step re-reads all n_ctx positions (learned positions: nothing cached stays valid). The ratio is
(one after another) / (batched): above 1, batching pays.

``--page`` measures what the Generation page really asks for on a new prompt, per student: a 200-token text (one
row) and six 150-token continuations (one row per temperature, which the page already runs as one batch), after
that student's own prompt (bench.load's prompts, of different lengths). "One after another" runs each student's
two streams in turn; "batched" steps every generation of every student together in one thread, as a worker that
gathered them all would at best (continuous batching with no waiting and no threads): the reads of the whole
window (every slid step) of all of them are stacked into one forward pass, the cached one-token reads go one
generation at a time (their caches differ in length). Tokens and probabilities are compared with the unbatched run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.analysis.generation import DEFAULT_TEMPERATURES  # noqa: E402
from core.analysis.sampling import Decoder, stream  # noqa: E402
from core.nn.checkpoint import load_checkpoint  # noqa: E402
from core.serve.threads import use_threads  # noqa: E402

PROMPT = "QUEEN:\nWhat news from the north, good cousin?\n\nGLOUCESTER:\nThe"  # pages/generation.py's default


def timed_steps(model, rows: list[list[int]], n_new: int, seeds: list[int]) -> tuple[list[list[int]], float, float]:
    """Tokens per row, seconds spent on cached steps, seconds on sliding-window steps."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    out = [[] for _ in rows]
    cached = slid = 0.0
    t = time.perf_counter()
    for step in stream(model, rows, n_new, [1.0] * len(rows), generator=gens):
        now = time.perf_counter()
        if step.slid:
            slid += now - t
        else:
            cached += now - t
        for r in range(len(rows)):
            out[r].append(int(step.token[r]))
        t = time.perf_counter()
    return out, cached, slid


def measure(model, ids: list[int], students: int, n_new: int, reps: int) -> dict:
    alone, batched = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        one = [timed_steps(model, [ids], n_new, [s]) for s in range(students)]
        alone.append((time.perf_counter() - t0, sum(c for _, c, _ in one), sum(s for _, _, s in one)))
        t0 = time.perf_counter()
        rows, c, s = timed_steps(model, [ids] * students, n_new, list(range(students)))
        batched.append((time.perf_counter() - t0, c, s))
    same = rows == [o[0][0] for o in one]
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return {"students": students, "alone_s": med(alone, 0), "batched_s": med(batched, 0),
            "ratio": med(alone, 0) / med(batched, 0),
            "cached_ratio": med(alone, 1) / max(1e-9, med(batched, 1)),
            "slid_ratio": med(alone, 2) / max(1e-9, med(batched, 2)), "identical_tokens": same}


def step_together(model, decoders: list[Decoder]) -> list[list]:
    """Run every decoder to its end, all at once: per step, the decoders that read their whole window share one
    forward pass over the stacked windows, the others read their own cache. Returns each decoder's Steps."""
    steps = [[] for _ in decoders]
    live = list(range(len(decoders)))
    with torch.inference_mode():
        while live:
            wide = [i for i in live if decoders[i].reads_window]
            if wide:
                stacked = torch.cat([decoders[i].window() for i in wide])  # (sum of rows, n_ctx)
                logits = model(stacked, last_only=True).logits[:, -1, :]  # (sum of rows, m)
                for i, part in zip(wide, logits.split([decoders[i].rows for i in wide])):
                    steps[i].append(decoders[i].advance(part))
            for i in live:
                if i not in wide:
                    steps[i].append(decoders[i].advance(decoders[i].read(model)))
            live = [i for i in live if not decoders[i].done]
    return steps


def page_requests(tok, students: int) -> list[tuple]:
    """(rows, new tokens, temperature(s), generator(s)) of the Generation page's two streams for each student."""
    from bench.load import new_prompt  # the classroom bench's prompts: one per student, of different lengths
    temps = list(DEFAULT_TEMPERATURES)
    out = []
    for i in range(students):
        ids = tok.encode(new_prompt(i, 1))
        out.append(([ids], 200, 1.0, torch.Generator().manual_seed(i)))
        out.append(([ids] * len(temps), 150, temps, [torch.Generator().manual_seed(i)] * len(temps)))  # as the page
    return out


def measure_page(model, tok, students: int, reps: int) -> dict:
    alone, batched = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        one = [list(stream(model, rows, n, t, generator=g)) for rows, n, t, g in page_requests(tok, students)]
        alone.append(time.perf_counter() - t0)
        decoders = [Decoder(model, rows, n, t, generator=g) for rows, n, t, g in page_requests(tok, students)]
        t0 = time.perf_counter()
        together = step_together(model, decoders)
        batched.append(time.perf_counter() - t0)
    tokens = [[s.token.tolist() for s in run] for run in one] == [[s.token.tolist() for s in run] for run in together]
    gap = max(float((a.prob - b.prob).abs().max()) for x, y in zip(one, together) for a, b in zip(x, y))
    a, b = statistics.median(alone), statistics.median(batched)
    return {"students": students, "workload": "page", "alone_s": a, "batched_s": b, "ratio": a / b,
            "alone_per_student_s": a / students, "identical_tokens": tokens, "largest_prob_difference": gap}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.batching", description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, nargs="*", default=[1, 4, 15, 30])
    p.add_argument("--new", type=int, default=200)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--page", action="store_true", help="the Generation page's work per student (text + continuations)")
    a = p.parse_args(argv)
    use_threads(1)  # a page run's setting (core.serve.threads)
    model, tok = load_checkpoint(ROOT / "assets" / "models" / "shakespeare-char")
    if a.page:
        rows = []
        for n in a.students:
            r = measure_page(model, tok, n, a.reps)
            rows.append(r)
            print(f"  {n:>3} students, a text and six continuations each: one after another {r['alone_s']:6.2f} s "
                  f"({r['alone_per_student_s']:.2f} s a student), batched {r['batched_s']:6.2f} s, ratio "
                  f"{r['ratio']:4.2f}x, identical tokens: {r['identical_tokens']}, largest probability difference "
                  f"{r['largest_prob_difference']:.1e}", flush=True)
        if a.json:
            print(json.dumps(rows))
        return
    ids = tok.encode(PROMPT)
    print(f"{len(ids)}-token prompt, {a.new} new tokens, n_ctx {model.config.n_ctx}: "
          f"{max(0, len(ids) + a.new - model.config.n_ctx)} of the steps slide")
    rows = []
    for n in a.students:
        r = measure(model, ids, n, a.new, a.reps)
        rows.append(r)
        print(f"  {n:>3} students: one after another {r['alone_s']:6.2f} s, batched {r['batched_s']:6.2f} s, "
              f"ratio {r['ratio']:4.2f}x (cached steps {r['cached_ratio']:4.2f}x, sliding steps "
              f"{r['slid_ratio']:4.2f}x), identical tokens: {r['identical_tokens']}", flush=True)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
