"""The one picker of "the head with the largest score": NaN skipped, never picked.

numpy's ``argmax`` and Python's ``max`` both go wrong on a NaN: ``np.argmax`` returns the NaN's index (NaN compares
as the largest), and ``max(..., key=...)`` keeps whatever it met first when that is a NaN (every comparison with it is
False). A head's score is NaN where it is undefined (a prompt with no repeated token, two runs that agree, a
diverged model), so every head picker of core goes through ``nan_argmax`` or ``best_of``.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


def nan_argmax(values) -> tuple[int, ...] | None:
    """The index (one int per axis) of the largest entry of ``values`` (an array of any shape, a list, a CPU
    tensor), NaN entries skipped, the first of equal entries; None when there is no entry or every one is NaN."""
    a = np.asarray(values, dtype=float)
    if a.size == 0 or np.isnan(a).all():
        return None
    return tuple(int(i) for i in np.unravel_index(np.nanargmax(a), a.shape))


def best_of(items: Sequence[T], key: Callable[[T], float]) -> T | None:
    """The item with the largest ``key`` (``nan_argmax`` over the keys: NaN skipped, the first of ties); None when
    there is no item or every key is NaN."""
    items = list(items)
    i = nan_argmax([float(key(x)) for x in items])
    return None if i is None else items[i[0]]


def nan_last(value: float) -> tuple[bool, float]:
    """A sort key putting NaN after every number: ``sorted(xs, key=lambda x: nan_last(-x))`` is largest first."""
    return (math.isnan(value), 0.0 if math.isnan(value) else value)
