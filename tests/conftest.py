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
