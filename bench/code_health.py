"""Code-health figures: lines per page, per core module and per ui module, and comment share.

    python -m bench.code_health            # table of every file, worst first, and the limits it breaks
    python -m bench.code_health core/training/trainer.py core/training/study.py

A comment line is a line that holds a `#` comment (alone or after code), found with `tokenize`, so a `#`
inside a string does not count; docstrings do not count either (the target is *why* comments, not
docstring ceremony). The share is over non-blank lines.
"""
from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"pages": 250, "core": 450, "ui": 200}  # the ceilings, by top folder
COMMENTED = ("train", "study", "checkpoint", "tokenizer", "params", "scaling_runs")  # want >= 15%
COMMENT_TARGET = 0.15


def measure(path: Path) -> tuple[int, int, int]:
    """(lines, non-blank lines, lines holding a comment) of one Python file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    commented = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            commented.add(tok.start[0])
    return len(lines), sum(1 for line in lines if line.strip()), len(commented)


def files(args: list[str]) -> list[Path]:
    if args:
        return [ROOT / a for a in args]
    found = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    found += sorted((ROOT / "core").rglob("*.py"))
    ui = ROOT / "ui"
    found += sorted(ui.rglob("*.py")) if ui.is_dir() else [ROOT / "ui.py"]
    # an old flat name kept importable (core/model.py is core.nn.model itself) is not a module of its own
    return [f for f in found if f.exists() and "sys.modules[__name__] = _moved" not in f.read_text()]


def main(argv: list[str] | None = None) -> int:
    rows = []
    for f in files(list(sys.argv[1:] if argv is None else argv)):
        n, nonblank, comments = measure(f)
        rel = f.relative_to(ROOT).as_posix()
        top = rel.split("/")[0].removesuffix(".py")
        limit = LIMITS.get(top)
        share = comments / max(nonblank, 1)
        notes = []
        if limit and n > limit:
            notes.append(f"over {limit} lines")
        stem = f.stem
        if top == "core" and any(stem == c or stem.startswith(c + "_") for c in COMMENTED) \
                and share < COMMENT_TARGET:
            notes.append(f"comments under {COMMENT_TARGET:.0%}")
        rows.append((n, rel, share, ", ".join(notes)))
    rows.sort(reverse=True)
    for n, rel, share, notes in rows:
        print(f"{n:5d}  {share:5.1%}  {rel:45s} {notes}")
    broken = sum(1 for r in rows if r[3])
    print(f"{broken} file(s) break a limit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
