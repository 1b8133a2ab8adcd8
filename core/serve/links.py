"""A link's query string parsed into a page's settings, field by field: a field that does not parse (a head the
model lacks, a number out of range, garbage) is left out and named, never raised, and nothing in it is executed or
evaluated. The keys are contracts, counted as the screen counts (from 1): model, prompt, layer, head, pos, off
(heads switched off, "L2H1,L1H3"), T, step, lesson."""
from __future__ import annotations

import math
import re
from urllib.parse import urlencode

GLOBAL_KEYS = frozenset({"model", "step", "embed", "embed_options"})  # read by the frame (app.py) or Streamlit itself
MAX_LINK_CHARS = 2000   # a link's query string at most (chat clients and browsers cut longer ones)
MAX_VALUE_CHARS = 4000  # a value longer than this is not read at all
MAX_KEYS = 50           # keys past this many are not looked at
_HEAD = re.compile(r"^L(\d{1,4})H(\d{1,4})$")


def parse_heads(text: str, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """'L2H1,L1H3' -> [(1, 0), (0, 2)] (0-based, sorted, unique); ValueError naming the bad part."""
    out = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _HEAD.match(part.upper())
        if not m:
            raise ValueError(f"'{part[:20]}' is not of the form L2H1")
        l, h = int(m.group(1)), int(m.group(2))
        if not (1 <= l <= n_layers and 1 <= h <= n_heads):
            raise ValueError(f"this model has no head {part} (L1–L{n_layers}, H1–H{n_heads})")
        out.add((l - 1, h - 1))
    return sorted(out)


def format_heads(heads) -> str:
    return ",".join(f"L{l + 1}H{h + 1}" for l, h in sorted(heads))


def _parse(value: str, kind: tuple):
    name = kind[0]
    if name == "int":
        lo, hi = kind[1], kind[2]
        if not re.fullmatch(r"[+-]?\d{1,9}", value.strip()):
            raise ValueError("not a whole number")
        v = int(value)
        if not lo <= v <= hi:
            raise ValueError(f"{v} is outside {lo}–{hi}")
        return v
    if name == "float":
        lo, hi = kind[1], kind[2]
        try:
            v = float(value)
        except ValueError:
            raise ValueError("not a number") from None
        if not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"not between {lo:g} and {hi:g}")
        return v
    if name == "choice":
        options = kind[1]
        if value not in options:
            raise ValueError("not one of the choices")
        return value
    if name == "heads":
        return parse_heads(value, kind[1], kind[2])
    if name == "text":
        if len(value) > kind[1]:
            raise ValueError(f"longer than {kind[1]:,} characters")
        return value
    if name == "prompt":  # ("prompt", tokenizer, n_ctx): must fit the model's context
        tokenizer, n_ctx = kind[1], kind[2]
        ids = tokenizer.encode(value, errors="drop")
        if len(ids) > n_ctx:
            raise ValueError(f"{len(ids):,} {tokenizer.units}, more than the model's context of {n_ctx:,}")
        return value
    raise ValueError(f"unknown kind {name!r}")  # a page's spec is wrong: still never an exception to the user


def parse_fields(query: dict, spec: dict, extra_known=frozenset()) -> tuple[dict, list[tuple[str, str]]]:
    """({key: value} of the valid fields of ``spec`` found in ``query``, [(key, why ignored)]). ``extra_known``:
    keys read elsewhere (the frame's model and step), neither parsed nor named."""
    values, ignored = {}, []
    for i, (key, raw) in enumerate(query.items()):
        if i >= MAX_KEYS:
            ignored.append(("…", f"{len(query) - MAX_KEYS} more fields not read"))
            break
        key, raw = str(key), "" if raw is None else str(raw)
        if key in extra_known:
            continue
        if key not in spec:
            ignored.append((key, "not a setting of this page"))
            continue
        if len(raw) > MAX_VALUE_CHARS:
            ignored.append((key, f"longer than {MAX_VALUE_CHARS:,} characters"))
            continue
        try:
            values[key] = _parse(raw, spec[key])
        except ValueError as e:
            ignored.append((key, str(e)))
    return values, ignored


def fit_link(params: dict) -> tuple[dict, int]:
    """``params`` whose query string fits MAX_LINK_CHARS: the prompt cut (from its end) if it must be; (params, the
    prompt's kept length, or 0 when nothing was cut)."""
    if len(urlencode(params)) <= MAX_LINK_CHARS or "prompt" not in params:
        return params, 0
    text = params["prompt"]
    lo, hi = 0, len(text)
    while lo < hi:  # the longest start of the prompt that fits
        mid = (lo + hi + 1) // 2
        if len(urlencode({**params, "prompt": text[:mid]})) <= MAX_LINK_CHARS:
            lo = mid
        else:
            hi = mid - 1
    return {**params, "prompt": text[:lo]}, lo
