"""Page times with GPT-2 small's real shape selected (124M parameters, 12 x 12 heads, 1024 positions).

    python -m bench.gpt2_pages [--pages attention generation] [--prompt-tokens 1024 [--edits 4]] [--out FILE.csv]

Builds a GPT-2 folder with random weights (names and shapes from transformers' GPT2LMHeadModel on the
meta device: no download, no memory for the model there), puts it in a temporary TE_MODELS_DIR, and opens
each page in Streamlit's AppTest with it selected, each page in a process of its own so that its peak memory
is its own: the time of the first run (caches cold; the model is loaded on the home page before the clock
starts, except on the home page itself, whose first run includes it) and of a second run (caches warm), the
process's peak resident memory, and the load average of the machine at the start of the page.

--prompt-tokens N writes a text of N tokens of the folder's BPE (Python's documentation, past the part its BPE
was learned from) into the page's prompt box before the page first runs; without it each page keeps its own
default prompt. Where the heads page asks before ranking every head (a long prompt), the button is pressed after the
second run and the time of that run is rank_button_s (the peak memory includes it). --edits K then types K other texts of that length into the box, one after another, as a user
editing a long prompt does, and records the mean time of a rerun after an edit and the peak memory after them
(caches must not keep growing by gigabytes). --max-gib caps each page process's address space, so that a page that would eat the machine's
memory fails with an error in its row instead.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import write_csv  # noqa: E402

PAGES = ["home", "attention", "heads", "inside", "generation", "parameters"]
PROMPT_KEYS = {"attention": "attn_prompt", "heads": "heads_prompt", "inside": "inside_prompt",
               "generation": "gen_prompt"}
NAME = "gpt2-small-random"


def build_folder(models_dir: Path) -> Path:
    import transformers
    from safetensors.torch import save_file

    from core.data.corpus import pydoc_text
    from core.nn.bpe import BPETokenizer

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


def long_prompt(folder: Path, n_tokens: int, start: int = 400_000) -> tuple[str, int]:
    """(text, its token count): Python's documentation from character ``start`` (past the BPE's training part), cut
    to at most n_tokens tokens of the folder's tokenizer (a cut text can encode to one token fewer or more at its
    end: trimmed until it fits)."""
    from core.data.corpus import pydoc_text
    from core.nn.bpe import BPETokenizer

    tok = BPETokenizer.from_file(folder / "tokenizer.json")
    ids = tok.encode(pydoc_text()[start:start + 20 * n_tokens], errors="drop")[:n_tokens]
    while len(tok.encode(tok.decode(ids), errors="drop")) > n_tokens:
        ids = ids[:-1]
    text = tok.decode(ids)
    return text, len(tok.encode(text, errors="drop"))


def rss_gib() -> float:
    """Peak resident memory of this process so far, GiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def run_page(page: str, prompt: str | None, timeout: float, edits: list[str] = ()) -> dict:
    """One page in this process (the child's side): times, peak memory, the page's first exception; then, with
    ``edits``, each text typed into the prompt box in turn (a user editing a long prompt): the mean time of a
    rerun after an edit and the peak memory after all of them."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    at.session_state["te_model_name"] = NAME
    if prompt is not None and page in PROMPT_KEYS:
        at.session_state[PROMPT_KEYS[page]] = prompt
    t0 = time.perf_counter()
    at.run()  # the home page: loads the model
    if page != "home":
        t0 = time.perf_counter()
        at.switch_page(f"pages/{page}.py")
        at.run()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    at.run()
    second = time.perf_counter() - t0
    notes = [w.value for w in at.warning] + [i.value for i in at.info]
    rank = ""
    if page == "heads" and any(b.key == "heads_rank_go" for b in at.button):  # a ranking that waits for its button
        notes.append(next(m.value for m in at.markdown if "forward passes of the whole model" in m.value))
        t0 = time.perf_counter()
        at.button(key="heads_rank_go").click().run()
        rank = round(time.perf_counter() - t0, 2)
    row = {"first_run_s": round(first, 2), "second_run_s": round(second, 2), "rank_button_s": rank, "peak_rss_gib": rss_gib(),
           "error": at.exception[0].message if at.exception else "", "notes": " | ".join(notes)[:300]}
    if edits and page in PROMPT_KEYS and not at.exception:
        t0 = time.perf_counter()
        for text in edits:
            at.text_area(key=PROMPT_KEYS[page]).input(text).run()
        row["edit_s"] = round((time.perf_counter() - t0) / len(edits), 2)
        row["peak_rss_after_edits_gib"] = rss_gib()
        row["error"] = row["error"] or (at.exception[0].message if at.exception else "")
    return row


def child(args):
    if args.max_gib:
        cap = int(args.max_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    prompt, edits = None, []
    if args.prompt_file:
        prompt, *edits = json.loads(Path(args.prompt_file).read_text())
    try:
        row = run_page(args.child, prompt, args.timeout, edits)
    except MemoryError:
        row = {"first_run_s": "", "second_run_s": "", "error": f"MemoryError (address space capped at {args.max_gib} GiB)",
               "notes": ""}
    except Exception as e:  # a timeout of AppTest, for one
        row = {"first_run_s": "", "second_run_s": "", "error": f"{type(e).__name__}: {e}"[:300], "notes": ""}
    row.setdefault("peak_rss_gib", rss_gib())
    print("ROW " + json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", nargs="*", default=PAGES)
    ap.add_argument("--prompt-tokens", type=int, default=None, help="the pages' prompt: this many tokens of text")
    ap.add_argument("--edits", type=int, default=0,
                    help="with --prompt-tokens: then type this many other texts of that length, one after another")
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one page run may take")
    ap.add_argument("--max-gib", type=float, default=16, help="address-space cap of each page's process (0: none)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp))
        env = dict(os.environ, TE_MODELS_DIR=tmp)
        extra, n_tokens = [], ""
        if args.prompt_tokens:
            texts = [long_prompt(folder, args.prompt_tokens, 400_000 + 25_000 * i) for i in range(1 + args.edits)]
            text, n_tokens = texts[0]
            (Path(tmp) / "prompts.json").write_text(json.dumps([t for t, _ in texts]))
            extra = ["--prompt-file", str(Path(tmp) / "prompts.json")]
            print(f"prompt: {n_tokens} tokens, {len(text)} characters", flush=True)
        for page in args.pages:
            load = os.getloadavg()[0]
            cmd = [sys.executable, "-m", "bench.gpt2_pages", "--child", page, "--timeout", str(args.timeout),
                   "--max-gib", str(args.max_gib), *extra]
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
            if found:
                row = json.loads(found[-1])
            else:  # the process died (killed for memory, say) before it could report
                row = {"first_run_s": "", "second_run_s": "", "peak_rss_gib": "",
                       "error": f"page process exited {done.returncode}: {done.stderr.strip()[-200:]}", "notes": ""}
            rows.append({"page": page, "prompt_tokens": n_tokens, "first_run_s": row["first_run_s"],
                         "second_run_s": row["second_run_s"], "rank_button_s": row.get("rank_button_s", ""),
                         "peak_rss_gib": row["peak_rss_gib"],
                         **({"edits": args.edits, "edit_s": row.get("edit_s", ""),
                             "peak_rss_after_edits_gib": row.get("peak_rss_after_edits_gib", "")} if args.edits else {}),
                         "load_avg_1min": round(load, 2), "error": row["error"], "notes": row["notes"]})
            print(rows[-1], flush=True)
    if args.out:
        write_csv(rows, args.out)


if __name__ == "__main__":
    main()
