"""A pair of prompts for a learner to patch: a corrupted copy made for them, the induction circuit's example, two
lengths made one, and the strongest head a page opens on. The default answers need the patching forward: they live in
``core.analysis.patching`` (default_answers, top_predictions), which imports this module, never the reverse."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.induction import model_probe, probe_choices
from core.analysis.picks import nan_argmax


# ---------------------------------------------------------------- a pair of prompts for a learner
@dataclass(frozen=True)
class Corruption:
    ids: list[int]   # the corrupted prompt
    position: int    # the position changed
    old: int         # the clean token there
    new: int         # what replaced it
    why: str         # which position was picked, in words


def corrupt_one(ids, vocab_size: int, position: int | None = None, choices=None, seed: int = 0) -> Corruption:
    """``ids`` with one token changed, so that a learner need not write the corrupted prompt. Default position: the
    latest earlier occurrence of the last token, the place an induction head finds the token to copy (what follows
    it): changing it breaks the previous-token information the induction head's keys are built from. Without one,
    the last token. The replacement is a token absent from the prompt (no new accidental match), drawn from
    ``choices`` (default every id; a BPE page passes its readable tokens) in an order fixed by ``seed``."""
    ids = [int(t) for t in ids]
    if not ids:
        raise ValueError("the prompt is empty")
    n = len(ids)
    why = None
    if position is None:
        earlier = [j for j in range(n - 2, -1, -1) if ids[j] == ids[-1]]
        if earlier:
            position = earlier[0]
            why = "the earlier occurrence of the last token, where an induction head finds what to copy"
        else:
            position, why = n - 1, "the last token: it does not occur earlier in the prompt"
    if not 0 <= position < n:
        raise ValueError(f"position {position} is outside the prompt's {n} tokens")
    pool = list(range(vocab_size)) if choices is None else [int(t) for t in choices]
    used = set(ids)
    free = [t for t in pool if t not in used] or [t for t in pool if t != ids[position]]
    if not free:
        raise ValueError("the vocabulary has no other token to put there")
    g = torch.Generator().manual_seed(seed)
    new = free[int(torch.randint(len(free), (1,), generator=g))]
    out = list(ids)
    out[position] = new
    return Corruption(out, position, ids[position], new, why or f"position {position + 1}, as asked")


def corrupt_prompt(tokenizer, ids, vocab_size: int, seed: int = 0) -> Corruption:
    """``corrupt_one`` with the replacement drawn from what a page can show: a BPE's readable tokens
    (core.analysis.induction.probe_choices), any character for a character model."""
    return corrupt_one(ids, vocab_size, choices=None if tokenizer.kind == "char" else probe_choices(tokenizer),
                       seed=seed)


def example_pair(model, tokenizer, seed: int = 0, period: int = 24, again: int = 16):
    """The induction circuit's example: ``period`` random tokens (the probe's, core.analysis.induction.model_probe),
    then the first ``again`` of them once more, and its corrupted copy (``corrupt_prompt``: the earlier occurrence of
    the last token changed). Returns (clean ids, Corruption, period, again), sized to fit the model's context."""
    period = min(period, model.config.n_ctx // 2)
    again = min(again, period - 1)
    clean = model_probe(model, tokenizer, n_seqs=1, period=period, seed=seed)[0].tolist()[: period + again]
    return clean, corrupt_prompt(tokenizer, clean, model.config.vocab_size), period, again


def match_lengths(clean, corrupt, how: str, pad: int) -> tuple[list[int], list[int]]:
    """Two prompts of different lengths made patchable: "cut" drops the longer one's first tokens, "pad" puts
    ``pad`` tokens before the shorter one. Both keep each prompt's end, where the metric is read."""
    clean, corrupt = [int(t) for t in clean], [int(t) for t in corrupt]
    n = min(len(clean), len(corrupt)) if how == "cut" else max(len(clean), len(corrupt))
    if how == "cut":
        return clean[len(clean) - n:], corrupt[len(corrupt) - n:]
    if how == "pad":
        return [pad] * (n - len(clean)) + clean, [pad] * (n - len(corrupt)) + corrupt
    raise ValueError(f"how must be 'cut' or 'pad', got {how!r}")


def stack_rows(rows) -> np.ndarray:
    """Rows of one grid computed one at a time (a stage, a kind of activation) as one (rows, n) array."""
    return np.stack([np.asarray(r, dtype=float) for r in rows])


def strongest_head(table: np.ndarray) -> tuple[int, int]:
    """(layer, head) of the largest restored share in size, NaN skipped (``core.analysis.picks.nan_argmax``);
    (L-1, 0) when every entry is NaN (the two runs agree: a page still needs a head to open on)."""
    a = np.abs(np.asarray(table, dtype=float))
    at = nan_argmax(a)
    return (a.shape[0] - 1, 0) if at is None else (at[0], at[1])
