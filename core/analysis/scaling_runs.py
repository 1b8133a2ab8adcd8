"""Training runs (N, D, loss) for the scaling-law fit: read from a user's CSV or pasted rows, checked with
messages that name the problem, or drawn from a known law to try the fit on."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field

import numpy as np

from core.analysis.scaling import ScalingLaw

MAX_BYTES = 1_000_000  # a CSV of a thousand runs is ~50 kB; anything this big is not a list of runs
MAX_RUNS = 1000  # the fit's cost grows with the runs; 1,000 keeps it within seconds
MIN_RUNS = 8  # five constants to fit, and a few runs to spare
ALIASES = {
    "N": ("n", "params", "parameters", "n_params", "num_params", "model_size"),
    "D": ("d", "tokens", "n_tokens", "num_tokens", "training_tokens", "data"),
    "loss": ("loss", "l", "final_loss", "val_loss", "eval_loss", "test_loss"),
}
# counts the way papers write them, 70B or 1.4T; "g" for giga, as some tools print; m is million (never milli):
# nobody trains a model of a thousandth of a parameter
SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


class RunsError(ValueError):
    """A CSV of runs that cannot be used; the message says why, in words for the user."""


@dataclass
class Runs:
    N: np.ndarray
    D: np.ndarray
    loss: np.ndarray
    warnings: list[str] = field(default_factory=list)  # usable but doubtful runs, said beside the fit

    def __len__(self):
        return len(self.N)

    def to_csv(self) -> str:
        # six significant digits of N and D, six decimals of the loss: parse_runs reads the text back to within the
        # noise of any real run, and the same runs always give the same text (the page caches the fit on it)
        lines = ["N,D,loss"] + [f"{n:.6g},{d:.6g},{l:.6f}" for n, d, l in zip(self.N, self.D, self.loss)]
        return "\n".join(lines) + "\n"


def _number(cell: str, allow_suffix: bool) -> float:
    """'7e10', '70B', '1.4T', '1_000' -> float; raises ValueError."""
    s = cell.strip().replace("_", "")  # 1_000, as Python writes it
    # a suffix only on counts: a loss of "2.5k" is a typo, not 2,500 nats
    if allow_suffix and s and s[-1].lower() in SUFFIX:
        return float(s[:-1]) * SUFFIX[s[-1].lower()]
    return float(s)


def _split(lines: list[str]) -> list[list[str]]:
    sample = lines[0]  # the first line decides: a header or a first run has the same separators as the rest
    # comma first; semicolons are what spreadsheets write where the comma is the decimal mark
    for delim in (",", ";", "\t"):
        if delim in sample:
            reader = csv.reader(lines, delimiter=delim)
            try:
                return list(reader)
            except csv.Error as e:  # a field past csv's limit (131,072 characters), say: the user's text, not a bug
                if "field limit" in str(e):
                    raise RunsError(f"Line {reader.line_num} has a field longer than {csv.field_size_limit():,} "
                                    "characters; a run is a short line such as 400M,8B,2.95.") from None
                raise RunsError(f"Line {reader.line_num} cannot be read as CSV ({e}).") from None
    return [line.split() for line in lines]  # no separator: columns apart by spaces, as pasted from a table


def parse_runs(data: bytes | str) -> Runs:
    """Runs from CSV text with columns N, D and loss (any order, a few aliases, header optional when there are
    exactly three columns). Raises RunsError with a message naming the problem."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:  # checked before decoding: a huge upload is refused unread
            raise RunsError(f"The file is {len(data) / 1e6:.1f} MB; a CSV of runs is at most "
                            f"{MAX_BYTES / 1e6:.0f} MB ({MAX_RUNS:,} runs).")
        if b"\x00" in data:  # a text file holds no zero byte; images, zips and spreadsheets (.xlsx) do
            raise RunsError("This is not a text file (it contains binary data). Upload a CSV with columns N, D, loss.")
        try:
            data = data.decode("utf-8-sig")  # -sig: Excel's "CSV UTF-8" starts with a byte-order mark
        except UnicodeDecodeError:
            raise RunsError("This file is not UTF-8 text. Upload a CSV with columns N, D, loss.") from None
    elif len(data) > MAX_BYTES:
        raise RunsError(f"The text is too long; at most {MAX_RUNS:,} runs are accepted.")
    # blank lines and # comments are skipped, so a file may note where its runs came from
    lines = [ln for ln in data.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise RunsError("No rows: the file is empty. Give a header line N,D,loss and one run per line.")
    rows = [[c.strip() for c in row] for row in _split(lines)]
    header = [c.lower() for c in rows[0]]
    # a first line of three numbers is a run, not a header: the columns are then N, D, loss in that order
    try:
        [_number(c, True) for c in rows[0]]
        headerless = len(rows[0]) == 3
    except ValueError:
        headerless = False
    if headerless:
        cols = {"N": 0, "D": 1, "loss": 2}
        body, first_line = rows, 1  # line numbers in messages count from 1, as an editor shows them
    else:
        cols = {key: next((i for i, h in enumerate(header) if h in names), None) for key, names in ALIASES.items()}
        missing = [key for key, i in cols.items() if i is None]
        if missing:
            # what the first line holds, cut short: a binary or minified file must not fill the message
            found = ", ".join(repr(h[:20]) + ("…" if len(h) > 20 else "") for h in rows[0][:8]) or "nothing"
            raise RunsError(f"Missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}. The first line "
                            f"must name the columns N, D and loss (found {found}).")
        body, first_line = rows[1:], 2
    if len(body) > MAX_RUNS:
        raise RunsError(f"{len(body):,} runs is too many; at most {MAX_RUNS:,} are accepted.")
    values, problems = [], []
    for r, row in enumerate(body, start=first_line):
        out = []
        for key, i in cols.items():
            cell = row[i] if i < len(row) else ""  # a short row reads as an empty cell, reported as "no N"
            try:
                v = _number(cell, allow_suffix=key != "loss")
            except ValueError:
                problems.append(f"line {r}: {key} = {cell[:20]!r} is not a number" if cell else f"line {r}: no {key}")
                break  # one problem per row: the rest of a broken row would only repeat it
            # the fit takes the logarithm of N, D and the loss: each must be finite and above zero
            if not math.isfinite(v) or v <= 0:
                problems.append(f"line {r}: {key} = {cell[:20]} must be a positive finite number")
                break
            out.append(v)
        else:
            values.append(out)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""  # three name the pattern
        raise RunsError("Some rows cannot be used: " + "; ".join(problems[:3]) + more + ".")
    if len(values) < MIN_RUNS:
        raise RunsError(f"Only {len(values)} run{'s' if len(values) != 1 else ''}; the fit needs at least {MIN_RUNS} "
                        "(the law has five constants).")
    N, D, loss = np.array(values, dtype=float).T  # (n, 3) -> three (n,) columns
    runs = Runs(N, D, loss)
    for key, v in (("N", N), ("D", D)):
        if len(np.unique(v)) < 3:  # two points fix a line on a log plot, never its bend towards a floor
            runs.warnings.append(f"{key} takes fewer than three distinct values, so its exponent and constant are "
                                 "barely constrained: read the fitted values with care.")
    if loss.max() > 20:  # a uniform guess over 50k tokens costs ln(50,000) ≈ 10.8 nats
        runs.warnings.append("Some losses are above 20 nats per token. The law is for cross-entropy in nats; "
                             "perplexities or losses in bits give different constants.")
    return runs


def synthetic_runs(law: ScalingLaw, n: int = 250, noise: float = 0.01, seed: int = 0) -> Runs:
    """n runs spread over Chinchilla's range (70M to 16B parameters, 5B to 500B tokens), losses from ``law``
    times log-normal noise of relative size ``noise``."""
    rng = np.random.default_rng(seed)
    # log-uniform: as many runs per decade, as a grid of sizes and budgets spaced by factors would give
    N = 10 ** rng.uniform(np.log10(7e7), np.log10(1.6e10), n)
    D = 10 ** rng.uniform(np.log10(5e9), np.log10(5e11), n)
    loss = law.loss(N, D) * np.exp(noise * rng.standard_normal(n))  # multiplicative: the fit works in log loss
    return Runs(N, D, loss)
