"""The shipped model: loads offline, is small, and meets its validation target on the real corpus."""
from pathlib import Path

import torch

from core.nn.checkpoint import load_checkpoint, read_config
from core.data.corpus import split_train_val
from core.nn.params import count_parameters
from core.training.train_data import windowed_loss
from attention_hooks import attention_and_logits

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


def _probe_measures(model, heads_off=()):
    """Induction stripe and per-copy losses on 8 rows of 50 distinct random characters written twice, computed
    here from the model's own attention pattern and logits (heads switched off by zeroing their W_O columns in a
    copy of the weights, not through core.analysis.interventions)."""
    import copy

    import torch.nn.functional as F
    g = torch.Generator().manual_seed(123)
    first = torch.stack([torch.randperm(model.config.vocab_size, generator=g)[:50] for _ in range(8)])
    idx = torch.cat([first, first], dim=1)                                     # (8, 100)
    m = copy.deepcopy(model)
    d_h = m.config.d_head
    with torch.no_grad():
        for layer, head in heads_off:
            m.blocks[layer].attn.out.weight[:, head * d_h:(head + 1) * d_h] = 0
    records, logits = attention_and_logits(m, idx)
    rows = torch.arange(50, 100)
    stripe = torch.stack([rec.pattern[:, :, rows, rows - 49].mean(dim=(0, 2)) for rec in records])  # (L, h)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), idx[:, 1:], reduction="none")   # (8, 99)
    return stripe, loss[:, :49].mean().item(), loss[:, 50:].mean().item()


def test_shipped_model_has_an_induction_head_that_copies():
    model, _ = load_checkpoint(SHIPPED)
    stripe, first, second = _probe_measures(model)
    assert stripe.max() >= 0.30, stripe
    assert second <= 0.5 * first, (first, second)


def test_switching_the_induction_head_off_breaks_copying_and_no_other_head_does():
    model, _ = load_checkpoint(SHIPPED)
    stripe, _, second = _probe_measures(model)
    layer, head = divmod(int(stripe.argmax()), model.config.n_heads)
    rise = _probe_measures(model, [(layer, head)])[2] - second
    others = [_probe_measures(model, [(layer, h)])[2] - second for h in range(model.config.n_heads) if h != head]
    assert rise >= 0.5, rise
    assert rise >= 2 * max(others), (rise, others)


def test_shipped_heads_csv_records_when_the_head_formed():
    from core.analysis.induction import formation_step
    from core.nn.heads_csv import read_heads_csv
    rows = read_heads_csv(SHIPPED / "heads.csv")
    _, _, training = read_config(SHIPPED)
    assert formation_step(rows) == training["induction"]["formed_at_step"] is not None
    assert {(r["layer"], r["head"]) for r in rows} == {(l, h) for l in range(2) for h in range(4)}


SHIPPED_BPE = SHIPPED.parent / "shakespeare-bpe"


def test_shipped_bpe_model_is_small_and_carries_its_tokenizer():
    from core.nn.bpe import BPETokenizer
    model, tok = load_checkpoint(SHIPPED_BPE)
    c = model.config
    assert (c.d_model, c.n_heads, c.n_layers, c.n_ctx) == (64, 4, 2, 128)
    assert isinstance(tok, BPETokenizer) and tok.byte_level and tok.vocab_size == c.vocab_size == 1024
    assert (SHIPPED_BPE / "tokenizer.json").is_file()
    assert sum(f.stat().st_size for f in SHIPPED_BPE.iterdir()) < 2 * 2**20
    text = "KING RICHARD:\nWhither away so fast? 🙂"  # our own line; byte-level BPE reads anything
    assert tok.decode(tok.encode(text)) == text


def test_shipped_bpe_tokenizer_was_learned_from_the_training_part_only(corpus_text):
    from core.nn.bpe import BPETokenizer
    _, tok = load_checkpoint(SHIPPED_BPE)
    train_text, _ = split_train_val(corpus_text)
    assert tok.to_str() == BPETokenizer.train(train_text, 1024).to_str()


def test_shipped_bpe_bits_per_character(corpus_text):
    """Recomputed here: the summed next-token loss over every full 128-token window of the held-out text
    (encoded on its own), over the characters the predicted tokens decode to, over ln 2."""
    import math
    import torch.nn.functional as F
    model, tok = load_checkpoint(SHIPPED_BPE)
    _, val_text = split_train_val(corpus_text)
    val = torch.tensor(tok.encode(val_text), dtype=torch.long)
    n = model.config.n_ctx
    w = (len(val) - 1) // n
    x, y = val[:w * n].view(w, n), val[1:w * n + 1].view(w, n)
    with torch.no_grad():
        total = sum(F.cross_entropy(model(x[i:i + 64]).logits.transpose(1, 2), y[i:i + 64], reduction="sum").item()
                    for i in range(0, w, 64))
    chars = len(tok.decode(y.reshape(-1).tolist()))
    bits = total / chars / math.log(2)
    _, _, training = read_config(SHIPPED_BPE)
    assert abs(bits - training["val_bits_per_char"]) < 1e-3
    assert abs(total / y.numel() - training["val_loss"]) < 1e-3
    assert bits <= 2.30, bits  # the target; the character model has 2.245
