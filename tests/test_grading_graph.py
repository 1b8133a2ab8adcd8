"""The attribution graph graded against the answer keys (core.analysis.grading_graph, issue 59 §2) and the keys'
transcoders (core.features.answer_key_transcoders): the scoring on a hand-made graph whose answer is counted by hand;
on the copy key, the head split the scores rest on against a plain forward with the patterns and scales frozen; the
shipped transcoders load and their health numbers are what the files say, recomputed from the raw weights."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from core.analysis import grading as G
from core.analysis import grading_graph as GG
from core.analysis.answer_keys import KEYS_DIR, list_keys, load_key
from core.analysis.attribution import Graph
from core.analysis.sae import model_fingerprint
from core.analysis.transcoders import load_transcoders


@pytest.fixture(autouse=True)
def one_thread():
    was = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(was)


def hand_graph() -> Graph:
    """Two positions, one block: a feature (block 0, position 1), two error nodes, two token embeddings, one logit.
    Nodes 0 feature, 1-2 errors, 3-4 tokens, 5 the logit. Into the logit: the feature 2, token 1 +1, token 0 -1;
    into the feature: token 1 +3, token 0 +1."""
    a = np.zeros((6, 6))
    a[5, 0], a[5, 4], a[5, 3] = 2.0, 1.0, -1.0
    a[0, 4], a[0, 3] = 3.0, 1.0
    return Graph(ids=[0, 1], features=np.array([[0, 1, 0]]), activations=np.ones(1), n_layers=1, logit_tokens=[7],
                 logit_probs=np.ones(1), adjacency=a, inputs=np.zeros(6), constants=np.zeros(6))


def test_the_scores_of_a_hand_made_graph_against_a_hand_count():
    """Normalized |A|: the logit reads the feature 1/2, token 1 1/4, token 0 1/4; the feature reads token 1 3/4,
    token 0 1/4. Influence: the feature 1/2, so the flow into it is 3/8 from token 1 and 1/8 from token 0. The head
    split: logit <- token 0 all through L1 H1; logit <- token 1 half direct, half through L1 H2; logit <- feature
    direct; feature <- token 0 through L1 H1; feature <- token 1 half direct, half through L1 H1."""
    g = hand_graph()
    flow, inf = GG.flows(g, 0)  # nothing is pruned: 80 % of the influence needs every node here
    hand = np.zeros((6, 6))
    hand[5, 0], hand[5, 4], hand[5, 3], hand[0, 4], hand[0, 3] = 1 / 2, 1 / 4, 1 / 4, 3 / 8, 1 / 8
    assert np.allclose(flow, hand) and np.allclose(inf[[0, 3, 4]], [1 / 2, 3 / 8, 5 / 8])
    rows = [0, 5]
    parts = {n: np.zeros((2, 5)) for n in ("direct", "L1H1", "L1H2", "composed")}
    parts["L1H1"][1, 3] = -1.0
    parts["direct"][1, 4], parts["L1H2"][1, 4] = 0.5, 0.5
    parts["direct"][1, 0] = 2.0
    parts["L1H1"][0, 3] = 1.0
    parts["direct"][0, 4], parts["L1H1"][0, 4] = 1.5, 1.5
    got = GG.route(g, 1, rows, parts, flow, inf, 0)
    h1 = 1 / 4 + 1 / 8 + 3 / 16  # logit <- token 0, feature <- token 0, half of feature <- token 1
    assert got["components"] == pytest.approx({"L1 H1": h1, "L1 H2": 1 / 8, "L1 MLP": 1 / 2})
    e = got["edges"]
    assert e["tokens", "L1 H1"] == pytest.approx(h1) and e["L1 H1", "logits"] == pytest.approx(1 / 4)
    assert e["L1 H1", "L1 MLP"] == pytest.approx(1 / 8 + 3 / 16) and e["tokens", "L1 MLP"] == pytest.approx(3 / 16)
    assert e["tokens", "L1 H2"] == e["L1 H2", "logits"] == pytest.approx(1 / 8)
    assert e["tokens", "logits"] == pytest.approx(1 / 8) and e["L1 MLP", "logits"] == pytest.approx(1 / 2)
    assert got["mass"] == pytest.approx(4.0) and got["composed"] == 0.0 and got["errors"] == 0.0


def _frozen_part(model, ids, target, head, cache) -> float:
    """The part of ``target(cache_of_run)`` that token embeddings carry through ``head`` alone (None: the residual
    stream alone), from a plain forward of a one-block model with its LayerNorm scales and attention patterns frozen
    at the real run's, the position embeddings zeroed (the graph's constants) and every other head's output zeroed:
    affine in the token embeddings, so (``head`` on - every head off) with the embeddings minus the same without
    them (the LayerNorms' biases through the head, constants in the graph) is its part."""
    def run(on, embed=True):
        def z(x, name):
            keep = torch.zeros(x.shape[2])
            if on is not None:
                keep[on] = 1.0
            return x * keep[None, None, :, None]  # (B, n, h, d/h): the other heads' outputs zeroed
        hooks = [(n, lambda x, name, v=cache[n]: v) for n in ("blocks.0.ln1.hook_scale", "blocks.0.ln2.hook_scale",
                                                               "blocks.0.attn.hook_pattern", "ln_final.hook_scale")]
        hooks += [("hook_pos_embed", lambda x, name: torch.zeros_like(x)), ("blocks.0.attn.hook_z", z),
                  ("hook_embed", lambda x, name: x if embed else torch.zeros_like(x)),
                  ("blocks.0.hook_mlp_out", lambda x, name: torch.zeros_like(x))]  # features are other sources
        logits = model(torch.tensor([ids]), hooks=hooks).logits[0, -1].double()
        return float(target(logits))
    return (run(head) - run(None)) - (run(head, False) - run(None, False))


def test_the_copy_keys_head_routes_against_a_plain_forward():
    """The head split the scores route by: the answer's logit minus the mean logit, read from the token embeddings
    through each head (head_split's part, summed over the sources, as the scorer's rows hold it) against a plain
    forward with everything frozen (``_frozen_part``); then the method's scores on the copy key: L1 H3, the key's
    one head, carries the answer, the grade is 1 with no twin run and the verdict says why."""
    from core.analysis.attribution import attribution_graph, head_split

    model, _, key, task = load_key("copy")
    tcs = GG.key_transcoders(model)
    assert sorted(tcs) == [0]
    e = G.pairs(task, model.config.n_ctx, 1)[0]
    g = attribution_graph(model, tcs, list(e.clean), logit_tokens=[e.answer])
    logit = g.slices()["logits"].start
    parts = head_split(model, tcs, g, [logit])
    _, cache = model.run_with_cache(torch.tensor([list(e.clean)]))
    answer = lambda lg: lg[e.answer] - lg.mean()  # noqa: E731  the graph's target (circuit-tracer's)
    for h in range(model.config.n_heads):
        assert parts[f"L1H{h + 1}"][0].sum() == pytest.approx(_frozen_part(model, list(e.clean), answer, h, cache),
                                                             abs=1e-4)
    assert parts["L1H3"][0].sum() > 1.0  # the key's head writes the answer: the check above is not of zeros only
    got = GG.example_scores(model, tcs, e.clean, [e.answer])[0]
    assert max(got["components"], key=got["components"].get) == "L1 H3" and got["components"]["L1 H3"] > 0.5
    gr = G.grade("copy", "attribution_graph", count=4, loaded=(model, None, key, task))
    assert gr.auroc == 1.0 and gr.scores.claim.startswith("L1 H3") and np.isnan(gr.random_twin)
    assert "The random twin cannot be graded" in gr.verdict and gr.control_seconds < gr.seconds


def test_a_model_without_transcoders_is_refused_in_words():
    model = load_key("copy")[0]
    twin = G.random_twin(model)
    with pytest.raises(GG.NoTranscoders, match="no transcoder"):
        GG.score_graph(twin, G.pairs(load_key("copy")[3], model.config.n_ctx, 1))


def _raw_fit(folder, x, y):
    """explained variance and l0 of a TopK transcoder from its raw weights: f = relu(topk(x W_enc + b_enc))."""
    w, cfg = load_file(folder / "sae_weights.safetensors"), json.loads((folder / "config.json").read_text())
    pre = x @ w["W_enc"] + w["b_enc"]  # (N, d_sae)
    top = pre.topk(cfg["k"], dim=-1)
    f = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
    y_hat = f @ w["W_dec"] + w["b_dec"]
    err, var = (y - y_hat).pow(2).sum(), (y - y.mean(0)).pow(2).sum()
    return float(1 - err / var), float((f > 0).sum(-1).float().mean()), float(err / len(y))


@pytest.mark.parametrize("name", list_keys())
def test_the_keys_transcoders_load_and_their_numbers_are_what_the_files_say(name):
    """Every block's transcoder loads as the Attribution page loads them (trained on these weights), stays small, and
    its metrics.json's fit (explained variance, l0, mse) and the answer's clean loss are what the raw weights and a
    plain forward give on task.json's prompts."""
    model, _, _, task = load_key(name)
    tcs = load_transcoders(KEYS_DIR / name, model.config, trained_on=model_fingerprint(model))
    assert sorted(tcs) == list(range(model.config.n_layers))
    for layer in tcs:
        folder = KEYS_DIR / name / "transcoders" / f"layer-{layer}"
        assert (folder / "sae_weights.safetensors").stat().st_size < 300_000
        m = json.loads((folder / "metrics.json").read_text())
        xs, ys, ce = [], [], 0.0
        for p, a in zip(task.prompts, task.answers):
            logits, cache = model.run_with_cache(torch.tensor([p]), names=[f"blocks.{layer}.hook_mlp_in",
                                                                           f"blocks.{layer}.hook_mlp_out"])
            xs.append(cache[f"blocks.{layer}.hook_mlp_in"][0])
            ys.append(cache[f"blocks.{layer}.hook_mlp_out"][0])
            ce -= float(logits[0, -1].double().log_softmax(-1)[a])
        ev, l0, mse = _raw_fit(folder, torch.cat(xs), torch.cat(ys))
        assert m["l0"] == pytest.approx(l0, abs=1e-4) and m["mse"] == pytest.approx(mse, rel=1e-3, abs=1e-9)
        assert m["explained_variance"] == pytest.approx(ev, rel=1e-3, abs=1e-4)
        assert m["ce_clean"] == pytest.approx(ce / len(task.prompts), rel=1e-4, abs=1e-6)
        assert m["eval_tokens"] == sum(map(len, task.prompts))
