"""What every method graded against the answer keys returns (core.analysis.grading, core.analysis.grading_graph):
its scores, where its finding is, and the edges a key could hold. Its own module, below both, so neither imports the
other back."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.analysis.answer_keys import INPUT, OUTPUT, all_components, parse_component

DIGITS = 6          # scores are compared to this many decimals (nats, shares, logits)


@dataclass
class Scores:
    """A method's scores: one per name (a component "L1 H2", or an edge (source, target)), larger = more in the
    circuit; the threshold the page uses on them; what they are over ("components" or "edges"). Then the finding:
    ``effect``, the largest score in ``unit`` ("share" of ``norm``, or "nats"), said in ``claim``; ``nonsense``, the
    same read off the same runs for the nonsense labels (NaN when none were given)."""
    names: list
    values: np.ndarray
    threshold: float
    level: str
    effect: float = math.nan
    nonsense: float = math.nan
    norm: float = 1.0      # what a share is a share of: the summed gaps (patching), the total |DLA|; 1 for nats
    unit: str = "nats"
    claim: str = ""

    def __post_init__(self):
        # differences below DIGITS decimals are rounding (a head trained to do nothing scores +-1e-8): ties, not a rank
        self.values = np.round(np.asarray(self.values, dtype=float), DIGITS)


def _largest(values, unit: str) -> int | None:
    """Where the finding is: the largest score in size (shares: a push against the answer is a finding too), or the
    largest rise (nats: switching off what does nothing for the answer may lower its loss). None when empty."""
    v = np.nan_to_num(np.asarray(values, dtype=float).reshape(-1), nan=-np.inf)
    if v.size == 0:
        return None
    return int(np.argmax(np.abs(v) if unit == "share" else v))


def _effect(values, unit: str) -> float:
    at = _largest(values, unit)
    v = np.asarray(values, dtype=float).reshape(-1)
    return math.nan if at is None else float(abs(v[at]) if unit == "share" else v[at])


def candidate_edges(config) -> list[tuple[str, str]]:
    """Every edge a key could hold: from the input or a component to a later component or the logits (a block's
    heads read the stream before its MLP writes; heads of one layer never read each other)."""
    order = [INPUT] + all_components(config) + [OUTPUT]

    def rank(n):  # (layer, 0 for a head, 1 for an MLP); the input before all, the logits after
        if n == INPUT:
            return (-1, 1)
        if n == OUTPUT:
            return (config.n_layers, 0)
        comp = parse_component(n, config)
        return (comp.layer, 0 if comp.kind == "head" else 1)
    return [(s, t) for s in order[:-1] for t in order[1:] if rank(s) < rank(t) and s != t]
