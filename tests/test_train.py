import math

import pytest
import torch

from core.nn.checkpoint import load_checkpoint
from core.training.recipes import TrainConfig, lr_at
from core.training.train_cli import main
from core.training.trainer import Trainer
from core.training.train_data import windowed_loss

TEXT = ("To be or not to be, that is the question we ask of every small model. " * 40)


def small(**kw):
    return Trainer(TEXT, dict(n_ctx=16, d_model=16, n_heads=2, n_layers=1),
                   TrainConfig(batch_size=8, steps=kw.pop("steps", 30), warmup=5, eval_batches=2, **kw))


def test_loss_falls_and_is_reproducible():
    a, b = small(), small()
    first = a.evaluate()["train_loss"]
    la = [a.step()["loss"] for _ in range(30)]
    lb = [b.step()["loss"] for _ in range(30)]
    assert la == lb
    assert a.evaluate()["train_loss"] < first - 0.3
    assert a.done


def test_schedule_warms_up_then_decays():
    tc = TrainConfig(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [lr_at(s, tc) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(x >= y for x, y in zip(lrs[10:], lrs[11:]))
    assert lrs[-1] == pytest.approx(1e-4, rel=0.05)


def test_refuses_bad_settings():
    with pytest.raises(ValueError, match="corpus too short"):
        Trainer("abc" * 10, dict(n_ctx=16, d_model=16, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="not divisible"):
        Trainer(TEXT, dict(d_model=16, n_heads=3))
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)


def test_windowed_loss_uses_full_windows():
    t = small()
    data = t.val_data[: 16 * 3 + 5]
    loss = windowed_loss(t.model, data, 16)
    assert math.isfinite(loss) and loss == pytest.approx(math.log(t.tokenizer.vocab_size), abs=0.3)


def test_command_line_writes_a_loadable_checkpoint(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    main(["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--d-model", "16", "--n-heads", "2",
          "--n-layers", "1", "--n-ctx", "16", "--steps", "12", "--batch-size", "4", "--eval-interval", "5",
          "--eval-batches", "1", "--warmup", "2"])
    printed = capsys.readouterr().out
    assert "parameters per block: 3,136" in printed  # 12*16^2 + 4*16
    model, tok = load_checkpoint(tmp_path / "out")
    assert model.config.n_ctx == 16
    assert (tmp_path / "out" / "log.csv").read_text().count("\n") == 1 + 4  # header, steps 0, 5, 10, 12


def test_encode_corpus_matches_the_tokenizer():
    from core.nn.tokenizer import CharTokenizer
    from core.training.train_data import encode_corpus

    tok = CharTokenizer.from_text(TEXT + "é")
    text = "xTo bé ot😀\n" + TEXT[:100]
    assert encode_corpus(tok, text).tolist() == tok.encode(text, errors="drop")
    assert encode_corpus(tok, text).dtype == torch.long


# Our own sentences: the training 90% talks about boats, the held-out 10% repeats a word it never uses.
BOATS = "The small boat drifts past the harbour wall while gulls argue over a crust of bread. " * 60
HELD_OUT = "Quixotic zephyrs vex the jukebox. " * 15


def bpe_small(text=BOATS + HELD_OUT, vocab=300, steps=20):
    return Trainer(text, dict(n_ctx=16, d_model=16, n_heads=2, n_layers=1),
                   TrainConfig(batch_size=8, steps=steps, warmup=5, eval_batches=2, heads_interval=0),
                   bpe_vocab_size=vocab)


def test_bpe_is_learned_from_the_training_part_only():
    from core.data.corpus import split_train_val
    from core.nn.bpe import BPETokenizer

    text = BOATS + HELD_OUT
    train_text, val_text = split_train_val(text)
    assert "zephyr" not in train_text and val_text.count("zephyr") > 5  # the split the test relies on
    t = bpe_small(text)
    assert t.tokenizer.to_str() == BPETokenizer.train(train_text, 300).to_str()
    assert not any("zeph" in p or "jukeb" in p for p in t.tokenizer.pieces)  # no merge learned from the held-out part
    assert " boat" in t.tokenizer.pieces and " drifts" in t.tokenizer.pieces  # its words are
    # each part encoded on its own, exactly as the tokenizer encodes it
    assert t.train_data.tolist() == t.tokenizer.encode(train_text)
    assert t.val_data.tolist() == t.tokenizer.encode(val_text)
    assert t.config.vocab_size == t.tokenizer.vocab_size == 300
    for _ in range(3):
        t.step()


def _bits_per_char_by_hand(model, tok, data, n_ctx):
    """Summed -log p of every predicted token over the full windows, over the characters those tokens decode to."""
    total, chars = 0.0, 0
    for w in range((len(data) - 1) // n_ctx):
        x = data[w * n_ctx:(w + 1) * n_ctx]
        y = data[w * n_ctx + 1:(w + 1) * n_ctx + 1]
        with torch.no_grad():
            logp = torch.log_softmax(model(x[None]).logits[0].double(), dim=-1)
        total -= logp[torch.arange(n_ctx), y].sum().item()
        chars += sum(len(tok.decode([i])) for i in y.tolist())  # ASCII text: every token decodes on its own
    return total / chars / math.log(2), total / ((len(data) - 1) // n_ctx * n_ctx)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_training_record_reports_bits_per_character(kind):
    from core.training.trainer import training_record

    t = bpe_small() if kind == "bpe" else small(steps=20, heads_interval=0)
    while not t.done:
        t.step()
    rec = training_record(t, "ours.txt", 1234, 1.0)
    bits, nats = _bits_per_char_by_hand(t.model, t.tokenizer, t.val_data, 16)
    assert rec["val_bits_per_char"] == pytest.approx(bits, abs=2e-4)
    assert rec["val_loss"] == pytest.approx(nats, abs=2e-4)
    assert rec["tokenizer"] == kind and rec["loss_unit"] == ("character" if kind == "char" else "token")
    if kind == "char":  # one character per token: bits/char is nats/char over ln 2
        assert rec["val_chars_per_token"] == 1.0
        assert rec["val_bits_per_char"] == pytest.approx(rec["val_loss"] / math.log(2), abs=2e-4)
    else:  # sub-word tokens cover several characters each: fewer bits per character than nats per token / ln 2
        assert rec["val_chars_per_token"] > 1.1  # the held-out words were never merged: few pieces
        assert rec["val_bits_per_char"] == pytest.approx(rec["val_loss"] / math.log(2) / rec["val_chars_per_token"], abs=1e-3)


def test_command_line_trains_a_bpe_model(tmp_path, capsys):
    from core.nn.model_card import read_card
    from core.nn.bpe import BPETokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text(BOATS + HELD_OUT)
    main(["--corpus", str(corpus), "--out", str(tmp_path / "out"), "--tokenizer", "bpe", "--vocab-size", "280",
          "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--n-ctx", "16", "--steps", "6", "--batch-size", "4",
          "--eval-interval", "3", "--eval-batches", "1", "--warmup", "2", "--heads-interval", "0"])
    printed = capsys.readouterr().out
    assert "tokenizer: byte-level BPE (280 tokens), learned from the training 90%" in printed
    model, tok = load_checkpoint(tmp_path / "out")
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == model.config.vocab_size == 280
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    from core.nn.checkpoint import read_config
    _, _, training = read_config(tmp_path / "out")
    bits = training["val_bits_per_char"]
    assert f"= {bits:.4f} bits/char" in printed and "nats/token" in printed
    card = read_card(tmp_path / "out")
    assert f"| validation bits per character | {bits:.4f}" in card
    assert f"| characters per token | {training['val_chars_per_token']:.3f}" in card
    assert "nats/token" in card and "nats/char" not in card and "byte\\-level BPE \\(280 tokens\\)" in card
    assert "--tokenizer bpe --vocab-size 280" in card


def test_command_line_refuses_a_vocabulary_size_for_characters(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text(BOATS)
    for extra in (["--vocab-size", "300"], ["--tokenizer", "bpe", "--vocab-size", "100"]):
        with pytest.raises(SystemExit):
            main(["--corpus", str(corpus), "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert "--vocab-size applies to --tokenizer bpe" in err and "at least 256" in err


def test_a_bpe_corpus_too_short_in_tokens_is_refused_in_tokens():
    with pytest.raises(ValueError, match=r"corpus too short.*tokens.*held-out part"):
        Trainer("Wind over the water. " * 40, dict(n_ctx=64, d_model=16, n_heads=2, n_layers=1), bpe_vocab_size=400)
