"""Sizes as a person writes them ("1.5G", "800M"), and the server's memory settings given as one."""
from __future__ import annotations

import os
import re

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}  # K, M, G and T count in powers of 1024


def parse_size(text: str) -> int:
    """Bytes from a size as a person writes it: "1.5G", "800M", "512k", "1GiB", "2 GB" or a number of bytes.
    K, M, G and T count in powers of 1024, as Docker's memory limits do. ValueError when it is not a size."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not found:
        raise ValueError(f"{text!r} is not a size: write bytes, or a number with K, M, G or T, e.g. 1.5G or 800M")
    number, unit = found.groups()
    return int(float(number) * _UNITS[unit.lower()])


def size_setting(env: str, default: int, value: str | None = None) -> int | None:
    """A memory budget the server sets by a size: ``value``, by default the environment's ``env`` (1G, 800M), else
    ``default``. None: no limit (0). ValueError, naming the setting, when it is not a size."""
    value = os.environ.get(env, "") if value is None else value
    if not str(value).strip():
        return default
    try:
        return parse_size(value) or None
    except ValueError as e:
        raise ValueError(f"the server's {env} setting is wrong: {e}") from None
