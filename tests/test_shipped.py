"""The shipped model: loads offline, is small, and meets its validation target on the real corpus."""
from pathlib import Path

import torch

from core.checkpoint import load_checkpoint, read_config
from core.corpus import split_train_val
from core.params import count_parameters
from core.train import windowed_loss

SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "models" / "shakespeare-char"


def test_shipped_model_is_the_lecture_demo_and_small():
    model, tok = load_checkpoint(SHIPPED)
    c = model.config
    assert (c.d_model, c.n_heads, c.n_layers, c.d_ff, c.n_ctx) == (64, 4, 2, 256, 128)
    assert count_parameters(c)["per_block"] == 49_408
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) < 2 * 2**20
    assert tok.decode(tok.encode("ROMEO:\nWhat, ho!")) == "ROMEO:\nWhat, ho!"


def test_shipped_model_validation_loss(corpus_text):
    model, tok = load_checkpoint(SHIPPED)
    data = torch.tensor(tok.encode(corpus_text), dtype=torch.long)
    _, val = split_train_val(data)
    loss = windowed_loss(model, val)
    assert loss <= 1.60, loss
    _, _, training = read_config(SHIPPED)
    assert abs(loss - training["val_loss"]) < 1e-3  # the card reports what the weights give
