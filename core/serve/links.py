"""A link's query string parsed into a page's settings, field by field: a field that does not parse (a head the
model lacks, a number out of range, garbage) is left out and named, never raised, and nothing in it is executed or
evaluated. The keys are contracts, counted as the screen counts (from 1): model, prompt, layer, head, pos, off
(heads switched off, "L2H1,L1H3"), T, step, lesson."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlencode

LINK_CUT_KEY = "te_link_cut"  # added by the server to a link it had to cut (cut_query): "<fields>-<characters>"
# read by the frame (app.py) or Streamlit itself
GLOBAL_KEYS = frozenset({"model", "step", "embed", "embed_options", LINK_CUT_KEY})
MAX_LINK_CHARS = 2000   # a link's query string at most (chat clients and browsers cut longer ones)
MAX_VALUE_CHARS = 4000  # a value longer than this is not read at all
MAX_KEYS = 50           # keys that are not a page's own named at most (the rest counted); its own are read anywhere
MAX_INT_DIGITS = 18     # whole numbers up to 10^18 (a seed of 2^63 - 1 has 19 digits; the kind's bounds decide)
# a head as the screen writes it ("L1 H3") or as a link does ("L1H3"), in any case
_HEAD = re.compile(r"^L\s*(\d{1,4})\s*H\s*(\d{1,4})$")
NO_HEADS = "none"       # off=none: every head on (an empty off= reads the same)


def parse_heads(text: str, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """'L2H1,L1H3' or 'L2 H1, L1 H3' -> [(1, 0), (0, 2)] (0-based, sorted, unique); '' or 'none' -> []; ValueError
    naming the bad part."""
    out = set()
    if text.strip().lower() == NO_HEADS:
        return []
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
    """[(1, 0), (0, 2)] -> 'L1H3,L2H1'; no heads -> 'none' (so that a link can say "every head on")."""
    return ",".join(f"L{l + 1}H{h + 1}" for l, h in sorted(heads)) or NO_HEADS


def _parse(value: str, kind: tuple):
    name = kind[0]
    if name == "int":
        lo, hi = kind[1], kind[2]
        if not re.fullmatch(rf"[+-]?\d{{1,{MAX_INT_DIGITS}}}", value.strip()):
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
    if name == "index":  # ("index", n): a position, layer or head counted from 1 as on screen; 0-based inside
        return _parse(value, ("int", 1, kind[1])) - 1
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
    keys read elsewhere (the frame's model and step), neither parsed nor named. The page's own keys are read wherever
    they stand (a link of many other keys still opens its settings); the others are named, the first MAX_KEYS of
    them, and counted. The work is one look-up a key and one parse a key of ``spec``: a query's keys are unique."""
    values, ignored, unknown = {}, [], 0
    for key, raw in query.items():
        key, raw = str(key), "" if raw is None else str(raw)
        if key in extra_known:
            continue
        if key not in spec:
            unknown += 1
            if unknown <= MAX_KEYS:
                ignored.append((key, "not a setting of this page"))
            continue
        if len(raw) > MAX_VALUE_CHARS:
            ignored.append((key, f"longer than {MAX_VALUE_CHARS:,} characters"))
            continue
        try:
            values[key] = _parse(raw, spec[key])
        except ValueError as e:
            ignored.append((key, str(e)))
    if unknown > MAX_KEYS:
        ignored.append(("…", f"{unknown - MAX_KEYS:,} more fields that are not settings of this page"))
    return values, ignored


def cut_query(query: str, max_fields: int, max_chars: int) -> str:
    """A query string over a server's limits (more than ``max_fields`` fields, counted as Streamlit counts them, or
    more than ``max_chars`` characters) cut to its first whole fields that fit both, with one field more,
    LINK_CUT_KEY=<fields>-<characters> of the whole link, so that the page can say what was left out. Reads the
    string once (a count and a slice)."""
    marker = f"{LINK_CUT_KEY}={query.count('&') + 1}-{len(query)}"
    room = max_chars - len(marker) - 1
    head = query[:room + 1]  # one character more: a cut that falls on an "&" keeps the field before it whole
    if len(query) > room:
        head = head[:head.rfind("&")] if "&" in head else ""
    fields = [f for f in head.split("&", max_fields - 1)[:max_fields - 1] if f]  # the last part held the rest
    return "&".join([*fields, marker])


def read_cut(value: str) -> tuple[int, int] | None:
    """(fields, characters) of the whole link from LINK_CUT_KEY's value; None when it is not the server's."""
    m = re.fullmatch(r"(\d{1,12})-(\d{1,15})", str(value))
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Cut:
    """What fitting a link under MAX_LINK_CHARS did to its prompts: nothing (``kept is None``), or each of
    ``keys`` cut to its first ``kept`` characters (0: the other fields alone fill the link)."""
    keys: tuple = ()
    kept: int | None = None

    def __bool__(self):
        return self.kept is not None

    def words(self) -> str:
        if self.kept is None:
            return ""
        what = " and ".join(f"**{k}**" for k in self.keys)
        if self.kept == 0:
            return (f"The other settings alone fill a link of {MAX_LINK_CHARS:,} characters, so {what} "
                    f"{'were' if len(self.keys) > 1 else 'was'} left out: the link opens on the page's default text.")
        return (f"{what} {'were' if len(self.keys) > 1 else 'was'} cut to the first {self.kept:,} characters to keep "
                f"the link under {MAX_LINK_CHARS:,} characters.")


def fit_link(params: dict, cut_keys=("prompt",), same_length: Callable | None = None) -> tuple[dict, Cut]:
    """``params`` whose query string fits MAX_LINK_CHARS, the text fields ``cut_keys`` cut together from their ends
    to one length, so that a clean and a corrupted prompt stay a pair; ``same_length(a, b)``, when given, must hold
    of the first cut value and each other one (the same number of tokens, say), or the cut goes shorter."""
    keys = tuple(k for k in cut_keys if k in params)
    if len(urlencode(params)) <= MAX_LINK_CHARS or not keys:
        return params, Cut()
    texts = {k: params[k] for k in keys}

    def cut(n):
        return {**params, **{k: t[:n] for k, t in texts.items()}}

    lo, hi = 0, max(len(t) for t in texts.values())
    while lo < hi:  # the longest common start that fits (the query string grows with n)
        mid = (lo + hi + 1) // 2
        if len(urlencode(cut(mid))) <= MAX_LINK_CHARS:
            lo = mid
        else:
            hi = mid - 1
    if same_length is not None and len(keys) > 1:  # shorter until the pair has one length again (a few steps)
        first = texts[keys[0]]
        while lo > 0 and not all(same_length(first[:lo], texts[k][:lo]) for k in keys[1:]):
            lo -= 1
    return cut(lo), Cut(keys, lo)


@dataclass(frozen=True)
class Field:
    """One URL key of a page's link: how its value parses (a kind of ``_parse``), the session-state key of the
    widget it sets, and how a value moves between the two. ``state`` None: the page reads ``values`` itself and
    passes what to publish (a setting that is not one widget's)."""
    kind: tuple
    state: str | None = None
    to_state: Callable | None = None   # parsed value -> the widget's value
    to_url: Callable | None = None     # the widget's value -> the URL's (default: str; None values are left out)
    cut: bool = False                  # a text cut to fit the link (paired fields are cut together)


def _index_to_url(v) -> str:
    return str(int(v) + 1)  # positions, layers and heads are 0-based in state and count from 1 in a link


class LinkSpec:
    """A page's link, declared once: ``fields`` maps a URL key to its Field. ``parse`` reads a query string into
    values and what was ignored; ``updates`` turns values into session-state writes; ``params`` reads the page's
    state back into URL values (``overrides``: values held as state holds them, for fields without a state key, and
    keys outside the spec, such as the frame's model and step, written as they are); ``fit`` cuts the text fields
    (together, so a pair stays one length) to fit MAX_LINK_CHARS. An "index" field (``("index", n)``) counts from
    1 in the URL and from 0 in state: the one place a link converts."""

    def __init__(self, fields: Mapping[str, Field], same_length: Callable | None = None):
        self.fields = dict(fields)
        self.same_length = same_length

    @property
    def kinds(self) -> dict:
        return {k: f.kind for k, f in self.fields.items()}

    def parse(self, query: Mapping, extra_known=GLOBAL_KEYS) -> tuple[dict, list[tuple[str, str]]]:
        return parse_fields(dict(query), self.kinds, extra_known=extra_known)

    def updates(self, values: Mapping) -> dict:
        out = {}
        for key, value in values.items():
            f = self.fields.get(key)
            if f is not None and f.state is not None:
                out[f.state] = f.to_state(value) if f.to_state else value
        return out

    def params(self, state: Mapping, overrides: Mapping | None = None) -> dict[str, str]:
        out = {}
        for key, f in self.fields.items():
            if overrides and key in overrides:  # a value as the page holds it (an index from 0), converted as state is
                value = overrides[key]
            elif f.state is not None and f.state in state:
                value = state[f.state]
            else:
                continue
            if value is None:
                continue
            if f.to_url is not None:
                value = f.to_url(value)
            elif f.kind[0] == "index":
                value = _index_to_url(value)
            out[key] = str(value)
        for key, value in (overrides or {}).items():  # the frame's model and step, say
            if key not in self.fields and value is not None:
                out[key] = str(value)
        return out

    def fit(self, params: dict) -> tuple[dict, Cut]:
        keys = tuple(k for k, f in self.fields.items() if f.cut)
        return fit_link(params, keys or ("prompt",), self.same_length)
