import random

import torch

from core.model import ModelConfig, Transformer
from core.nn.params import count_parameters, count_module_parameters


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
