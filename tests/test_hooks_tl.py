"""Our cache by TransformerLens's names equals TransformerLens's own on the same GPT-2 weights (issue 41's contract).

TransformerLens is not a dependency of the app or of CI: this test runs where it is importable (it was run with
transformer_lens 2.16.1) and is skipped elsewhere, saying so. The weights are a random GPT-2 saved as a Hugging Face
folder (no download), read by core.nn.hf and by TransformerLens's own GPT-2 conversion."""
import pytest
import torch

tl = pytest.importorskip("transformer_lens", reason="TransformerLens is not installed (not a dependency of the app)")
pytest.importorskip("transformers")

from core.nn.checkpoint import load_checkpoint  # noqa: E402
from tests.gpt2_folders import save_random_gpt2  # noqa: E402


def test_run_with_cache_gives_transformer_lens_cache_by_the_same_names(tmp_path):
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    folder, theirs = save_random_gpt2(tmp_path / "gpt2", tie_word_embeddings=True)
    model, _ = load_checkpoint(folder)
    c = model.config
    cfg = HookedTransformerConfig(n_layers=c.n_layers, d_model=c.d_model, n_heads=c.n_heads, d_head=c.d_head,
                                  d_mlp=c.d_ff, n_ctx=c.n_ctx, d_vocab=c.vocab_size, act_fn="gelu_new",
                                  normalization_type="LN", eps=c.ln_eps, positional_embedding_type="standard",
                                  default_prepend_bos=False)
    hooked = HookedTransformer(cfg)
    hooked.load_and_process_state_dict(convert_gpt2_weights(theirs, cfg), fold_ln=False, center_writing_weights=False,
                                       center_unembed=False, fold_value_biases=False)
    hooked.eval()
    idx = torch.randint(0, c.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want_logits, want = hooked.run_with_cache(idx)
        logits, got = model.run_with_cache(idx)
    torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=0)
    common = [name for name in model.hook_names() if name in want]
    # every hook of ours that TransformerLens has by that name (hook_result and hook_mlp_in it records only when
    # asked: use_attn_result, use_hook_mlp_in)
    assert set(model.hook_names()) - set(common) <= {f"blocks.{l}.{n}" for l in range(c.n_layers)
                                                      for n in ("attn.hook_result", "hook_mlp_in")}
    future = torch.ones(12, 12, dtype=torch.bool).triu(1)
    for name in common:
        ours, theirs_ = got[name], want[name]
        if name.endswith("hook_attn_scores"):  # ours before the mask (the Attention page's); TL's after it
            ours, theirs_ = ours.masked_fill(future, 0.0), theirs_.masked_fill(future, 0.0)
        torch.testing.assert_close(ours, theirs_, atol=1e-4, rtol=1e-4, msg=name)
