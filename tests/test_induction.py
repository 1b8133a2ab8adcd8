"""core.analysis.induction: the probe, the head-score recorder on hand-built patterns, the repeat mixture."""
import numpy as np
import pytest
import torch

from core.analysis.induction import (HeadRecorder, add_repeats, formation_step, head_scores, model_probe, repeat_probe,
                                     stripe_scores)
from core.nn.heads_csv import read_heads_csv, write_heads_csv
from core.nn.config import ModelConfig
from core.nn.hooks import ActivationCache
from core.nn.model import Transformer


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


def test_head_scores_of_a_transformer_whose_logits_are_built_by_hand():
    """A real Transformer with its weights set by hand, so that its losses on each copy are known. Every block adds
    nothing and reads nothing (all its weights 0: every head spreads its weight evenly over the past), the token
    embedding is 0, and the position table holds, at each second-copy position i, the one-hot of the probe's token
    i + 1 (elsewhere 0). The final LayerNorm turns a one-hot e into (e - 1/m) / sigma and the output map c I makes
    that a logit higher by b = c / sigma for the right token: every second-copy prediction costs
    log(1 + (m - 1) e^-b), every first-copy one log m (a stream of 0 gives flat logits). Position T - 1, which
    predicts the first token of the second copy, boosts a wrong token, so counting it in either copy would show."""
    m, T, c = 12, 5, 0.5
    probe = repeat_probe(m, n_seqs=1, period=T, seed=3)  # (1, 2T)
    model = Transformer(ModelConfig(vocab_size=m, n_ctx=2 * T, d_model=m, n_heads=2, n_layers=1)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.ln_f.weight.fill_(1.0)
        model.head.weight.copy_(c * torch.eye(m))
        for i in range(T, 2 * T - 1):
            model.pos_emb.weight[i, probe[0, i + 1]] = 1.0
        model.pos_emb.weight[T - 1, (probe[0, T] + 1) % m] = 1.0
    b = c / np.sqrt((1 / m) * (1 - 1 / m) + model.config.ln_eps)
    s = head_scores(model, probe)
    assert s.first_copy_loss == pytest.approx(np.log(m), rel=1e-6)
    assert s.second_copy_loss == pytest.approx(np.log(1 + (m - 1) * np.exp(-b)), rel=1e-5)
    assert s.in_context_gain == pytest.approx(np.log(m) - np.log(1 + (m - 1) * np.exp(-b)), rel=1e-5)
    # the heads attend evenly to the past: a[i, j] = 1/(i + 1)
    assert s.induction == pytest.approx(np.full((1, 2), np.mean([1 / (i + 1) for i in range(T, 2 * T)])), rel=1e-6)
    assert s.previous_token == pytest.approx(np.full((1, 2), np.mean([1 / (i + 1) for i in range(1, 2 * T)])),
                                             rel=1e-6)
    assert model.training is False and head_scores(model.train(), probe).first_copy_loss == pytest.approx(np.log(m))
    assert model.training  # measured in eval mode, handed back as it came


class CopyingModel(torch.nn.Module):
    """A model written out by hand, whose scores and losses are known: head 0 of its one layer is an exact
    induction head (query i attends to the key after the earlier occurrence of token i, else to itself), head 1
    a previous-token head; the logits give ``boost`` to the token after the earlier occurrence, else are flat.
    So every first-copy prediction costs log m and every second-copy one log(1 + (m - 1) e^-boost)."""

    def __init__(self, vocab_size: int, n_ctx: int, boost: float):
        super().__init__()
        self.config = ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, d_model=8, n_heads=2, n_layers=1)
        self.boost = boost

    def run_with_cache(self, idx, names=None):
        """(logits, {"blocks.0.attn.hook_pattern": pattern}): the one forward head_scores asks for."""
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
        return logits, ActivationCache({"blocks.0.attn.hook_pattern": pattern})


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


def test_probe_period_and_the_models_probe():
    from core.analysis.induction import PROBE_PERIOD, model_period, probe_period

    assert probe_period(1000) == PROBE_PERIOD == 50  # 50 where context and vocabulary allow
    assert probe_period(40) == 20 and probe_period(40, vocab_size=7) == 7
    assert probe_period(3) == 1 and probe_period(2) == 1 and probe_period(1) == 1  # at least one token

    class FewIds:  # a BPE-like tokenizer whose whole printable tokens are 30 of its 300 ids
        def readable_ids(self):
            return list(range(100, 130))

    model = Transformer(ModelConfig(vocab_size=300, n_ctx=200, d_model=8, n_heads=2, n_layers=1))
    assert model_period(model) == 50 and model_period(model, FewIds()) == 30
    probe = model_probe(model, FewIds(), n_seqs=3, seed=5)
    assert torch.equal(probe, repeat_probe(300, n_seqs=3, period=30, seed=5, choices=range(100, 130)))
    assert torch.equal(model_probe(model, period=4), repeat_probe(300, period=4))
    with pytest.raises(ValueError, match=r"^50 distinct tokens need a vocabulary of at least 50 \(got 20\)$"):
        repeat_probe(20, period=50)


def test_induction_and_stripe_scores_by_hand_in_float64():
    """T = 2, n = 4: the induction score is the mean over queries 2 and 3 of a[2, 1] and a[3, 2]; the
    previous-token score the mean of a[1, 0], a[2, 1], a[3, 2]; float32 patterns are read in float64."""
    from core.analysis.induction import induction_score

    a = np.array([[1.0, 0, 0, 0], [0.3, 0.7, 0, 0], [0.1, 0.123456789, 0.776543211, 0],
                  [0.2, 0.1, 0.987654321, -0.287654321]], dtype=np.float32)  # (the last row need not be a pattern)
    p = a.astype(np.float64)
    score = induction_score(a, 2)
    assert score.dtype == np.float64 and float(score) == pytest.approx((p[2, 1] + p[3, 2]) / 2, rel=1e-15)
    prev, ind = stripe_scores(np.stack([a, np.eye(4, dtype=np.float32)])[:, None], 2)  # (B=2, 1 head, 4, 4)
    assert prev[0] == pytest.approx(((p[1, 0] + p[2, 1] + p[3, 2]) / 3 + 0) / 2, rel=1e-15)
    assert ind[0] == pytest.approx(((p[2, 1] + p[3, 2]) / 2 + 0) / 2, rel=1e-15)
    with pytest.raises(ValueError, match=r"^the pattern covers 4 positions, fewer than two copies of period 3$"):
        induction_score(a, 3)


def test_best_head_and_the_rows_a_measurement_writes():
    from core.analysis.induction import HeadScores, score_rows

    scores = HeadScores(previous_token=np.array([[0.123456, 0.9], [0.5, 0.25]]),
                        induction=np.array([[0.1, 0.2], [0.87654321, 0.3]]),
                        first_copy_loss=2.718281828, second_copy_loss=1.414213562)
    assert scores.best_head() == (1, 0) and isinstance(scores.best_head()[0], int)
    assert scores.in_context_gain == pytest.approx(2.718281828 - 1.414213562)
    rows = score_rows(7, scores)
    assert rows[2] == {"step": 7, "layer": 1, "head": 0, "previous_token": 0.5, "induction": 0.8765,
                       "first_copy_loss": 2.7183, "second_copy_loss": 1.4142, "in_context_gain": 1.3041}
    assert [(r["layer"], r["head"], r["previous_token"]) for r in rows] == [(0, 0, 0.1235), (0, 1, 0.9), (1, 0, 0.5),
                                                                          (1, 1, 0.25)]


def test_the_recorder_measures_its_own_probe_at_its_interval():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=30, n_ctx=40, d_model=16, n_heads=2, n_layers=2))
    rec = HeadRecorder(model)
    assert rec.every == 100 and rec.due(300) and not rec.due(150)
    assert torch.equal(rec.probe, repeat_probe(30, period=20, seed=0))
    assert HeadRecorder(model, every=0).every == 1  # at least every step
    seeded = HeadRecorder(model, every=5, seed=3)
    assert torch.equal(seeded.probe, repeat_probe(30, period=20, seed=3))
    got = seeded.record(model, 5)
    want = head_scores(model, repeat_probe(30, period=20, seed=3))
    np.testing.assert_array_equal(got.induction, want.induction)
    assert got.first_copy_loss == want.first_copy_loss


def test_heads_csv_text_parses_to_numbers_of_the_right_kind():
    from core.nn.heads_csv import parse_heads_csv

    text = ("step,layer,head,previous_token,induction,first_copy_loss\r\n"
            "100,0,1,0.25,0.5,\r\n200,1,0,0.125,0.75,3.5\r\n")
    rows = parse_heads_csv(text)
    assert rows == [{"step": 100, "layer": 0, "head": 1, "previous_token": 0.25, "induction": 0.5},
                    {"step": 200, "layer": 1, "head": 0, "previous_token": 0.125, "induction": 0.75,
                     "first_copy_loss": 3.5}]
    assert all(type(r[k]) is int for r in rows for k in ("step", "layer", "head"))
    assert parse_heads_csv(text.splitlines(keepends=True)) == rows  # any iterable of lines
    with pytest.raises(ValueError, match=r"^heads.csv lacks the column\(s\) induction, previous_token$"):
        parse_heads_csv("step,layer,head\n1,0,0\n")
    with pytest.raises(ValueError, match=r"^heads.csv line 3: invalid literal for int\(\) with base 10: 'x'$"):
        parse_heads_csv("step,layer,head,previous_token,induction\n1,0,0,0.1,0.2\nx,0,0,0.1,0.2\n")


def test_formation_step_at_the_threshold_and_without_scores():
    from core.analysis.induction import THRESHOLD

    rows = [{"step": 50, "layer": 0, "head": 0}, {"step": 100, "layer": 0, "head": 0, "induction": THRESHOLD}]
    assert formation_step(rows) == 100  # reaching the threshold counts; a row without a score never does
    assert formation_step(rows[:1]) is None


def test_induction_summary_of_hand_written_rows():
    from core.analysis.induction import induction_summary

    rows = [
        {"step": 100, "layer": 0, "head": 0, "previous_token": 0.9, "induction": 0.1},
        {"step": 100, "layer": 1, "head": 1, "previous_token": 0.2, "induction": 0.35},
        {"step": 200, "layer": 0, "head": 0, "previous_token": 0.95, "induction": 0.05, "first_copy_loss": 3.0,
         "second_copy_loss": 1.0},
        {"step": 200, "layer": 0, "head": 1, "previous_token": 0.3, "induction": 0.2, "first_copy_loss": 3.0,
         "second_copy_loss": 1.0},
        {"step": 200, "layer": 1, "head": 1, "previous_token": 0.1, "induction": 0.8, "first_copy_loss": 3.0,
         "second_copy_loss": 1.0},
    ]
    assert induction_summary(rows) == {
        "threshold": 0.30, "formed_at_step": 100, "measured_at_step": 200, "best_head": [1, 1],
        "best_induction": 0.8, "best_previous_token_head": [0, 0], "best_previous_token": 0.95,
        "first_copy_loss": 3.0, "second_copy_loss": 1.0}
    late = induction_summary(rows, threshold=0.5)
    assert late["threshold"] == 0.5 and late["formed_at_step"] == 200
    assert induction_summary(rows[:2], threshold=0.9)["formed_at_step"] is None
    assert induction_summary(rows[:2])["first_copy_loss"] is None  # rows without losses


def test_add_repeats_is_its_generators_alone_and_spans_the_documented_range():
    """The same generator state gives the same rows whatever the global random state; spans run from min_span to
    max_span (8 and 40 by default, at most half a row); a fraction of 0 draws nothing."""
    w = torch.arange(128).repeat(1500, 1)
    torch.manual_seed(1)
    a = add_repeats(w, 1.0, torch.Generator().manual_seed(9), vocab_size=10**9)  # no random token hits its own id
    torch.manual_seed(2)
    b = add_repeats(w, 1.0, torch.Generator().manual_seed(9), vocab_size=10**9)
    assert torch.equal(a, b)
    spans = set()
    for row in a.tolist():
        changed = [i for i in range(128) if row[i] != i]  # the first copy (random tokens) and the second
        spans.add(len(changed) // 2)
    assert min(spans) == 8 and max(spans) == 40
    short = add_repeats(torch.arange(64).repeat(800, 1), 1.0, torch.Generator().manual_seed(3), 10**9, max_span=60)
    assert max(len([i for i in range(64) if row[i] != i]) // 2 for row in short.tolist()) == 32  # half of 64
    g = torch.Generator().manual_seed(4)
    assert torch.equal(add_repeats(w[:10], 0.0, g, 1000), w[:10])
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=torch.Generator().manual_seed(4)))
    # a row of 2 * min_span holds exactly one span twice; a shorter one none
    exact = add_repeats(torch.arange(16).repeat(5, 1), 1.0, torch.Generator().manual_seed(0), 10**9)
    assert all(r[:8] == r[8:] and r[:8] != list(range(8)) for r in exact.tolist())
    assert torch.equal(add_repeats(torch.arange(15).repeat(5, 1), 1.0, g, 1000), torch.arange(15).repeat(5, 1))


def test_add_repeats_chooses_rows_and_randomises_spans_independently():
    w = torch.arange(64).repeat(2000, 1)
    torch.manual_seed(1)
    out = add_repeats(w, 0.5, torch.Generator().manual_seed(5), vocab_size=1000, random_share=0.5)
    torch.manual_seed(2)  # which rows, and which spans are random, come from the generator given, not the global one
    assert torch.equal(add_repeats(w, 0.5, torch.Generator().manual_seed(5), vocab_size=1000, random_share=0.5), out)
    chosen = (out != w).any(dim=1)
    randomised = (out >= 64).any(dim=1)  # random tokens are ids 64..999 with high probability
    assert 0.45 < chosen.float().mean().item() < 0.55
    assert 0.4 < randomised[chosen].float().mean().item() < 0.6  # about half the chosen rows, not all of them


def test_add_repeats_draws_random_tokens_from_the_pool_only():
    # a pool of three ids far from the rows' own 0..63: every changed first-copy token must be one of them
    w = torch.arange(64).repeat(300, 1)
    pool = torch.tensor([500, 700, 900])
    out = add_repeats(w, 1.0, torch.Generator().manual_seed(4), vocab_size=1000, random_share=1.0, pool=pool)
    new = set(out[out != w].tolist())
    assert new and new <= {500, 700, 900} | set(range(64))  # the second copy may also rewrite own-text ids
    assert {500, 700, 900} <= new  # each pool id is drawn (3 ids, thousands of draws)
    assert not (out >= 64).logical_and(~torch.isin(out, pool)).any()


def test_frequent_tokens_counts_by_hand():
    from core.training.train_data import frequent_tokens

    data = torch.tensor([5, 3, 3, 9, 9, 9, 5, 5, 1, 9])  # 9 four times, 5 three, 3 twice, 1 once
    assert frequent_tokens(data, 3).tolist() == [9, 5, 3]
    assert frequent_tokens(torch.tensor([2, 4, 4, 2, 7]), 2).tolist() == [2, 4]  # a tie: the lower id first


def test_the_trainer_uses_the_pool_for_its_steps_only():
    from core.training.recipes import TrainConfig
    from core.training.trainer import Trainer
    from tests.snapshot_models import made_up_text

    tc = TrainConfig(steps=20, batch_size=4, eval_interval=20, eval_batches=1, heads_interval=0, snapshots=0,
                     repeat_first_steps=20, repeat_fraction=1.0, repeat_pool=5, repeat_pool_steps=10)
    tr = Trainer(made_up_text(20_000), dict(n_ctx=32, d_model=16, n_heads=2, n_layers=1, d_ff=32), tc)
    counts = torch.bincount(tr.train_data, minlength=tr.config.vocab_size)
    top5 = set(counts.argsort(descending=True)[:5].tolist())
    assert set(tr.repeat_pool(0).tolist()) == top5 and set(tr.repeat_pool(9).tolist()) == top5
    assert tr.repeat_pool(10) is None  # after repeat_pool_steps: every id
    tc0 = TrainConfig(steps=20, batch_size=4, heads_interval=0, snapshots=0, repeat_pool=0)
    assert Trainer(made_up_text(20_000), dict(n_ctx=32, d_model=16, n_heads=2, n_layers=1, d_ff=32), tc0).repeat_pool(0) is None
