"""A run's memory is estimated from its shape before it starts, and a run over the server's budget is refused."""
import pytest
import torch

from core.data.budget import DEFAULT_RUN_MEMORY, PROCESS_BYTES, memory_budget
from core.training.job_settings import (FLOAT, JobSettings, activation_floats_per_token, memory_summary, run_memory,
                                        validate_settings)
from core.serve.sizes import parse_size
from core.nn.config import ModelConfig
from core.nn.model import Transformer

# the example: characters, d=176, h=4, L=24, n_ctx=256, batch 256 (under MAX_PARAMS and 65,536 tokens a step)
HUGE = dict(d_model=176, n_heads=4, n_layers=24, n_ctx=256, batch_size=256)


@pytest.fixture(autouse=True)
def default_budget(monkeypatch):
    monkeypatch.delenv("TE_RUN_MEMORY", raising=False)


def test_activations_of_a_tiny_shape_counted_by_hand():
    # d=4, h=2, L=1, d_ff=8, m=5: floats kept per token for the backward pass
    block = (4      # the block's input x (LayerNorm 1 reads it)
             + 4    # LayerNorm 1's output (W_QKV reads it)
             + 12   # q, k, v: the fused (d, 3d) map's output
             + 2    # attention's log-sum-exp, one per head
             + 4    # attention's output, the input of W_O
             + 4    # the stream after attention (LayerNorm 2 reads it)
             + 4    # LayerNorm 2's output (W1 reads it)
             + 8    # the ReLU's output, d_ff (W2 reads it)
             + 4)   # mean and 1/sigma of both LayerNorms
    top = 4 + 4 + 2 + 5 + 2 + 2  # stream, final LayerNorm, its mean and 1/sigma, log-softmax, int64 ids and targets
    assert activation_floats_per_token(ModelConfig(vocab_size=5, n_ctx=8, d_model=4, n_heads=2, n_layers=1,
                                                   d_ff=8)) == block + top == 65


def _saved_bytes(config: ModelConfig, batch: int) -> int:
    """Bytes of every tensor autograd keeps for the backward pass of one training loss, weights excluded."""
    model = Transformer(config).train()
    x = torch.randint(config.vocab_size, (batch, config.n_ctx))
    y = torch.randint(config.vocab_size, (batch, config.n_ctx))
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, targets=y).loss
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in kept.items() if ptr not in weights)


@pytest.mark.parametrize("shape, batch", [
    (dict(vocab_size=65, n_ctx=32, d_model=32, n_heads=4, n_layers=2), 4),
    (dict(vocab_size=300, n_ctx=16, d_model=48, n_heads=3, n_layers=3, d_ff=40), 6),
    (dict(vocab_size=7, n_ctx=64, d_model=16, n_heads=8, n_layers=1), 2),
])
def test_the_count_is_what_autograd_keeps(shape, batch):
    config = ModelConfig(**shape)
    # and one scalar: the cross-entropy's total weight
    assert _saved_bytes(config, batch) == FLOAT * (batch * config.n_ctx * activation_floats_per_token(config) + 1)


def test_weights_and_optimiser_state_by_hand():
    # d=4, L=1, d_ff=16, m=5, n_ctx=8: per block 4*4*4 (attention) + 2*4*16 (MLP) + 4*4 (norms) = 208, of which the
    # Muon recipe's matrices are 192; embedding 20, positions 32, final norm 8, output 20: 288 in all
    s = JobSettings(d_model=4, n_heads=2, n_layers=1, d_ff=16, n_ctx=8, batch_size=1)
    muon = run_memory(s, 5, 0).weights
    adamw = run_memory(JobSettings(**{**s.__dict__, "recipe": "adamw"}), 5, 0).weights
    assert muon == 4 * (288 + 288 + 2 * 96 + 192)  # weights, gradients, AdamW's two moments, Muon's one momentum
    assert adamw == 4 * (288 + 288 + 2 * 288)


def test_the_estimate_grows_with_each_setting():
    base = JobSettings()
    total = run_memory(base, 65, 1_000_000).total
    assert total > PROCESS_BYTES
    for change in (dict(d_model=128), dict(n_layers=4), dict(n_ctx=256), dict(batch_size=64)):
        assert run_memory(JobSettings(**{**base.__dict__, **change}), 65, 1_000_000).total > total, change
    assert run_memory(base, 4096, 1_000_000).total > total
    assert run_memory(base, 65, 4_000_000).total > total


@pytest.mark.parametrize("text, size", [("1.5G", 3 * 2**29), ("800M", 800 * 2**20), ("1073741824", 2**30),
                                        ("512k", 2**19), ("2GiB", 2**31), (" 1 GB ", 2**30), ("0.5g", 2**29)])
def test_sizes_as_people_write_them(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["lots", "-1G", "1.5X", "", "G", "1e9"])
def test_a_wrong_size_says_so(bad):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(bad)


def test_the_budget_comes_from_the_environment(monkeypatch):
    assert memory_budget() == DEFAULT_RUN_MEMORY == 2**30
    monkeypatch.setenv("TE_RUN_MEMORY", "3G")
    assert memory_budget() == 3 * 2**30
    monkeypatch.setenv("TE_RUN_MEMORY", "0")
    assert memory_budget() is None
    for bad in ("plenty", "1.5"):  # 1.5 bytes: a unit left out
        monkeypatch.setenv("TE_RUN_MEMORY", bad)
        with pytest.raises(ValueError, match="TE_RUN_MEMORY"):
            memory_budget()


def test_a_run_past_the_memory_budget_is_refused_and_the_lecture_model_is_not(monkeypatch):
    assert "memory" not in validate_settings(JobSettings(), 1_000_000, 65)
    assert memory_summary(JobSettings(), 65, 1_000_000).endswith("the server allows 1.0 GiB per run.")
    errors = validate_settings(JobSettings(**HUGE), 1_000_000, 65)
    assert list(errors) == ["memory"]  # every other check passes: only memory refuses it
    # the activations alone: 24 blocks x (8 x 176 + 704 + 4 + 4) floats + the top, per token, 65,536 tokens
    assert run_memory(JobSettings(**HUGE), 65, 1_000_000).activations > 4 * 65_536 * (24 * 2120 + 352 + 71)
    assert "the server allows 1.0 GiB per run" in errors["memory"] and "batch × n_ctx" in errors["memory"]
    monkeypatch.setenv("TE_RUN_MEMORY", "64G")
    assert validate_settings(JobSettings(**HUGE), 1_000_000, 65) == {}
    monkeypatch.setenv("TE_RUN_MEMORY", "a lot")
    assert "TE_RUN_MEMORY" in validate_settings(JobSettings(), 1_000_000, 65)["memory"]


def test_a_bpe_vocabulary_counts_in_the_logits():
    # the lecture's shape with a big vocabulary: the (B n, m) logits, their log-softmax and their gradients; and a
    # saved run is scored 64 windows at a time, whatever its batch: 64 x 2,048 x 16,384 floats of logits are 8 GiB
    split = (400_000, 45_000)
    assert "memory" not in validate_settings(JobSettings(tokenizer="bpe", bpe_vocab=2048), 1_000_000, 2048, split)
    big_batch = JobSettings(tokenizer="bpe", bpe_vocab=16_384, batch_size=256)
    assert "memory" in validate_settings(big_batch, 1_000_000, 16_384, split)
    long_windows = JobSettings(tokenizer="bpe", bpe_vocab=16_384, n_ctx=2048, batch_size=1, n_layers=1)
    assert run_memory(long_windows, 16_384, 1_000_000).activations > 4 * 64 * 2048 * 16_384
    assert "memory" in validate_settings(long_windows, 1_000_000, 16_384, split)


def test_a_training_job_refuses_over_budget_settings_without_the_page():
    from core.training.training_job import TrainingJob

    with pytest.raises(ValueError, match="the server allows 1.0 GiB per run"):
        TrainingJob("some text " * 1000, "text", JobSettings(**HUGE))
    TrainingJob("some text " * 1000, "text", JobSettings())  # the lecture's model is fine (and never started)


def test_the_training_page_refuses_only_the_start(open_page, tmp_path):
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    at.radio(key="train_corpus").set_value("pydoc").run()
    assert any("the server allows 1.0 GiB per run" in c.value for c in at.caption)
    assert not at.button(key="train_start").disabled
    for key, value in HUGE.items():
        at.number_input(key=f"train_{key}").set_value(value)
    at.run()
    assert not at.exception
    refusals = [e.value for e in at.error]
    assert len(refusals) == 1 and "the server allows 1.0 GiB per run" in refusals[0]
    assert at.button(key="train_start").disabled
    # everything else stays: the settings as typed, the count and the cost
    assert {k: at.number_input(key=f"train_{k}").value for k in HUGE} == HUGE
    metrics = {m.label for m in at.metric}
    assert {"Parameters N", "Training tokens D", "Compute 6ND (FLOP)"} <= metrics
    at.number_input(key="train_batch_size").set_value(8).run()
    at.number_input(key="train_n_layers").set_value(2).run()
    assert not at.error and not at.button(key="train_start").disabled
