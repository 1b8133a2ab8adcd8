"""The Features page's views on the shipped character model and its shipped SAE (issue 42), after the index is built.

    python -m bench.feature_views          # or: python -m bench.run --only feature_views

Rows: a unit's card (core.features.browse.unit_card: contexts, bands, direct path, the switch-off losses; a new
feature each call, so no result is reused) and the prompt view (the top five SAE features and neurons of block 1
at every position of a 128-character prompt, and its table), each against the issue's 300 ms budget as the peer
(ratio = budget / ours: at least 1 meets it). The index build, once per model and SAE, is stated too."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "shakespeare-char"
SITE = "blocks.0.hook_resid_post"
BUDGET_MS = 300.0


def _median_ms(fn, reps: int) -> float:
    fn(0)
    times = []
    for i in range(1, reps + 1):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv=None, record=None) -> list[dict]:
    from core.data.held_out import model_held_out
    from core.features.index import build_index
    from core.features.browse import prompt_units, unit_card
    from core.analysis.sae import load_sae, sae_folder
    from core.features.units import feature_units, neuron_units
    from core.nn.checkpoint import load_checkpoint, read_config
    from core.views.features_view import prompt_rows

    if record is None:
        from bench.run import record
    quick = bool(argv) and "--quick" in argv
    model, tok = load_checkpoint(MODEL)
    training = read_config(MODEL)[2]
    sae = load_sae(sae_folder(MODEL, SITE))
    feats, neurons = feature_units(model, sae), neuron_units(model, 0)
    t = time.perf_counter()
    held = model_held_out(model, tok, training)
    index = build_index(model, feats, held)
    build_s = time.perf_counter() - t
    reps = 5 if quick else 15
    live = [u for u in range(feats.n) if index.fires[u] > 0]
    card = _median_ms(lambda i: unit_card(model, tok, feats, index, live[(37 * i) % len(live)]), reps)
    ids = held.windows[3].tolist()  # a full window: the longest prompt the model reads

    def view(i):
        p = ids[i % 7:] + ids[:i % 7]  # a new prompt each call
        for units, kind in ((feats, "feature"), (neurons, "neuron")):
            prompt_rows(prompt_units(model, units, p, tokenizer=tok), kind)

    prompt = _median_ms(view, reps * 4)
    note = (f"(index of {feats.n} latents over {held.n_tokens:,} held-out tokens built in {build_s:.1f} s; "
            f"{torch.get_num_threads()} torch threads)")
    return [record("feature card (a new feature each call)", card, BUDGET_MS, "ms", target=1.0,
                   higher_is_better=False, note=note),
            record("prompt view (top 5 features and neurons, 128 tokens)", prompt, BUDGET_MS, "ms", target=1.0,
                   higher_is_better=False, note="(peer: the 300 ms budget)")]


if __name__ == "__main__":
    main()
