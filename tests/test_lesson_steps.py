"""Each of the Lesson's 12 steps (core.lesson.STEPS) graded against an answer computed here independently: a model
built so that the answer is known, or the answer worked out by hand (a forward written out with hooks, the formula
on the numbers); for each, the grade of a right and of a wrong guess. A model without an induction head, snapshots,
the study or the lecture's block is asked nothing by the steps that need one."""
import copy
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SHIPPED
from core import lesson as LS
from core.analysis.generation import draw
from core.analysis.induction import THRESHOLD, HeadScores, head_scores, model_probe
from core.analysis.scaling import CHINCHILLA
from core.views.variants_view import Study
from core.nn.checkpoint import CheckpointError, load_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer
from core.serve.fmt import head_label

BPE = SHIPPED.parent / "shakespeare-bpe"
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"


@pytest.fixture(scope="module")
def char():
    model, tok = load_checkpoint(SHIPPED)
    return model, tok, head_scores(model, tokenizer=tok)


def scores_of(prev, ind, first=4.0, second=1.0) -> HeadScores:
    return HeadScores(previous_token=np.array(prev, dtype=float), induction=np.array(ind, dtype=float),
                      first_copy_loss=first, second_copy_loss=second)


def ask(key, ctx):
    step = LS.STEP[key]
    q = LS.question(step, ctx)
    assert q.blocked is None, q.blocked
    return step, q, step.measure(ctx, q)


def marks(key, ctx, right, wrong):
    """(grade of the right guess, grade of the wrong one, the Question, the measure)."""
    step, q, m = ask(key, ctx)
    return LS.answer(step, q, m, right)[0], LS.answer(step, q, m, wrong)[0], q, m


def pointing_model(n_ctx=32):
    """One layer whose head 1 looks at token 7 wherever it is: its query is a constant (the bias b_Q), its key reads
    the embedding's first coordinate, +1 for token 7 and -1 for every other token. W_O is 0: nothing is written."""
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=10, n_ctx=n_ctx, d_model=8, n_heads=2, n_layers=1, bias=True)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        for ln in (m.blocks[0].ln1, m.blocks[0].ln2, m.ln_f):
            ln.weight.fill_(1.0)
        m.tok_emb.weight[:, 0] = -1.0
        m.tok_emb.weight[7, 0] = 1.0
        m.tok_emb.weight[:, 1] = torch.arange(10.0) * 0.01  # rows differ a little elsewhere
        m.blocks[0].attn.qkv.bias[0] = 20.0                  # q of head 1: 20 along its first dimension
        m.blocks[0].attn.qkv.weight[8 + 0, 0] = 1.0          # k of head 1: the embedding's first coordinate
    return m


TEN = CharTokenizer("abcdefghij")
POINTING_SCORES = scores_of([[0.9, 0.1]], [[0.5, 0.0]])  # head L1 H1 the previous-token head, and an induction head


# ---------------------------------------------------------------- 1. which key
def test_step_1_grades_the_key_the_head_was_built_to_look_at():
    ctx = LS.Context(pointing_model(), TEN, (1, 2, 7, 3, 4, 5), POINTING_SCORES)
    right, wrong, q, _ = marks("key", ctx, 2, 5)
    assert (right.correct, right.answer, wrong.correct) == (True, 2, False)
    assert q.choices == tuple(range(6))
    twice = LS.answer(*ask("key", LS.Context(pointing_model(), TEN, (1, 7, 2, 7, 3), POINTING_SCORES)), 1)[0]
    assert twice.correct is None  # two 7s: equal weights, too close to call


def test_step_1_offers_the_key_it_grades_when_the_heaviest_is_the_first():
    ids = (7,) + (1, 2, 3, 4, 5, 6) * 3 + (8,)  # 20 tokens; the head's key is the first token, a sink
    ctx = LS.Context(pointing_model(), TEN, ids, POINTING_SCORES)
    right, wrong, q, _ = marks("key", ctx, 0, 18)
    assert q.choices == (0,) + tuple(range(5, 20))  # the first position and the last 15, by hand
    assert (right.correct, right.answer, wrong.correct) == (True, 0, False)


# ---------------------------------------------------------------- 2. the mask
def test_step_2_the_earlier_rows_move_after_the_softmax_only_when_the_last_key_changes():
    ctx = LS.Context(pointing_model(), TEN, (1, 2, 3, 7), POINTING_SCORES)  # the last 7 becomes an 8: its key flips
    right, wrong, _, m = marks("mask", ctx, "yes", "no")
    assert (right.correct, right.answer, wrong.correct) == (True, True, False) and m["mask_on_scores"] == 0.0
    blind = pointing_model()
    with torch.no_grad():
        blind.blocks[0].attn.qkv.weight[8:16] = 0.0  # no key reads anything: every score 0, uniform rows
    right, wrong, _, _ = marks("mask", LS.Context(blind, TEN, (1, 2, 3, 7), POINTING_SCORES), "no", "yes")
    assert (right.correct, right.answer, wrong.correct) == (True, False, False)


# ---------------------------------------------------------------- 3. a head off
def test_step_3_the_loss_on_the_second_copy_against_a_copy_of_the_model_without_the_head(char):
    model, tok, scores = char
    ids = tuple(tok.encode("Heavy the crown; light the feather of a"))
    l, h = scores.best_head()
    other = copy.deepcopy(model)
    dh = model.config.d_head
    with torch.no_grad():
        other.blocks[l].attn.out.weight[:, h * dh:(h + 1) * dh] = 0.0  # the head's columns of W_O
        x = torch.tensor([ids + ids])
        before = F.cross_entropy(model(x).logits[0, :-1], x[0, 1:], reduction="none")
        after = F.cross_entropy(other(x).logits[0, :-1], x[0, 1:], reduction="none")
    change = float((after - before)[len(ids):].mean())  # predictions of the second copy's tokens after its first
    assert change > 0.3
    right, wrong, _, m = marks("off", LS.Context(model, tok, ids, scores), "up", "down")
    assert m["change"] == pytest.approx(change, abs=1e-4)
    assert (right.correct, right.answer, wrong.correct) == (True, "up", False)


@pytest.mark.parametrize("key", ["off", "forming", "patch", "circuit"])
def test_a_bpe_model_without_an_induction_head_asks_nothing_on_those_steps(key):
    shipped, tok = load_checkpoint(BPE)
    torch.manual_seed(0)
    model = Transformer(shipped.config).eval()  # untrained: no head (the shipped BPE model has one since issue 43)
    scores = head_scores(model, tokenizer=tok)
    assert np.nanmax(scores.induction) < THRESHOLD  # about 0.01
    ctx = LS.Context(model, tok, tuple(tok.encode(PROMPT)), scores, snapshots=(0, 7000), load_step=None)
    q = LS.question(LS.STEP[key], ctx)
    assert q.blocked and "no induction head" in q.blocked and f"{THRESHOLD:.2f}" in q.blocked and not q.choices


# ---------------------------------------------------------------- 4, 5. one block
def config_ctx(config):
    return LS.Context(Transformer(config), TEN, (1, 2, 3, 4), scores_of([[0.0] * config.n_heads] * config.n_layers,
                                                                        [[0.0] * config.n_heads] * config.n_layers))


def test_step_4_counts_the_lectures_block_by_hand():
    c = ModelConfig(vocab_size=10, n_ctx=16, d_model=64, n_heads=4, n_layers=1)
    count = 4 * 64 * 64 + 2 * 64 * 256 + 4 * 64  # 49,408
    right, wrong, _, _ = marks("block", config_ctx(c), count + 500, count - 2000)  # within 2%, and 4% off
    assert (right.correct, right.answer, wrong.correct) == (True, count, False)


def test_step_4_writes_the_formula_of_a_variants_block():
    c = ModelConfig(vocab_size=10, n_ctx=16, d_model=32, n_heads=4, n_layers=1, mlp=False, w_o=False)
    count = 3 * 32 * 32 + 2 * 32  # W_Q, W_K, W_V and the one LayerNorm
    step, q, m = ask("block", config_ctx(c))
    grade, shown = LS.answer(step, q, m, count)
    assert grade.correct is True and LS.answer(step, q, m, 4 * 32 * 32 + 2 * 32)[0].correct is False
    assert "d_{ff}" not in shown.latex and shown.latex.startswith("3d^2 + 2d") and shown.latex.endswith("3{,}136")
    assert "no MLP" in q.text and "no $W_O$" in q.text and "d_ff" not in q.text


def test_step_5_the_mlps_share_by_hand():
    c = ModelConfig(vocab_size=10, n_ctx=16, d_model=64, n_heads=4, n_layers=1)
    share = 2 * 64 * 256 / (4 * 64 * 64 + 2 * 64 * 256 + 4 * 64)  # 0.663
    right, wrong, _, _ = marks("share", config_ctx(c), round(share * 100), 50)
    assert (right.correct, wrong.correct) == (True, False) and right.answer == pytest.approx(share)


# ---------------------------------------------------------------- 6. the cost
def test_step_6_six_n_d_with_n_counted_by_hand():
    c = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    d, m, L = 24, 11, 2
    N = L * (12 * d * d + 4 * d) + m * d + 16 * d + 2 * d + d * m  # blocks, embedding, positions, ln_f, output
    truth = 6 * N * 10_000_000
    right, wrong, _, _ = marks("cost", config_ctx(c), truth * 1.05, truth * 2)
    assert (right.correct, right.answer, wrong.correct) == (True, truth, False)


# ---------------------------------------------------------------- 7. temperature
def hand_logprob(model, prompt, new):
    x = torch.tensor([list(prompt) + list(new)])
    with torch.no_grad():
        lp = F.log_softmax(model(x).logits[0, :-1].double(), -1)
    return float(lp[torch.arange(len(prompt) - 1, x.shape[1] - 1), x[0, len(prompt):]].mean())


@pytest.mark.parametrize("text, seed", [(PROMPT, 0), (PROMPT, 1), ("KING HENRY:\nOnce more unto the breach, dear "
                                         "friends, once more; or close the wall up with our English dead! " * 2, 0)])
def test_step_7_the_cold_text_is_the_one_drawn_cold(char, text, seed):
    model, tok, scores = char
    ids = tuple(tok.encode(text))
    n_ctx = model.config.n_ctx
    step, q, m = ask("temp", LS.Context(model, tok, ids, scores, seed=seed))
    keep = min(len(ids), n_ctx - 40)  # room for the 40 draws: a long prompt is read from its end
    cold = [r["id"] for r in draw(model, ids[len(ids) - keep:], 40, 0.2, seed=seed, chars=tok.pieces)[0]]
    cold_at = [t for _, t in q.shows].index(tok.decode(cold))
    assert [len(t) for t in m["texts_ids"]] == [40, 40] and keep + 40 <= n_ctx
    assert m["logprob"][cold_at] == pytest.approx(hand_logprob(model, ids[len(ids) - keep:], cold), abs=1e-4)
    right, wrong = (LS.answer(step, q, m, g)[0] for g in (cold_at, 1 - cold_at))
    if abs(m["logprob"][0] - m["logprob"][1]) < 0.1:
        assert right.correct is None and wrong.correct is None
    else:
        assert (right.correct, right.answer, wrong.correct) == (True, cold_at, False)


# ---------------------------------------------------------------- 8. scaling
def test_step_8_the_chinchilla_drops_by_hand():
    law, N, D = CHINCHILLA, 1e9, 20e9
    drop_n = law.A / N ** law.alpha - law.A / (2 * N) ** law.alpha
    drop_d = law.B / D ** law.beta - law.B / (2 * D) ** law.beta
    best, other = ("N", "D") if drop_n > drop_d else ("D", "N")
    assert abs(drop_n - drop_d) > 0.05 * max(drop_n, drop_d)  # not a close call
    right, wrong, _, _ = marks("scaling", config_ctx(ModelConfig(10, 16, 8, 2, 1)), best, other)
    assert (right.correct, right.answer, wrong.correct) == (True, best, False)


# ---------------------------------------------------------------- 9. the induction head forms
def hand_copy_losses(model, tok):
    probe = model_probe(model, tok)
    T = probe.shape[1] // 2
    with torch.no_grad():
        loss = F.cross_entropy(model(probe).logits[:, :-1].transpose(1, 2), probe[:, 1:], reduction="none")
    return float(loss[:, :T - 1].mean()), float(loss[:, T:2 * T - 1].mean())  # first copy's tokens 1.., second's


def test_step_9_the_first_snapshot_against_the_end_by_hand(char):
    model, tok, scores = char
    early_model, _ = load_checkpoint(SHIPPED, step=0)
    (e1, e2), (f1, f2) = hand_copy_losses(early_model, tok), hand_copy_losses(model, tok)
    best = "first" if e1 - f1 > e2 - f2 else "second"
    ctx = LS.Context(model, tok, (1, 2, 3, 4), scores, snapshots=(0, 12000),
                     load_step=lambda s: load_checkpoint(SHIPPED, step=s))
    right, wrong, _, m = marks("forming", ctx, best, {"first": "second", "second": "first"}[best])
    assert m["early"] == pytest.approx((e1, e2), abs=1e-4) and m["end"] == pytest.approx((f1, f2), abs=1e-4)
    assert (right.correct, right.answer, wrong.correct) == (True, best, False)


def test_step_9_when_both_losses_rose_or_the_snapshot_is_unreadable_nothing_is_graded(char):
    model, tok, scores = char
    early = head_scores(load_checkpoint(SHIPPED, step=0)[0], tokenizer=tok)
    worse = copy.copy(scores)
    worse.first_copy_loss, worse.second_copy_loss = early.first_copy_loss + 0.3, early.second_copy_loss + 0.1
    ctx = LS.Context(model, tok, (1, 2, 3, 4), worse, snapshots=(0, 12000),
                     load_step=lambda s: load_checkpoint(SHIPPED, step=s))
    for guess in ("first", "second"):  # the second "fell more" only in that it rose less
        grade = LS.answer(*ask("forming", ctx), guess)[0]
        assert grade.correct is None and grade.call == "neither loss fell"

    def unreadable(step):
        raise CheckpointError(SHIPPED / "checkpoints" / "step-000000.safetensors", "not a readable safetensors file")
    step, q, m = ask("forming", LS.Context(model, tok, (1, 2, 3, 4), scores, snapshots=(0, 12000),
                                           load_step=unreadable))
    grade, shown = LS.answer(step, q, m, "second")
    assert grade.correct is None and "step 0" in grade.why and "step-000000.safetensors" in grade.why
    assert "/" not in grade.why.split("(")[1].split(":")[0]  # the file's name, not the server's path
    no_snapshots = LS.question(LS.STEP["forming"], LS.Context(model, tok, (1, 2, 3, 4), scores))
    assert no_snapshots.blocked and "no snapshots" in no_snapshots.blocked


# ---------------------------------------------------------------- 10. a piece taken out
def test_step_10_the_piece_whose_removal_raises_the_loss_most():
    rows = {v: {"causal_val_loss": x, "n_layers": 2} for v, x in (("lecture", 1.5), ("no-residual", 2.5),
                                                                  ("no-mlp", 1.7))}
    ctx = LS.Context(None, TEN, (1, 2, 3, 4), POINTING_SCORES, study=lambda: Study(rows, {}, []))
    right, wrong, _, m = marks("piece", ctx, "no-residual", "no-mlp")
    assert (right.correct, right.answer, wrong.correct) == (True, "no-residual", False)
    assert m["rises"] == pytest.approx({"no-residual": 1.0, "no-mlp": 0.2})
    rows.pop("no-mlp")
    assert LS.question(LS.STEP["piece"], ctx).blocked


# ---------------------------------------------------------------- 11. patching
def hand_patch_table(model, clean, corrupt):
    """Every head's share of the clean answer restored, by hooks on W_O's input (the heads side by side)."""
    c, dh = model.config, model.config.d_head
    x_clean, x_bad = torch.tensor([clean]), torch.tensor([corrupt])
    with torch.no_grad():
        answer = int(model(x_clean).logits[0, -1].argmax())
        top2 = model(x_bad).logits[0, -1].topk(2).indices.tolist()
        wrong = top2[1] if top2[0] == answer else top2[0]

        def metric(logits):
            return float(logits[0, -1, answer] - logits[0, -1, wrong])

        seen = {}
        hooks = [model.blocks[l].attn.out.register_forward_pre_hook(
            lambda mod, args, l=l: seen.__setitem__(l, args[0].clone())) for l in range(c.n_layers)]
        m_clean = metric(model(x_clean).logits)
        for hk in hooks:
            hk.remove()
        m_bad = metric(model(x_bad).logits)
        table = np.zeros((c.n_layers, c.n_heads))
        for l in range(c.n_layers):
            for h in range(c.n_heads):
                def put_back(mod, args, l=l, h=h):
                    y = args[0].clone()
                    y[..., h * dh:(h + 1) * dh] = seen[l][..., h * dh:(h + 1) * dh]
                    return (y,)
                hk = model.blocks[l].attn.out.register_forward_pre_hook(put_back)
                table[l, h] = (metric(model(x_bad).logits) - m_bad) / (m_clean - m_bad)
                hk.remove()
    return table, m_clean, m_bad


def test_step_11_the_head_that_restores_most_by_hand(char):
    model, tok, scores = char
    ctx = LS.Context(model, tok, (1, 2, 3, 4), scores)
    step, q, m = ask("patch", ctx)
    table, m_clean, m_bad = hand_patch_table(model, list(q.data["clean"]), list(q.data["corrupt"]))
    np.testing.assert_allclose(m["table"], table, atol=1e-4)
    best = tuple(int(v) for v in np.unravel_index(np.argmax(table), table.shape))
    worst = tuple(int(v) for v in np.unravel_index(np.argmin(table), table.shape))
    right, wrong = (LS.answer(step, q, m, g)[0] for g in (best, worst))
    assert (right.correct, right.answer, wrong.correct) == (True, best, False)
    flat = dict(m, clean=m["corrupt"] + 0.1)  # a corrupted run as good as the clean one: nothing to restore
    assert LS.answer(step, q, flat, best)[0].correct is None


# ---------------------------------------------------------------- 12. the induction circuit
def hand_key_totals(model, ids, layer, head, i, j):
    """Each source's part of the head's score s_ij through the key: q_i . k_j(source) / sqrt(d_h), where k_j(source)
    is W_K of the source's write after LayerNorm's centring and scale (1/sigma of the whole stream at j)."""
    c, d, dh = model.config, model.config.d_model, model.config.d_head
    x = torch.tensor([ids])
    n = len(ids)
    parts = {"token embedding": model.tok_emb.weight[x[0]], "position embedding": model.pos_emb.weight[:n]}
    seen = {}
    hooks = []
    for l in range(layer):
        hooks.append(model.blocks[l].attn.out.register_forward_pre_hook(
            lambda mod, args, l=l: seen.__setitem__(("z", l), args[0][0].clone())))
        hooks.append(model.blocks[l].mlp.register_forward_hook(
            lambda mod, args, out, l=l: seen.__setitem__(("mlp", l), out[0].clone())))
    with torch.no_grad():
        model(x)
        for hk in hooks:
            hk.remove()
        for l in range(layer):
            w_o = model.blocks[l].attn.out.weight
            for r in range(c.n_heads):
                parts[f"L{l + 1} H{r + 1}"] = seen[("z", l)][:, r * dh:(r + 1) * dh] @ w_o[:, r * dh:(r + 1) * dh].T
            parts[f"L{l + 1} MLP"] = seen[("mlp", l)]
        stream = sum(parts.values()).double()  # (n, d): what the head's LayerNorm reads
        ln = model.blocks[layer].ln1
        w = model.blocks[layer].attn.qkv.weight.double()
        w_q, w_k = w[head * dh:(head + 1) * dh], w[d + head * dh:d + (head + 1) * dh]
        q = w_q @ F.layer_norm(stream[i], (d,), ln.weight.double(), ln.bias.double(), ln.eps)
        sigma = torch.sqrt(stream[j].var(unbiased=False) + ln.eps)
        totals = {name: float(q @ (w_k @ (ln.weight.double() * (p[j].double() - p[j].double().mean()) / sigma)))
                  / math.sqrt(dh) for name, p in parts.items()}
        totals["LN shift"] = float(q @ (w_k @ ln.bias.double())) / math.sqrt(dh)
    return totals


@pytest.fixture(scope="module", params=["char", "bpe"])
def shipped_circuit(request):
    """(model, the step, its Question, its measure, scores) on each shipped model."""
    model, tok = load_checkpoint(SHIPPED if request.param == "char" else BPE)
    scores = head_scores(model, tokenizer=tok)
    step, q, m = ask("circuit", LS.Context(model, tok, (1, 2, 3, 4), scores))
    return model, step, q, m, scores


def _hand_ln(ln, x):
    """LayerNorm written out in float64: (x - mean) / sqrt(var + eps) * weight + bias."""
    w, b = ln.weight.double(), ln.bias.double() if ln.bias is not None else 0.0
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + ln.eps) * w + b


def _hand_heads(model, l, x, key_x=None, key_head=None):
    """Block l's attention by hand, float64: (each head's write after W_O (h, n, d), its weights (h, n, n)). The
    keys of head ``key_head`` are read from ``key_x`` instead of ``x`` (path patching's receiver)."""
    c, blk = model.config, model.blocks[l]
    d, dh, n = c.d_model, c.d_head, x.shape[0]
    wq, wk, wv = blk.attn.qkv.weight.double().split(d, 0)   # (3d, d) -> 3 x (d, d)
    w_o = blk.attn.out.weight.double()                        # (d, d): head r writes through columns r*dh..
    a = _hand_ln(blk.ln1, x)
    outs, pats = [], []
    for r in range(c.n_heads):
        rows = slice(r * dh, (r + 1) * dh)
        k_in = _hand_ln(blk.ln1, key_x) if r == key_head else a
        q, k, v = a @ wq[rows].T, k_in @ wk[rows].T, a @ wv[rows].T  # (n, dh) each
        s = (q @ k.T) / math.sqrt(dh) + torch.triu(torch.full((n, n), -math.inf, dtype=torch.float64), 1)
        p = torch.softmax(s, -1)                               # (n, n)
        outs.append(p @ v @ w_o[:, rows].T)                    # (n, dh) x (dh, d) -> (n, d)
        pats.append(p)
    return torch.stack(outs), torch.stack(pats)


def _hand_mlp(model, l, x):
    blk = model.blocks[l]
    u = _hand_ln(blk.ln2, x)
    return torch.relu(u @ blk.mlp.w1.weight.double().T) @ blk.mlp.w2.weight.double().T


@torch.no_grad()
def hand_two_layers(model, ids, receiver=None, key_x=None):
    """The shipped 2-layer model's forward by hand: (last position's logits, the stream entering block 1 (n, d),
    each block-0 head's write (h, n, d), block 1's weights (h, n, n))."""
    n = len(ids)
    x0 = model.tok_emb.weight.double()[list(ids)] + model.pos_emb.weight.double()[:n]
    heads0, _ = _hand_heads(model, 0, x0)
    x = x0 + heads0.sum(0)
    x1 = x + _hand_mlp(model, 0, x)
    heads1, pats1 = _hand_heads(model, 1, x1, key_x, receiver)
    x = x1 + heads1.sum(0)
    x = x + _hand_mlp(model, 1, x)
    logits = _hand_ln(model.ln_f, x[-1]) @ model.head.weight.double().T
    return logits, x1, heads0, pats1


def hand_paths(model, clean, corrupt, receiver):
    """{sender: share of the clean answer} of every block-0 head's path into ``receiver``'s keys, by hand: the
    corrupted run, but the receiver's keys read the corrupted stream with the sender's clean write in place of its
    corrupted one (block 0's other heads and its MLP stay corrupted); the metric is the logit difference of the clean
    run's top token over the corrupted run's (its second when both agree), as a share of clean - corrupted."""
    lc, _, hc, _ = hand_two_layers(model, clean)
    lx, x1x, hx, _ = hand_two_layers(model, corrupt)
    answer = int(lc.argmax())
    top2 = torch.topk(lx, 2).indices.tolist()
    wrong = top2[1] if top2[0] == answer else top2[0]
    diff = lambda lg: float(lg[answer] - lg[wrong])  # noqa: E731
    m_clean, m_corrupt = diff(lc), diff(lx)
    out = {}
    for r in range(model.config.n_heads):
        lp = hand_two_layers(model, corrupt, receiver[1], x1x - hx[r] + hc[r])[0]
        out[(0, r)] = (diff(lp) - m_corrupt) / (m_clean - m_corrupt)
    return out


def test_step_12_numbers_it_prints_against_a_forward_by_hand(shipped_circuit):
    """Every number step 12 prints, on both shipped models, from a forward written here from the weights: the
    head's weight on the key it finds, each earlier head's path into its keys, the score and its key-side parts."""
    model, step, q, m, scores = shipped_circuit
    (l, h), clean = q.data["head"], list(q.data["clean"])
    assert l == 1  # the hand forward below is of a 2-layer model's second-layer head
    _, _, _, pats = hand_two_layers(model, clean)
    row = pats[h, -1]
    assert q.data["j"] == int(row.argmax()) and f"(weight {float(row.max()):.2f})" in q.text
    paths = hand_paths(model, clean, list(q.data["corrupt"]), (l, h))
    assert m["paths"] == pytest.approx(paths, abs=1e-3)
    totals = hand_key_totals(model, clean, l, h, q.data["i"], q.data["j"])
    assert m["key_totals"] == pytest.approx(totals, abs=1e-3)
    assert m["score"] == pytest.approx(sum(totals.values()), abs=1e-3)  # the parts add up to the score
    words = LS.answer(step, q, m, q.choices[0])[1].words
    best = max(paths, key=paths.get)
    assert f"{round(100 * paths[best]):.0f}%" in words and f"{m['score']:.2f}" in words
    top = max(totals, key=totals.get)
    assert f"**{top}**'s, {totals[top]:+.2f}" in words


def test_step_12_marks_the_head_the_reveal_names_as_the_circuits(shipped_circuit):
    """One story: the head marked right is the one the reveal names first and calls the circuit's; it is the
    earlier head with the best path, and a previous-token head. Where no path carries 10%, nothing is marked and the
    words say no single head carries it, never "0%, more than any other"."""
    model, step, q, m, scores = shipped_circuit
    paths = {p: m["paths"][p] for p in q.choices}
    best = max(paths, key=paths.get)
    right, shown = LS.answer(step, q, m, best)
    wrongs = [LS.answer(step, q, m, p)[0] for p in q.choices if p != best]
    words = shown.words
    assert not re.search(r"\b0 ?%[^.]*more than any other", words)
    assert "more than any other" not in words or paths[best] >= 0.10
    if paths[best] >= 0.10:
        assert right.correct is True and right.answer == best and not any(g.correct for g in wrongs)
        assert words.startswith(f"**{head_label(*best)}**")
        assert scores.previous_token[best] >= THRESHOLD and "K-composition" in words
        assert "Not this time" not in words and "not a previous-token head" not in words.split("The figure")[0]
    else:
        assert right.correct is None and all(g.correct is None for g in wrongs)
        assert words.startswith("No single earlier head's path") and "K-composition" not in words


def test_step_12_on_the_shipped_models_what_the_numbers_show():
    """The numbers of the issue: on the character model the circuit runs through L1 H3 (previous-token head, its
    path more than half the clean answer), not the score split's largest part, L1 H1; on the BPE model no single
    earlier head's path carries the answer."""
    for path, carried in ((SHIPPED, True), (BPE, False)):
        model, tok = load_checkpoint(path)
        scores = head_scores(model, tokenizer=tok)
        step, q, m = ask("circuit", LS.Context(model, tok, (1, 2, 3, 4), scores))
        best = max(q.choices, key=lambda p: m["paths"][p])
        assert (m["paths"][best] >= 0.10) == carried
        if carried:
            assert best == (0, 2) and max(m["key_totals"], key=m["key_totals"].get) == "L1 H1"
            assert LS.answer(step, q, m, (0, 2))[0].correct is True
            assert LS.answer(step, q, m, (0, 0))[0].correct is False


def test_step_12_asks_a_no_mlp_block_and_nothing_of_a_post_norm_one():
    """The score split needs a stream that is a sum of writers: an attention-only model has one (its split is asked
    and adds up), a post-norm model does not (the step says why)."""
    scores = scores_of([[0, 0], [0, 0]], [[0, 0], [0, 0.9]])
    c = ModelConfig(vocab_size=10, n_ctx=16, d_model=8, n_heads=2, n_layers=2, mlp=False)
    assert LS.question(LS.STEP["circuit"], LS.Context(Transformer(c), TEN, (1, 2, 3, 4), scores)).blocked is None
    post = ModelConfig(vocab_size=10, n_ctx=16, d_model=8, n_heads=2, n_layers=2, norm="post")
    blocked = LS.question(LS.STEP["circuit"], LS.Context(Transformer(post), TEN, (1, 2, 3, 4), scores)).blocked
    assert "post-norm" in blocked


def test_every_step_is_a_record_with_its_words():
    assert [s.key for s in LS.STEPS] == ["key", "mask", "off", "block", "share", "cost", "temp", "scaling", "forming",
                                         "piece", "patch", "circuit"]
    for s in LS.STEPS:
        assert s.title and s.page.startswith("pages/") and s.measures and s.too_close and s.on in (
            "prompt", "model", "nothing")


def test_nan_induction_scores_name_no_head():
    """Every score NaN (core.analysis's NaN-safe best_head finds none): no induction head, said in words."""
    ctx = LS.Context(pointing_model(), TEN, (1, 2, 3, 4), scores_of([[0.9, 0.1]], [[float("nan"), float("nan")]]))
    q = LS.question(LS.STEP["off"], ctx)
    assert q.blocked and "no induction head" in q.blocked and "nan" not in q.blocked
