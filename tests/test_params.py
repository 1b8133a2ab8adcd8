import random
import re

import pytest
import torch

from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.params import (BREAKDOWN_ROWS, DETAILED_ROWS, breakdown_rows, build_on_meta, count_module_parameters,
                         count_parameters, heads_sweep, mlp_latex, parameter_table, per_block_formula, per_block_latex,
                         share_latex)


def test_lecture_block_is_49408():
    counts = count_parameters(ModelConfig(vocab_size=65, d_model=64, n_heads=4, d_ff=256))
    assert counts["per_block"] == 49_408 == 12 * 64**2 + 4 * 64
    assert counts["attention"] == 16_384 and counts["mlp"] == 32_768 and counts["norms"] == 256


def test_heads_do_not_change_the_count():
    a = count_parameters(ModelConfig(d_model=64, n_heads=1))
    b = count_parameters(ModelConfig(d_model=64, n_heads=16))
    assert a == b


def test_gpt3_blocks():
    counts = count_parameters(ModelConfig(vocab_size=50257, n_ctx=2048, d_model=12288, n_heads=96, n_layers=96))
    assert abs(counts["blocks"] / 1.74e11 - 1) < 0.005


def test_matches_instantiated_model_for_many_configs():
    rng = random.Random(0)
    for _ in range(25):
        h = rng.choice([1, 2, 3, 4, 8])
        cfg = ModelConfig(
            vocab_size=rng.randint(2, 300), n_ctx=rng.randint(1, 200), d_model=h * rng.randint(1, 12),
            n_heads=h, n_layers=rng.randint(1, 4), d_ff=rng.choice([None, rng.randint(1, 100)]),
        )
        model = Transformer(cfg)
        counts = count_parameters(cfg)
        assert counts["total"] == count_module_parameters(model)
        assert counts["per_block"] == count_module_parameters(model.blocks[0])
        assert counts["attention"] == count_module_parameters(model.blocks[0].attn)
        assert counts["mlp"] == count_module_parameters(model.blocks[0].mlp)


def test_gpt3_on_meta_device():
    cfg = ModelConfig(vocab_size=50257, n_ctx=2048, d_model=12288, n_heads=96, n_layers=96)
    with torch.device("meta"):
        model = Transformer(cfg)
    assert count_module_parameters(model) == count_parameters(cfg)["total"]


def test_per_block_latex_states_the_lecture_number():
    from core.nn.params import per_block_latex

    assert per_block_latex(ModelConfig(d_model=64)) == r"12d^2 + 4d = 12(64)^2 + 4(64) = 49{,}408"
    assert per_block_latex(ModelConfig(d_model=8, n_heads=2, d_ff=10)).endswith("= 4(8)^2 + 2(8)(10) + 4(8) = 448")


def test_gpt2_terms_biases_and_tied_output_agree_with_the_model():
    from core.nn.params import breakdown_rows, measured_counts, parameter_table, per_block_latex

    rng = random.Random(1)
    for _ in range(20):
        h = rng.choice([1, 2, 3, 4])
        cfg = ModelConfig(vocab_size=rng.randint(2, 300), n_ctx=rng.randint(1, 64), d_model=h * rng.randint(1, 8),
                          n_heads=h, n_layers=rng.randint(1, 3), d_ff=rng.choice([None, rng.randint(1, 50)]),
                          bias=rng.random() < 0.5, tie_weights=rng.random() < 0.5)
        model = Transformer(cfg)
        counts = count_parameters(cfg)
        assert counts["total"] == count_module_parameters(model) == sum(p.numel() for p in model.parameters())
        assert {k: v for k, v in counts.items() if k in measured_counts(model)} == measured_counts(model)
        for detailed in (False, True):
            assert all(r["agree"] for r in parameter_table(model, breakdown_rows(cfg, detailed)))
    gpt2ish = ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_heads=12, n_layers=12, bias=True, tie_weights=True)
    assert count_parameters(gpt2ish)["per_block"] == 7_087_872 == 12 * 768**2 + 13 * 768
    assert per_block_latex(gpt2ish) == r"12d^2 + 13d = 12(768)^2 + 13(768) = 7{,}087{,}872"
    rows = {key: (label, formula) for key, label, formula in breakdown_rows(gpt2ish, detailed=True)}
    assert rows["attention_biases"][1] == "4·d" and rows["mlp_biases"][1] == "d_ff + d"
    assert "tied" in rows["output"][0] and count_parameters(gpt2ish)["output"] == 0
    assert "attention_biases" not in {key for key, *_ in breakdown_rows(ModelConfig(), detailed=True)}


def value_of(text: str, **symbols) -> float:
    """A formula evaluated the way a reader would, independently of how core.nn.params built it: the Parameters
    page's "4·d² + 4·d", the LaTeX "4d^2 + 2\\,d\\,d_{ff}" and "4(8)^2 + 2(8)(10)", the terminal's "4*8^2".
    Products are implicit ("9d", "2(8)(10)"); thousands separators ("49{,}408", "7,087,872") are dropped."""
    expr = text.replace(r"\,", "*").replace("{,}", "").replace(",", "").replace("d_{ff}", "d_ff")
    expr = expr.replace("·", "*").replace("²", "^2").replace("^", "**")
    expr = re.sub(r"(\d|\))(?=[a-z(])", r"\1*", expr)  # 4d -> 4*d, 4(8) -> 4*(8), (8)(10) -> (8)*(10)
    return eval(expr, {"__builtins__": {}}, symbols)


def fraction_of(latex: str, **symbols) -> tuple[float, float]:
    """(numerator, denominator) of a \\frac{..}{..} of symbols, each evaluated with value_of."""
    m = re.fullmatch(r"\\frac\{(.*)\}\{(.*)\}", latex.replace("d_{ff}", "d_ff"))
    assert m, latex
    return value_of(m.group(1), **symbols), value_of(m.group(2), **symbols)


def by_hand(d, d_ff, m, n_ctx, L, bias, tied):
    """The lecture's count written out once more, for the tests below: per block 4d² + 2 d d_ff + 4d (plus 4d and
    d_ff + d of biases), then L blocks, the (m, d) embedding, the position table, the final norm, the output map."""
    attention, mlp = 4 * d * d + (4 * d if bias else 0), 2 * d * d_ff + (d_ff + d if bias else 0)
    per_block = attention + mlp + 4 * d
    return dict(attention=attention, mlp=mlp, per_block=per_block,
                total=L * per_block + m * d + n_ctx * d + 2 * d + (0 if tied else d * m))


CONFIGS = [ModelConfig(vocab_size=65, n_ctx=256, d_model=64, n_heads=4, n_layers=4),
           ModelConfig(vocab_size=50257, n_ctx=1024, d_model=768, n_heads=12, n_layers=12, bias=True, tie_weights=True),
           ModelConfig(vocab_size=7, n_ctx=5, d_model=8, n_heads=2, n_layers=3, d_ff=10, bias=True),
           ModelConfig(vocab_size=9, n_ctx=3, d_model=6, n_heads=3, n_layers=2, d_ff=24, tie_weights=True)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["lecture", "gpt2-small", "bias", "tied"])
def test_every_formula_on_the_parameters_page_evaluates_to_the_count_beside_it(cfg):
    counts = count_parameters(cfg)
    symbols = dict(d=cfg.d_model, d_ff=cfg.d_ff, m=cfg.vocab_size, n_ctx=cfg.n_ctx, L=cfg.n_layers,
                   per_block=counts["per_block"])
    expected = by_hand(cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_ctx, cfg.n_layers, cfg.bias, cfg.tie_weights)
    assert {k: counts[k] for k in expected} == expected
    for detailed in (False, True):
        for key, label, formula in breakdown_rows(cfg, detailed):
            if formula == "sum of the above":
                continue  # the total, checked against by_hand above
            shown = 0 if formula == "0 new" else value_of(formula.replace("per block", "per_block"), **symbols)
            assert shown == counts[key], (key, formula)


def test_gpt2_rows_say_biases_and_tied_in_the_pages_words():
    gpt2 = CONFIGS[1]
    rows = breakdown_rows(gpt2, detailed=True)
    assert [key for key, *_ in rows] == ["W_Q", "W_K", "W_V", "W_O", "attention_biases", "attention", "W1", "W2",
                                         "mlp_biases", "mlp", "norms", "per_block", "blocks", "token_embedding",
                                         "position_embedding", "final_norm", "output", "total"]
    labels = {key: label for key, label, _ in rows}
    assert labels["attention"] == "attention W_Q, W_K, W_V, W_O and their biases (per block)"
    assert labels["mlp"] == "MLP W1, W2 and their biases (per block)"
    assert labels["per_block"] == "one block"
    assert labels["output"] == "output map, tied to the token embedding (the same matrix)"
    assert [key for key, *_ in breakdown_rows(gpt2)] == [key for key, *_ in BREAKDOWN_ROWS]  # not detailed by default
    # the lecture's model keeps the lecture's rows, word for word
    assert breakdown_rows(ModelConfig()) == BREAKDOWN_ROWS and breakdown_rows(ModelConfig(), True) == DETAILED_ROWS


def test_parameter_table_shows_a_tensor_the_formula_forgot():
    torch.manual_seed(0)
    cfg = CONFIGS[2]
    model = Transformer(cfg)
    table = parameter_table(model)  # rows default to the config's breakdown rows
    assert [r["part"] for r in table] == [label for _, label, _ in breakdown_rows(cfg)]
    assert set(table[0]) == {"part", "formula", "by formula", "counted in the model", "agree"}
    by_part = {r["part"]: r for r in table}
    assert by_part["one block"]["by formula"] == by_part["one block"]["counted in the model"] == 498
    assert all(r["agree"] for r in table)
    assert len(parameter_table(model, breakdown_rows(cfg, detailed=True))) == 18
    model.blocks[0].attn.extra = torch.nn.Parameter(torch.zeros(3))  # 3 numbers no formula knows of
    wrong = {key for (key, *_), r in zip(breakdown_rows(cfg), parameter_table(model)) if not r["agree"]}
    assert wrong == {"attention", "per_block", "blocks", "total"}
    row = next(r for r in parameter_table(model) if r["part"] == "one block")
    assert (row["by formula"], row["counted in the model"]) == (498, 501)


def test_heads_sweep_counts_the_same_attention_for_every_head_count():
    rows = heads_sweep(ModelConfig(d_model=64, n_heads=4))  # divisors of 64: 1, 2, 4, ..., 64; at most 6 rows
    assert [r["heads h"] for r in rows] == [1, 2, 4, 8, 16]
    assert [r["width per head d/h"] for r in rows] == [64, 32, 16, 8, 4]
    assert {(r["attention by formula"], r["attention counted"], r["block counted"]) for r in rows} == {
        (4 * 64**2, 4 * 64**2, 4 * 64**2 + 2 * 64 * 256 + 4 * 64)}
    # fewer rows: every second divisor, and the model's own h always among them
    assert [r["heads h"] for r in heads_sweep(ModelConfig(d_model=64, n_heads=8), max_rows=3)] == [1, 4, 8]
    gpt2 = heads_sweep(CONFIGS[1])  # 18 divisors of 768, every third: 1, 4, 12, 32, 96
    assert [r["heads h"] for r in gpt2] == [1, 4, 12, 32, 96]
    assert {(r["attention counted"], r["block counted"]) for r in gpt2} == {(4 * 768**2 + 4 * 768, 7_087_872)}
    # the model's own d_ff and biases: d = 12, d_ff = 20, h = 3 among the divisors 1, 2, 3, 4, 6, 12
    odd = heads_sweep(ModelConfig(d_model=12, n_heads=3, d_ff=20, bias=True))
    assert [r["heads h"] for r in odd] == [1, 2, 3, 4, 6]
    assert all(type(r["width per head d/h"]) is int for r in odd)
    want = by_hand(12, 20, 1, 1, 1, True, False)
    assert {(r["attention by formula"], r["attention counted"], r["block counted"]) for r in odd} == {
        (want["attention"], want["attention"], want["per_block"])}
    assert heads_sweep(ModelConfig(d_model=1, n_heads=1)) == [
        {"heads h": 1, "width per head d/h": 1, "attention by formula": 4, "attention counted": 4,
         "block counted": 4 + 2 * 4 + 4}]


def test_a_model_on_the_meta_device_has_shapes_and_no_storage():
    model = build_on_meta(CONFIGS[1])
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert count_module_parameters(model) == by_hand(768, 3072, 50257, 1024, 12, True, True)["total"]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["lecture", "gpt2-small", "bias", "tied"])
def test_share_fractions_are_attention_and_mlp_over_one_block(cfg):
    counts = count_parameters(cfg)
    attn, mlp = share_latex(cfg)
    symbols = dict(d=cfg.d_model, d_ff=cfg.d_ff)
    assert fraction_of(attn, **symbols) == (counts["attention"], counts["per_block"])
    assert fraction_of(mlp, **symbols) == (counts["mlp"], counts["per_block"])


@pytest.mark.parametrize("general", [False, True])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["lecture", "gpt2-small", "bias", "tied"])
def test_per_block_formulas_hold_in_symbols_in_numbers_and_in_total(cfg, general):
    n = count_parameters(cfg)["per_block"]
    symbols = dict(d=cfg.d_model, d_ff=cfg.d_ff)
    # the lecture's short form (12d^2 + ...) exactly when d_ff = 4d and the general form was not asked for;
    # the terminal's plain text keeps it for the bias-free lecture shape only
    short = cfg.d_ff == 4 * cfg.d_model and not general
    texts = [(per_block_latex(cfg, general), short)]
    if not general:
        texts.append((per_block_formula(cfg), short and not cfg.bias))
    for text, short in texts:
        symbolic, numbers, total = text.split(" = ")
        assert (value_of(symbolic, **symbols), value_of(numbers), value_of(total)) == (n, n, n), text
        assert symbolic.startswith("12d^2") == short, text
    assert "," in per_block_formula(CONFIGS[1]) and "{,}" in per_block_latex(CONFIGS[1])


def test_mlp_formula_names_the_models_nonlinearity_and_its_biases():
    assert mlp_latex(ModelConfig()) == r"\operatorname{MLP}(u) = W_2^\top \,\operatorname{ReLU}(W_1^\top u)"
    gpt2 = ModelConfig(bias=True, activation="gelu")
    assert mlp_latex(gpt2) == r"\operatorname{MLP}(u) = W_2^\top \,\operatorname{GELU}(W_1^\top u + b_1) + b_2"
    assert mlp_latex(gpt2, hidden=True) == (r"h = \operatorname{GELU}(W_1^\top u + b_1) \in \mathbb{R}^{d_{ff}}, "
                                            r"\qquad \operatorname{MLP}(u) = W_2^\top h + b_2")
    assert mlp_latex(ModelConfig(), hidden=True) == (r"h = \operatorname{ReLU}(W_1^\top u) \in \mathbb{R}^{d_{ff}}, "
                                                     r"\qquad \operatorname{MLP}(u) = W_2^\top h")
