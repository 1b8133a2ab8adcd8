"""Attribution graphs (issue 46): the replacement model gives the model's logits; every target's edges and constant
terms add up to its input; an edge is the change of its target when its source grows by (1 + eps), over eps; a
model built so the graph is known by hand gives that graph; the head split and the query-key split add up to what
the model computes; pruning and the two scores on hand-made graphs. Issue 57: the conventions are circuit-tracer's
(a logit target is the logit minus the mean logit, a position embedding a constant), and its scores and pruning,
written out here from its code, agree with ours on the shipped model."""
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis import attribution as A
from core.analysis import attribution_prune as P
from core.analysis.sae import SAE, SAEConfig
from core.analysis.transcoders import load_transcoders
from core.nn.checkpoint import load_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer

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
    # float32 rounding only: the replacement writes each MLP's output back as tc(x) + (y - tc(x)), which keeps y to
    # the rounding of the larger term, then carries it through the next block, the final LayerNorm and W_U. Measured
    # under ATEN_CPU_CAPABILITY default, avx2, avx512: 5.8e-6, 7.9e-6, 6.3e-6 at logits up to 10, i.e. 5 to 7 float32
    # ulps of the largest logit (the former bound of 1e-5 held by 21 % on avx2); 64 ulps of it
    ulp = 2.0 ** -23 * real.abs().max().item()
    assert (real - replaced).abs().max().item() < 64 * ulp


@pytest.fixture(scope="module")
def graph(shipped):
    model, _, tcs, ids = shipped
    return A.attribution_graph(model, tcs, ids)


@pytest.fixture(scope="module")
def raw_graph(shipped):
    model, _, tcs, ids = shipped
    return A.attribution_graph(model, tcs, ids, target="raw")


def plain_logits(model, ids) -> torch.Tensor:
    """(m,) the model's own logits at the last position: a plain forward, no hooks."""
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0, -1].double()


@pytest.mark.parametrize("which", ["demeaned", "raw"])
def test_every_targets_edges_and_constants_add_up_to_its_input(shipped, graph, raw_graph, which):
    model, _, _, ids = shipped
    g = graph if which == "demeaned" else raw_graph
    sl = g.slices()
    assert list(sl) == ["features", "errors", "tokens", "logits"] and g.target == which
    assert g.n_nodes == g.n_features + (g.n_layers + 1) * g.n_pos + len(g.logit_tokens)
    targets = list(range(g.n_features)) + list(range(sl["logits"].start, g.n_nodes))
    total = g.adjacency[targets].sum(1) + g.constants[targets]
    np.testing.assert_allclose(total, g.inputs[targets], atol=1e-4)
    # the inputs are the real ones: a feature's pre-activation is at least its activation (TopK keeps the ReLU of it)
    np.testing.assert_allclose(g.inputs[:g.n_features], g.activations, atol=1e-5)
    # a logit target from a plain forward: the logit minus the mean over the vocabulary (circuit-tracer's), or the logit
    logits = plain_logits(model, ids)
    want = logits[g.logit_tokens] - (logits.mean() if which == "demeaned" else 0)
    assert abs(float(logits.mean())) > 0.1  # the two conventions differ here: something to check
    np.testing.assert_allclose(g.inputs[sl["logits"]], want.numpy(), atol=1e-4)
    np.testing.assert_allclose(total[g.n_features:], want.numpy(), atol=1e-4)
    assert not g.adjacency[sl["errors"].start:sl["logits"].start].any()  # errors and embeddings have no inputs


def test_the_two_targets_share_every_feature_row(graph, raw_graph):
    """Only the logit rows differ: a feature's input is its pre-activation under either convention."""
    F, top = graph.n_features, graph.slices()["logits"].start
    np.testing.assert_array_equal(graph.adjacency[:F], raw_graph.adjacency[:F])
    assert np.abs(graph.adjacency[top:] - raw_graph.adjacency[top:]).max() > 1e-3
    with pytest.raises(ValueError, match="a logit target is one of"):
        A.attribution_graph(None, {}, [0], target="centred")


def test_an_edge_is_the_change_when_its_source_grows(shipped, graph):
    """Source scaled by (1 + eps) in the frozen replacement: the target moves by eps x the edge."""
    model, _, tcs, ids = shipped
    g, eps = graph, 1e-2
    ids_t = torch.as_tensor(ids)
    t = g.logit_tokens[0]

    def target(logits):  # (1, n, m) -> the demeaned logit of t at the last position
        return float(logits[0, -1, t] - logits[0, -1].mean())
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
        change = (target(moved) - target(base)) / eps
        assert change == pytest.approx(g.adjacency[top, src], rel=1e-3, abs=1e-4)


def hand_model(positions: bool = False):
    """One block, no LayerNorm, attention that writes nothing (W_O = 0), one-hot embeddings; the MLP writes 2 e2 for
    coordinate 0 of its input and 3 e3 for coordinate 1, and a transcoder that does exactly the same. ``positions``:
    with a position embedding, zero until the caller sets it."""
    cfg = ModelConfig(vocab_size=4, n_ctx=4, d_model=4, n_heads=1, n_layers=1, d_ff=4, norm="none",
                      positions=positions)
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


@pytest.mark.parametrize("which", ["raw", "demeaned"])
def test_a_model_built_so_the_graph_is_known(which):
    model, tcs = hand_model()
    g = A.attribution_graph(model, tcs, [0, 1], logit_tokens=[3, 1], target=which)
    # two active features: coordinate 0 at position 0, coordinate 1 at position 1, each of activation 1
    assert g.features.tolist() == [[0, 0, 0], [0, 1, 1]] and g.activations.tolist() == pytest.approx([1, 1])
    sl = g.slices()
    tok, out = sl["tokens"].start, sl["logits"].start
    # the last position's stream is e1 + 3 e3 (its token, the feature's write); W_U = I, so the logits are the stream
    # and their mean over the 4 tokens is a quarter of its sum: the demeaned logit of t reads e_t - (1, 1, 1, 1) / 4
    m = 0.25 if which == "demeaned" else 0.0
    want = np.zeros_like(g.adjacency)
    want[0, tok + 0] = 1.0   # feature (pos 0) <- its token's embedding e0
    want[1, tok + 1] = 1.0   # feature (pos 1) <- e1
    want[out, 1] = 3.0 * (1 - m)        # logit of token 3 <- the feature writing 3 e3 at the last position
    want[out, tok + 1] = -m             # ... and e1 (only the mean reads it)
    want[out + 1, tok + 1] = 1.0 - m    # logit of token 1 <- e1, straight along the stream
    want[out + 1, 1] = -3.0 * m         # ... and the feature's 3 e3 (only the mean)
    np.testing.assert_allclose(g.adjacency, want, atol=1e-6)
    assert not g.constants.any()
    assert P.scores(g) == pytest.approx((1.0, 1.0))  # no error node carries anything


def test_a_position_embedding_is_a_constant_as_in_circuit_tracer():
    """The hand model with a position embedding in the coordinates no MLP unit writes from (2 and 3): the features
    and errors are unchanged, no node carries the position embedding, and each logit target's constant is its part,
    p[t] - mean(p) at the last position (W_U = I)."""
    model, tcs = hand_model(positions=True)
    pos = torch.zeros(4, 4)
    pos[:, 2], pos[:, 3] = torch.tensor([0.5, -1.0, 2.0, 0.7]), torch.tensor([1.5, 0.25, -0.5, 3.0])
    with torch.no_grad():
        model.pos_emb.weight.copy_(pos)
    g = A.attribution_graph(model, tcs, [0, 1], logit_tokens=[3, 1])
    no_pos = A.attribution_graph(hand_model()[0], tcs, [0, 1], logit_tokens=[3, 1])
    assert g.features.tolist() == no_pos.features.tolist() and g.n_nodes == no_pos.n_nodes
    np.testing.assert_allclose(g.adjacency, no_pos.adjacency, atol=1e-6)  # the same edges: no node of its own
    last = pos[1].double()
    out = g.slices()["logits"].start
    np.testing.assert_allclose(g.constants[out:], (last[[3, 1]] - last.mean()).numpy(), atol=1e-6)
    assert not g.constants[:out].any()  # the features read coordinates 0 and 1, where it writes nothing
    logits = plain_logits(model, [0, 1])
    np.testing.assert_allclose(g.inputs[out:], (logits[[3, 1]] - logits.mean()).numpy(), atol=1e-6)


def gated_edges(model, tcs, g, targets, gates) -> np.ndarray:
    """The edges into ``targets`` with only the heads ``gates`` lets through ({layer: (h,) 0 or 1}), patterns frozen:
    how head_split computes each of its parts."""
    import inspect

    keep = {"keep": g.features.tolist()} if "keep" in inspect.signature(A._run).parameters else {}
    run, _, _ = A._run(model, tcs, torch.as_tensor(g.ids), logit_tokens=g.logit_tokens, **keep)
    return A._edges(model, tcs, run, A._rows_of(g, targets), gates=gates)[0]


def test_the_head_split_adds_up_and_one_attention_layer_composes_nothing(shipped, graph):
    """The composed part computed on its own (issue 55: head_split defines it as the remainder, so checking that the
    parts add up to the edge could not fail). A path passes at most one head of each layer, so with whole layers
    switched on one at a time, f(all) - f(none) - sum_l (f(layer l alone) - f(none)) is every path through two
    heads or more; the single-head parts must then make up the rest."""
    model, _, tcs, _ = shipped
    g = graph
    L, h = model.config.n_layers, model.config.n_heads
    first = [i for i in range(g.n_features) if g.features[i][0] == 0][:4]  # targets in block 1: one layer of heads
    targets = first + [g.slices()["logits"].start]
    parts = A.head_split(model, tcs, g, targets)
    S = g.slices()["logits"].start
    edges = g.adjacency[targets, :S]
    none = gated_edges(model, tcs, g, targets, {l: torch.zeros(h) for l in range(L)})
    layers = [gated_edges(model, tcs, g, targets, {m: torch.full((h,), float(m == l)) for m in range(L)})
              for l in range(L)]
    composed = edges - none - sum(f - none for f in layers)
    assert np.abs(composed[-1]).max() > 1e-3  # the logit's edges do pass two heads in turn: something to check
    singles = sum(v for k, v in parts.items() if k not in ("direct", "composed"))
    # each part is a float32 backward pass, 2 + L (h + 1) of them added: rounding of a few float32 ulps of the
    # largest edge each (measured: 7.2e-7 under every ATEN_CPU_CAPABILITY, edges up to ~3); 64 ulps of it
    tol = 64 * 2.0 ** -23 * np.abs(edges).max()
    np.testing.assert_allclose(parts["direct"] + singles + composed, edges, atol=tol)
    np.testing.assert_allclose(parts["composed"], composed, atol=tol)
    assert np.abs(composed[:len(first)]).max() < 1e-5  # nothing reaches block 1's MLP through two heads
    assert not any(np.abs(parts[f"L2H{k}"][:len(first)]).max() > 1e-6 for k in range(1, h + 1))  # nor through block 2's


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
                logit_probs=np.array([1.0]), adjacency=np.zeros((4, 4)), inputs=np.zeros(4), constants=np.zeros(4))
    # nodes: 0 feature, 1 error, 2 token, 3 logit
    g.adjacency[0, 2] = 2.0
    g.adjacency[3, 0], g.adjacency[3, 1] = 3.0, 0.1
    na = P.normalize(g.adjacency)
    inf = P.influence(na, np.array([0, 0, 0, 1.0]))
    assert inf[:3] == pytest.approx([3 / 3.1, 0.1 / 3.1, 3 / 3.1])
    rep, comp = P.scores(g)
    assert rep == pytest.approx((3 / 3.1) / (3 / 3.1 + 0.1 / 3.1))
    # completeness: each node's share of input not from errors (1 for a node with no input at all, as
    # circuit-tracer counts it; 3/3.1 for the logit), weighted by its influence plus its logit weight:
    # (3 + 0.1 + 3 + 3) / 3.1 over (3 + 0.1 + 3 + 3.1) / 3.1
    assert comp == pytest.approx(9.1 / 9.2)
    pr = P.prune(g, node_threshold=0.9, edge_threshold=0.9)
    assert pr.node_mask.tolist() == [True, False, True, True]  # the error node carries under 10 %
    assert pr.edge_mask[3, 0] and pr.edge_mask[0, 2] and not pr.edge_mask[3, 1]
    with pytest.raises(ValueError):
        P.prune(g, node_threshold=1.5)


# ---------------------------------------------------------------- circuit-tracer's scores and pruning (issue 57)
# Written out from circuit-tracer's circuit_tracer/graph.py (normalize_matrix, compute_influence, find_threshold,
# prune_graph, compute_graph_scores), in torch as there, on its node order [features, errors, tokens, logits]; none
# of it calls ours. The logit weights are the logit nodes' probabilities, the last n_logits nodes.
def ct_normalize_matrix(matrix):
    normalized = matrix.abs()
    return normalized / normalized.sum(dim=1, keepdim=True).clamp(min=1e-10)


def ct_compute_influence(A_, logit_weights, max_iter=1000):
    current_influence = logit_weights @ A_
    influence = current_influence.clone()
    iterations = 0
    while current_influence.any():
        assert iterations < max_iter
        current_influence = current_influence @ A_
        influence += current_influence
        iterations += 1
    return influence


def ct_find_threshold(scores, threshold):
    sorted_scores = torch.sort(scores, descending=True).values
    cumulative_score = torch.cumsum(sorted_scores, dim=0) / torch.sum(sorted_scores)
    threshold_index = int(torch.searchsorted(cumulative_score, threshold).item())
    threshold_index = min(threshold_index, len(cumulative_score) - 1)
    return sorted_scores[threshold_index]


def ct_logit_weights(adjacency, probs):
    w = torch.zeros(adjacency.shape[0], dtype=adjacency.dtype)
    w[-len(probs):] = probs
    return w


def ct_graph_scores(adjacency, probs, n_features, n_tokens, n_layers):
    error_start = n_features
    error_end = error_start + n_tokens * n_layers
    token_end = error_end + n_tokens
    logit_weights = ct_logit_weights(adjacency, probs)
    normalized_matrix = ct_normalize_matrix(adjacency)
    node_influence = ct_compute_influence(normalized_matrix, logit_weights)
    token_influence = node_influence[error_end:token_end].sum()
    error_influence = node_influence[error_start:error_end].sum()
    replacement_score = token_influence / (token_influence + error_influence)
    non_error_fractions = 1 - normalized_matrix[:, error_start:error_end].sum(dim=-1)
    output_influence = node_influence + logit_weights
    completeness_score = (non_error_fractions * output_influence).sum() / output_influence.sum()
    return replacement_score.item(), completeness_score.item()


def ct_prune_graph(adjacency, probs, n_features, n_tokens, node_threshold=0.8, edge_threshold=0.98):
    n_logits = len(probs)
    logit_weights = ct_logit_weights(adjacency, probs)
    node_influence = ct_compute_influence(ct_normalize_matrix(adjacency), logit_weights)
    node_mask = node_influence >= ct_find_threshold(node_influence, node_threshold)
    node_mask[-n_logits - n_tokens:] = True
    pruned_matrix = adjacency.clone()
    pruned_matrix[~node_mask] = 0
    pruned_matrix[:, ~node_mask] = 0
    normalized_pruned = ct_normalize_matrix(pruned_matrix)
    pruned_influence = ct_compute_influence(normalized_pruned, logit_weights) + logit_weights
    edge_scores = normalized_pruned * pruned_influence[:, None]
    edge_mask = edge_scores >= ct_find_threshold(edge_scores.flatten(), edge_threshold)
    old_node_mask = node_mask.clone()
    node_mask[: -n_logits - n_tokens] &= edge_mask[:, : -n_logits - n_tokens].any(0)
    node_mask[:n_features] &= edge_mask[:n_features].any(1)
    while not torch.all(node_mask == old_node_mask):
        old_node_mask[:] = node_mask
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        node_mask[: -n_logits - n_tokens] &= edge_mask[:, : -n_logits - n_tokens].any(0)
        node_mask[:n_features] &= edge_mask[:n_features].any(1)
    return node_mask, edge_mask


PROMPT = "Long live the king! Long live the queen! Long live the k"  # the page's default


@pytest.fixture(scope="module")
def default_graph(shipped):
    model, tok, tcs, _ = shipped
    return A.attribution_graph(model, tcs, tok.encode(PROMPT)[-64:])


def ct_args(g):
    return torch.as_tensor(g.adjacency), torch.as_tensor(g.logit_probs), g.n_features, g.n_pos


def test_the_scores_and_pruning_are_circuit_tracers(default_graph, raw_graph):
    """Ours against circuit-tracer's formulas above, on the default prompt's graph (and on a raw-logit graph: the
    formulas are the same whatever the targets)."""
    for g in (default_graph, raw_graph):
        adjacency, probs, F, n = ct_args(g)
        want = ct_graph_scores(adjacency, probs, F, n, g.n_layers)
        assert P.scores(g) == pytest.approx(want, abs=1e-9)
        node_mask, edge_mask = ct_prune_graph(adjacency, probs, F, n)
        pr = P.prune(g)
        np.testing.assert_array_equal(pr.node_mask, node_mask.numpy())
        np.testing.assert_array_equal(pr.edge_mask, edge_mask.numpy())


def test_the_default_graph_gives_circuit_tracers_numbers(default_graph):
    """Issue 57: circuit-tracer's ``attribute`` on the shipped character model and transcoders, default prompt,
    gave replacement / completeness 0.791 / 0.920 and kept 237 edges at node share 0.8 (edge share 0.98); the
    raw-logit convention with position embedding nodes gave 0.765 / 0.906 and 497 edges."""
    g = default_graph
    rep, comp = P.scores(g)
    assert (round(rep, 3), round(comp, 3)) == (0.791, 0.920)
    assert int(P.prune(g, 0.8).edge_mask.sum()) == 237


def test_a_graph_needs_every_blocks_transcoder(shipped):
    model, _, tcs, ids = shipped
    with pytest.raises(ValueError, match="a transcoder for every block"):
        A.attribution_graph(model, {0: tcs[0]}, ids)


# ---------------------------------------------------------------- a direction read through to the logits (issue 55)
def norm_model(norm: str, seed: int = 0):
    """A random model of one ``norm`` setting (core.nn.config.NORMS), its LayerNorms' gains and shifts random too (the
    defaults 1 and 0 would hide a forgotten gain or shift), and a random transcoder on its last block."""
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=50, n_ctx=8, d_model=16, n_heads=2, n_layers=2, norm=norm)).eval()
    tc = SAE(SAEConfig(site="blocks.1.hook_mlp_out", d_in=16, d_sae=8, kind="topk", k=3))
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(tc.named_parameters()):
            p.copy_((1.0 if name.startswith("ln") and name.endswith("weight") else 0.0) + torch.randn_like(p))
    return model, {1: tc.requires_grad_(False)}


def by_hand(model, d: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """W_U (gamma (d - mean d) / sigma) with a final LayerNorm (pre-norm), W_U d without one (post-norm: the last
    block's own LayerNorm ends the stream; "none"), written out."""
    d = d.double()
    if model.config.norm == "pre":
        d = model.ln_f.weight.double() * (d - d.mean(-1, keepdim=True)) / sigma
    return d @ model.head.weight.double().T


@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_direct_read_is_the_models_readout_with_the_scale_frozen(norm):
    from core.analysis.trace import direct_read, read_shift

    model, _ = norm_model(norm)
    x = 3 * torch.randn(5, 16, dtype=torch.float64)
    sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + model.config.ln_eps) if norm == "pre" else 1.0
    got = direct_read(model, x, 1 / sigma)  # (5, m)
    torch.testing.assert_close(got, by_hand(model, x, sigma))
    shift = torch.tensor([read_shift(model, t) for t in range(50)], dtype=torch.float64)
    assert (shift.abs().max() > 0.1) == (norm == "pre")  # only a final LayerNorm has a shift
    # the model's own readout (sigma frozen at the stream's own: the parts and the shift make the logits), in float32:
    # logits of ~20 rounded to ~1e-6 each, against float64 here
    with torch.no_grad():
        torch.testing.assert_close(got + shift, model.readout(x.float()).double(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(direct_read(model, x[2], 1 / sigma[2] if norm == "pre" else 1.0, token=7), got[2, 7])


@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_the_three_readers_of_a_direction_agree_with_the_hand_computation(norm):
    """The feature profile's promoted tokens (it once centred every direction, with or without a final LayerNorm:
    for "post" and "none" it ranked other tokens than W_U d), a unit card's direct logits, and the direct logit
    attribution of one writer."""
    from core.analysis.attribution_probes import feature_profile
    from core.analysis.trace import direct_logit_attribution, trace
    from core.features.browse import direct_logits
    from core.features.units import Units

    model, tcs = norm_model(norm)
    d = tcs[1].W_dec[5]
    want = by_hand(model, d)
    prof = feature_profile(model, tcs, [1, 2, 3, 4], 1, 5)
    assert prof["promotes"] == torch.argsort(want, descending=True)[:6].tolist()
    assert prof["suppresses"] == torch.argsort(want)[:6].tolist()
    if norm != "pre":  # no final LayerNorm: the top of W_U d, as it stands
        assert prof["promotes"] == torch.argsort(model.head.weight.double() @ d.double(), descending=True)[:6].tolist()
    units = Units("blocks.1.hook_mlp_out", "feature", 8, tcs[1].encode, tcs[1].W_dec, None, "test")
    sigma = 2.5 if norm == "pre" else None  # the index's held-out mean scale; None exactly without a final LN
    index = type("Index", (), {"ln_scale": sigma, "total": 100})()
    logits, words = direct_logits(model, units, index, 5)
    torch.testing.assert_close(logits, by_hand(model, d, sigma or 1.0))
    assert ("no final LayerNorm" in words) == (norm != "pre")
    tr = trace(model, [1, 2, 3, 4])
    att = direct_logit_attribution(model, tr, 9, 3)
    mlp = tr.mlp_out[1][0, 3]
    scale = float(tr.ln_scale[0, 3])
    assert att.values[att.names.index("L2 MLP")] == pytest.approx(float(by_hand(model, mlp, 1 / scale)[9]), rel=1e-9)
    if norm != "post":  # pre and "none" are sums of their writers: the parts and the shift make the logit
        assert att.gap == pytest.approx(0.0, abs=1e-4 * max(1.0, abs(att.logit)))
