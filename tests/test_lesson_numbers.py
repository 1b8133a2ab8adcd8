"""The Lesson's numbers as a learner reads them (issue 55): a share asked in percent is answered in percent with the
answers that count; a count of FLOPs in powers of ten, never "e+12"; a loss that rose is said to rise; and step 10's
"no residual" answer says that the model has only a few blocks, beside the variant study's deeper stacks. Every
value is computed here, by hand or from the study's own CSV."""
import copy
import csv
import re

import numpy as np
import pytest

from conftest import ROOT, SHIPPED
from core import lesson as LS
from core.analysis.induction import HeadScores, head_scores
from core.nn.checkpoint import load_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer
from core.views.variants_view import STUDY_DIR, read_study

SUPER = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?: × 10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)?")


def numbers(text: str) -> list[float]:
    """Every number written in ``text``, read back: 66.3, 61, 6.93 × 10¹² -> 6.93e12, 198,912."""
    out = []
    for m in NUMBER.findall(text):
        mant, _, exp = m.partition(" × 10")
        out.append(float(mant.replace(",", "")) * 10 ** int(exp.translate(SUPER)) if exp else
                   float(mant.replace(",", "")))
    return out


def answer(key, ctx, guess):
    step = LS.STEP[key]
    q = LS.question(step, ctx)
    assert q.blocked is None, q.blocked
    m = step.measure(ctx, q)
    return LS.answer(step, q, m, guess)


def config_ctx(config):
    zeros = [[0.0] * config.n_heads] * config.n_layers
    return LS.Context(Transformer(config), CharTokenizer("abcdefghij"), (1, 2, 3, 4),
                      HeadScores(np.array(zeros), np.array(zeros), 4.0, 1.0))


def test_step_5_answers_a_share_asked_in_percent_in_percent():
    c = ModelConfig(vocab_size=10, n_ctx=16, d_model=64, n_heads=4, n_layers=1)
    share = 2 * 64 * 256 / (4 * 64 * 64 + 2 * 64 * 256 + 4 * 64)  # 0.6632...
    grade, shown = answer("share", config_ctx(c), 40)
    percents = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)%", grade.why)]
    # the share, then the lowest and the highest answer that count (8% of the share either side), all in percent
    assert percents == pytest.approx([100 * share, 92 * share, 108 * share], abs=0.05), grade.why
    assert "0.66" not in grade.why and "answers from" in grade.why
    assert numbers(shown.words) == pytest.approx([100 * share], abs=0.05)


def test_step_6_writes_the_flops_in_powers_of_ten():
    c = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    d, m, L = 24, 11, 2
    N = L * (12 * d * d + 4 * d) + m * d + 16 * d + 2 * d + d * m
    truth = 6 * N * 10_000_000
    grade, shown = answer("cost", config_ctx(c), 1e12)
    assert "e+" not in grade.why and "e+" not in shown.words
    assert numbers(grade.why) == pytest.approx([truth, 0.9 * truth, 1.1 * truth], rel=5e-3), grade.why
    assert numbers(shown.words)[-1] == pytest.approx(truth, rel=5e-3)


def test_step_9_says_a_loss_that_rose_rose():
    model, tok = load_checkpoint(SHIPPED)
    early = head_scores(load_checkpoint(SHIPPED, step=0)[0], tokenizer=tok)
    end = copy.copy(head_scores(model, tokenizer=tok))
    rise, fall = 0.1, 0.5  # the first copy's loss rose by 0.1 from the first snapshot; the second's fell by 0.5
    end.first_copy_loss, end.second_copy_loss = early.first_copy_loss + rise, early.second_copy_loss - fall
    ctx = LS.Context(model, tok, (1, 2, 3, 4), end, snapshots=(0, 12000),
                     load_step=lambda s: load_checkpoint(SHIPPED, step=s))
    grade, _ = answer("forming", ctx, "first")
    assert grade.answer == "second" and grade.correct is False
    assert "fell: -" not in grade.why and "fell -" not in grade.why
    said = dict(re.findall(r"the (first|second) copy's loss: (rose|fell) ", grade.why))
    assert said == {"second": "fell", "first": "rose"}, grade.why
    assert numbers(grade.why) == pytest.approx([fall, rise], abs=0.001), grade.why


def test_step_10_says_the_model_has_few_blocks_beside_the_deeper_stacks():
    rows = {r["variant"]: r for r in csv.DictReader(open(ROOT / "assets" / "variants" / "variants.csv"))}
    if not all(v in rows for v in ("lecture", "no-residual", "no-mlp", "deep-L6", "deep-L6-bare", "deep-L12",
                                   "deep-L12-bare")):
        pytest.skip("the shipped variant study lacks the runs step 10 shows")
    ctx = LS.Context(None, CharTokenizer("abcdefghij"), (1, 2, 3, 4), None, study=lambda: read_study(STUDY_DIR))
    blocks = int(rows["lecture"]["n_layers"])
    words = {2: "two", 3: "three", 4: "four"}.get(blocks, str(blocks))
    for guess in ("no-mlp", "no-residual"):
        grade, shown = answer("piece", ctx, guess)
        assert f"only {words} blocks" in shown.words and "deep stacks" in shown.words
        got = dict(shown.metrics)
        for v in ("deep-L6", "deep-L12"):
            L = rows[v]["n_layers"]
            assert float(got[f"{L} blocks, with residual and LayerNorm"]) == pytest.approx(
                float(rows[v]["causal_val_loss"]), abs=5e-4)
            assert float(got[f"{L} blocks, without either"]) == pytest.approx(
                float(rows[v + "-bare"]["causal_val_loss"]), abs=5e-4)
    assert f"({words} blocks)" in LS.question(LS.STEP["piece"], ctx).text
