"""What the lesson's steps measure on the model and the prompt, with the same core functions the full pages use.
Each returns plain numbers (a step's answer, cached by the page), never a figure or a sentence."""
from __future__ import annotations

import math

import numpy as np
import torch

from core.analysis import patching as P
from core.analysis.attention import changed_last, dependence_on_last, head_attention
from core.analysis.generation import fit_in_window
from core.analysis.interventions import mean_logprob, repeat_ids, token_losses  # noqa: F401  (mean_logprob: core.lesson re-exports it)
from core.lesson.grading import Grade, MIN_NOISE, NOISE_SE, grade_choice
from core.nn.params import count_parameters

CHOICES = 16      # step 1 offers this many keys: the first position (a common sink) and the last ones
DRAWS = 40        # step 7 draws this many tokens at each temperature (fewer when the context is short)


def key_weights(model, ids, layer: int, head: int) -> np.ndarray:
    """(n,) the weights the last position of ``ids`` puts on each key, for one head."""
    return head_attention(model, list(ids), layer, head)[1][-1]


def key_choices(n: int, k: int = CHOICES) -> list[int]:
    """The keys (positions from 0) offered for the last of ``n`` positions: all when n <= k, else the first one
    (where many heads park their weight) and the last k - 1. Offered and graded alike (``which_key``)."""
    return list(range(n)) if n <= k else [0] + list(range(n - k + 1, n))


def which_key(model, ids, layer: int, head: int, guess: int, keys=None) -> Grade:
    """"Which earlier token will this head weigh most from the last position?" over the offered ``keys`` (default
    ``key_choices``; positions from 0), the ones the learner can pick."""
    w = key_weights(model, ids, layer, head)
    keys = key_choices(len(w)) if keys is None else keys
    return grade_choice({j: float(w[j]) for j in keys}, guess, label=lambda j: f"position {j + 1}")


def copy_loss_change(model, ids, heads, n_ctx: int, mode: str = "zero") -> tuple[float, float, list[int]]:
    """(mean change of the loss on the second copy of ``ids`` written twice when ``heads`` are off, its noise, the
    repeated ids). The noise is ``NOISE_SE`` standard errors of the per-token changes (at least ``MIN_NOISE``)."""
    rep, _ = repeat_ids(list(ids), n_ctx)
    half = len(rep) // 2
    before, after = token_losses(model, rep), token_losses(model, rep, list(heads), mode)
    d = (after - before)[half:]  # entry i predicts token i + 1: the second copy's tokens after its first
    if d.size == 0:
        return 0.0, MIN_NOISE, rep
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    return float(d.mean()), max(MIN_NOISE, NOISE_SE * se), rep


def mask_experiment(model, ids, layer: int, head: int) -> dict:
    """Change the last token, and how far the earlier rows' weights move with the mask on the scores and after the
    softmax: {"mask_on_scores", "mask_after_softmax"} (core.analysis.attention.dependence_on_last)."""
    changed, _ = changed_last(list(ids), model.config.vocab_size)
    scores = head_attention(model, list(ids), layer, head)[0]
    return dependence_on_last(scores, head_attention(model, changed, layer, head)[0])


def block_numbers(config) -> dict:
    """One block's parameters and the MLP's share of them (core.nn.params)."""
    c = count_parameters(config)
    return {"per_block": c["per_block"], "mlp": c["mlp"], "attention": c["attention"], "norms": c["norms"],
            "mlp_share": c["mlp"] / c["per_block"] if c["per_block"] else 0.0}


def parameter_count(model) -> int:
    """N of C = 6ND: every parameter of the model, a tied matrix once."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def fitted_prompt(ids, n_ctx: int, n_new: int = DRAWS) -> tuple[list[int], int]:
    """(the end of ``ids`` that leaves room for the draws, how many to draw): prompt and draws fit the context
    (core.analysis.generation.fit_in_window), so a long prompt is read from its end."""
    keep, new = fit_in_window(len(ids), n_new, n_ctx)
    return list(ids)[len(ids) - keep:], new


def temperature_pair(model, ids, draw, seed: int, cold: float = 0.2, hot: float = 2.0) -> dict:
    """Two continuations of ``ids``, drawn by ``draw(temperature, seed) -> new ids`` at ``cold`` and ``hot``, shown
    in an order fixed by ``seed``: {"texts_ids": [a, b], "cold": index of the cold one, "logprob": [a's, b's]}."""
    first_cold = (seed % 2) == 0
    pair = [draw(cold, seed), draw(hot, seed)]
    if not first_cold:
        pair.reverse()
    lp = [mean_logprob(model, list(ids) + list(p), len(ids)) if p else float("nan") for p in pair]
    return {"texts_ids": pair, "cold": 0 if first_cold else 1, "logprob": lp}


def which_is_cold(pair: dict, guess: int) -> Grade:
    """The learner's guess of which text was drawn cold. Known exactly (we drew them); too close to call when the
    two texts are about as typical as each other (mean log-probabilities within 0.1 nats), or the same text."""
    a, b = pair["logprob"]
    why = f"mean log-probability per token: A {a:.2f}, B {b:.2f} nats"
    if pair["texts_ids"][0] == pair["texts_ids"][1] or not (math.isfinite(a) and math.isfinite(b)) or abs(a - b) < 0.1:
        return Grade(None, pair["cold"], why + ": the two texts are too alike to tell apart")
    return Grade(guess == pair["cold"], pair["cold"], why)


def head_patching(model, clean, corrupt) -> dict:
    """Every head's output put back from the clean run into the corrupted one (core.analysis.patching.patch_heads,
    logit difference of the clean run's answer over the corrupted run's): {"table" (L, h) shares restored, "clean",
    "corrupt" (the metric on each run)}."""
    answer, wrong = P.default_answers(model, list(clean), list(corrupt))
    metric = P.Metric(answer, wrong)
    return {"table": P.patch_heads(model, list(clean), list(corrupt), metric, "z"),
            "clean": metric(model, list(clean)), "corrupt": metric(model, list(corrupt))}


def source_names(model, layer: int, head: int) -> list[str]:
    """The writers of a head's query and key streams, as ``score_sources`` names them (its split of one token's
    score, the cheapest call that names them)."""
    return P.score_sources(model, [0], layer, head, 0, 0)[1]


def key_sources(model, ids, layer: int, head: int, i: int, j: int) -> dict:
    """Head (layer, head)'s score of query i for key j split by source (core.analysis.patching.score_sources):
    {"table", "names", "score", "key_totals": each key-side source's whole part of the score (its column's sum)}."""
    table, names, score = P.score_sources(model, list(ids), layer, head, i, j)
    return {"table": table, "names": names, "score": score,
            "key_totals": {name: float(table[:, k].sum()) for k, name in enumerate(names)}}
