"""The layers import only downwards (issues 41, 56). Every package of core/ has one place in a total order and a module
may import only packages at or below its own place; ui/ imports core (never pages/); a page (pages/<x>.py or a file
under pages/<x>/) imports ui and core, never another page. Read from every module's imports, local imports inside
functions included, so that neither an upward import nor a cycle can hide in a function body. Core's import graph,
module by module, has no cycle; and the residue of earlier moves (PEP 562 forwarders, sys.modules shims, the old flat
alias modules) stays gone."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE, UI, PAGES = ROOT / "core", ROOT / "ui", ROOT / "pages"
# bottom first. serve: paths, files, formats, the page gate; nn: the network, its hooks and checkpoints; data: the
# corpora and their held-out windows; analysis: what a forward pass shows (the SAE and transcoder math included);
# training: runs, studies and their jobs; features: SAEs and transcoders trained on a trained model, their jobs and
# browsing; lesson: the lesson's questions; figures: Plotly figures; views: page view-models. A package named here
# that is not (yet, or any more) in core/ is skipped; a package of core/ not named here fails the first test.
ORDER = ["serve", "jobs", "nn", "data", "analysis", "training", "features", "lesson", "figures", "views"]
ENTRIES = {"study", "train", "variants", "bpe_induction", "forecast_study"}  # core/<x>.py: `python -m core.x` only


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of ``path``, at any depth (a function body's too); ``from a import b`` gives
    ``a.b`` (b may be a submodule or a name: callers look only at the packages)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _packages() -> list[str]:
    return sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").exists())


def _place(package: str) -> int:
    present = [p for p in ORDER if (CORE / p).is_dir()]
    return present.index(package) if package in present else ORDER.index(package)


def upward_imports(path: Path, package: str) -> list[str]:
    """The imports of ``path`` (a module of core package ``package``) that reach a core package above it."""
    wrong = []
    for line, mod in _imports(path):
        parts = mod.split(".")
        if parts[0] != "core" or len(parts) < 2 or parts[1] not in ORDER:
            continue  # outside core, or core's own top-level names (none is imported: see the residue test)
        if _place(parts[1]) > _place(package):
            wrong.append(f"{path.name}:{line} ({package}) imports {mod}")
    return wrong


def page_of(path: Path) -> str:
    """pages/<x>.py and every file under pages/<x>/ belong to page x."""
    rel = path.relative_to(PAGES) if path.is_relative_to(PAGES) else Path(path.name)
    return rel.parts[0].removesuffix(".py")


def cross_page_imports(path: Path, page: str) -> list[str]:
    return [f"{path.name}:{line} (page {page}) imports {mod}" for line, mod in _imports(path)
            if mod.split(".")[0] == "pages" and len(mod.split(".")) > 1 and mod.split(".")[1] != page]


def test_every_core_package_has_a_place_in_the_order():
    assert set(_packages()) <= set(ORDER), f"give these a place in ORDER: {sorted(set(_packages()) - set(ORDER))}"
    loose = {p.stem for p in CORE.glob("*.py")} - {"__init__"} - ENTRIES
    assert not loose, f"core/ holds packages and command-line entries only: {sorted(loose)}"


@pytest.mark.parametrize("package", [p for p in ORDER if (CORE / p).is_dir()])
def test_no_core_import_runs_up_the_order(package):
    wrong = [w for path in sorted((CORE / package).rglob("*.py")) for w in upward_imports(path, package)]
    assert not wrong, "\n".join(wrong)


def test_ui_imports_core_and_never_a_page():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for path in sorted(UI.rglob("*.py"))
             for line, mod in _imports(path) if mod.split(".")[0] == "pages"]
    assert not wrong, "\n".join(wrong)


def test_a_page_imports_no_other_page():
    wrong = [w for path in sorted(PAGES.rglob("*.py")) for w in cross_page_imports(path, page_of(path))]
    assert not wrong, "\n".join(wrong)


def test_core_imports_neither_ui_nor_pages():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for path in sorted(CORE.rglob("*.py"))
             for line, mod in _imports(path) if mod.split(".")[0] in ("ui", "pages", "streamlit")]
    assert not wrong, "\n".join(wrong)


def test_the_checks_catch_an_upward_import_and_a_cross_page_import(tmp_path):
    """The checker can fail: a local import inside a function that runs up the order is flagged, one that runs down
    is not; a page importing another page is flagged, its own folder is not."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from core.training.trainer import main\n    import core.serve.fmt\n")
    assert [w.split(" imports ")[1] for w in upward_imports(f, "nn")] == ["core.training.trainer.main"]
    assert upward_imports(f, "views") == []
    page = tmp_path / "p.py"
    page.write_text("from pages.home import x\nfrom pages.heads.view import y\nimport ui\n")
    assert [w.split(" imports ")[1] for w in cross_page_imports(page, "heads")] == ["pages.home.x"]


# ---------------------------------------------------------------- no cycle in core's import graph
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(files) -> dict[str, set[str]]:
    """module -> the modules among ``files`` it imports (at module level or inside a function). ``from a import b``
    is an edge to a.b when that is a module, else to a (a package's __init__ when a is a package)."""
    mods = {_module_name(p): p for p in files}
    graph = {}
    for name, path in mods.items():
        out = set()
        for _, mod in _imports(path):
            parent = mod.rsplit(".", 1)[0]
            if mod in mods:
                out.add(mod)
            elif parent in mods:
                out.add(parent)
        graph[name] = out - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_core_has_no_import_cycle():
    found = cycles(import_graph(sorted(CORE.rglob("*.py"))))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle_through_a_local_import(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "core" / "a").mkdir(parents=True)
    (tmp_path / "core" / "a" / "x.py").write_text("from core.a.y import f\n")
    (tmp_path / "core" / "a" / "y.py").write_text("def f():\n    from core.a import x\n")
    (tmp_path / "core" / "a" / "z.py").write_text("from core.a.x import f\n")
    graph = import_graph(sorted((tmp_path / "core").rglob("*.py")))
    assert graph["core.a.z"] == {"core.a.x"}
    assert cycles(graph) == [["core.a.x", "core.a.y"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# ---------------------------------------------------------------- no residue of earlier moves
def test_the_old_flat_aliases_are_gone_and_the_command_lines_stay():
    for name in ("model", "checkpoint", "trace", "interventions", "hf", "patching"):
        assert not (CORE / f"{name}.py").exists(), f"core/{name}.py is still there"
    for name in ("train", "study", "variants"):
        assert (CORE / f"{name}.py").exists(), f"python -m core.{name} is the README's command line"


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_a_command_line_entry_is_only_a_main_guard(name):
    """core/<x>.py runs core.training's main under ``python -m core.x`` and defines nothing to import."""
    tree = ast.parse((CORE / f"{name}.py").read_text(encoding="utf-8"))
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert len(body) == 1 and isinstance(body[0], ast.If) and ast.unparse(body[0].test) == "__name__ == '__main__'"
    assert not body[0].orelse


def test_no_module_forwards_names_or_replaces_itself():
    """No PEP 562 forwarder (a module-level __getattr__) and no sys.modules[__name__] swap anywhere in core or ui."""
    wrong = []
    for path in sorted([*CORE.rglob("*.py"), *UI.rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            wrong.append(f"{path.relative_to(ROOT)}: a module-level __getattr__")
        if "sys.modules[__name__]" in text:
            wrong.append(f"{path.relative_to(ROOT)}: replaces itself in sys.modules")
    assert not wrong, "\n".join(wrong)
