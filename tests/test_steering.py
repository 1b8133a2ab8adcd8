"""Steering (core.analysis.steering, core.features.steering): alpha = 0 is the plain text bit for bit, a steered
generation (key/value cache, sliding window) equals a loop written here with the addition done by hand, and a
direction built to mean one token makes every new token that token."""
import pytest
import torch

from core.analysis import generation as G
from core.analysis.sampling import generate
from core.analysis.steering import steer_hooks
from core.analysis.sae import SAE, SAEConfig
from core.features.steering import feature_hooks, feature_scales
from core.nn.config import ModelConfig
from core.nn.model import Transformer

CHARS = [chr(ord("a") + i) for i in range(11)]
SITE0, SITE1 = "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"
PROMPT = [1, 4, 2, 7, 3]
N_NEW = 20  # 5 + 20 > n_ctx = 16: the window slides for the last 9 steps


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)).eval()


def direction(seed=1, d=24):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g)
    return v / v.norm()


@pytest.mark.parametrize("site,temperature", [(SITE0, 1.0), (SITE1, 0.0), (SITE1, 1.0), ("blocks.0.mlp.hook_post", 1.0)])
def test_alpha_zero_is_the_plain_generation_bit_for_bit(model, site, temperature):
    width = 4 * 24 if site.endswith("mlp.hook_post") else 24
    plain, _ = G.draw(model, PROMPT, N_NEW, temperature, seed=3, chars=CHARS)
    zero, _ = G.draw(model, PROMPT, N_NEW, temperature, seed=3, chars=CHARS,
                     hooks=steer_hooks(site, direction(d=width), 0.0))
    assert any(s["slid"] for s in plain)
    assert zero == plain  # every token, probability and alternative, exactly


def test_alpha_zero_continuations_are_the_plain_ones(model):
    runs = G.continuations(model, PROMPT, [0.0, 1.0], N_NEW, 3, CHARS)
    assert G.continuations(model, PROMPT, [0.0, 1.0], N_NEW, 3, CHARS, hooks=steer_hooks(SITE1, direction(), 0)) == runs


def test_the_hooked_path_adding_zero_is_the_plain_generation_bit_for_bit(model):
    """Not only no hook at alpha = 0: a hook that runs and adds a zero vector (the steered code path, cache, slides and
    all) gives the same text and the same probabilities, bit for bit, on a block before the last."""
    zeros = [(SITE0, lambda x, name: x + torch.zeros(24))]
    for t in (0.0, 1.0):
        plain, _ = G.draw(model, PROMPT, N_NEW, t, seed=5, chars=CHARS)
        hooked, _ = G.draw(model, PROMPT, N_NEW, t, seed=5, chars=CHARS, hooks=zeros)
        assert hooked == plain


def hand_loop(model, site_layer: int, added: torch.Tensor, n_new: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy generation written out: every step reads the last n_ctx tokens from scratch (no cache), runs the blocks
    up to ``site_layer``, adds ``added`` to the stream at every position by hand, runs the rest: no hooks at all."""
    seq, logits_seen = list(PROMPT), []
    with torch.no_grad():
        for _ in range(n_new):
            idx = torch.tensor([seq[-model.config.n_ctx:]])
            x = model.blocks_from(model.embed(idx), 0, site_layer + 1)
            x = x + added  # (1, n, d) + (d,)
            x = model.blocks_from(x, site_layer + 1)
            z = model.readout(x)[0, -1]
            logits_seen.append(z)
            seq.append(int(z.argmax()))
    return seq[len(PROMPT):], logits_seen


@pytest.mark.parametrize("site,layer", [(SITE0, 0), (SITE1, 1)])
def test_steered_generation_equals_the_addition_written_by_hand(model, site, layer):
    d, alpha = direction(2), 2.5
    want, want_logits = hand_loop(model, layer, alpha * d, N_NEW)
    steps, _ = G.draw(model, PROMPT, N_NEW, 0.0, chars=CHARS, hooks=steer_hooks(site, d, alpha))
    assert [s["id"] for s in steps] == want
    plain = generate(model, torch.tensor(PROMPT), N_NEW, 0.0)[len(PROMPT):].tolist()
    assert plain != want  # the direction changes the text: the test can tell steered from plain
    # the probability each step gave its token, against the hand loop's logits
    for s, z in zip(steps, want_logits):
        assert s["prob"] == pytest.approx(float(torch.softmax(z, -1)[s["id"]]), abs=1e-5)


def test_steered_logits_equal_a_hook_written_here(model):
    d, alpha = direction(4), -3.0
    idx = torch.tensor([PROMPT * 3])  # (1, 15)
    mine = model.run_with_hooks(idx, hooks=[(SITE0, lambda x, name: x + alpha * d)])
    theirs = model.run_with_hooks(idx, hooks=steer_hooks(SITE0, d, alpha))
    assert torch.equal(mine, theirs)
    assert not torch.allclose(theirs, model(idx).logits)


def one_token_model(j: int):
    """A model whose unembedding row j (centred) is longer than every other: a stream dominated by that row's
    direction leaves the final LayerNorm (weight 1, bias 0 at init) pointing along it, and token j's logit wins."""
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)).eval()
    with torch.no_grad():
        w = m.head.weight  # (vocab, d)
        row = w[j] - w[j].mean()
        w[j] = 100 * row / row.norm()  # far longer than the others (about 0.1 at init): p(j) is 1 at T = 1 too
    return m, w[j].detach().clone()


@pytest.mark.parametrize("site,temperature", [(SITE0, 1.0), (SITE1, 0.0)])
def test_a_huge_alpha_along_a_token_direction_writes_that_token(site, temperature):
    j = 7
    m, d = one_token_model(j)
    plain = [s["id"] for s in G.draw(m, PROMPT, N_NEW, temperature, seed=1, chars=CHARS)[0]]
    assert set(plain) != {j}
    steered = G.draw(m, PROMPT, N_NEW, temperature, seed=1, chars=CHARS, hooks=steer_hooks(site, d / d.norm(), 1e4))[0]
    assert [s["id"] for s in steered] == [j] * N_NEW  # every new token, slid steps too
    assert any(s["slid"] for s in steered)


def test_bad_steering_is_refused_in_words(model):
    with pytest.raises(ValueError, match="finite"):
        steer_hooks(SITE0, direction(), float("nan"))
    with pytest.raises(ValueError, match="one vector"):
        steer_hooks(SITE0, torch.ones(2, 24), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        steer_hooks(SITE0, torch.full((24,), float("nan")), 1.0)
    with pytest.raises(ValueError, match="24"):
        G.draw(model, PROMPT, 3, 0.0, chars=CHARS, hooks=steer_hooks(SITE0, torch.ones(7), 1.0))
    with pytest.raises(ValueError, match="no hook"):
        G.draw(model, PROMPT, 3, 0.0, chars=CHARS, hooks=steer_hooks("blocks.9.hook_resid_post", direction(), 1.0))


def test_feature_scales_against_a_hand_count(model):
    sae = SAE(SAEConfig(site=SITE0, d_in=24, d_sae=32, kind="topk", k=4), torch.Generator().manual_seed(0))
    windows = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(2))  # (W, n_ctx)
    scales = feature_scales(model, sae, windows)
    _, cache = model.run_with_cache(windows, names=[SITE0])
    f = sae.encode(cache[SITE0].reshape(-1, 24)).detach()  # (W, n_ctx, d) -> (48, d) -> (48, 32)
    for i in range(32):
        on = f[:, i][f[:, i] > 0]
        assert int(scales.fired[i]) == len(on)
        if len(on):
            assert scales.scale(i) == pytest.approx(float(on.mean()), rel=1e-5)
            best = int(f[:, i].argmax())
            assert scales.top_ids[i, 0] == windows.reshape(-1)[best]
        else:
            assert scales.scale(i) == scales.fallback()
    hooks = feature_hooks(sae, 5, 2.0, scales.scale(5))
    x = torch.zeros(1, 3, 24)
    assert torch.allclose(hooks[0][1](x, SITE0)[0, 1], 2.0 * scales.scale(5) * sae.W_dec[5])
    with pytest.raises(ValueError, match="0 to 31"):
        feature_hooks(sae, 32, 1.0)


def test_last_only_keeps_the_last_blocks_shortcut_only_when_no_hook_reads_that_block(model):
    """Steering an earlier block keeps the last block's last-position shortcut (the bench row's 10%); a hook that
    reads the last block still sees every position, and the logits agree either way."""
    from core.nn.hooks import HookRun
    idx = torch.tensor([PROMPT * 3])  # (1, 15)
    full = model(idx).logits[:, -1:]
    for name in (SITE0, SITE1, "blocks.1.mlp.hook_post"):
        run = HookRun(names=[name], record=True)
        out = model(idx, hooks=run, last_only=True).logits
        assert run.store[name].shape[1] == 15, name
        assert torch.allclose(out, full, atol=1e-6)
