"""Code-health figures: lines per page, per core module and per ui module, comment share, and caching in pages.

    python -m bench.code_health            # table of every file, worst first, and the limits it breaks
    python -m bench.code_health core/training/trainer.py core/training/study.py

Limits (exit status 1 when any is broken, else 0): a page over 250 lines, a core module over 450, a ui module over
200, and a page that calls ``st.cache_data`` / ``st.cache_resource`` itself (a cache keyed by hand in a page:
caching rules live behind ``ui/`` helpers). The comment share is advice, printed but never failing.

A comment line is a line that holds a `#` comment (alone or after code), found with `tokenize`, so a `#`
inside a string does not count; docstrings do not count either (the target is *why* comments, not
docstring ceremony). The share is over non-blank lines.
"""
from __future__ import annotations

import ast
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


def st_caches(path: Path) -> list[int]:
    """Lines where ``path`` uses Streamlit's caches itself: ``st.cache_data``, ``streamlit.cache_resource`` (as a
    decorator or a call), or such a name imported from streamlit. Read from the syntax tree, so a comment or a
    string that names them does not count."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("cache_") and isinstance(node.value, ast.Name) \
                and node.value.id in ("st", "streamlit"):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "streamlit" \
                and any(a.name.startswith("cache_") for a in node.names):
            found.append(node.lineno)
    return sorted(found)


def files(args: list[str], root: Path = ROOT) -> list[Path]:
    if args:
        return [root / a for a in args]
    found = [root / "app.py", *sorted((root / "pages").glob("*.py"))]
    found += sorted((root / "core").rglob("*.py"))
    ui = root / "ui"
    found += sorted(ui.rglob("*.py")) if ui.is_dir() else [root / "ui.py"]
    # an old flat name kept importable (core/model.py is core.nn.model itself) is not a module of its own
    return [f for f in found if f.exists() and "sys.modules[__name__] = _moved" not in f.read_text()]


def check(args: list[str] | None = None, root: Path = ROOT) -> list[dict]:
    """One row per file (worst first): its path from ``root``, lines, comment share, the limits it breaks
    (``broken``) and the advice it misses (``advice``)."""
    rows = []
    for f in files(list(args or []), root):
        n, nonblank, comments = measure(f)
        rel = f.relative_to(root).as_posix()
        top = rel.split("/")[0].removesuffix(".py")
        limit = LIMITS.get(top)
        share = comments / max(nonblank, 1)
        broken, advice = [], []
        if limit and n > limit:
            broken.append(f"over {limit} lines")
        if top == "pages":
            caches = st_caches(f)
            if caches:
                broken.append("st.cache_* in a page (line " + ", ".join(map(str, caches)) + ")")
        stem = f.stem
        if top == "core" and any(stem == c or stem.startswith(c + "_") for c in COMMENTED) \
                and share < COMMENT_TARGET:
            advice.append(f"comments under {COMMENT_TARGET:.0%}")
        rows.append(dict(path=rel, lines=n, share=share, broken=broken, advice=advice))
    rows.sort(key=lambda r: (r["lines"], r["path"]), reverse=True)
    return rows


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    """Print the table; 1 when a file breaks a limit, else 0."""
    rows = check(list(sys.argv[1:] if argv is None else argv), root)
    for r in rows:
        notes = ", ".join(r["broken"] + [f"(advice: {a})" for a in r["advice"]])
        print(f"{r['lines']:5d}  {r['share']:5.1%}  {r['path']:45s} {notes}")
    broken = [r for r in rows if r["broken"]]
    print(f"{len(broken)} file(s) break a limit" + (": " + ", ".join(r["path"] for r in broken) if broken else ""))
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
