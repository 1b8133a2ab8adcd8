"""heads.csv, the log of every head's induction and previous-token scores through training that a model folder keeps
beside its weights: its columns, and reading and writing it. Part of the checkpoint format (core.nn), so that the
checkpoint code needs nothing from the analyses that compute the scores (core.analysis.induction)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

HEADS_CSV = "heads.csv"
HEADS_COLUMNS = ("step", "layer", "head", "previous_token", "induction", "first_copy_loss", "second_copy_loss",
                 "in_context_gain")


def write_heads_csv(path: str | Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(HEADS_COLUMNS))
        w.writeheader()
        w.writerows(rows)


def read_heads_csv(path: str | Path) -> list[dict]:
    """Rows of a heads.csv as dicts of numbers; raises ValueError when a column is missing or a cell is not a number."""
    with open(path, newline="", encoding="utf-8") as f:
        return parse_heads_csv(f)


def parse_heads_csv(lines) -> list[dict]:
    """``read_heads_csv`` of text already read (a string, or any iterable of lines)."""
    reader = csv.DictReader(io.StringIO(lines, newline="") if isinstance(lines, str) else lines)
    missing = {"step", "layer", "head", "previous_token", "induction"} - set(reader.fieldnames or [])
    if missing:
        raise ValueError(f"heads.csv lacks the column(s) {', '.join(sorted(missing))}")
    rows = []
    for r in reader:
        try:
            rows.append({k: (int(v) if k in ("step", "layer", "head") else float(v)) for k, v in r.items() if v != ""})
        except (TypeError, ValueError) as e:
            raise ValueError(f"heads.csv line {reader.line_num}: {e}") from None
    return rows
