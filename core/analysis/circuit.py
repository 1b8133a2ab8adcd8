"""A score taken apart, read out in words: ``score_sources``' table cut to what a page draws (``top_sources``,
``sources_view``), its largest entry and each side's builder (``read_sources``), and the induction circuit's sentence
under it (``read_circuit``): the key's largest source with its own previous-token score and its path into the keys,
beside the head that path patching finds. Pure: the numbers come in, no model is run here (core.analysis.patching
runs them). Also the small rules of the Cause and effect page: a share in words (``share_text``), the default key
(``default_key``) and the default sender and receiver (``path_defaults``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.analysis.induction import THRESHOLD
from core.analysis.picks import nan_argmax
from core.serve.fmt import head_label

PREVIOUS_TOKEN = THRESHOLD  # a previous-token score at or above this counts as a previous-token head
CARRIES = 0.10              # a path restoring at least this share of the clean answer carries it


def top_sources(table: np.ndarray, names: list[str], k: int = 10):
    """``score_sources``' table cut to the ``k`` query-side and ``k`` key-side sources with the largest entries,
    the rest summed into "all others" (so the entries still add up to the score): (table, row names, column
    names). A GPT-2 layer has over a hundred sources, too many to draw."""
    S = len(names)
    if S <= k:
        return table, list(names), list(names)

    def pick(weight):  # indices of the k largest, in the table's order
        return sorted(np.argsort(-weight)[:k].tolist())
    rows, cols = pick(np.abs(table).max(1)), pick(np.abs(table).max(0))
    rest_r, rest_c = [i for i in range(S) if i not in rows], [j for j in range(S) if j not in cols]
    r_groups, c_groups = [[i] for i in rows] + [rest_r], [[j] for j in cols] + [rest_c]
    out = np.array([[table[np.ix_(rg, cg)].sum() for cg in c_groups] for rg in r_groups])
    other = "all others"
    return out, [names[i] for i in rows] + [other], [names[j] for j in cols] + [other]


def sources_view(table: np.ndarray, names: list[str], k: int = 10):
    """What a page draws of ``score_sources``' table: (table cut to ``top_sources(k)``, its row names, its column
    names, the ``read_sources`` reading of the whole table). The reading is of the whole table, never of the cut one:
    there the rest is summed into "all others", which is no source and must not be named the key's builder."""
    shown, rows, cols = top_sources(table, names, k)
    return shown, rows, cols, read_sources(table, names)


@dataclass(frozen=True)
class Reading:
    query_source: str   # the row of the largest entry (who wrote what the query asks)
    key_source: str     # its column (who wrote what the key offers)
    value: float        # that entry
    share: float        # its part of the sum of the entries' sizes
    key_builder: str    # the column with the largest sum: the source of the key's stream that adds most to the score
    key_total: float    # that column's sum (its whole part of the score, whatever the query side)
    query_builder: str  # the same for the query's stream (the row with the largest sum)
    query_total: float
    composition: str | None  # "K" when the key's builder is an earlier head, "Q" the query's, "QK" both, else None


def _is_head(name: str) -> bool:
    return name.startswith("L") and " H" in name  # head_label's "L1 H3"


def read_sources(table: np.ndarray, names: list[str], row_names=None, col_names=None) -> Reading:
    """A score-sources table read out: its largest entry, and the source of each side that adds most to the score
    (a column's or a row's sum). Composition: an earlier head is the key's builder (K), the query's (Q), or both."""
    rows, cols = row_names or names, col_names or names
    r, c = nan_argmax(np.abs(table)) or (0, 0)
    col_sums, row_sums = table.sum(0), table.sum(1)
    (kb,), (qb,) = nan_argmax(col_sums) or (0,), nan_argmax(row_sums) or (0,)
    comp = "".join(side for side, name in (("Q", rows[qb]), ("K", cols[kb])) if _is_head(name)) or None
    total = float(np.abs(table).sum())
    return Reading(rows[r], cols[c], float(table[r, c]), float(abs(table[r, c]) / total) if total else 0.0,
                   cols[kb], float(col_sums[kb]), rows[qb], float(row_sums[qb]), comp)


# ---------------------------------------------------------------- the induction circuit, in words
def share_text(value: float, digits: int = 0) -> str:
    """A share (1 = 100%) as a page prints it: "undefined" for NaN or an infinity (a share of a gap of 0), and never
    "-0%" (a value that rounds to zero prints as "0%", whatever its sign)."""
    if value is None or not math.isfinite(value):
        return "undefined"
    pct = round(100 * float(value), digits)
    return f"{0.0 if pct == 0 else pct:.{digits}f}%"


def _heads_by_name(table: np.ndarray) -> dict[str, tuple[int, int]]:
    L, h = np.shape(table)
    return {head_label(l, k): (l, k) for l in range(L) for k in range(h)}


@dataclass(frozen=True)
class CircuitReading:
    """What the score split and the path patching show of one head's keys (``read_circuit``)."""
    builder: str                        # the key's largest source (``Reading.key_builder``)
    builder_total: float                # its part of the score
    builder_previous: float | None      # its previous-token score (None: not a head)
    builder_path: float | None          # its path into the keys (None: not a head, or no path measured)
    path_head: tuple[int, int] | None   # the earlier head whose path into the keys restores most (None: none)
    path_share: float                   # that path's share of the clean answer (NaN when none, or undefined)
    path_previous: float | None         # the path head's previous-token score
    circuit: bool                       # the path head is a previous-token head and its path carries the answer
    text: str                           # all of it in Markdown, the numbers beside each name


def read_circuit(reading, score: float, previous_token: np.ndarray,
                 paths: dict[tuple[int, int], float] | None) -> CircuitReading:
    """The sentence under the score split of a head's score, from what was measured, not from a name: the key's
    largest source (``reading``: ``read_sources``' ``Reading``) with its own previous-token score (from
    ``previous_token``, (L, h): ``HeadScores.previous_token``) and its path; and the head that path patching finds,
    the earlier head whose clean output reaching only this head's keys restores most (``paths``: {sender: share},
    core.analysis.patching.paths_into; {} for a head of the first layer, None when not measured). It is the
    induction circuit (K-composition) only when that head is a previous-token head (score >= PREVIOUS_TOKEN) whose
    path restores at least CARRIES of the clean answer."""
    prev = np.asarray(previous_token, dtype=float)
    by_name = _heads_by_name(prev)
    b = by_name.get(reading.key_builder)
    b_prev = None if b is None else float(prev[b])
    b_path = None if b is None or not paths or b not in paths else float(paths[b])
    text = (f"Of the key's sources, **{reading.key_builder}** adds most to this score: {reading.key_total:+.2f} "
            f"of {score:.2f}.")
    if b is not None:
        looks = b_prev >= PREVIOUS_TOKEN  # False for NaN
        text += (f" Its previous-token score is {b_prev:.2f} ({'' if looks else 'not '}a previous-token head)"
                 + ("." if b_path is None else f"; its path into the keys restores {share_text(b_path)}."))
    best = None
    if paths:
        senders = list(paths)
        at = nan_argmax([paths[s] for s in senders])
        best = None if at is None else senders[at[0]]
    p_share = math.nan if best is None else float(paths[best])
    p_prev = None if best is None else float(prev[best])
    circuit = best is not None and p_prev >= PREVIOUS_TOKEN and p_share >= CARRIES
    if paths is None:
        pass
    elif not paths:
        text += " No head sits in an earlier layer, so no other head builds this head's keys."
    elif best is None:
        text += " Path patching is undefined here: the two runs agree on the measure."
    elif p_share < CARRIES:  # the largest of paths that carry nothing is no finding: said as none carrying it
        text += (f" No single earlier head's path into the keys carries the answer: the largest, {head_label(*best)}'s "
                 f"(previous-token score {p_prev:.2f}), restores {share_text(p_share)} of the clean answer (none "
                 f"restores {share_text(CARRIES)}).")
    else:
        text += (f" Path patching finds **{head_label(*best)}** (previous-token score {p_prev:.2f}): its clean "
                 f"output reaching only this head's keys restores {share_text(p_share)} of the clean answer, more "
                 "than any other earlier head's.")
        if circuit:
            text += (" That is the induction circuit, **K-composition**: a previous-token head writes at each "
                     "position which token came before, and this head's keys are read from it.")
            if b is not None and b != best:
                text += (f" The largest part of the score and the path are different heads: {reading.key_builder} "
                         "adds the most to the score, but what the corruption changed reaches the keys through "
                         f"{head_label(*best)}.")
        else:
            text += (f" It is not a previous-token head (below {PREVIOUS_TOKEN:.2f}): this head's keys are built "
                     "by something other than the induction circuit's first half.")
    return CircuitReading(reading.key_builder, float(reading.key_total), b_prev, b_path, best, p_share, p_prev,
                          bool(circuit), text)


# ---------------------------------------------------------------- the Cause and effect page's defaults
def default_key(pattern_row, i: int) -> int:
    """The key position a head at query ``i`` looks at most (``pattern_row``: its weights over the keys), NaN
    skipped; ``i`` itself when every weight is NaN. A page keys its box by the prompt, so that a new prompt opens
    on its own default."""
    at = nan_argmax(np.asarray(pattern_row, dtype=float)[: i + 1])
    return i if at is None else at[0]


def path_defaults(previous_token: np.ndarray, induction: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(sender, receiver) the path patching opens on: the receiver is the head of a later layer (not the first)
    with the highest induction score, the sender the head of an earlier layer than the receiver's with the highest
    previous-token score, NaN skipped; where every score of a side is NaN, its first head. None for a model of
    one layer (no path)."""
    prev, ind = np.asarray(previous_token, dtype=float), np.asarray(induction, dtype=float)
    if ind.shape[0] < 2:
        return None
    r = nan_argmax(ind[1:])
    receiver = (1, 0) if r is None else (r[0] + 1, r[1])
    s = nan_argmax(prev[: receiver[0]])
    return (0, 0) if s is None else (s[0], s[1]), receiver
