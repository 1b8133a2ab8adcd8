"""The views over training (core.analysis.over_training) and the natural-text copy probe (core.analysis.text_probe),
against answers built by hand."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_hooks import attention, attention_and_logits
from core.analysis.over_training import copy_keys, head_patterns, over_training, pick_steps, prompt_induction
from core.analysis.text_probe import text_copy_losses, text_probe, token_span
from pages.over_training import figures as OF
from core.nn.config import ModelConfig
from core.nn.model import Transformer


def test_copy_keys_mark_the_token_after_each_earlier_copy():
    #        0  1  2  3  4  5
    ids = [7, 8, 7, 9, 7, 8]
    keys = copy_keys(ids)
    # query 2 (a 7): the 7 at 0 is followed by key 1; query 4 (a 7): keys 1 and 3; query 5 (an 8): key 2
    expected = np.zeros((6, 6), bool)
    expected[2, 1] = expected[4, 1] = expected[4, 3] = expected[5, 2] = True
    assert (keys == expected).all()
    assert copy_keys([1, 1, 1]).sum() == 1  # query 2 -> key 1; never a query's own position


def test_prompt_induction_classic_on_a_text_written_twice_and_general_otherwise():
    n, T = 6, 3
    pat = np.zeros((1, 2, n, n))
    pat[0, 0] = np.eye(n)                                 # head 0: each query on itself
    for i in range(T, 2 * T):
        pat[0, 1, i, i - T + 1] = 1.0                     # head 1: the induction stripe
    score, period = prompt_induction(pat, [4, 5, 6, 4, 5, 6])
    assert period == T and score.tolist() == [[0.0, 1.0]]
    ids = [7, 8, 7, 9, 7, 8]                              # not two equal halves: the marked keys of copy_keys
    pat = np.zeros((1, 1, n, n))
    pat[0, 0, 2, 1] = 0.5                                 # query 2 puts half its weight on key 1
    pat[0, 0, 4, 3] = 0.25                                # query 4: a quarter on key 3 (key 1 gets none)
    score, period = prompt_induction(pat, ids)
    assert period is None and score[0, 0] == pytest.approx((0.5 + 0.25 + 0.0) / 3)  # queries 2, 4, 5
    score, _ = prompt_induction(np.zeros((1, 1, 3, 3)), [1, 2, 3])  # nothing repeats
    assert np.isnan(score).all()


@pytest.fixture
def two_models():
    cfg = ModelConfig(vocab_size=13, n_ctx=24, d_model=16, n_heads=2, n_layers=2)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append((seed * 10, Transformer(cfg).eval()))
    return models


def test_over_training_scores_each_snapshot_like_its_own_forward(two_models):
    ids = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    ot = over_training(two_models, ids)
    assert ot.steps == [0, 10] and ot.period == 5
    x = torch.tensor([ids])
    for i, (_, model) in enumerate(two_models):
        with torch.no_grad():
            records, logits = attention_and_logits(model, x)
        loss = F.cross_entropy(logits[0, :-1], x[0, 1:], reduction="none").numpy()
        assert np.allclose(ot.token_loss[i], loss, atol=1e-5)
        for layer, rec in enumerate(records):
            p = rec.pattern[0].double().numpy()  # (h, n, n)
            assert np.allclose(ot.previous_token[i, layer], [np.diag(p[h], -1).mean() for h in range(2)], atol=1e-6)
            assert np.allclose(ot.induction[i, layer], [np.mean([p[h, q, q - 4] for q in range(5, 10)])
                                                        for h in range(2)], atol=1e-6)
        # the lens's last stage is the model itself: its accuracy is the share of right argmaxes
        right = (logits[0, :-1].argmax(-1) == x[0, 1:]).float().mean().item()
        assert ot.lens_accuracy[i, -1] == pytest.approx(right)
    # every step explains the last model's favourite; the shares plus the LayerNorm shift make its logit
    last = two_models[-1][1]
    with torch.no_grad():
        logits = last(x).logits[0, -1]
    assert ot.target == int(logits.argmax())
    shift = float(last.head.weight[ot.target].detach() @ last.ln_f.bias.detach())
    assert ot.attribution[-1].sum() + shift == pytest.approx(float(logits[ot.target]), abs=1e-4)


def test_copy_losses_and_the_best_head_on_the_prompt(two_models):
    ot = over_training(two_models, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5])
    first, second = ot.copy_losses()
    # predictions of tokens 1..4 (entries 0..3) and of tokens 6..9 (entries 5..8): token 5 cannot be copied
    assert np.allclose(first, ot.token_loss[:, 0:4].mean(1)) and np.allclose(second, ot.token_loss[:, 5:9].mean(1))
    layer, head = ot.best_induction_head()
    assert ot.induction[-1, layer, head] == np.max(ot.induction[-1])
    none = over_training(two_models, [1, 2, 3, 4])  # nothing repeats: no copies, every score NaN
    assert none.copy_losses() is None and none.best_induction_head() == (0, 0)


def test_head_patterns_and_picked_steps(two_models):
    ids = [3, 1, 4, 1, 5, 9]
    pats = head_patterns(two_models, ids, layer=1, head=0)
    with torch.no_grad():
        want = attention(two_models[1][1], torch.tensor([ids]))[1].pattern[0, 0]
    assert pats.shape == (2, 6, 6) and np.allclose(pats[1], want.numpy())
    assert pick_steps([0, 1, 2, 3, 4, 5, 6], 3) == [0, 3, 6]
    assert pick_steps([0, 5], 12) == [0, 5]


def test_one_token_prompt_is_refused(two_models):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        over_training(two_models, [3])


def test_figures_draw_every_snapshot(two_models):
    ids = [1, 2, 3, 1, 2, 3]
    ot = over_training(two_models, ids)
    tokens = [str(i) for i in ids]
    heat = OF.token_loss_heatmap(ot, tokens)
    assert heat.data[0].y == ("0", "10") and np.allclose(np.array(heat.data[0].z), ot.token_loss)
    heads = OF.live_heads_figure(ot, formed=5)  # formed between snapshots: marked at the next one, step 10
    assert len(heads.data) == 2 * 2 * 2 and any("step 5" in (a.text or "") for a in heads.layout.annotations)
    strip = OF.pattern_strip(head_patterns(two_models, ids, 0, 1), [0, 10], tokens, "t")
    assert len(strip.data) == 2
    assert len(OF.attribution_over_steps(ot, "x").data) == len(ot.writers)
    assert OF.first_snapshot_from([0, 10, 20], 11) == 20 and OF.first_snapshot_from([0, 10], 11) is None


# ------------------------------------------------------------------ the natural-text probe
def test_text_probe_writes_each_span_twice_and_scores_only_the_copies():
    ids = torch.arange(1000) % 97  # a text with no repeat shorter than 97 tokens
    probe = text_probe(ids, n_ctx=64, span=(10, 20), n_spans=8, seed=3)
    assert probe.windows.shape == (8, 64)
    for row, first, second in zip(probe.windows, probe.first, probe.second):
        a = int(np.argmax(first))                 # first scored logit: position a predicts token a + 1
        b = int(np.argmax(second))
        length = int(first.sum()) + 1             # L - 1 predictions per copy
        assert int(second.sum()) == length - 1 and 10 <= length <= 20
        assert torch.equal(row[a:a + length], row[b:b + length])  # the span, again
        assert b + length == 64                    # the second copy ends the window
        assert b - (a + length) >= 8               # natural text between the copies
        # everything else is the text as it was: consecutive ids
        assert all((int(row[i + 1]) - int(row[i])) % 97 == 1 for i in range(b - 1))


def test_text_copy_losses_of_a_model_that_copies_by_construction():
    """A model whose logits are built by hand: it predicts the token that followed the last earlier occurrence of
    the current token (perfect copying), else uniform. Second copy: nearly 0 nats; first copy: log m."""
    m = 300

    class Copier(torch.nn.Module):
        def forward(self, idx, **_):
            B, n = idx.shape
            logits = torch.zeros(B, n, m)
            for b in range(B):
                for i in range(n):
                    earlier = [j for j in range(i) if idx[b, j] == idx[b, i]]
                    if earlier:
                        logits[b, i, idx[b, earlier[-1] + 1]] = 30.0
            return type("Out", (), {"logits": logits})()

    text = torch.randperm(m, generator=torch.Generator().manual_seed(0))[:250]  # distinct: only the copy repeats
    probe = text_probe(text, n_ctx=60, span=(10, 15), n_spans=4, seed=0)
    model = Copier()
    model.config = ModelConfig(vocab_size=m, n_ctx=60, d_model=8, n_heads=1, n_layers=1)
    first, second = text_copy_losses(model, probe)
    assert second < 1e-6
    assert first == pytest.approx(np.log(m))  # never seen before: the copier's uniform guess


def test_token_span_holds_about_the_same_characters():
    class Tok:
        kind = "bpe"

    assert token_span(Tok(), (40, 60), chars_per_token=2.0) == (20, 30)
    Tok.kind = "char"
    assert token_span(Tok(), (40, 60), chars_per_token=2.0) == (40, 60)


def test_the_probe_refuses_spans_that_do_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        text_probe(torch.arange(1000), n_ctx=64, span=(30, 40))
    with pytest.raises(ValueError, match="at least"):
        text_probe(torch.arange(100), n_ctx=64, span=(10, 20))
