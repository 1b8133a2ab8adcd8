"""The lesson's questions: each is a prediction the learner makes before the live model answers it. This module
computes the model's answer (from the same core functions the pages use) and grades a guess against it; when the
model's own answer is too close to call, it says so instead of grading (``Grade.correct is None``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.attention import changed_last, dependence_on_last, head_attention
from core.analysis.interventions import repeat_ids, token_losses
from core.nn.params import count_parameters

AMBIGUOUS_SHARE = 0.05   # two options within 5% of each other: too close to call
NOISE_SE = 2.0           # a loss change within this many standard errors of 0 is noise
MIN_NOISE = 0.01         # nats: and never below this
MASK_CHANGE = 1e-6       # a weight that moves less than this did not move (float32 rounding)


@dataclass(frozen=True)
class Grade:
    correct: bool | None  # None: the model's answer is too close to call, so the guess is not graded
    answer: object        # the model's answer
    why: str              # the numbers behind it, in words


def close_call(values: dict, share: float = AMBIGUOUS_SHARE) -> bool:
    """Whether the two largest of ``values`` lie within ``share`` of the largest (in size)."""
    top = sorted(values.values(), reverse=True)
    return len(top) > 1 and abs(top[0] - top[1]) <= share * abs(top[0])


def grade_choice(values: dict, guess, label=str, unit: str = "", share: float = AMBIGUOUS_SHARE) -> Grade:
    """The option with the largest value is the answer; a close call (``close_call``) is not graded."""
    if not values:
        raise ValueError("no options to choose from")
    ranked = sorted(values, key=values.get, reverse=True)
    best, second = ranked[0], ranked[1] if len(ranked) > 1 else None
    why = f"{label(best)}: {values[best]:.3g}{unit}"
    if second is not None:
        why += f"; next, {label(second)}: {values[second]:.3g}{unit}"
    if close_call(values, share):
        return Grade(None, best, why + f" (within {share:.0%} of each other: too close to call)")
    return Grade(guess == best, best, why)


def grade_direction(change: float, noise: float, guess: str) -> Grade:
    """``guess`` in up/down/same against a measured ``change``: up or down when it is larger than ``noise`` in
    size; within the noise the question says so instead of grading ("same" cannot be told from a small change)."""
    if guess not in ("up", "down", "same"):
        raise ValueError(f"guess must be up, down or same, got {guess!r}")
    why = f"change {change:+.3f} nats (noise about ±{noise:.3f})"
    if abs(change) <= noise:
        return Grade(None, "same", why + ": within the noise, too small to call")
    answer = "up" if change > 0 else "down"
    return Grade(guess == answer, answer, why)


def grade_number(guess: float, truth: float, rel_tol: float) -> Grade:
    """Right within ``rel_tol`` of the true value."""
    ok = math.isfinite(guess) and abs(guess - truth) <= rel_tol * abs(truth)
    return Grade(ok, truth, f"{truth:,.6g} (answers within {rel_tol:.0%} count)")


def grade_yes_no(measured: float, threshold: float, guess: bool) -> Grade:
    """Yes when ``measured`` exceeds ``threshold`` (a change that is not rounding)."""
    answer = measured > threshold
    return Grade(guess == answer, answer, f"largest change {measured:.2e}")


# ---------------------------------------------------------------- the model's answers
def key_weights(model, ids, layer: int, head: int) -> np.ndarray:
    """(n,) the weights the last position of ``ids`` puts on each key, for one head."""
    return head_attention(model, list(ids), layer, head)[1][-1]


def which_key(model, ids, layer: int, head: int, guess: int) -> Grade:
    """"Which earlier token will this head weigh most from the last position?" (positions from 0)."""
    w = key_weights(model, ids, layer, head)
    return grade_choice({j: float(w[j]) for j in range(len(w))}, guess, label=lambda j: f"position {j + 1}")


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


@torch.no_grad()
def mean_logprob(model, ids, start: int) -> float:
    """The model's mean log-probability (at temperature 1) of the tokens ``ids[start:]``: how typical a text is."""
    losses = token_losses(model, list(ids))  # entry i: the loss of ids[i + 1]
    return float(-losses[start - 1:].mean())


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
