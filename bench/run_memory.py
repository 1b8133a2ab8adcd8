"""The memory a training run needs: core.training.job_settings.run_memory's estimate against the real peak.

    python -m bench.run_memory               # every shape below, a few steps each
    python -m bench.run_memory --steps 40    # longer runs, to see whether the peak creeps up

Each shape runs in a fresh process that does what a run started on the Training page does in its own
process (``core.training.training_job._train_in_process``: read the corpus, learn the tokenizer, encode, build the model,
evaluate, sample, train the steps, hand the weights over), with a stand-in for the page's end of the pipe;
then it reads its own peak resident memory (VmHWM in /proc/self/status). The estimate is computed here, from
the settings, the corpus's length and the vocabulary the run ended up with. Results go to
bench/results/run-memory.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import parse_or_run_one

RESULTS = Path(__file__).parent / "results" / "run-memory.md"

# (name, corpus, JobSettings fields): the lecture's model, then each of d, L, n_ctx, batch, the vocabulary,
# the recipe and the corpus's length pushed up in turn; "x4" is the corpus written four times over
SHAPES = [
    ("lecture", "shakespeare", dict()),
    ("wide", "shakespeare", dict(d_model=256, n_heads=8, batch_size=64)),
    ("deep", "shakespeare", dict(d_model=96, n_heads=4, n_layers=8, n_ctx=256)),
    ("long context", "shakespeare", dict(n_ctx=1024, batch_size=16, n_layers=3)),
    ("big batch", "shakespeare", dict(d_model=128, n_layers=3, batch_size=256)),
    ("adamw", "shakespeare", dict(d_model=128, n_layers=4, n_ctx=256, batch_size=48, recipe="adamw")),
    ("bpe 512", "shakespeare", dict(tokenizer="bpe", bpe_vocab=512, d_model=128, n_layers=3, batch_size=128)),
    ("bpe 4096", "shakespeare", dict(tokenizer="bpe", bpe_vocab=4096, n_ctx=256, batch_size=64)),
    ("bpe 4096 batch 8", "shakespeare", dict(tokenizer="bpe", bpe_vocab=4096, batch_size=8)),  # peak: the scoring
    ("big corpus", "shakespeare x4", dict()),
    ("big corpus bpe", "shakespeare x4", dict(tokenizer="bpe", bpe_vocab=1024)),
]


def corpus(name: str) -> str:
    from core.training.corpus import pydoc_text, read_text_file, shakespeare_path

    path = shakespeare_path()
    text = read_text_file(path) if path is not None else pydoc_text()  # the Python docs where there is no copy
    return text * 4 if name.endswith("x4") else text


class _Pipe:
    """The page's end of the pipe: no command ever comes, messages are kept."""

    def __init__(self):
        self.messages = []

    def send(self, msg):
        self.messages.append(msg)

    def poll(self, timeout=0.0):
        return False

    def recv(self):
        raise EOFError

    def close(self):
        pass


def _peak_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource  # not Linux: ru_maxrss, in kB on Linux and bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _one(corpus_name: str, fields: dict, steps: int) -> dict:
    from core.training.job_settings import JobSettings
    from core.serve.threads import training_threads
    from core.training.training_child import _train_in_process

    text = corpus(corpus_name)
    settings = JobSettings(**{**fields, "steps": steps})
    fd, path = tempfile.mkstemp(prefix="te-bench-corpus-", suffix=".txt")
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
    chars = len(text)
    del text  # the page keeps its copy in the app process; the run's process reads its own from the file
    pipe = _Pipe()
    _train_in_process(pipe, path, corpus_name, settings, "The ", settings.threads or training_threads())
    peak = _peak_bytes()
    report = {}
    for msg in pipe.messages:
        report.update(msg)
    if report.get("retired"):
        shutil.rmtree(Path(report["retired"]).parent, ignore_errors=True)
    if report.get("state") == "failed":
        raise SystemExit(f"the run failed: {report.get('message')}")
    return {"peak": peak, "vocab": report["vocab_size"], "chars": chars, "step": report["step"]}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.run_memory", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="training steps of each run")
    p.add_argument("--only", nargs="+", help="names of SHAPES to run (default: all)")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"the results file (default {RESULTS})")
    args = parse_or_run_one(p, argv, _one)
    if args is None:
        return
    from core.serve.fmt import binary_bytes as size_label
    from core.training.job_settings import JobSettings, memory_budget, run_memory

    rows = []
    print(f"{'run':16s} {'estimate':>10s} {'peak':>10s} {'ratio':>6s}")
    for name, corpus_name, fields in SHAPES:
        if args.only and name not in args.only:
            continue
        spec = json.dumps({"corpus_name": corpus_name, "fields": fields, "steps": args.steps})
        # no budget in the measured process: shapes above the default one are measured too
        done = subprocess.run([sys.executable, "-m", "bench.run_memory", "--one", spec], capture_output=True,
                              text=True, env={**os.environ, "TE_RUN_MEMORY": "0"})
        if done.returncode:
            raise SystemExit(f"{name}: {done.stderr.strip()[-2000:]}")
        out = done.stdout
        got = json.loads(out.strip().splitlines()[-1])
        s = JobSettings(**fields)
        est = run_memory(s, got["vocab"], got["chars"])
        rows.append((name, corpus_name, s, got, est))
        print(f"{name:16s} {size_label(est.total):>10s} {size_label(got['peak']):>10s} "
              f"{est.total / got['peak']:6.2f}", flush=True)
    budget = memory_budget()
    lines = ["# A run's memory: the estimate against the real peak", "",
             f"`{' '.join(['python -m bench.run_memory', *(argv if argv is not None else sys.argv[1:])])}`", "",
             "Each row is one run in a fresh process doing what a run from the Training page does in its own process "
             f"(`core.training.training_job._train_in_process`), {args.steps} steps, one evaluation and sample every step; "
             "peak: the process's VmHWM (peak resident memory). Estimate: `core.training.job_settings.run_memory` from the "
             "settings, the corpus's length and the vocabulary the run ended with; ratio = estimate / peak (above 1: "
             f"the estimate is conservative). The default budget is {size_label(budget) if budget else 'none'} per run "
             "(`TE_RUN_MEMORY`).", "",
             "| run | corpus | tokens | d | h | L | n_ctx | batch | recipe | process | data | weights | activations "
             "| estimate | peak | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, corpus_name, s, got, est in rows:
        tokens = "characters" if s.tokenizer == "char" else f"BPE {got['vocab']:,}"
        lines.append(f"| {name} | {corpus_name} ({got['chars']:,} chars) | {tokens} | {s.d_model} | {s.n_heads} | "
                     f"{s.n_layers} | {s.n_ctx} | {s.batch_size} | {s.recipe} | {size_label(est.process)} | "
                     f"{size_label(est.data)} | {size_label(est.weights)} | {size_label(est.activations)} | "
                     f"{size_label(est.total)} | {size_label(got['peak'])} | {est.total / got['peak']:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
