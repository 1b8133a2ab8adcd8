"""Numbers and text for display, in one place: LaTeX and plain scientific notation, parameter and token
counts the way papers write them, byte sizes, Markdown escaping, and printable stand-ins for whitespace."""
from __future__ import annotations

import math
import re


# ---------------------------------------------------------------- numbers

def human_bytes(b: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if b < 1000 or unit == "PB":
            return f"{b:,.0f} {unit}" if unit == "bytes" else f"{b:,.1f} {unit}"
        b /= 1000


def binary_bytes(n: float) -> str:
    """310 MiB, 1.0 GiB: sizes in powers of 1024, as memory budgets and file limits are written (human_bytes is
    for sizes people compare with what a download page says, in powers of 1000)."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit in ("bytes", "MiB") else f"{n:,.1f} {unit}"
        n /= 1024


def latex_int(x: int) -> str:
    """49408 -> '49{,}408': a thousands comma that LaTeX does not space like a list comma."""
    return f"{int(x):,}".replace(",", "{,}")


def sci_parts(x: float, digits: int) -> tuple[str, int]:
    """(mantissa with `digits` significant digits, trailing zeros dropped; exponent) of a nonzero x."""
    exp = math.floor(math.log10(abs(x)))
    mant = round(x / 10**exp, digits - 1)
    if abs(mant) >= 10:  # 9.999 rounded up to 10.0
        mant, exp = mant / 10, exp + 1
    return f"{mant:.{digits - 1}f}".rstrip("0").rstrip("."), exp


def latex_sci(x: float, digits: int = 3) -> str:
    """1.74e11 -> '1.74 \\times 10^{11}'; whole numbers below a million stay plain digits."""
    if abs(x) < 1e6 and float(x).is_integer():
        return latex_int(x)
    mant, exp = sci_parts(x, digits)
    return f"10^{{{exp}}}" if mant == "1" else rf"{mant} \times 10^{{{exp}}}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def pretty_sci(x: float, digits: int = 3) -> str:
    """The one way a number is written for a reader (prose, grades, metrics, tick labels): whole numbers below a
    million in digits with thousands commas (230,912); other numbers from 0.001 to a million to ``digits``
    significant digits, without an exponent (0.663, 20,200); the rest as 3.4 × 10¹³ (10⁹ for a mantissa of 1);
    '–' for a NaN or an infinity."""
    if not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e6:
        if float(x).is_integer():
            return f"{x:,.0f}"
        places = digits - 1 - math.floor(math.log10(abs(x)))  # decimals that keep ``digits`` significant
        r = round(x, places)
        if 1e-3 <= abs(r) < 1e6:  # 999,999.7 rounds to a million: written as one below
            text = f"{r:,.{max(places, 0)}f}"
            return text.rstrip("0").rstrip(".") if "." in text else text
    mant, exp = sci_parts(x, digits)
    return f"10{str(exp).translate(_SUPERSCRIPT)}" if mant == "1" else f"{mant} × 10{str(exp).translate(_SUPERSCRIPT)}"


def percent(share: float, digits: int = 3) -> str:
    """0.663212 -> '66.3%', 0.08 -> '8%': a share written as a percentage (``pretty_sci``'s digits)."""
    return f"{pretty_sci(100 * share, digits)}%"


def change(x: float, unit: str = "", up: str = "rose", down: str = "fell") -> str:
    """-0.1, ' nats' -> 'rose 0.1 nats' for a loss's fall: the sign said in a word, never as a minus sign after
    "fell"."""
    return f"{up if x < 0 else down} {pretty_sci(abs(x))}{unit}"


def human(x: float, unit: str = "") -> str:
    """175e9 -> '175B', 1.4e12 -> '1.4T'; counts of parameters and tokens the way papers write them, to three
    significant digits; from a thousand trillion on (no letter for it) ``pretty_sci``'s 3.25 × 10¹⁷."""
    if not math.isfinite(x):
        return "–"
    r = float(f"{x:.3g}")  # rounded first, so that 999,950 reads 1M, not 1e+03k
    if abs(r) >= 1e15 or 0 < abs(r) < 1e-3:
        return pretty_sci(x) + unit
    for scale, s in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(r) >= scale:
            return f"{r / scale:.3g}{s}{unit}"
    return f"{r:.3g}{unit}"


def sci(x: float) -> str:
    """5.88e23 -> '5.88e23' (short, for hover text and tables); 9.999e23 -> '1e24'."""
    mant, e = sci_parts(x, 3)
    return f"{mant}e{e}"


def clock(seconds: float | None) -> str:
    """125 -> '2:05', minutes and seconds of a run; '–' when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


# ---------------------------------------------------------------- text

def md_escape(text: str) -> str:
    """Backslash every character Markdown could read as syntax, so quoted user text stays literal."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|$<>~&:])", r"\\\1", text)


_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}


def visible(text: str) -> str:
    """Printable stand-ins for whitespace and control characters, so they show on chart axes: a character
    (' ' -> '␣') or a token's whole text (' the' -> '␣the')."""
    if len(text) == 1:
        ch = text
        if ch in _VISIBLE:
            return _VISIBLE[ch]
        if ord(ch) < 32 or ord(ch) == 127:
            return chr(0x2400 + ord(ch)) if ord(ch) < 32 else "␡"
        return ch
    return "".join(visible(ch) for ch in text)


def head_label(layer: int, head: int) -> str:
    """(0, 2) -> 'L1 H3'. In code and in heads.csv layers and heads count from 0; on screen from 1: this is
    the one place that converts."""
    return f"L{layer + 1} H{head + 1}"


def shown_pos(i: int) -> int:
    """Position i of a tensor (from 0) as the screen and links count it (from 1), as layers and heads are counted:
    the one place that converts (core.serve.links' "index" kind converts a link's value back)."""
    return int(i) + 1


def pos_label(i: int, token: str | None = None) -> str:
    """(11, 'e') -> "12 'e'": a position as the screen counts it and, when given, its token made readable."""
    return f"{shown_pos(i)}" if token is None else f"{shown_pos(i)} '{visible(token)}'"


def heads_label(heads) -> str:
    """'L1 H3, L2 H1' for a list of heads; 'no head' for none."""
    return ", ".join(head_label(l, h) for l, h in heads) or "no head"


# ---------------------------------------------------------------- durations, significant figures, counts in words

def rough_time(seconds: float) -> str:
    """A duration the way one says it: 'about 40 seconds', 'about 12 minutes'."""
    if seconds < 90:  # up to a minute and a half, tens of seconds say it better than "about 1 minute"
        return f"about {max(10, round(seconds, -1)):.0f} seconds"
    return f"about {round(seconds / 60):.0f} minutes"


def duration_words(seconds: float) -> str:
    """An estimate in round words: "about 4 s", "about 40 s", "about 3 min", "about 1.5 h" (seconds up to two
    minutes: "under a minute" read 58-85 s)."""
    if seconds < 10:
        return f"about {max(1, round(seconds))} s"
    if seconds < 120:
        return f"about {round(seconds, -1):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def g3(v: float) -> str:
    """Three significant digits; a value within 1e-6 of zero (a bound the bootstrap drove to zero) reads as 0."""
    return "0" if abs(v) < 1e-6 else f"{v:.3g}"


_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def number_word(n: int) -> str:
    """8 -> 'eight': a small count the way prose writes it; from 13 on, digits with thousands commas."""
    return _WORDS[n] if 0 <= n < len(_WORDS) else f"{n:,}"


# ---------------------------------------------------------------- the training page's sizes, times and rates

def size_kib(n_bytes: int) -> str:
    """A text's size: '1,089 KiB', or in bytes below 10 KiB, where a rounded KiB would hide most of it."""
    return f"{n_bytes / 1024:,.0f} KiB" if n_bytes >= 10 * 1024 else f"{n_bytes:,} bytes"


def seconds_or_minutes(seconds: float) -> str:
    """An estimated run time: '95 s', and from two minutes on '7.4 min'."""
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"


def gflops(rate: float) -> str:
    """A speed in FLOP per second as '12.3 GFLOP/s'."""
    return f"{rate / 1e9:,.1f} GFLOP/s"


def millions(n: float) -> str:
    """1_003_854 -> '1.0', for 'million characters'."""
    return f"{n / 1e6:,.1f}"


# ---------------------------------------------------------------- the analysis pages' phrases

def code_text(text: str) -> str:
    """Text to show between backticks (Markdown code, where no escape works): a backtick would end the span
    early, so it becomes a quote."""
    return text.replace("`", "'")


def nats_than(change: float, than: str) -> str:
    """0.25, 'on the first' -> '0.250 nats lower than on the first'; a negative change reads 'higher'."""
    return f"{abs(change):.3f} nats {'lower' if change >= 0 else 'higher'} than {than}"
