"""How long learning a byte-level BPE takes on text without spaces, before and after the pre-token cap.

    python -m bench.bpe_learning                    # 200 KB and 1 MB of random letters, vocabulary 512
    python -m bench.bpe_learning --sizes 200000 --vocab 4096

A run of letters with no space is one pre-token, and the trainer's cost grows with the square of its longest
pre-token. "unsplit" is ``BPETokenizer.train`` on the text as it is (what the Training page did before);
"capped" is ``core.training.trainer.make_tokenizer``, which cuts every run longer than ``MAX_PRETOKEN`` characters into
pieces first (``core.training.trainer.bpe_pieces``). Each learning runs in a fresh process, one after the other; the
seconds are wall time on this machine. Results go to bench/results/bpe-learning.md.
"""
from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import time
from pathlib import Path

from bench import parse_or_run_one

RESULTS = Path(__file__).parent / "results" / "bpe-learning.md"


def no_spaces(chars: int, seed: int = 0) -> str:
    """``chars`` random lowercase letters: a hostile upload, one pre-token long."""
    return "".join(random.Random(seed).choices(string.ascii_lowercase, k=chars))


def corpus(name: str) -> str:
    from core.data.corpus import pydoc_text, read_text_file, shakespeare_path

    if name == "pydoc" or shakespeare_path() is None:
        return pydoc_text()
    text = read_text_file(shakespeare_path())
    return text * 4 if name.endswith("x4") else text


def _one(kind: str, chars: int, vocab: int, corpus_name: str | None = None) -> dict:
    from core.data.corpus import split_train_val
    from core.nn.bpe import BPETokenizer
    from core.training.train_data import encode_corpus, make_tokenizer

    if kind == "page":  # what the Training page does before it shows a BPE: learn, then encode both parts
        text = corpus(corpus_name)
        t0 = time.perf_counter()
        train_text, val_text = split_train_val(text)
        tok = make_tokenizer("bpe", train_text, vocab)
        encode_corpus(tok, train_text), encode_corpus(tok, val_text)
    else:
        text = no_spaces(chars)
        t0 = time.perf_counter()
        tok = BPETokenizer.train(text, vocab) if kind == "unsplit" else make_tokenizer("bpe", text, vocab)
    return {"kind": kind, "chars": len(text), "vocab": vocab, "seconds": time.perf_counter() - t0,
            "learned": tok.vocab_size, "corpus": corpus_name}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.bpe_learning", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000], help="characters of text")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--kinds", nargs="+", default=["unsplit", "capped"], choices=["unsplit", "capped"])
    p.add_argument("--timeout", type=float, default=900, help="seconds one learning may take before it is given up")
    p.add_argument("--corpora", nargs="*", default=["pydoc", "shakespeare", "shakespeare x4"],
                   help="corpora timed as the Training page prepares a BPE (learn, encode both parts)")
    args = parse_or_run_one(p, argv, _one)
    if args is None:
        return
    from core.training.train_data import MAX_PRETOKEN

    rows = []
    for chars in args.sizes:
        for kind in args.kinds:
            spec = json.dumps({"kind": kind, "chars": chars, "vocab": args.vocab})
            try:
                out = subprocess.run([sys.executable, "-m", "bench.bpe_learning", "--one", spec], check=True,
                                     capture_output=True, text=True, timeout=args.timeout).stdout
                row = json.loads(out.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {"kind": kind, "chars": chars, "vocab": args.vocab, "seconds": None, "learned": None}
            rows.append(row)
            secs = f"{row['seconds']:.2f}" if row["seconds"] is not None else f"> {args.timeout:.0f}"
            print(f"{kind:8s} {chars:>10,} chars  {secs:>8s} s  vocabulary {row['learned']}", flush=True)
    for name in args.corpora:
        spec = json.dumps({"kind": "page", "chars": 0, "vocab": args.vocab, "corpus_name": name})
        out = subprocess.run([sys.executable, "-m", "bench.bpe_learning", "--one", spec], check=True,
                             capture_output=True, text=True, timeout=args.timeout).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        print(f"page     {name:>16s} {row['chars']:>10,} chars  {row['seconds']:8.2f} s", flush=True)
    lines = ["# Learning a byte-level BPE from text without spaces", "",
             f"`{' '.join(['python -m bench.bpe_learning', *(argv if argv is not None else sys.argv[1:])])}`",
             "", f"Random lowercase letters, no space; vocabulary {args.vocab}; one fresh process per row. "
             f"\"unsplit\": `BPETokenizer.train` on the text as it is; \"capped\": `core.training.trainer.make_tokenizer`, "
             f"which cuts runs longer than {MAX_PRETOKEN} characters into pieces first. Wall seconds on this machine "
             "(2 shared cores).", "",
             "| text | unsplit (s) | capped (s) |", "|---|---|---|"]
    for chars in args.sizes:
        cell = {r["kind"]: r["seconds"] for r in rows if r["chars"] == chars and r["kind"] != "page"}
        shown = ["–" if k not in cell else f"> {args.timeout:.0f}" if cell[k] is None else f"{cell[k]:.2f}"
                 for k in ("unsplit", "capped")]
        lines.append(f"| {chars:,} characters | {shown[0]} | {shown[1]} |")
    pages = [r for r in rows if r["kind"] == "page"]
    if pages:
        lines += ["", "The Training page's whole preparation of a BPE (split, learn from the training 90%, encode both "
                  "parts), capped, on ordinary text:", "", "| corpus | characters | seconds |", "|---|---|---|"]
        lines += [f"| {r['corpus']} | {r['chars']:,} | {r['seconds']:.2f} |" for r in pages]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
