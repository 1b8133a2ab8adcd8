import math

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.train import TrainConfig, Trainer, lr_at, main, windowed_loss

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
    from core.tokenizer import CharTokenizer
    from core.train import encode_corpus

    tok = CharTokenizer.from_text(TEXT + "é")
    text = "xTo bé ot😀\n" + TEXT[:100]
    assert encode_corpus(tok, text).tolist() == tok.encode(text, errors="drop")
    assert encode_corpus(tok, text).dtype == torch.long
