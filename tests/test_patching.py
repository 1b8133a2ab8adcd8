"""Activation and path patching and the score's sources (core.analysis.patching), by identities that must hold exactly and
against forwards written out here."""
import math

import numpy as np
import pytest
import torch

from core.analysis.prompt_pairs import corrupt_one, match_lengths
from core.analysis.patching import default_answers, top_predictions
from core.analysis.circuit import read_sources, top_sources
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from attention_hooks import attention
from core.analysis.patching import (Metric, _forward, check_pair, patch_heads, patch_residual, patch_sublayers, path_patch,
                           score_sources)

SHAPES = {
    "lecture": dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=4, n_layers=2),
    "gpt2-like": dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=3, bias=True, activation="gelu_tanh",
                      tie_weights=True),
}


@pytest.fixture(params=list(SHAPES))
def model(request):
    torch.manual_seed(0)
    m = Transformer(ModelConfig(**SHAPES[request.param])).eval().double()  # float64: identities hold to 1e-12
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(6)  # larger than the init: every piece matters
    return m


CLEAN = [1, 2, 3, 4, 5, 1, 2, 3]
CORRUPT = [1, 2, 3, 9, 5, 1, 2, 3]   # one token changed, at position 3


def test_the_written_out_forward_is_the_models(model):
    idx = torch.tensor([CLEAN])
    assert torch.allclose(_forward(model, idx)[0], model(idx).logits, atol=1e-4)


def test_residual_patching_identities(model):
    metric = Metric(answer=4, wrong=9)
    grid = patch_residual(model, CLEAN, CORRUPT, metric)
    L, n = model.config.n_layers, len(CLEAN)
    assert grid.shape == (L + 1, n)
    # at the embedding only the changed position differs: putting it back restores everything, the others nothing
    assert grid[0, 3] == pytest.approx(1.0, abs=1e-6) and np.allclose(np.delete(grid[0], 3), 0.0, atol=1e-6)
    # leaving the last block only the last position is read out
    assert grid[L, n - 1] == pytest.approx(1.0, abs=1e-6) and np.allclose(grid[L, :-1], 0.0, atol=1e-6)
    # positions before the change see the same prefix in both runs: patching them changes nothing at any stage
    assert np.allclose(grid[:, :3], 0.0, atol=1e-6)


def test_a_patched_stage_equals_a_forward_with_it_substituted(model):
    """Block by block through the model's own modules, the stream entering block 1 at position 5 taken from the clean
    run: the same metric as patch_residual's cell."""
    metric = Metric(answer=4, wrong=9)
    clean, corrupt = torch.tensor([CLEAN]), torch.tensor([CORRUPT])
    with torch.no_grad():
        x_clean = model.blocks_from(model.embed(clean), 0, 1)
        x = model.blocks_from(model.embed(corrupt), 0, 1)
        x[0, 5] = x_clean[0, 5]
        x = model.blocks_from(x, 1)
        patched = float(metric.of_logits(model.readout(x))[0])
        m_clean, m_corrupt = (float(metric.of_logits(model(i).logits)[0]) for i in (clean, corrupt))
    want = (patched - m_corrupt) / (m_clean - m_corrupt)
    assert patch_residual(model, CLEAN, CORRUPT, metric)[1, 5] == pytest.approx(want, abs=1e-5)


def test_sublayers_and_heads(model):
    metric = Metric(answer=4)  # the answer's log-probability
    sub = patch_sublayers(model, CLEAN, CORRUPT, metric)
    L, h, n = model.config.n_layers, model.config.n_heads, len(CLEAN)
    assert sub.shape == (L, 2, n) and np.allclose(sub[:, :, :3], 0.0, atol=1e-6)  # before the change: nothing
    for what in ("q", "k", "v", "z", "pattern"):
        table = patch_heads(model, CLEAN, CORRUPT, metric, what)
        assert table.shape == (L, h)
        per = patch_heads(model, CLEAN, CORRUPT, metric, what, per_position=True)
        assert per.shape == (L, h, n)
    # one head's z everywhere, by hand: the model's own forward with that head's output replaced before W_O
    name = f"blocks.{L - 1}.attn.hook_z"  # (B, n, h, d/h)
    with torch.no_grad():
        _, z_clean = model.run_with_cache(torch.tensor([CLEAN]), names=[name])
        out = model(torch.tensor([CORRUPT]),
                    hooks=[(name, lambda z, _: torch.cat([z_clean[name][:, :, :1], z[:, :, 1:]], 2))]).logits
        m = [float(metric.of_logits(model(torch.tensor([i])).logits)[0]) for i in (CLEAN, CORRUPT)]
    want = (float(metric.of_logits(out)[0]) - m[1]) / (m[0] - m[1])
    assert patch_heads(model, CLEAN, CORRUPT, metric, "z")[L - 1, 0] == pytest.approx(want, abs=1e-5)


def test_path_patching(model):
    metric = Metric(answer=4, wrong=9)
    assert path_patch(model, CLEAN, CORRUPT, (0, 1), [], "k", metric) == 0.0  # nothing reached: the corrupted run
    every = [(l, r) for l in range(1, model.config.n_layers) for r in range(model.config.n_heads)]
    value = path_patch(model, CLEAN, CORRUPT, (0, 1), every, "v", metric)
    assert math.isfinite(value)
    with pytest.raises(ValueError, match="later layer"):
        path_patch(model, CLEAN, CORRUPT, (1, 0), [(0, 0)], "k", metric)


def test_identical_prompts_are_refused_in_words(model):
    with pytest.raises(ValueError, match="the two prompts are the same"):
        patch_residual(model, CLEAN, CLEAN, Metric(4, 9))


def test_prompts_of_different_lengths_are_refused_in_words(model):
    assert "same length" in check_pair(model, CLEAN, CLEAN[:-1])
    assert check_pair(model, CLEAN, CORRUPT) is None


def test_score_sources_add_up_and_each_entry_is_its_bilinear_term(model):
    layer, head, i, j = model.config.n_layers - 1, 1, 7, 3
    table, names, score = score_sources(model, CLEAN, layer, head, i, j)
    assert table.shape == (len(names), len(names)) and names[0] == "token embedding" and names[-1] == "LN shift"
    assert table.sum() == pytest.approx(score, abs=1e-4)
    with torch.no_grad():  # the model's own score, from its attention record
        rec = attention(model, torch.tensor([CLEAN]))[layer]
    assert score == pytest.approx(float(rec.scores[0, head, i, j]), abs=1e-4)
    # (token embedding, token embedding) by hand: both sides through the frozen LayerNorm and W_Q, W_K
    c, block = model.config, model.blocks[layer]
    with torch.no_grad():
        stream = model.blocks_from(model.embed(torch.tensor([CLEAN])), 0, layer)
        d, dh = c.d_model, c.d_head
        w = block.attn.qkv.weight.double()

        def share(pos, rows):
            x = stream[0, pos].double()
            sigma = torch.sqrt(x.var(unbiased=False) + block.ln1.eps)
            e = model.tok_emb.weight[CLEAN[pos]].double()
            return w[rows] @ (block.ln1.weight.double() * (e - e.mean()) / sigma)

        q = share(i, slice(head * dh, (head + 1) * dh))
        k = share(j, slice(d + head * dh, d + (head + 1) * dh))
    assert table[0, 0] == pytest.approx(float(q @ k) / math.sqrt(dh), abs=1e-6)


# ---------------------------------------------------------------- the page's helpers


def test_the_corrupted_copy_changes_the_earlier_occurrence_of_the_last_token():
    ids = [5, 6, 7, 8, 5, 6, 7]            # the last token, 7, occurred at position 2
    c = corrupt_one(ids, vocab_size=20)
    assert c.position == 2 and c.old == 7 and c.new not in ids
    assert [t for i, t in enumerate(c.ids) if i != 2] == [t for i, t in enumerate(ids) if i != 2]
    assert corrupt_one([1, 2, 3], vocab_size=20).position == 2           # no earlier occurrence: the last token
    assert corrupt_one(ids, vocab_size=20, position=0).ids[0] not in ids
    assert corrupt_one(ids, 20, choices=[5, 6, 7, 8, 15]).new == 15     # only one readable token is free
    with pytest.raises(ValueError):
        corrupt_one([], 20)
    with pytest.raises(ValueError):
        corrupt_one(ids, 20, position=7)


def test_lengths_are_matched_keeping_the_ends():
    assert match_lengths([1, 2, 3, 4], [7, 8], "cut", 0) == ([3, 4], [7, 8])
    assert match_lengths([1, 2, 3, 4], [7, 8], "pad", 0) == ([1, 2, 3, 4], [0, 0, 7, 8])
    with pytest.raises(ValueError):
        match_lengths([1], [2], "stretch", 0)


def test_default_answers_are_the_two_runs_top_predictions(model):
    logits = lambda ids: model(torch.tensor([ids])).logits[0, -1]  # noqa: E731
    with torch.no_grad():
        clean_top, corrupt_top = int(logits(CLEAN).argmax()), logits(CORRUPT).topk(2).indices.tolist()
    answer, wrong = default_answers(model, CLEAN, CORRUPT)
    assert answer == clean_top and wrong == (corrupt_top[1] if corrupt_top[0] == clean_top else corrupt_top[0])
    assert default_answers(model, CLEAN, CLEAN)[1] != clean_top         # never the same token twice
    assert top_predictions(model, CLEAN, 3)[0] == clean_top


def test_top_sources_keep_the_sum_and_the_largest_entries():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(6, 6))
    table[4, 1] = 50.0
    names = [f"s{i}" for i in range(6)]
    cut, rows, cols = top_sources(table, names, k=2)
    assert cut.shape == (3, 3) and rows[-1] == cols[-1] == "all others"
    assert cut.sum() == pytest.approx(table.sum()) and "s4" in rows and "s1" in cols
    assert top_sources(table, names, k=6)[0] is table


def test_the_reading_names_the_largest_entry_and_each_sides_builder():
    names = ["token embedding", "position embedding", "L1 H3", "L1 MLP", "LN shift"]
    table = np.zeros((5, 5))
    table[0, 2] = -3.0   # the largest entry ...
    table[1, 3], table[0, 3] = 1.0, 1.5   # ... but L1 MLP's column adds the most to the score
    r = read_sources(table, names)
    assert (r.query_source, r.key_source, r.value) == ("token embedding", "L1 H3", -3.0)
    assert r.share == pytest.approx(3.0 / 5.5)
    assert (r.key_builder, r.key_total, r.query_builder, r.composition) == ("L1 MLP", 2.5, "position embedding", None)
    table[0, 2] = 3.0    # now what L1 H3 wrote into the key adds most: K-composition
    assert (read_sources(table, names).key_builder, read_sources(table, names).composition) == ("L1 H3", "K")
    table[2, 2] = 9.0    # L1 H3 on both sides: both
    r = read_sources(table, names)
    assert (r.query_builder, r.query_total, r.composition) == ("L1 H3", 9.0, "QK")
    table[2, 2], table[0, 2], table[2, 0] = 0.0, 0.0, 9.0   # L1 H3's query against the key's token
    assert read_sources(table, names).composition == "Q"


def test_the_example_pair_is_the_probe_written_again_with_the_earlier_occurrence_changed():
    from conftest import SHIPPED
    from core.analysis.induction import model_probe
    from core.nn.checkpoint import load_checkpoint
    from core.analysis.prompt_pairs import example_pair
    from core.analysis.circuit import sources_view

    model, tok = load_checkpoint(SHIPPED)
    clean, bad, period, again = example_pair(model, tok, seed=5)
    row = model_probe(model, tok, n_seqs=1, period=24, seed=5)[0].tolist()
    assert (period, again) == (24, 16) and clean == row[:24] + row[:16]
    assert bad.position == 15 and bad.old == clean[-1] and bad.new not in clean   # the last token's first copy
    names = ["a", "b", "c"]
    table = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 0.5], [0.1, 0.0, 0.2]])
    shown, rows, cols, reading = sources_view(table, names, k=2)
    assert shown.sum() == pytest.approx(table.sum()) and reading.key_builder == "b" and rows[-1] == "all others"
