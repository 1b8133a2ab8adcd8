"""The training recipes (issue 13): parameter groups, who gets Muon, the schedules' ends, a short run."""
import math

import pytest
import torch

from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.training.recipes import RECIPES, TrainConfig, lr_scale, make_optimizers, param_groups
from core.training.trainer import Trainer

TEXT = "".join(chr(97 + (i * 7 + i // 13) % 26) + (" " if i % 5 == 4 else "") for i in range(6000))


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=27, n_ctx=16, d_model=16, n_heads=2, n_layers=2))


def test_groups_cover_every_parameter_exactly_once(model):
    groups = param_groups(model)
    names = [n for g in groups.values() for n, _ in g]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    assert len(names) == len(set(names))
    # by hand: each block holds qkv, out, w1, w2 (matrices) and two norms' weight and bias (vectors)
    assert sorted(n for n, _ in groups["matrices"]) == sorted(
        f"blocks.{l}.{m}.weight" for l in range(2) for m in ("attn.qkv", "attn.out", "mlp.w1", "mlp.w2"))
    assert sorted(n for n, _ in groups["other_matrices"]) == ["head.weight", "pos_emb.weight", "tok_emb.weight"]
    assert all(p.dim() == 1 for _, p in groups["vectors"]) and len(groups["vectors"]) == 2 * 2 * 2 + 2


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_optimisers_get_each_parameter_once_and_muon_only_block_matrices(model, recipe):
    opts = make_optimizers(model, TrainConfig.recipe(recipe, steps=10))
    seen = [p for o in opts for g in o.param_groups for p in g["params"]]
    assert len(seen) == len(list(model.parameters())) == len({id(p) for p in seen})
    muon = [o for o in opts if isinstance(o, torch.optim.Muon)]
    if recipe == "adamw":
        assert not muon and all(isinstance(o, torch.optim.AdamW) for o in opts)
    else:
        block = {id(p) for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2}
        got = {id(p) for g in muon[0].param_groups for p in g["params"]}
        assert got == block and all(p.dim() == 2 for g in muon[0].param_groups for p in g["params"])


def test_cosine_schedule_ends():
    tc = TrainConfig(steps=1000, warmup=100, schedule="cosine", min_lr_ratio=0.1)
    assert lr_scale(0, tc) == pytest.approx(1 / 100) and lr_scale(99, tc) == pytest.approx(1.0)
    assert lr_scale(100, tc) == pytest.approx(1.0)
    assert lr_scale(550, tc) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the cosine
    assert lr_scale(1000, tc) == pytest.approx(0.1)


def test_wsd_schedule_ends():
    tc = TrainConfig(steps=1000, warmup=None, warmup_frac=0.05, schedule="wsd", cooldown_frac=0.4, min_lr_ratio=0.0)
    assert tc.warmup == 50  # scales with the run
    assert lr_scale(0, tc) == pytest.approx(1 / 50) and lr_scale(49, tc) == pytest.approx(1.0)
    assert all(lr_scale(s, tc) == 1.0 for s in range(50, 600))  # constant until the last 40%
    assert lr_scale(600, tc) == pytest.approx(1.0) and lr_scale(999, tc) == pytest.approx(0.0)
    assert lr_scale(800, tc) == pytest.approx(1 - 200 / 399)  # a straight line from step 600 to the last
    assert TrainConfig(steps=100, warmup=None, warmup_frac=0.05).warmup == 5


def test_bad_recipe_settings_are_refused():
    with pytest.raises(ValueError, match="optimizer must be one of"):
        TrainConfig(optimizer="sgd")
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="muon_lr"):
        TrainConfig(muon_lr=0)
    with pytest.raises(ValueError, match="unknown recipe"):
        TrainConfig.recipe("lion")


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_a_short_run_lowers_the_loss_and_is_deterministic(recipe):
    def run():
        tc = TrainConfig.recipe(recipe, steps=40, batch_size=8, eval_batches=2, seed=3, warmup=4)
        tr = Trainer(TEXT, dict(n_ctx=16, d_model=16, n_heads=2, n_layers=1), tc)
        first = tr.evaluate()["val_loss"]
        losses = [tr.step()["loss"] for _ in range(40)]
        return first, tr.evaluate()["val_loss"], losses
    first, last, losses = run()
    assert last < first - 0.3 and math.log(27) - 0.5 < first < math.log(27) + 0.5
    assert run()[2] == losses  # the same seed, the same steps


def test_the_model_card_names_the_recipe():
    from dataclasses import asdict

    from core.nn.model_card import model_card

    cfg = ModelConfig(vocab_size=3, n_ctx=4, d_model=4, n_heads=1, n_layers=1)
    def recipe_row(training):  # the card escapes Markdown; read the row as a reader sees it
        row = next(line for line in model_card("m", cfg, training).splitlines() if line.startswith("| recipe |"))
        return row.replace("\\", "")
    assert recipe_row({"train_config": asdict(TrainConfig.recipe("muon", steps=10))}).startswith(
        "| recipe | Muon (block matrices) + AdamW; warmup, constant, linear cooldown; peak lr 0.006, Muon 0.02")
    assert recipe_row({"train_config": asdict(TrainConfig.recipe("adamw", steps=10))}).startswith(
        "| recipe | AdamW; warmup, cosine decay; peak lr 0.003")
    assert "| recipe | n/a |" in model_card("m", cfg, {})
