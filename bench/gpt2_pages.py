"""Page times with GPT-2 small's real shape selected (124M parameters, 12 x 12 heads, 1024 positions).

    python -m bench.gpt2_pages [--pages attention generation] [--out bench/results/gpt2-pages.csv]

Builds a GPT-2 folder with random weights (names and shapes from transformers' GPT2LMHeadModel on the
meta device: no download, no memory for the model there), puts it in a temporary TE_MODELS_DIR, and opens
each page in Streamlit's AppTest with it selected: the time of the first run (model loading included on the
first page, caches cold) and of a second run (caches warm), and the process's peak memory.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGES = ["home", "attention", "heads", "generation", "parameters"]
NAME = "gpt2-small-random"


def build_folder(models_dir: Path) -> Path:
    import transformers
    from safetensors.torch import save_file

    from core.corpus import pydoc_text
    from core.tokenizer import BPETokenizer

    cfg = transformers.GPT2Config(bos_token_id=None, eos_token_id=None)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in transformers.GPT2LMHeadModel(cfg).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(s, generator=g) * 0.02 for k, s in shapes.items() if k != "lm_head.weight"}
    folder = models_dir / NAME
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    tok = BPETokenizer.train(pydoc_text()[:300_000], vocab_size=2000, special_tokens=["<|endoftext|>"])
    (folder / "tokenizer.json").write_text(tok.to_str())
    return folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", nargs="*", default=PAGES)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from streamlit.testing.v1 import AppTest

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        build_folder(Path(tmp))
        os.environ["TE_MODELS_DIR"] = tmp
        for page in args.pages:
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
            at.session_state["te_model_name"] = NAME
            t0 = time.perf_counter()
            at.run()
            if page != "home":
                at.switch_page(f"pages/{page}.py")
                at.run()
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            at.run()
            second = time.perf_counter() - t0
            error = at.exception[0].message if at.exception else ""
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            rows.append({"page": page, "first_run_s": round(first, 2), "second_run_s": round(second, 2),
                         "peak_rss_gib": round(peak, 2), "error": error})
            print(rows[-1], flush=True)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
