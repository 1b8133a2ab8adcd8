"""The sparse autoencoder's arithmetic (core.analysis.sae, core.features.train), each number against a computation
written here: the encode and decode formulas by hand, the health numbers by explicit loops, the CE score on SAEs
whose answer is known (the identity, zero), the spliced run against a hook written here, and recovery of known
sparse directions."""
import math

import numpy as np
import pytest
import torch

from core.analysis.sae import SAE, SAEConfig
from core.data.held_out import HeldOut
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.features.train import (SAESettings, ce_loss_score, evaluate, mean_ce, reconstruction_stats, splice_hooks,
                                 train_on, zero_hooks)

SITE = "blocks.0.hook_resid_post"


def random_sae(d_in=6, d_sae=10, kind="topk", k=3, seed=0) -> SAE:
    g = torch.Generator().manual_seed(seed)
    sae = SAE(SAEConfig(site=SITE, d_in=d_in, d_sae=d_sae, kind=kind, k=k), generator=g)
    with torch.no_grad():  # every tensor away from its initial value, so a formula that drops one term shows
        sae.W_enc.copy_(torch.randn(d_in, d_sae, generator=g))
        sae.b_enc.copy_(torch.randn(d_sae, generator=g) * 0.5)
        sae.b_dec.copy_(torch.randn(d_in, generator=g))
    return sae.eval()


def by_hand(sae: SAE, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(f, x_hat) of one SAE on rows x, in float64 numpy loops: pre_j = sum_i (x_i - b_dec_i) W_enc_ij + b_enc_j;
    TopK keeps the k largest pre_j (ReLU on them), ReLU keeps every positive one; x_hat = sum_j f_j W_dec_j + b_dec."""
    W_enc, b_enc = sae.W_enc.detach().double().numpy(), sae.b_enc.detach().double().numpy()
    W_dec, b_dec = sae.W_dec.detach().double().numpy(), sae.b_dec.detach().double().numpy()
    xs = x.double().numpy()
    F, X = np.zeros((len(xs), sae.config.d_sae)), np.zeros_like(xs)
    for r, row in enumerate(xs):
        pre = [sum((row[i] - b_dec[i]) * W_enc[i, j] for i in range(len(row))) + b_enc[j] for j in range(len(b_enc))]
        keep = sorted(range(len(pre)), key=lambda j: -pre[j])[: sae.config.k] if sae.config.kind == "topk" \
            else range(len(pre))
        for j in keep:
            F[r, j] = max(pre[j], 0.0)
        X[r] = b_dec + sum(F[r, j] * W_dec[j] for j in range(len(pre)))
    return F, X


@pytest.mark.parametrize("kind", ["topk", "relu"])
def test_encode_and_decode_are_the_formulas(kind):
    sae = random_sae(kind=kind)
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(3))
    F, X = by_hand(sae, x)
    with torch.no_grad():
        f = sae.encode(x)
        np.testing.assert_allclose(f.double().numpy(), F, atol=1e-5)
        np.testing.assert_allclose(sae.decode(f).double().numpy(), X, atol=1e-5)
        np.testing.assert_allclose(sae(x).double().numpy(), X, atol=1e-5)
    if kind == "topk":  # exactly k latents active, fewer only where a kept pre-activation was negative
        nonzero = (f != 0).sum(-1)
        assert (nonzero <= 3).all()
        pre = sae.pre_acts(x)
        assert torch.equal(nonzero, (pre.topk(3, dim=-1).values > 0).sum(-1))
        assert (nonzero == 3).any()


def test_topk_with_negative_preactivations_keeps_fewer():
    sae = random_sae(d_in=3, d_sae=5, k=3)
    with torch.no_grad():
        sae.W_enc.zero_()
        sae.b_enc.copy_(torch.tensor([2.0, -1.0, 1.0, -3.0, -2.0]))  # pre = b_enc whatever x: two positive
    f = sae.encode(torch.randn(4, 3))
    assert torch.equal(f, torch.tensor([[2.0, 0.0, 1.0, 0.0, 0.0]]).expand(4, 5))


def test_reconstruction_stats_against_loops():
    sae = random_sae(d_in=5, d_sae=12, k=2)
    acts = torch.randn(37, 5, generator=torch.Generator().manual_seed(4)) * 2 + 1
    F, X = by_hand(sae, acts)
    a = acts.double().numpy()
    n, d = a.shape
    l0 = sum(sum(1 for v in row if v > 0) for row in F) / n
    sq = sum((X[r, i] - a[r, i]) ** 2 for r in range(n) for i in range(d))
    mean = [sum(a[r, i] for r in range(n)) / n for i in range(d)]
    var = sum((a[r, i] - mean[i]) ** 2 for r in range(n) for i in range(d))
    dead = sum(1 for j in range(F.shape[1]) if all(F[r, j] == 0 for r in range(n))) / F.shape[1]
    stats = reconstruction_stats(sae, acts, chunk=8)  # chunks of 8: the sums across chunks are tested too
    assert stats["l0"] == pytest.approx(l0)
    assert stats["mse"] == pytest.approx(sq / n, rel=1e-5)  # SAELens's: summed over the d numbers, mean over tokens
    assert stats["explained_variance"] == pytest.approx(1 - sq / var, rel=1e-5)
    assert stats["dead_fraction"] == pytest.approx(dead)
    assert 0 < dead < 1  # the case tests something: some latents dead, some alive
    assert stats["fires"].tolist() == [int((F[:, j] > 0).sum()) for j in range(F.shape[1])]


def test_mse_is_saelens_s_on_a_count_by_hand():
    """Two tokens of 3 numbers and an SAE that writes nothing (f = 0, x_hat = b_dec = 0): the errors are the
    tokens themselves, [1, 2, 2] and [0, 0, 3], 9 each. SAELens's mse is 9 (summed over the numbers of a token,
    averaged over the tokens), not 3 (a mean per number); explained variance 1 - 9 / (E||x||^2 - ||E x||^2) =
    1 - 9 / (9 - (0.25 + 1 + 6.25)) = -5."""
    sae = SAE(SAEConfig(site="blocks.0.hook_resid_post", d_in=3, d_sae=2, kind="relu", k=1))
    with torch.no_grad():
        for t in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec):
            t.zero_()
    stats = reconstruction_stats(sae, torch.tensor([[1.0, 2.0, 2.0], [0.0, 0.0, 3.0]]))
    assert stats["mse"] == pytest.approx(9.0)
    assert stats["explained_variance"] == pytest.approx(-5.0)
    assert (stats["l0"], stats["dead_fraction"]) == (0.0, 1.0)


def test_ce_loss_score_formula():
    assert ce_loss_score(clean=2.0, spliced=2.5, zeroed=4.0) == pytest.approx((4.0 - 2.5) / (4.0 - 2.0))
    assert ce_loss_score(clean=2.0, spliced=2.0, zeroed=4.0) == 1.0
    assert ce_loss_score(clean=2.0, spliced=4.0, zeroed=4.0) == 0.0
    assert ce_loss_score(clean=2.0, spliced=5.0, zeroed=4.0) == pytest.approx(-0.5)  # worse than nothing: negative
    assert math.isnan(ce_loss_score(clean=2.0, spliced=2.5, zeroed=2.0))


def identity_sae(d: int) -> SAE:
    """relu(x) - relu(-x) = x: d_sae = 2d, W_enc = [I, -I], W_dec = [I; -I], biases 0, ReLU."""
    sae = SAE(SAEConfig(site=SITE, d_in=d, d_sae=2 * d, kind="relu", k=1))
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))  # (d, 2d)
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))  # (2d, d)
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae.eval()


@pytest.fixture(scope="module")
def taught_model():
    """The conftest's tiny model after 60 steps on a counting sequence (token t+1 follows t): its sites then carry
    what its predictions need, so zeroing one costs loss (a random model's predictions are as good zeroed)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2))
    seq = (torch.arange(17)[None, :] + torch.arange(32)[:, None]) % 11  # (32, 17) rows of counting
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = model(seq[:, :-1], targets=seq[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def held_windows(vocab: int, n_ctx: int, w: int = 12, seed: int = 5) -> HeldOut:
    """``w`` windows of counting from random starts (what the taught model predicts well), (w, n_ctx) each."""
    start = torch.randint(vocab, (w, 1), generator=torch.Generator().manual_seed(seed))
    ids = (start + torch.arange(n_ctx + 1)) % vocab  # (w, n_ctx + 1)
    return HeldOut(ids[:, :-1].contiguous(), ids[:, 1:].contiguous(), "counting")


def test_identity_sae_reconstructs_exactly_and_scores_one(taught_model):
    tiny_model = taught_model
    sae = identity_sae(tiny_model.config.d_model)
    x = torch.randn(50, tiny_model.config.d_model)
    assert torch.equal(sae(x), x)
    m = evaluate(tiny_model, sae, held_windows(tiny_model.config.vocab_size, tiny_model.config.n_ctx))
    assert m["ce_loss_score"] == pytest.approx(1.0, abs=1e-6)
    assert m["explained_variance"] == pytest.approx(1.0, abs=1e-6) and m["mse"] == pytest.approx(0.0, abs=1e-9)
    assert m["ce_zero_ablated"] > m["ce_clean"] + 0.01  # zeroing the site costs something: the score has a scale


def test_zero_output_sae_scores_zero(taught_model):
    tiny_model = taught_model
    sae = random_sae(d_in=tiny_model.config.d_model, d_sae=48, k=4)
    with torch.no_grad():
        sae.W_dec.zero_()
        sae.b_dec.zero_()
    held = held_windows(tiny_model.config.vocab_size, tiny_model.config.n_ctx)
    m = evaluate(tiny_model, sae, held)
    assert m["ce_loss_score"] == pytest.approx(0.0, abs=1e-6)
    assert m["ce_spliced"] == pytest.approx(mean_ce(tiny_model, held, zero_hooks(SITE)), abs=1e-6)


@pytest.mark.parametrize("site", ["blocks.0.hook_resid_post", "blocks.1.hook_resid_mid", "blocks.0.mlp.hook_post",
                                  "blocks.1.hook_mlp_out"])
def test_spliced_run_equals_a_hook_written_here(tiny_model, site):
    width = tiny_model.config.d_ff if site.endswith("mlp.hook_post") else tiny_model.config.d_model
    g = torch.Generator().manual_seed(6)
    sae = SAE(SAEConfig(site=site, d_in=width, d_sae=2 * width, k=5), generator=g).eval()
    with torch.no_grad():
        sae.b_dec.copy_(torch.randn(width, generator=g))
        sae.b_enc.copy_(torch.randn(2 * width, generator=g) * 0.1)
    W_enc, b_enc, W_dec, b_dec = (t.detach().clone() for t in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec))

    def by_hand_hook(x, name):
        pre = (x - b_dec) @ W_enc + b_enc                     # (B, n, d_sae)
        kth = pre.topk(5, dim=-1).values[..., -1:]             # the 5th largest of each vector
        f = torch.where(pre >= kth, pre.clamp_min(0), torch.zeros_like(pre))
        return f @ W_dec + b_dec

    idx = held_windows(tiny_model.config.vocab_size, tiny_model.config.n_ctx, w=3).windows
    with torch.no_grad():
        ours = tiny_model(idx, hooks=splice_hooks(sae)).logits
        theirs = tiny_model.run_with_hooks(idx, hooks=[(site, by_hand_hook)])
        clean = tiny_model(idx).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert (ours - clean).abs().max() > 1e-3  # the splice changed something


def sparse_data(n=16_384, d=32, m=256, active=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    dirs = torch.randn(m, d, generator=g)
    dirs /= dirs.norm(dim=1, keepdim=True)            # m unit directions in d dimensions
    which = torch.rand(n, m, generator=g).argsort(1)[:, :active]  # (n, active) distinct directions per vector
    coef = torch.rand(n, active, generator=g) + 0.5    # positive sizes
    return (coef[..., None] * dirs[which]).sum(1), dirs  # (n, active, d) -> (n, d)


def test_train_on_recovers_known_sparse_directions():
    acts, dirs = sparse_data()
    settings = SAESettings(d_sae=512, k=3, steps=400, batch_size=256, lr=4e-3)
    sae = SAE(settings.config(SITE, 32), generator=torch.Generator().manual_seed(1))
    curve = train_on(sae, acts, settings)
    best = (dirs @ sae.W_dec.detach().T).max(1).values  # decoder rows have unit norm: these are cosines
    assert best.mean() >= 0.9, f"mean best cosine {best.mean():.3f}"
    assert curve[-1][1] < curve[0][1]
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(512))
