"""core.induction: the probe, the head-score recorder on hand-built patterns, the repeat mixture."""
import numpy as np
import pytest
import torch

from core.induction import (HeadRecorder, add_repeats, formation_step, head_scores, read_heads_csv, repeat_probe,
                            stripe_scores, write_heads_csv)
from core.model import ModelConfig, Transformer


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
