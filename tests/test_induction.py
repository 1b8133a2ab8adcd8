"""core.analysis.induction: the probe, the head-score recorder on hand-built patterns, the repeat mixture."""
import numpy as np
import pytest
import torch

from core.analysis.induction import (HeadRecorder, add_repeats, formation_step, head_scores, model_probe, read_heads_csv,
                            repeat_probe, stripe_scores, write_heads_csv)
from core.model import AttentionRecord, ModelConfig, ModelOutput, Transformer


def test_probe_rows_are_distinct_tokens_written_twice():
    p = repeat_probe(65, n_seqs=8, period=50, seed=3)
    assert p.shape == (8, 100)
    for row in p.tolist():
        assert row[:50] == row[50:] and len(set(row[:50])) == 50 and all(0 <= t < 65 for t in row)
    assert torch.equal(p, repeat_probe(65, n_seqs=8, period=50, seed=3))
    with pytest.raises(ValueError):
        repeat_probe(20, period=50)


def hand_pattern(n, period, target):
    """(n, n) rows that put all weight on key ``target(i)`` (a function of the query)."""
    a = np.zeros((n, n))
    for i in range(n):
        a[i, target(i)] = 1.0
    return a


def test_stripe_scores_on_hand_built_patterns():
    T, n = 5, 10
    perfect_induction = hand_pattern(n, T, lambda i: i - T + 1 if i >= T else 0)
    previous = hand_pattern(n, T, lambda i: max(i - 1, 0))
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    pats = np.stack([perfect_induction, previous, uniform])[None]  # (1 batch, 3 heads, n, n)
    prev, ind = stripe_scores(pats, T)
    assert ind[0] == pytest.approx(1.0)
    assert ind[1] == pytest.approx(0.0)                                   # T > 1: i - 1 != i - T + 1
    assert ind[2] == pytest.approx(np.mean([1 / (i + 1) for i in range(T, 2 * T)]))
    assert prev[1] == pytest.approx(1.0)
    # the induction head looks one back only for queries below T whose target is 0 at i = 1
    assert prev[0] == pytest.approx(1 / (n - 1))
    assert prev[2] == pytest.approx(np.mean([1 / (i + 1) for i in range(1, n)]))


def test_recorder_rows_cover_every_head_and_read_back(tmp_path):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=30, n_ctx=40, d_model=16, n_heads=2, n_layers=2))
    rec = HeadRecorder(model, every=10)
    assert rec.probe.shape == (8, 40) and rec.due(20) and not rec.due(25)
    s = rec.record(model, 10)
    rec.record(model, 20)
    assert len(rec.rows) == 2 * 2 * 2
    assert {(r["layer"], r["head"]) for r in rec.rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # an untrained model is close to uniform over 30 tokens on both copies
    assert s.first_copy_loss == pytest.approx(np.log(30), abs=0.2)
    write_heads_csv(tmp_path / "heads.csv", rec.rows)
    back = read_heads_csv(tmp_path / "heads.csv")
    assert back[0]["step"] == 10 and set(back[0]) >= {"step", "layer", "head", "previous_token", "induction"}
    assert formation_step(back, threshold=2.0) is None


def test_formation_step_is_the_first_step_over_the_threshold():
    rows = [{"step": s, "layer": 1, "head": 0, "induction": v} for s, v in [(100, 0.1), (200, 0.31), (300, 0.2), (400, 0.5)]]
    assert formation_step(rows) == 200
    assert formation_step(rows, threshold=0.4) == 400


def test_read_heads_csv_refuses_missing_columns(tmp_path):
    (tmp_path / "heads.csv").write_text("step,layer,head\n1,0,0\n")
    with pytest.raises(ValueError, match="induction"):
        read_heads_csv(tmp_path / "heads.csv")


def test_head_scores_of_a_copying_model_are_found():
    """Losses on the copies are measured on the right positions: a model scored on logits we control."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=60, n_ctx=100, d_model=16, n_heads=2, n_layers=1))
    s = head_scores(model)
    assert s.induction.shape == (1, 2) and s.previous_token.shape == (1, 2)
    assert s.in_context_gain == pytest.approx(s.first_copy_loss - s.second_copy_loss)


class CopyingModel(torch.nn.Module):
    """A model written out by hand, whose scores and losses are known: head 0 of its one layer is an exact
    induction head (query i attends to the key after the earlier occurrence of token i, else to itself), head 1
    a previous-token head; the logits give ``boost`` to the token after the earlier occurrence, else are flat.
    So every first-copy prediction costs log m and every second-copy one log(1 + (m - 1) e^-boost)."""

    def __init__(self, vocab_size: int, n_ctx: int, boost: float):
        super().__init__()
        self.config = ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, d_model=8, n_heads=2, n_layers=1)
        self.boost = boost

    def forward(self, idx, return_attn=False):
        B, n = idx.shape
        pattern = torch.zeros(B, 2, n, n)
        logits = torch.zeros(B, n, self.config.vocab_size)
        for b in range(B):
            row = idx[b].tolist()
            for i in range(n):
                earlier = [j for j in range(i) if row[j] == row[i]]
                if earlier:
                    pattern[b, 0, i, earlier[-1] + 1] = 1.0
                    logits[b, i, row[earlier[-1] + 1]] = self.boost
                else:
                    pattern[b, 0, i, i] = 1.0
                pattern[b, 1, i, max(i - 1, 0)] = 1.0
        attn = [AttentionRecord(scores=pattern, pattern=pattern)] if return_attn else None
        return ModelOutput(logits=logits, attn=attn)


def test_head_scores_of_a_hand_built_copying_model():
    """Which head copies, and the losses on each copy, are known from how the model is built: a swap of the
    first and second copy, or a loss read one position off, changes the numbers."""
    m, boost = 40, 3.0
    model = CopyingModel(m, n_ctx=24, boost=boost)
    s = head_scores(model)
    T = 12  # the probe's period: n_ctx // 2, less than 50 and than m
    assert s.induction[0, 0] == pytest.approx(1.0) and s.induction[0, 1] == pytest.approx(0.0)
    assert s.previous_token[0, 1] == pytest.approx(1.0)
    # the copying head looks one back only where the key after the twin is the previous key: never, T > 2
    assert s.previous_token[0, 0] == pytest.approx(0.0)
    assert s.first_copy_loss == pytest.approx(np.log(m))
    assert s.second_copy_loss == pytest.approx(np.log(1 + (m - 1) * np.exp(-boost)))
    assert s.in_context_gain == pytest.approx(np.log(m) - np.log(1 + (m - 1) * np.exp(-boost)))
    rec = HeadRecorder(model)
    assert rec.probe.shape == (8, 2 * T)
    rows = rec.record(model, 5)
    assert [(r["layer"], r["head"], r["induction"], r["previous_token"]) for r in rec.rows] == [(0, 0, 1.0, 0.0),
                                                                                             (0, 1, 0.0, 1.0)]
    assert rec.rows[0]["second_copy_loss"] == pytest.approx(np.log(1 + (m - 1) * np.exp(-boost)), abs=1e-4)
    assert rows.first_copy_loss == pytest.approx(np.log(m))


def test_the_probe_of_a_bpe_model_draws_whole_tokens_only():
    """One probe for the pages and the training log: a BPE model's whole printable tokens, a character model's
    every id."""
    from gpt2_folders import small_bpe

    from core.nn.tokenizer import CharTokenizer

    tok = small_bpe()
    readable = set(tok.readable_ids())
    assert len(readable) < tok.vocab_size
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=64, d_model=16, n_heads=2, n_layers=1))
    for probe in (model_probe(model, tok), HeadRecorder(model, tokenizer=tok).probe):
        assert probe.shape == (8, 64) and set(probe.flatten().tolist()) <= readable
    chars = CharTokenizer.from_text("abcdefghij")
    small = Transformer(ModelConfig(vocab_size=10, n_ctx=40, d_model=16, n_heads=2, n_layers=1))
    assert torch.equal(model_probe(small, chars), repeat_probe(10, period=10))  # every id: no narrower pool


def test_add_repeats_writes_each_chosen_span_again_later():
    g = torch.Generator().manual_seed(0)
    w = torch.arange(64).repeat(200, 1)  # rows 0..63: no token repeats within a row
    out = add_repeats(w, 1.0, g, vocab_size=1000, min_span=8, max_span=20, random_share=0.5)
    assert out.shape == w.shape and out.dtype == w.dtype
    assert torch.equal(w, torch.arange(64).repeat(200, 1))  # the input is not modified
    randomised = 0
    for row, orig in zip(out.tolist(), w.tolist()):
        changed = [i for i in range(64) if row[i] != orig[i]]
        assert changed, "every row was chosen (fraction 1)"
        # find the longest span that occurs twice at different places
        found = False
        for span in range(20, 7, -1):
            seen = {}
            for i in range(64 - span + 1):
                key = tuple(row[i:i + span])
                if key in seen and i >= seen[key] + span:
                    found = True
                    break
                seen.setdefault(key, i)
            if found:
                break
        assert found, row
        randomised += any(t >= 64 for t in row)
    assert 60 < randomised < 140  # about half the spans were random tokens


def test_add_repeats_fraction_zero_and_share():
    g = torch.Generator().manual_seed(1)
    w = torch.arange(64).repeat(400, 1)
    assert torch.equal(add_repeats(w, 0.0, g, 1000), w)
    out = add_repeats(w, 0.25, g, 1000)
    chosen = (out != w).any(dim=1).float().mean().item()
    assert 0.18 < chosen < 0.32
