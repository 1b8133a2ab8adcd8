"""pages.inside.view, core.analysis.trace.lens_accuracy and the Inside page's figure words: every number checked against
the model's own modules run here one by one (or the fused forward pass), and hand-built lenses."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.figures import trace_figures as TF
from pages.inside import view as TV
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.analysis.trace import Lens, lens_accuracy, stream_steps, trace

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5]


def make(bias=False, activation="relu"):
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=12, n_heads=3, n_layers=2, bias=bias,
                                activation=activation))
    with torch.no_grad():  # larger weights than the init, so that heads and units differ visibly
        for p in m.parameters():
            p.normal_(0, 0.4)
    return m.eval()


@pytest.fixture(scope="module", params=[(False, "relu"), (True, "gelu")], ids=["relu", "gelu-bias"])
def model(request):
    return make(*request.param)


def by_hand(model, ids):
    """Block 0 run from its modules: the stream before it, its queries, keys, values (h, n, d_h) and what its
    attention and MLP add."""
    c = model.config
    with torch.no_grad():
        x = model.tok_emb.weight[ids] + model.pos_emb.weight[:len(ids)]  # (n, d)
        block = model.blocks[0]
        q, k, v = block.attn.qkv(block.ln1(x)).split(c.d_model, dim=-1)
        q, k, v = (t.view(len(ids), c.n_heads, c.d_head).transpose(0, 1) for t in (q, k, v))  # (h, n, d_h)
        added = block.attn(block.ln1(x)[None])
        mid = x + added[0]
        hidden = block.mlp.act(block.mlp.w1(block.ln2(mid)))
        return dict(x=x, q=q, k=k, v=v, attn=added[0], mid=mid, hidden=hidden, mlp=block.mlp.w2(hidden))


def test_prediction_is_the_fused_forward_pass(model):
    tr = trace(model, IDS)
    with torch.no_grad():
        z = model(torch.tensor([IDS])).logits[0].double()  # (n, m)
    for pos in (0, 4, len(IDS) - 1):
        guess = TV.prediction(tr, pos)
        np.testing.assert_allclose(guess.logits, z[pos].numpy(), atol=1e-5)
        np.testing.assert_allclose(guess.probs, F.softmax(z[pos], -1).numpy(), atol=1e-6)
        assert guess.predicted == int(z[pos].argmax())
        assert list(guess.order) == sorted(range(11), key=lambda t: -guess.probs[t])


def test_step_rows_take_each_step_apart(model):
    tr, pos, hand = trace(model, IDS), 5, by_hand(model, IDS)
    steps = stream_steps(tr, pos)
    embed = TV.step_rows(model, tr, steps, 0, IDS, pos)
    np.testing.assert_allclose(embed[0], model.tok_emb.weight[IDS[pos]].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(embed[1], model.pos_emb.weight[pos].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(embed[2], hand["x"][pos].numpy(), atol=1e-6)

    attn = TV.step_rows(model, tr, steps, 1, IDS, pos)
    h = model.config.n_heads
    assert attn.shape == (h + 3, 12)
    np.testing.assert_allclose(attn[0], hand["x"][pos].numpy(), atol=1e-5)          # the stream before
    np.testing.assert_allclose(attn[h + 1], hand["attn"][pos].numpy(), atol=1e-5)   # what the module adds
    bias = model.blocks[0].attn.out.bias
    heads = attn[1:h + 1].sum(0) + (0 if bias is None else bias.detach().numpy())  # W_O's bias belongs to no head
    np.testing.assert_allclose(heads, attn[h + 1], atol=1e-5)
    np.testing.assert_allclose(attn[-1], hand["mid"][pos].numpy(), atol=1e-5)

    mlp = TV.step_rows(model, tr, steps, 2, IDS, pos)
    np.testing.assert_allclose(mlp[0], hand["mid"][pos].numpy(), atol=1e-5)
    np.testing.assert_allclose(mlp[1], hand["mlp"][pos].numpy(), atol=1e-5)
    np.testing.assert_allclose(mlp[2], (hand["mid"] + hand["mlp"])[pos].numpy(), atol=1e-5)


def test_head_at_is_the_softmax_of_scaled_dot_products_over_the_past(model):
    tr, hand = trace(model, IDS), by_hand(model, IDS)
    c = model.config
    for head, pos in ((0, 0), (1, 4), (2, 8)):
        at = TV.head_at(tr, 0, head, pos)
        q, keys, values = (hand[t][head].double().numpy() for t in ("q", "k", "v"))
        s = keys[:pos + 1] @ q[pos] / math.sqrt(c.d_head)  # (pos+1,) only keys j <= pos
        a = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        np.testing.assert_allclose(at.q, q[pos], atol=1e-5)
        np.testing.assert_allclose(at.keys, keys[:pos + 1], atol=1e-5)
        np.testing.assert_allclose(at.values, values[:pos + 1], atol=1e-5)
        np.testing.assert_allclose(at.scores, s, atol=1e-5)
        np.testing.assert_allclose(at.weights, a, atol=1e-5)
        assert at.heaviest == int(a.argmax())
        assert at.dot(at.heaviest) == pytest.approx(float(q[pos] @ keys[at.heaviest]), abs=1e-4)
        w_o = model.blocks[0].attn.out.weight.detach().double().numpy()[:, head * c.d_head:(head + 1) * c.d_head]
        assert at.out_norm == pytest.approx(np.linalg.norm(w_o @ (a @ values[:pos + 1])), abs=1e-4)


def test_mlp_at_counts_the_units_the_nonlinearity_silenced(model):
    tr, pos, hand = trace(model, IDS), 3, by_hand(model, IDS)
    mlp = TV.mlp_at(tr, 0, pos, model.config.activation)
    hidden = hand["hidden"][pos].double().numpy()
    np.testing.assert_allclose(mlp.hidden, hidden, atol=1e-5)
    np.testing.assert_allclose(mlp.out, hand["mlp"][pos].numpy(), atol=1e-5)
    assert mlp.out_norm == pytest.approx(float(np.linalg.norm(hand["mlp"][pos].numpy())), abs=1e-5)
    # ReLU sets a unit to exactly 0; GELU keeps the sign of its input, so a silenced unit is at or below 0
    want = int((hidden == 0).sum()) if model.config.activation == "relu" else int((hidden <= 0).sum())
    assert mlp.silent == want and 0 < want < model.config.d_ff


def test_lens_accuracy_by_hand():
    top = np.array([[1, 2, 3, 0], [5, 2, 9, 9]])[:, :, None]  # (stages, n, k = 1) favourites
    lens = Lens(top_ids=top, top_probs=np.ones(top.shape))
    np.testing.assert_allclose(lens_accuracy(lens, [7, 1, 2, 4]), [2 / 3, 1 / 3])  # next tokens 1, 2, 4


def test_lens_window_ends_at_the_chosen_position_where_it_can():
    assert TV.window_start(5, 100, 40) == 0      # near the start: the first 40
    assert TV.window_start(50, 100, 40) == 11    # positions 11..50
    assert TV.window_start(99, 100, 40) == 60    # the last 40
    assert TV.window_start(39, 40, 40) == 0


def test_step_words_and_clicks():
    steps = stream_steps(trace(make(), IDS), 2)
    labels, title, adds_up = TF.step_rows_text(steps[0], 3, "x", 2, "token")
    assert labels == ["token 'x'", "position 3", "= start of the stream"] and "for the token" in title  # index 2, the third
    labels, title, adds_up = TF.step_rows_text(steps[3], 3, "x", 2)  # block 2's attention
    assert labels == ["stream before", "+ L2 H1 adds", "+ L2 H2 adds", "+ L2 H3 adds", "= attention adds (sum)",
                      "stream after"]
    assert title.startswith("Block 2, attention") and adds_up.startswith("the 3 head rows add up")
    labels, title, _ = TF.step_rows_text(steps[2], 3, "x", 2)
    assert labels == ["stream before", "+ MLP adds", "= stream after"] and title.startswith("Block 1, MLP")
    assert TF.clicked_step([{"customdata": [2]}], 5) == 2
    for points in ([], None, [{}], [{"customdata": [5]}], [{"customdata": [-1]}], [{"customdata": "2"}]):
        assert TF.clicked_step(points, 5) is None


def test_the_lens_keeps_and_the_output_draws_the_numbers_the_page_states():
    from core.analysis.trace import LENS_TOP, lens_top
    model = make()
    tr = trace(model, IDS)
    lens = lens_top(model, tr)
    assert lens.top_ids.shape == (3, len(IDS), LENS_TOP) and LENS_TOP == 5  # "hover a cell for its top 5"
    with torch.no_grad():
        z = model(torch.tensor([IDS])).logits[0, -1].double().numpy()
    fig = TF.output_figure(z, "abcdefghijk", 1.0)
    assert TF.OUTPUT_TOP == 10 and len(fig.data[0].x) == 10  # "the ten tokens with the largest logits"
    assert list(fig.data[0].customdata) == [c for c in np.array(list("abcdefghijk"))[np.argsort(-z)[:10]]]
