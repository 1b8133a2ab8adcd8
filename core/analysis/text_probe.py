"""The natural-text copy probe: spans of real held-out text, each written twice inside one window, and the model's
loss on the first copy against the second. An induction head that copies only random characters leaves the two
equal (the second copy is as hard as the first); one that copies text makes the second nearly free.

The random-token probe (core.analysis.induction.repeat_probe) asks whether a head *can* copy; this one asks
whether the model *does*, on the text a learner types: the classic repeated-text loss drop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.interventions import ablate_heads

N_SPANS = 32
CHAR_SPAN = (40, 60)  # characters, the spans; a sub-word model gets as many characters in tokens


@dataclass(frozen=True)
class TextProbe:
    windows: torch.Tensor  # (N, n) token ids: natural text, a span, more text, the span again
    first: np.ndarray      # (N, n - 1) bool: the logits (position i predicts token i + 1) scored on the first copy
    second: np.ndarray     # (N, n - 1) bool: the same on the second copy

    @property
    def n_spans(self) -> int:
        return len(self.windows)


def text_probe(ids: torch.Tensor | list[int], n_ctx: int, span: tuple[int, int] = CHAR_SPAN,
               n_spans: int = N_SPANS, seed: int = 0) -> TextProbe:
    """``n_spans`` windows of ``n_ctx`` tokens cut from ``ids`` (held-out text): each holds a span of
    span[0]..span[1] tokens at a random place, the text that followed it, and the span again at the window's end.
    Scored: the span's tokens after its first (the first token of the second copy cannot be known from the first)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    lo, hi = span
    if lo < 2 or hi < lo or 2 * hi + 8 > n_ctx:
        raise ValueError(f"spans of {lo}-{hi} tokens written twice do not fit a window of {n_ctx} (need 2 x {hi} + 8)")
    if len(ids) < 4 * n_ctx:
        raise ValueError(f"the text has {len(ids):,} tokens; the probe needs at least {4 * n_ctx:,}")
    g = np.random.default_rng(seed)
    windows, first, second = [], np.zeros((n_spans, n_ctx - 1), bool), np.zeros((n_spans, n_ctx - 1), bool)
    for r in range(n_spans):
        length = int(g.integers(lo, hi + 1))
        before = int(g.integers(0, n_ctx - 2 * length - 8 + 1))   # natural text before the first copy
        gap = n_ctx - 2 * length - before                         # and after it (>= 8): the copy is not adjacent
        start = int(g.integers(before, len(ids) - length - gap))   # where the first copy begins in the text
        row = torch.cat([ids[start - before:start + length + gap], ids[start:start + length]])  # (n_ctx,)
        windows.append(row)
        # logits at i predict token i + 1: the span's tokens 1..L-1 are predicted from positions a..a+L-2
        first[r, before:before + length - 1] = True
        b = before + length + gap
        second[r, b:b + length - 1] = True
    return TextProbe(torch.stack(windows), first, second)  # N x (n_ctx,) -> (N, n_ctx)


@torch.no_grad()
def text_copy_losses(model, probe: TextProbe, heads=(), mode: str = "zero") -> tuple[float, float]:
    """Mean loss in nats on the first and on the second copy of every span, with ``heads`` switched off."""
    x = probe.windows
    logits = ablate_heads(model, x, heads, mode).logits[:, :-1]  # (N, n-1, m)
    loss = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none").numpy()  # (N, n-1)
    return float(loss[probe.first].mean()), float(loss[probe.second].mean())


def token_span(tokenizer, chars: tuple[int, int] = CHAR_SPAN, chars_per_token: float | None = None) -> tuple[int, int]:
    """Span lengths in tokens that hold about ``chars`` characters: the same for a character model; for a sub-word
    one, divided by its characters per token (measured on held-out text by the caller)."""
    if tokenizer.kind == "char" or not chars_per_token:
        return chars
    return max(2, round(chars[0] / chars_per_token)), max(2, round(chars[1] / chars_per_token))
