"""Issue 59 §2's row: the null controls beside a page's claim cost at most twice the method's own time.

Two page claims on the shipped character model: Cause and effect's strongest head (``patch_heads`` on the page's
example pair, output z; the controls: the twin's patching and ``NONSENSE_DRAWS`` random label pairs) and Switch heads
off's ranking (``head_losses`` ranked; the controls: the twin's ranking and the shuffled prompt's). Each round starts
cold, as a page's first press does: the pair's kept runs and the twin dropped; the method is timed, then the controls
(``Control.seconds``: their own time, the page's method already run). The figure: the method's median over the
controls' median (target >= 0.5, i.e. the controls <= 2x the method)."""
from __future__ import annotations

import statistics
import time

import numpy as np

from core.analysis import null_controls as NC
from core.analysis import patching as P
from core.analysis.head_ranking import rank
from core.analysis.interventions import layer_head_losses, token_losses
from core.analysis.patching import Metric, default_answers, patch_heads
from core.analysis.prompt_pairs import example_pair
from core.nn.checkpoint import load_checkpoint
from core.serve.paths import REPO_ROOT


def _cold(model, twin: bool):
    P._RUNS.pop(model, None)  # the pair's clean and corrupted runs, kept per model
    if twin:  # the server keeps the last two twins (core.analysis.null_controls._twin): only a first press builds one
        NC._twin.cache_clear()


def _rounds(model, method, controls, rounds: int, twin: bool) -> tuple[float, float]:
    """(median seconds of ``method()``, median ``controls().seconds``), each round from cold (``twin``: the twin
    built again too)."""
    ms, cs = [], []
    for _ in range(rounds + 1):  # the first round warms the code paths up and is dropped
        _cold(model, twin)
        t = time.perf_counter()
        method()
        ms.append(time.perf_counter() - t)
        cs.append(controls().seconds)
    return statistics.median(ms[1:]), statistics.median(cs[1:])


def run(record, quick: bool):
    print("\nNull controls (issue 59): the controls' time beside the method's own, on the shipped character model")
    model, tok = load_checkpoint(REPO_ROOT / "assets" / "models" / "shakespeare-char")
    rounds = 3 if quick else 15
    clean, bad, _, _ = example_pair(model, tok, seed=2000)
    metric = Metric(*default_answers(model, clean, bad.ids))
    ids = tok.encode("ROMEO:\nBut soft, what light through yonder window breaks?\n")
    L = model.config.n_layers

    def ranking():  # the page's ranking: the losses with every head on, then a layer at a time (pages/heads.py)
        per_head = np.stack([layer_head_losses(model, ids, layer, "zero") for layer in range(L)])  # L x (h, n-1)
        return rank(token_losses(model, ids), per_head)
    claims = {"Cause and effect's strongest head": (lambda: patch_heads(model, clean, bad.ids, metric),
                                                    lambda: NC.head_patching(model, clean, bad.ids, metric)),
              "Switch heads off's top head": (ranking, lambda: NC.head_ranking(model, ids))}
    for name, (method, controls) in claims.items():
        first = _rounds(model, method, controls, rounds, twin=True)
        m, c = _rounds(model, method, controls, rounds, twin=False)
        record(f"null controls: {name}", c, m, "s", target=0.5, higher_is_better=False,
               note=f"(the method's time over the controls': >= 0.5 is <= 2x; the twin kept as the server keeps it; "
                    f"a first press, building the twin: {first[0] / first[1]:.2f}x)")
