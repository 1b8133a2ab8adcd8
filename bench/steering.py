"""Steering against plain generation, measured interleaved in one run: the Generation page's text (the shipped
character model, its prompt, 200 new characters sampled at T = 1, so the window slides past n_ctx for most steps)
drawn plainly and steered with the shipped SAE's feature at alpha = 4 (core.analysis.steering's hook on
blocks.0.hook_resid_post). Target: steering adds at most 10%.

    python -m bench.run --only steering [--quick]
    python -m bench.steering
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "shakespeare-char"
SITE = "blocks.0.hook_resid_post"
PROMPT = "QUEEN:\nWhat news from the north, good cousin?\n\nGLOUCESTER:\nThe"
N_NEW = 200
TARGET = 1 / 1.10  # plain / steered: steered at most 10% slower


def texts(quick: bool = False) -> dict:
    """{"plain": s, "steered": s}: median seconds of one text of each kind, in alternating rounds."""
    from bench.run import interleaved
    from core.analysis import generation as G
    from core.features.sae import load_sae, sae_folder
    from core.features.steering import feature_hooks
    from core.nn.checkpoint import load_checkpoint

    model, tok = load_checkpoint(MODEL)
    ids = tok.encode(PROMPT)
    folder = sae_folder(MODEL, SITE)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is missing: the shipped SAE is needed (python -m core.features trains one)")
    hooks = feature_hooks(load_sae(folder), 197, 4.0, 1.37)  # the page's default feature at its typical size
    plain = lambda: G.draw(model, ids, N_NEW, 1.0, seed=0, chars=tok.pieces)  # noqa: E731
    steered = lambda: G.draw(model, ids, N_NEW, 1.0, seed=0, chars=tok.pieces, hooks=hooks)  # noqa: E731
    rounds, reps = (4, 2) if quick else (16, 2)  # many short rounds: this machine's load drifts within seconds
    return interleaved({"plain": plain, "steered": steered}, rounds, reps)


def main(quick: bool = False) -> list[dict]:
    from bench.run import record

    t = texts(quick)
    row = record(f"steering adds ≤ 10% to a generation ({N_NEW} chars)", t["steered"], t["plain"], "s",
                 target=round(TARGET, 3), higher_is_better=False,
                 note=f"(plain {t['plain'] * 1e3:.0f} ms, steered {t['steered'] * 1e3:.0f} ms: "
                      f"+{(t['steered'] / t['plain'] - 1) * 100:.1f}%)")
    return [row]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main("--quick" in sys.argv)
