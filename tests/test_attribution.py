"""Attribution graphs (issue 46): the replacement model gives the model's logits; every target's edges and constant
terms add up to its input; an edge is the change of its target when its source grows by (1 + eps), over eps; a
model built so the graph is known by hand gives that graph; the head split and the query-key split add up to what
the model computes; pruning and the two scores on hand-made graphs."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis import attribution as A
from core.features.sae import SAE, SAEConfig
from core.features.transcoder import load_transcoders
from core.nn.checkpoint import load_checkpoint
from core.nn.model import ModelConfig, Transformer

ROOT = Path(__file__).resolve().parent.parent
CHAR = ROOT / "assets" / "models" / "shakespeare-char"
TEXT = "The king is dead. Long live the king! The king is dead. Long live the k"


@pytest.fixture(scope="module")
def shipped():
    model, tok = load_checkpoint(CHAR)
    model.eval()
    tcs = load_transcoders(CHAR, model.config)
    assert sorted(tcs) == [0, 1], "the shipped character model has a transcoder for each block"
    return model, tok, tcs, tok.encode(TEXT[:40])


def test_the_replacement_model_gives_the_models_logits(shipped):
    model, _, tcs, ids = shipped
    real, replaced = A.replacement_logits(model, tcs, ids)
    assert (real - replaced).abs().max().item() < 1e-5


@pytest.fixture(scope="module")
def graph(shipped):
    model, _, tcs, ids = shipped
    return A.attribution_graph(model, tcs, ids)


def test_every_targets_edges_and_constants_add_up_to_its_input(graph):
    g = graph
    sl = g.slices()
    targets = list(range(g.n_features)) + list(range(sl["logits"].start, g.n_nodes))
    total = g.adjacency[targets].sum(1) + g.constants[targets]
    np.testing.assert_allclose(total, g.inputs[targets], atol=1e-4)
    # the inputs are the real ones: a feature's pre-activation is at least its activation (TopK keeps the ReLU of it)
    np.testing.assert_allclose(g.inputs[:g.n_features], g.activations, atol=1e-5)
    np.testing.assert_allclose(g.inputs[sl["logits"]], g.logits[g.logit_tokens], atol=1e-4)
    assert not g.adjacency[sl["errors"].start:sl["logits"].start].any()  # errors and embeddings have no inputs


def test_an_edge_is_the_change_when_its_source_grows(shipped, graph):
    """Source scaled by (1 + eps) in the frozen replacement: the target moves by eps x the edge."""
    model, _, tcs, ids = shipped
    g, eps = graph, 1e-2
    ids_t = torch.as_tensor(ids)
    _, cache, acts, errors = A._record(model, ids_t, tcs)
    top = g.slices()["logits"].start
    strongest = [int(i) for i in np.argsort(-np.abs(g.adjacency[top, :g.n_features]))[:3]]
    for src in strongest:
        l, p, f = g.features[src]
        grown = [a.clone() for a in acts]
        grown[l][p, f] *= 1 + eps
        with torch.no_grad():
            _, _, base = A._replacement(model, ids_t, tcs, cache, acts, errors, 1, False)
            _, _, moved = A._replacement(model, ids_t, tcs, cache, grown, errors, 1, False)
        change = float(moved[0, -1, g.logit_tokens[0]] - base[0, -1, g.logit_tokens[0]]) / eps
        assert change == pytest.approx(g.adjacency[top, src], rel=1e-3, abs=1e-4)


def hand_model():
    """One block, no LayerNorm, attention that writes nothing (W_O = 0), one-hot embeddings; the MLP writes 2 e2 for
    coordinate 0 of its input and 3 e3 for coordinate 1, and a transcoder that does exactly the same."""
    cfg = ModelConfig(vocab_size=4, n_ctx=4, d_model=4, n_heads=1, n_layers=1, d_ff=4, norm="none", positions=False)
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tok_emb.weight.copy_(torch.eye(4))
        model.head.weight.copy_(torch.eye(4))
        model.blocks[0].attn.qkv.weight.copy_(torch.randn(12, 4))  # any pattern: W_O = 0 writes none of it
        model.blocks[0].mlp.w1.weight.copy_(torch.eye(4))
        w2 = torch.zeros(4, 4)
        w2[2, 0], w2[3, 1] = 2.0, 3.0  # (d_out, d_ff)
        model.blocks[0].mlp.w2.weight.copy_(w2)
    tc = SAE(SAEConfig(site="blocks.0.hook_mlp_out", d_in=4, d_sae=2, kind="topk", k=2))
    with torch.no_grad():
        tc.W_enc.zero_()
        tc.W_enc[0, 0], tc.W_enc[1, 1] = 1.0, 1.0
        tc.W_dec.zero_()
        tc.W_dec[0, 2], tc.W_dec[1, 3] = 2.0, 3.0
        tc.b_enc.zero_()
        tc.b_dec.zero_()
    return model.eval(), {0: tc.requires_grad_(False)}


def test_a_model_built_so_the_graph_is_known():
    model, tcs = hand_model()
    g = A.attribution_graph(model, tcs, [0, 1], logit_tokens=[3, 1])
    # two active features: coordinate 0 at position 0, coordinate 1 at position 1, each of activation 1
    assert g.features.tolist() == [[0, 0, 0], [0, 1, 1]] and g.activations.tolist() == pytest.approx([1, 1])
    sl = g.slices()
    tok = sl["tokens"].start
    want = np.zeros_like(g.adjacency)
    want[0, tok + 0] = 1.0   # feature (pos 0) <- its token's embedding e0
    want[1, tok + 1] = 1.0   # feature (pos 1) <- e1
    want[sl["logits"].start, 1] = 3.0      # logit of token 3 <- the feature writing 3 e3 at the last position
    want[sl["logits"].start + 1, tok + 1] = 1.0  # logit of token 1 <- e1, straight along the stream
    np.testing.assert_allclose(g.adjacency, want, atol=1e-6)
    assert not g.constants.any()
    assert A.scores(g) == pytest.approx((1.0, 1.0))  # no error node carries anything


def test_the_head_split_adds_up_and_one_attention_layer_composes_nothing(shipped, graph):
    model, _, tcs, _ = shipped
    g = graph
    first = [i for i in range(g.n_features) if g.features[i][0] == 0][:4]  # targets in block 1: one layer of heads
    top = [g.slices()["logits"].start]
    parts = A.head_split(model, tcs, g, first + top)
    S = g.slices()["logits"].start
    np.testing.assert_allclose(sum(parts.values()), g.adjacency[first + top, :S], atol=1e-9)
    assert np.abs(parts["composed"][:len(first)]).max() < 1e-5  # nothing reaches block 1's MLP through two heads
    assert not any(np.abs(parts[f"L2H{h}"][:len(first)]).max() > 1e-6 for h in range(1, 5))  # nor through block 2's


def test_the_query_key_split_adds_up_to_the_heads_score(shipped):
    model, _, tcs, ids = shipped
    q, k = len(ids) - 1, 20
    split = A.qk_split(model, tcs, ids, 1, 3, q, k)
    total = split["terms"].sum() + split["query_const"].sum() + split["key_const"].sum() + split["const"]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.as_tensor(ids)[None], names=["blocks.1.attn.hook_attn_scores"])
    assert total == pytest.approx(float(cache["blocks.1.attn.hook_attn_scores"][0, 3, q, k]), abs=1e-4)
    assert split["score"] == pytest.approx(total, abs=1e-4)


def test_influence_and_pruning_on_a_hand_made_chain():
    # token -> feature -> logit with weights 2 and 3, and a weak error -> logit edge of 0.1
    g = A.Graph(ids=[0], features=np.array([[0, 0, 0]]), activations=np.array([1.0]), n_layers=1, logit_tokens=[5],
                logit_probs=np.array([1.0]), adjacency=np.zeros((5, 5)), inputs=np.zeros(5), constants=np.zeros(5))
    # nodes: 0 feature, 1 error, 2 token, 3 position, 4 logit
    g.adjacency[0, 2] = 2.0
    g.adjacency[4, 0], g.adjacency[4, 1] = 3.0, 0.1
    na = A.normalize(g.adjacency)
    inf = A.influence(na, np.array([0, 0, 0, 0, 1.0]))
    assert inf[:3] == pytest.approx([3 / 3.1, 0.1 / 3.1, 3 / 3.1])
    rep, comp = A.scores(g)
    assert rep == pytest.approx((3 / 3.1) / (3 / 3.1 + 0.1 / 3.1))
    # completeness: each node's share of input not from errors (1 for a node with no input at all, as
    # circuit-tracer counts it; 3/3.1 for the logit), weighted by its influence plus its logit weight:
    # (3 + 0.1 + 3 + 3) / 3.1 over (3 + 0.1 + 3 + 3.1) / 3.1
    assert comp == pytest.approx(9.1 / 9.2)
    pr = A.prune(g, node_threshold=0.9, edge_threshold=0.9)
    assert pr.node_mask.tolist() == [True, False, True, True, True]  # the error node carries under 10 %
    assert pr.edge_mask[4, 0] and pr.edge_mask[0, 2] and not pr.edge_mask[4, 1]
    with pytest.raises(ValueError):
        A.prune(g, node_threshold=1.5)


def test_a_graph_needs_every_blocks_transcoder(shipped):
    model, _, tcs, ids = shipped
    with pytest.raises(ValueError, match="a transcoder for every block"):
        A.attribution_graph(model, {0: tcs[0]}, ids)
