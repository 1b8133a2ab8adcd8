"""How a guess is graded: against the model's answer, and not at all when that answer is too close to call
(``Grade.correct is None``, with ``Grade.call`` saying why in a few words)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from core.serve.fmt import percent, pretty_sci

AMBIGUOUS_SHARE = 0.05   # two options within 5% of each other: too close to call
NOISE_SE = 2.0           # a loss change within this many standard errors of 0 is noise
MIN_NOISE = 0.01         # nats: and never below this
MASK_CHANGE = 1e-6       # a weight that moves less than this did not move (float32 rounding)
CLOSE = "too close to call"


@dataclass(frozen=True)
class Grade:
    correct: bool | None  # None: the model's answer is too close to call (or there is none), so no mark
    answer: object        # the model's answer
    why: str              # the numbers behind it, in words
    call: str = CLOSE     # when not marked: why, as a heading ("too close to call", "nothing to compare")


def close_call(values: dict, share: float = AMBIGUOUS_SHARE) -> bool:
    """Whether the two largest of ``values`` lie within ``share`` of the largest (in size)."""
    top = sorted(values.values(), reverse=True)
    return len(top) > 1 and abs(top[0] - top[1]) <= share * abs(top[0])


def grade_choice(values: dict, guess, label=str, unit: str = "", share: float = AMBIGUOUS_SHARE, say=None) -> Grade:
    """The option with the largest value is the answer; a close call (``close_call``) is not graded. A NaN value is
    no option's answer (left out); when every value is NaN, nothing is graded. ``say(value)`` writes a value in the
    reason (default: core.serve.fmt.pretty_sci and ``unit``)."""
    if not values:
        raise ValueError("no options to choose from")
    finite = {k: v for k, v in values.items() if math.isfinite(v)}
    if not finite:
        return Grade(None, None, "the model gave no number for any option", call="no answer")
    say = say or (lambda v: pretty_sci(v) + unit)
    ranked = sorted(finite, key=finite.get, reverse=True)
    best, second = ranked[0], ranked[1] if len(ranked) > 1 else None
    why = f"{label(best)}: {say(finite[best])}"
    if second is not None:
        why += f"; next, {label(second)}: {say(finite[second])}"
    if close_call(finite, share):
        return Grade(None, best, why + f" (within {percent(share)} of each other: too close to call)")
    return Grade(guess == best, best, why)


def grade_direction(change: float, noise: float, guess: str) -> Grade:
    """``guess`` in up/down/same against a measured ``change``: up or down when it is larger than ``noise`` in
    size; within the noise the question says so instead of grading ("same" cannot be told from a small change)."""
    if guess not in ("up", "down", "same"):
        raise ValueError(f"guess must be up, down or same, got {guess!r}")
    why = f"change {change:+.3f} nats (noise about ±{noise:.3f})"
    if not abs(change) > noise:  # NaN too: no direction
        return Grade(None, "same", why + ": within the noise, too small to call")
    answer = "up" if change > 0 else "down"
    return Grade(guess == answer, answer, why)


def grade_number(guess: float, truth: float, rel_tol: float, say=pretty_sci) -> Grade:
    """Right within ``rel_tol`` of the true value. The reason names the value and the answers that count, written
    by ``say`` in the question's own unit (a share asked in percent: core.serve.fmt.percent)."""
    ok = math.isfinite(guess) and abs(guess - truth) <= rel_tol * abs(truth)
    lo, hi = sorted((truth * (1 - rel_tol), truth * (1 + rel_tol)))
    return Grade(ok, truth, f"{say(truth)}; answers from {say(lo)} to {say(hi)} count")


def grade_yes_no(measured: float, threshold: float, guess: bool) -> Grade:
    """Yes when ``measured`` exceeds ``threshold`` (a change that is not rounding)."""
    answer = measured > threshold
    return Grade(guess == answer, answer, f"largest change {pretty_sci(measured)}")
