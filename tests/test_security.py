"""Security properties, one test each: no pickle, safe names, no HTML from users, capped uploads, XSRF."""
import ast
import re
import tomllib
from pathlib import Path

import pytest
import torch

from core.nn.checkpoint import CheckpointError, load_checkpoint
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
APP_CODE = [ROOT / "app.py", *sorted((ROOT / "ui").glob("*.py")), *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "core").rglob("*.py"))]


def code(path: Path) -> str:
    # drop comments and docstring-ish lines that merely mention the words
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def test_no_pickle_anywhere_in_the_app():
    for path in APP_CODE:
        text = code(path)
        assert not re.search(r"^\s*(import|from)\s+(pickle|dill|cloudpickle|joblib)\b", text, re.M), path
        assert "torch.load(" not in text, f"{path} uses torch.load"
        assert "pickle.load" not in text, path


def test_a_pickle_disguised_as_weights_is_refused(tmp_path):
    tok = CharTokenizer.from_text("abc")
    model = Transformer(ModelConfig(vocab_size=3, n_ctx=4, d_model=4, n_heads=1, n_layers=1))
    path = save_checkpoint(tmp_path / "m", model, tok)
    import io
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    buf = io.BytesIO()
    pickle.dump({"x": Evil()}, buf)
    (path / "model.safetensors").write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(path)
    torch.save(model.state_dict(), path / "model.safetensors")  # a torch zip-pickle under the right name
    with pytest.raises(CheckpointError, match="safetensors"):
        load_checkpoint(path)


# ------------------------------------------------------------------ HTML: only from core builders that escape

UI_CODE = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


def _module_file(module: str) -> Path | None:
    """core.analysis.generation -> ROOT/core/analysis/generation.py (or a package's __init__.py); None outside core/."""
    if module != "core" and not module.startswith("core."):
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(tree: ast.Module) -> tuple[dict[str, str], dict[str, tuple[str, str]], list[str]]:
    """(module aliases {"G": "core.analysis.generation"}, imported names {"shaded_html": ("core.analysis.generation", "shaded_html")},
    modules star-imported). ``from core import generation as G`` names a module when core/generation.py exists."""
    modules, names, stars = {}, {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    modules[a.asname] = a.name
                else:  # `import core.analysis.generation` binds `core`; the dotted chain is resolved from there
                    modules[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name == "*":
                    stars.append(node.module)
                elif _module_file(f"{node.module}.{a.name}") is not None:
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
                else:
                    names[a.asname or a.name] = (node.module, a.name)
    return modules, names, stars


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _resolve(func: ast.expr, tree: ast.Module) -> tuple[str, str] | None:
    """The (module, function name) a call's function refers to, through the file's imports; None if unknown."""
    chain = _dotted(func)
    if chain is None:
        return None
    modules, names, _ = _imports(tree)
    if len(chain) == 1:
        return names.get(chain[0])
    head, *middle, last = chain
    if head not in modules:
        return None
    return ".".join([modules[head], *middle]), last


def _find_function(module: str, name: str, seen=()) -> tuple[Path, ast.FunctionDef] | None:
    """The definition of ``module.name`` in core/, following re-exports (``from core.x import name``)."""
    path = _module_file(module)
    if path is None or (module, name) in seen:
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return path, node
    modules, names, stars = _imports(tree)
    if name in names:
        return _find_function(*names[name], seen=(*seen, (module, name)))
    for star in stars:
        found = _find_function(star, name, seen=(*seen, (module, name)))
        if found:
            return found
    return None


def _escapes(path: Path, fn: ast.FunctionDef) -> bool:
    """The function calls html.escape (however ``html`` or ``escape`` was imported in its file) in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules, names, _ = _imports(tree)
    for a in (n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "html"):
        names.update({x.asname or x.name: ("html", x.name) for x in a.names})
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            chain = _dotted(node.func) or []
            if len(chain) == 2 and modules.get(chain[0]) == "html" and chain[1] == "escape":
                return True
            if len(chain) == 1 and names.get(chain[0]) == ("html", "escape"):
                return True
    return False


def _takes_arguments(fn: ast.FunctionDef) -> bool:
    a = fn.args
    return bool(a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg)


def unsafe_html(source: str, filename: str) -> list[str]:
    """Every ``<anything>.html(...)`` call whose markup is not built by a core/ function that escapes its text
    (or takes none), and every unsafe_allow_html that is not a literal False, as 'file:line: why'."""
    tree = ast.parse(source, filename)
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        where = f"{filename}:{node.lineno}"
        for kw in node.keywords:
            if kw.arg == "unsafe_allow_html" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                problems.append(f"{where}: unsafe_allow_html renders raw HTML")
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "html"):
            continue
        body = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "body"), None)
        if not isinstance(body, ast.Call):
            problems.append(f"{where}: .html() of {ast.unparse(body) if body else 'nothing'}, "
                            "not of a core/ function that escapes its text")
            continue
        target = _resolve(body.func, tree)
        found = _find_function(*target) if target else None
        if found is None:
            problems.append(f"{where}: .html() of {ast.unparse(body.func)}(...), which is not a function in core/")
            continue
        path, fn = found
        if _takes_arguments(fn) and not _escapes(path, fn):
            problems.append(f"{where}: .html() of {ast.unparse(body.func)}(...), and {path.relative_to(ROOT)}:"
                            f"{fn.lineno} {fn.name} takes arguments but never calls html.escape")
    return problems


def test_no_unsafe_html_with_user_text():
    problems = []
    for path in UI_CODE:
        problems += unsafe_html(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("snippet, bad", [
    ("from core.figures import generation_figures as G\nst.html(G.shaded_html(p, s))\nbox.html(G.legend_html())", False),
    ("from core.figures.generation_figures import shaded_html as sh\ncol.html(sh(p, s))", False),
    ("import core.figures.generation_figures\nst.html(body=core.figures.generation_figures.shaded_html(p, s))", False),
    ("st.html(prompt.text)", True),
    ("st.html(f'<b>{prompt.text}</b>')", True),
    ("st.html('<b>' + text + '</b>')", True),
    ("from core.figures import generation_figures as G\nst.html(G.hover_text(c, p, q, alts))", True),  # core, but never escapes
    ("from core.nn.tokenizer import visible\nst.html(visible(text))", True),
    ("st.html(str(text))", True),
    ("from core import generation as G\nst.html(G.nonexistent(text))", True),
    ("st.markdown(text, unsafe_allow_html=True)", True),
    ("st.markdown(text, unsafe_allow_html=flag)", True),
])
def test_the_html_check_tells_safe_from_unsafe(snippet, bad):
    assert bool(unsafe_html(snippet, "snippet.py")) == bad, unsafe_html(snippet, "snippet.py")


def test_upload_size_is_capped_and_xsrf_stays_on():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert 0 < cfg["server"]["maxUploadSize"] <= 50
    assert cfg["server"].get("enableXsrfProtection", True) is True
    assert cfg["server"].get("enableCORS", True) is True  # turning CORS off would also weaken XSRF


def test_streamlit_reads_those_settings_from_the_repo():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "from streamlit import config; config.get_config_options(force_reparse=True);"
                               "print(config.get_option('server.maxUploadSize'), config.get_option('server.enableXsrfProtection'))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    cap, xsrf = out.stdout.split()[-2:]
    assert int(cap) <= 50 and xsrf == "True"


def test_checkpoint_loading_never_leaves_the_given_folder(tmp_path):
    # a config.json cannot point the loader at another file: names are fixed, paths are not read from JSON
    tok = CharTokenizer.from_text("ab")
    model = Transformer(ModelConfig(vocab_size=2, n_ctx=4, d_model=4, n_heads=1, n_layers=1))
    path = save_checkpoint(tmp_path / "m", model, tok)
    import json

    cfg = json.loads((path / "config.json").read_text())
    cfg["weights"] = "../../etc/passwd"
    (path / "config.json").write_text(json.dumps(cfg))
    loaded, _ = load_checkpoint(path)  # extra keys are ignored; the weights still come from the folder
    assert torch.equal(loaded.head.weight, model.head.weight)


def test_a_file_name_cannot_put_links_into_the_shared_model_card():
    from core.nn.model_card import model_card

    card = model_card("mine", ModelConfig(vocab_size=3, n_ctx=4, d_model=4, n_heads=1, n_layers=1),
                      {"corpus": "[Sign in again](https://evil.example) | ![](https://t.example/p.png) x.txt"})
    data_row = next(line for line in card.splitlines() if line.startswith("| data |"))
    assert len(re.findall(r"(?<!\\)\|", data_row)) == 3  # still two cells: every pipe of the name is escaped
    assert not re.search(r"(?<!\\)\]\(", data_row)  # and no live link or image
