"""The feature browser (core.features.units, index, browse) against brute force and hand-written hooks on a tiny
model with a random SAE: top activations, histograms, bands, the direct path, switching a unit off, the prompt
view and token purity."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.features import index as I
from core.data.held_out import HeldOut
from core.features.index import build_index
from core.features.browse import prompt_units, purity_summary, token_purity, unit_card, unit_off_losses
from core.analysis.sae import SAE, SAEConfig
from core.features.units import feature_units, neuron_units
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer

SITE = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)).eval()
    model.requires_grad_(False)
    tok = CharTokenizer("abcdefghij ")
    g = torch.Generator().manual_seed(1)
    sae = SAE(SAEConfig(site=SITE, d_in=24, d_sae=40, k=4), generator=g).eval()
    sae.requires_grad_(False)
    ids = torch.randint(0, 11, (30, 17), generator=g)
    held = HeldOut(ids[:, :16].contiguous(), ids[:, 1:].contiguous(), "random")
    return model, tok, sae, held


def dense(model, units, held) -> torch.Tensor:
    """(W * T, n) every unit's activation on every token, the brute-force way: one full run, the site recorded."""
    _, cache = model.run_with_cache(held.windows, names=[units.site.name])
    return units.encode(cache[units.site.name]).reshape(-1, units.n)  # (W, T, n) -> (W * T, n)


@pytest.fixture(scope="module", params=["feature", "neuron"])
def indexed(request, setup):
    model, tok, sae, held = setup
    units = feature_units(model, sae) if request.param == "feature" else neuron_units(model, 1)
    mp = pytest.MonkeyPatch()
    mp.setattr(I, "CHUNK_FLOATS", 7 * 16 * units.n)  # seven windows a chunk: the merge across chunks is exercised
    if request.param == "neuron":
        mp.setattr(I, "MAX_ENTRIES", 10)  # too many entries to keep: the second pass runs the model again
    try:
        index = build_index(model, units, held, top=20)
    finally:
        mp.undo()
    return units, index, dense(model, units, held)


def test_top_activations_are_a_brute_force_search(indexed):
    units, index, acts = indexed
    for u in range(units.n):
        want = torch.sort(acts[:, u], descending=True).values[:20]
        np.testing.assert_allclose(index.top_values[:, u], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(acts[index.top_rows[:, u], u], want, rtol=1e-5, atol=1e-6)  # the rows hold them
    assert torch.equal(index.fires, (acts > 0).sum(0))


def test_histogram_and_bands_match_the_dense_activations(indexed):
    units, index, acts = indexed
    for u in range(0, units.n, 7):
        a = acts[:, u].double().numpy()
        vmax = a.max()
        if vmax <= 0:
            assert index.hist[u].sum() == 0
            continue
        on = a[a > 0]
        want, _ = np.histogram(np.minimum(on, vmax), bins=I.BINS, range=(0, vmax))
        assert np.abs(index.hist[u].numpy() - want).sum() <= 2  # a value on a bin edge may fall either side
        assert index.hist[u].sum() == len(on)
        for j, (lo, hi) in enumerate(I.BANDS):
            rows = index.band_rows[j, :, u]
            rows = rows[rows >= 0]
            frac = a[rows.numpy()] / vmax
            assert ((frac > lo - 1e-6) & (frac <= hi + 1e-6)).all()
            assert len(rows) == min(I.PER_BAND, int(((a / vmax > lo) & (a / vmax <= hi) & (a > 0)).sum()))
            assert len(set(rows.tolist())) == len(rows)


def test_promoted_tokens_are_the_direct_path_by_hand(setup, indexed):
    model, tok, sae, held = setup
    units, index, _ = indexed
    _, cache = model.run_with_cache(held.windows, names=["ln_final.hook_scale"])
    sigma = cache["ln_final.hook_scale"].double().mean()
    assert index.ln_scale == pytest.approx(float(sigma), rel=1e-6)
    i = 5
    if units.kind == "feature":
        d = sae.W_dec[i].double()
    else:
        d = model.blocks[1].mlp.w2.weight[:, i].double()  # W2's column i
    u = model.ln_f.weight.double() * (d - d.mean()) / sigma
    logits = model.head.weight.double() @ u
    card = unit_card(model, tok, units, index, i)
    order = torch.argsort(logits, descending=True)
    assert [t for t, _ in card.promoted] == [tok.visible_tokens([int(t)])[0] for t in order[:10]]
    assert [t for t, _ in card.suppressed] == [tok.visible_tokens([int(t)])[0] for t in order.flip(0)[:10]]
    np.testing.assert_allclose([v for _, v in card.promoted], logits[order[:10]].numpy(), rtol=1e-6)


def test_feature_off_hooks_equal_a_hook_written_here(setup):
    model, _, sae, held = setup
    units, i, x = feature_units(model, sae), 3, held.windows[:4]

    def by_hand(act, name):
        f = torch.relu(sae.pre_acts(act))
        top = torch.topk(sae.pre_acts(act), 4, dim=-1).indices
        f_i = torch.where((top == i).any(-1), f[..., i], torch.zeros(()))  # TopK: latent i only if among the top 4
        out = act.clone()
        out[:, 2:5] -= (f_i[..., None] * sae.W_dec[i])[:, 2:5]
        return out

    with torch.no_grad():
        want = model(x, hooks=[(SITE, by_hand)]).logits
        got = model(x, hooks=units.off_hooks(i, positions=[2, 3, 4])).logits
        assert not torch.allclose(want, model(x).logits)  # the feature did fire there: the test can fail
    torch.testing.assert_close(got, want)


def test_neuron_off_equals_a_zeroed_input_row(setup):
    model, _, _, held = setup
    x, i = held.windows[:4], 7
    units = neuron_units(model, 0)
    twin = Transformer(model.config).eval()
    twin.load_state_dict(model.state_dict())
    with torch.no_grad():
        twin.blocks[0].mlp.w1.weight[i] = 0.0  # ReLU(0) = 0: the neuron is off at every position
        torch.testing.assert_close(model(x, hooks=units.off_hooks(i)).logits, twin(x).logits)


def test_write_direction_of_an_sae_on_hidden_units_goes_through_w2(setup):
    model, _, _, held = setup
    site = "blocks.1.mlp.hook_post"
    sae = SAE(SAEConfig(site=site, d_in=model.config.d_ff, d_sae=16, k=2), generator=torch.Generator().manual_seed(3))
    units = feature_units(model, sae)
    x = held.windows[:2]
    add = [(site, lambda a, name: a + 2.0 * sae.W_dec[4].detach())]
    with torch.no_grad():
        _, clean = model.run_with_cache(x, names=["blocks.1.hook_mlp_out"])
        _, moved = model.run_with_cache(x, names=["blocks.1.hook_mlp_out"], hooks=add)
    diff = moved["blocks.1.hook_mlp_out"] - clean["blocks.1.hook_mlp_out"]
    torch.testing.assert_close(diff, (2.0 * units.write_direction(4)).expand_as(diff), atol=1e-5, rtol=1e-5)


def test_prompt_units_are_the_largest_per_position(setup):
    model, tok, sae, held = setup
    units = feature_units(model, sae)
    ids = held.windows[3].tolist()
    got = prompt_units(model, units, ids, top=3, tokenizer=tok)
    _, cache = model.run_with_cache(torch.tensor([ids]), names=[SITE])
    f = sae.encode(cache[SITE])[0]  # (T, n)
    for t in range(len(ids)):
        order = torch.argsort(f[t], descending=True)[:3]
        np.testing.assert_allclose(got.values[t], f[t, order].numpy(), rtol=1e-5)
        on = f[t, order] > 0  # among zeros the order is arbitrary
        assert got.units[t][on.numpy()].tolist() == order[on].tolist()


def test_unit_off_losses_by_hand(setup):
    model, _, sae, held = setup
    units, i = neuron_units(model, 1), 2
    ids = held.windows[0].tolist()
    got = unit_off_losses(model, units, i, ids)
    x = torch.tensor([ids])

    def zero(a, name):
        a = a.clone()
        a[..., i] = 0
        return a

    with torch.no_grad():
        clean = F.cross_entropy(model(x).logits[0, :-1], x[0, 1:], reduction="none")
        off = F.cross_entropy(model(x, hooks=[("blocks.1.mlp.hook_post", zero)]).logits[0, :-1], x[0, 1:],
                              reduction="none")
    np.testing.assert_allclose(got.clean, clean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got.off, off.numpy(), rtol=1e-5)


def test_card_loss_change_where_it_fires_by_hand(setup, indexed):
    model, tok, _, held = setup
    units, index, acts = indexed
    i = int(torch.argmax((acts[: index.eval_windows * 16] > 0).sum(0)))  # the unit firing most in the eval windows
    card = unit_card(model, tok, units, index, i)
    E = index.eval_windows
    x, y = held.windows[:E], held.targets[:E]
    with torch.no_grad():
        clean = F.cross_entropy(model(x).logits.reshape(-1, 11), y.reshape(-1), reduction="none")
        off = F.cross_entropy(model(x, hooks=units.off_hooks(i)).logits.reshape(-1, 11), y.reshape(-1),
                              reduction="none")
    on = acts[: E * 16, i] > 0
    assert card.n_all == int(on.sum()) > 0
    assert card.loss_all == pytest.approx(float((off - clean)[on].mean()), abs=1e-5)
    assert len(card.contexts) == min(20, int((acts[:, i] > 0).sum()))
    c = card.contexts[0]
    assert c.value == pytest.approx(float(acts[:, i].max()), rel=1e-5) and c.acts[c.at] == pytest.approx(c.value)


def test_token_purity_on_a_constructed_index():
    windows = torch.tensor([[0, 1, 2, 0], [0, 0, 3, 1]])  # flat tokens: 0 1 2 0 0 0 3 1
    held = HeldOut(windows, windows, "made up")
    values = torch.tensor([[3.0, 5.0, 0.0], [2.0, 4.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.0]])  # (top, n)
    rows = torch.tensor([[0, 1, 2], [3, 7, 5], [4, 2, 6], [6, 3, 7]])
    index = I.UnitIndex("neuron", "blocks.0.mlp.hook_post", 3, 4, 8, values, rows, None, None, None, None, 1, None,
                        None, held)
    p = token_purity(index, held, top=4)
    # unit 0: tokens 0, 0, 0, 3 -> 3/4; unit 1: tokens 1, 1 (the zeros are not active) -> 1; unit 2 never fires
    assert p[0] == pytest.approx(0.75) and p[1] == pytest.approx(1.0) and np.isnan(p[2])
    s = purity_summary(p)
    assert s == {"units": 2, "mean": pytest.approx(0.875), "median": pytest.approx(0.875), "above_half": 1.0}


def test_bad_unit_numbers_are_refused_by_name(setup):
    model, _, sae, _ = setup
    with pytest.raises(ValueError, match="feature 40"):
        feature_units(model, sae).off_hooks(40)
    with pytest.raises(ValueError, match="no block 5"):
        neuron_units(model, 5)
