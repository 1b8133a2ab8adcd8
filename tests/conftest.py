import ast
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.corpus import shakespeare_path  # noqa: E402
from core.model import ModelConfig, Transformer  # noqa: E402

SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    return Transformer(cfg).eval()


@pytest.fixture(scope="session")
def corpus_text():
    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare not found (set TE_CORPUS or place it at ../shared/data/tinyshakespeare.txt)")
    return path.read_text(encoding="utf-8")


def app_pages() -> list[tuple[str, str]]:
    """(script, title) of every st.Page in app.py's PAGES list, in order, read from app.py's source."""
    tree = ast.parse((ROOT / "app.py").read_text())
    pages = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets))
    found = []
    for call in pages.elts:
        assert isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "Page", ast.unparse(call)
        title = next(k.value.value for k in call.keywords if k.arg == "title")
        found.append((call.args[0].value, title))
    return found
