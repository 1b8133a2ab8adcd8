"""Code-health figures: lines per page, page folder, core module and ui module, the longest functions, comment share
and caching in pages.

    python -m bench.code_health            # table of every file, worst first, and the limits it breaks
    python -m bench.code_health --brief    # only the files that break a limit or are excused (what CI prints)
    python -m bench.code_health core/training/trainer.py core/training/study.py

Limits (exit status 1 when one is broken and not excused in ``EXCEPTIONS``, else 0): a page (``pages/<x>.py``) over 250
lines; a page with its folder (``pages/<x>.py`` and every Python file in ``pages/<x>/`` together) over 700; a core
module, or a module in a page's folder, over 450; a ui module over 200; a function in app.py,
pages/, core/ or ui/ over 60 lines (``def`` to its last line, decorators not counted); a page that calls
``st.cache_data`` / ``st.cache_resource`` itself (a cache keyed by hand in a page: caching rules live behind ``ui/``
helpers). A break named in ``EXCEPTIONS`` is printed with its reason and does not fail; an exception that matches no
break any more is printed as advice (delete it). The comment share is advice, printed but never failing.

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
PAGE, PAGE_FOLDER, MODULE, UI_MODULE, FUNCTION = 250, 700, 450, 200, 60  # issue 56's ceilings, in lines
LIMITS = {"pages": PAGE, "core": MODULE, "ui": UI_MODULE}  # a file's ceiling by its top folder (see limit())
FUNCTION_TOPS = ("app", "pages", "core", "ui")  # where functions are measured: the app's code, not bench or tests
COMMENTED = ("train", "study", "checkpoint", "tokenizer", "params", "scaling_runs")  # want >= 15%
COMMENT_TARGET = 0.15

# Breaks that stay, each with its reason. A key is a file or page folder ("pages/x/") for its size, or
# "path::qualified.name" for a function's length. A reason is a debt with a note, not a permit: keep the table short.
EXCEPTIONS = {
    "core/training/study_run.py::run_study": "a study's run in order: every check before the first run, then the "
                                             "grid's runs (issue 56: one study framework)",
    "core/training/study.py::main": "a command line's flags and their checks (issue 56: one study command line)",
    "core/training/study.py::write_card": "the study card's markdown, written top to bottom as it reads",
    "core/nn/model_card.py::model_card": "the model card's markdown, written top to bottom as it reads",
    "core/training/train_cli.py::_train": "the training command's run in order: check, train, measure, save",
    "core/nn/model_store.py::save_checkpoint": "one atomic save in order: a temporary folder, every file, the "
                                               "rename",
    "core/analysis/scaling_runs.py::parse_runs": "one uploaded CSV's checks, each with the message it gives",
    "core/analysis/scaling.py::_lbfgs": "batched L-BFGS with its line search and stopping test: one loop, read "
                                        "whole",
    "core/figures/attention_panels.py::head_panels": "the lecture's four panels for one head, a figure read top "
                                                     "to bottom",
    "core/figures/scaling_figures.py::loss_map": "the loss map's contours, compute lines, frontier and models in "
                                                 "one figure",
    "pages/classroom/": "the Class page's three screens (teacher, student, projector) with the identity of a voter and "
                        "the store's faults in words (issue 54), and its five kinds of question (issue 58 added "
                        "describe.py, 75 lines: its scoring is core.features.describe's; issue 59 key_round.py, 35 "
                        "lines: its question is core.analysis.hunt's); 1,056 lines in all, each module under its "
                        "own limit",
    "pages/classroom.py::teacher": "the teacher's screen in the order it shows (issue 56: into the page's "
                                   "parts.py)",
    "pages/scaling_fit/forecast.py::_bet": "the forecast bet's form in the order it shows",
}


def measure(path: Path) -> tuple[int, int, int]:
    """(lines, non-blank lines, lines holding a comment) of one Python file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    commented = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            commented.add(tok.start[0])
    return len(lines), sum(1 for line in lines if line.strip()), len(commented)


def long_functions(path: Path, limit: int = FUNCTION) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function in ``path`` longer than ``limit`` lines, from its
    ``def`` to its last line (``end_lineno - lineno + 1``); a method is ``Class.name``, a nested function
    ``outer.inner`` (and counts inside ``outer`` as well)."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    n = child.end_lineno - child.lineno + 1
                    if n > limit:
                        found.append((name, child.lineno, n))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


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
    found = [root / "app.py", *sorted((root / "pages").rglob("*.py"))]
    found += sorted((root / "core").rglob("*.py"))
    ui = root / "ui"
    found += sorted(ui.rglob("*.py")) if ui.is_dir() else [root / "ui.py"]
    return [f for f in found if f.exists()]


def is_page(rel: str) -> bool:
    """A page: a script directly in pages/ (its own modules are in the folder of its name beside it)."""
    parts = rel.split("/")
    return parts[0] == "pages" and len(parts) == 2


def limit(rel: str) -> int | None:
    """The line ceiling of one file: a page's, a ui module's, or a module's (core, and a page folder's others)."""
    if is_page(rel):
        return PAGE
    return MODULE if rel.startswith("pages/") else LIMITS.get(rel.split("/")[0].removesuffix(".py"))


def check(args: list[str] | None = None, root: Path = ROOT) -> list[dict]:
    """One row per file and per page folder (worst first): its path from ``root`` (a folder's ends in "/"), lines,
    comment share, the limits it breaks (``broken``), those excused by ``EXCEPTIONS`` (``excused``, each with
    its reason) and the advice it misses (``advice``)."""
    rows, folders = [], {}
    for f in files(list(args or []), root):
        n, nonblank, comments = measure(f)
        rel = f.relative_to(root).as_posix()
        top = rel.split("/")[0].removesuffix(".py")
        share = comments / max(nonblank, 1)
        breaks, advice = [], []  # a break: (exception key, text)
        cap = limit(rel)
        if cap and n > cap:
            breaks.append((rel, f"over {cap} lines"))
        if is_page(rel):
            caches = st_caches(f)
            if caches:
                breaks.append((None, "st.cache_* in a page (line " + ", ".join(map(str, caches)) + ")"))
        if top in FUNCTION_TOPS:
            breaks += [(f"{rel}::{name}", f"function {name} (line {line}) is {k} lines, over {FUNCTION}")
                       for name, line, k in long_functions(f)]
        if top == "pages":  # pages/<x>.py and pages/<x>/<file>.py: counted together as the page's folder
            folder = "pages/" + rel.split("/")[1].removesuffix(".py") + "/"
            folders[folder] = [a + b for a, b in zip(folders.get(folder, (0, 0, 0)), (n, nonblank, comments))]
        stem = f.stem
        if top == "core" and any(stem == c or stem.startswith(c + "_") for c in COMMENTED) \
                and share < COMMENT_TARGET:
            advice.append(f"comments under {COMMENT_TARGET:.0%}")
        rows.append(row(rel, n, share, breaks, advice))
    for folder, (n, nonblank, comments) in folders.items():
        if not (root / folder).is_dir():
            continue  # a page without modules of its own: its row is the page's
        breaks = [(folder, f"page folder over {PAGE_FOLDER} lines")] if n > PAGE_FOLDER else []
        rows.append(row(folder, n, comments / max(nonblank, 1), breaks, []))
    rows.sort(key=lambda r: (r["lines"], r["path"]), reverse=True)
    return rows


def row(rel: str, n: int, share: float, breaks: list[tuple[str | None, str]], advice: list[str]) -> dict:
    """A table row; breaks whose key is in EXCEPTIONS go to ``excused`` with their reason."""
    broken = [text for key, text in breaks if key not in EXCEPTIONS]
    excused = [f"{text}: excused, {EXCEPTIONS[key]}" for key, text in breaks if key in EXCEPTIONS]
    return dict(path=rel, lines=n, share=share, broken=broken, excused=excused, advice=advice,
                keys=[key for key, _ in breaks if key in EXCEPTIONS])


def stale(rows: list[dict]) -> list[str]:
    """Exceptions that excused nothing in ``rows`` (only meaningful for a run over the whole tree)."""
    used = {k for r in rows for k in r["keys"]}
    return sorted(k for k in EXCEPTIONS if k not in used)


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    """Print the table; 1 when a file breaks a limit that ``EXCEPTIONS`` does not excuse, else 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    brief = "--brief" in args
    args = [a for a in args if a != "--brief"]
    rows = check(args, root)
    for r in rows:
        if brief and not (r["broken"] or r["excused"]):
            continue
        notes = ", ".join(r["broken"] + r["excused"] + [f"(advice: {a})" for a in r["advice"]])
        print(f"{r['lines']:5d}  {r['share']:5.1%}  {r['path']:45s} {notes}")
    if not args:
        for key in stale(rows):
            print(f"(advice: the exception {key!r} excuses nothing now: delete it)")
    broken = [r for r in rows if r["broken"]]
    print(f"{len(broken)} file(s) break a limit" + (": " + ", ".join(r["path"] for r in broken) if broken else ""))
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
