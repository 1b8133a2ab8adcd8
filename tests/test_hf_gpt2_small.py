"""GPT-2 small's real shape (124M parameters, 12 layers of 12 heads, 1024 positions) with random weights:
it loads from a local folder and runs on this CPU, a full 1024-token window included. The names and shapes
come from transformers' own GPT2LMHeadModel built on the meta device (no memory); the weights are random."""
import json
import resource
import time

import pytest
import torch

transformers = pytest.importorskip("transformers")

from core.nn.checkpoint import check_checkpoint, load_checkpoint  # noqa: E402
from core.nn.params import count_parameters  # noqa: E402
from tests.gpt2_folders import small_bpe  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt2_small(tmp_path_factory):
    from safetensors.torch import save_file

    cfg = transformers.GPT2Config(bos_token_id=None, eos_token_id=None)  # GPT-2 small's shape, as published
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in transformers.GPT2LMHeadModel(cfg).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(shape, generator=g) * 0.02 for k, shape in shapes.items() if k != "lm_head.weight"}
    folder = tmp_path_factory.mktemp("models") / "gpt2-small-random"
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    # a small tokenizer: the model's 50,257 rows are more than its tokens, which the loader allows
    (folder / "tokenizer.json").write_text(small_bpe().to_str())
    return folder, state


def test_gpt2_small_shape_loads_and_runs_a_full_window_on_cpu(gpt2_small):
    folder, state = gpt2_small
    config, tok, _ = check_checkpoint(folder)
    assert (config.n_layers, config.n_heads, config.n_ctx, config.d_model) == (12, 12, 1024, 768)
    assert count_parameters(config)["total"] == 124_439_808
    t0 = time.perf_counter()
    model, tok = load_checkpoint(folder)
    load_s = time.perf_counter() - t0
    assert tok.vocab_size == 50257 and model.head.weight is model.tok_emb.weight
    torch.testing.assert_close(model.blocks[3].attn.qkv.weight, state["transformer.h.3.attn.c_attn.weight"].T)
    idx = torch.randint(0, 300, (1, 1024), generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    with torch.inference_mode():
        logits = model(idx).logits
    forward_s = time.perf_counter() - t0
    assert logits.shape == (1, 1024, 50257) and torch.isfinite(logits).all()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"GPT-2 small shape: load {load_s:.1f} s, 1024-token forward {forward_s:.1f} s, peak RSS {peak_gib:.1f} GiB")
    assert peak_gib < 8  # memory, not speed: the times are printed, bench/ measures speed


def test_gpt2_small_shape_matches_transformers_on_a_short_prompt(gpt2_small):
    folder, _ = gpt2_small
    model, tok = load_checkpoint(folder)
    theirs = transformers.GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    idx = torch.tensor([tok.encode("KING HENRY:\nOnce more unto the breach")])
    with torch.inference_mode():
        torch.testing.assert_close(model(idx).logits, theirs(idx).logits, atol=1e-4, rtol=0)
