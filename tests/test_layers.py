"""The layers of core/ import only downwards (issue 41): serve at the bottom, then nn, then analysis, then the rest
(training, figures, views, lesson). Read from every module's imports, local imports inside functions included, so that
a cycle cannot hide in a function body; and the old flat alias modules are gone."""
import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "core"
# what each low layer may import from core; the layers above analysis may import any of these and each other
ALLOWED = {"serve": {"serve"}, "nn": {"serve", "nn"}, "analysis": {"serve", "nn", "analysis"}}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "core":
                out += [(node.lineno, f"core.{a.name}") for a in node.names]
            elif node.module.startswith("core."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("core.")]
    return out


def _layer(module: str) -> str:
    return module.split(".")[1]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_import_runs_up_a_layer(layer):
    wrong = [f"{path.relative_to(CORE.parent)}:{line} imports {mod}"
             for path in sorted((CORE / layer).rglob("*.py")) for line, mod in _imports(path)
             if _layer(mod) not in ALLOWED[layer]]
    assert not wrong, "\n".join(wrong)


def test_the_checks_catch_an_upward_import(tmp_path):
    """The reader sees a local import inside a function (the test can fail)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from core.training.trainer import main\n    import core.analysis.trace\n")
    assert [_layer(m) for _, m in _imports(f)] == ["training", "analysis"]


def test_the_old_flat_aliases_are_gone_and_the_command_lines_stay():
    for name in ("model", "checkpoint", "trace", "interventions", "hf", "patching"):
        assert not (CORE / f"{name}.py").exists(), f"core/{name}.py is still there"
    for name in ("train", "study", "variants"):
        assert (CORE / f"{name}.py").exists(), f"python -m core.{name} is the README's command line"
