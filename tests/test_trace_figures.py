"""core.figures.trace_figures: the figures of the "Inside the model" page, read back from their data and compared with
numbers computed here from the model's own forward pass (its fused path, its hook points, its modules)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.figures import trace_figures as TF
from core.serve.fmt import visible
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.analysis.trace import direct_logit_attribution, lens_stage_names, lens_top, stream_steps, trace
from attention_hooks import attention

CHARS = list("ab c\nde.fgh")  # 11 characters, a space and a newline among them


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
            else:
                p.mul_(8.0)  # so the attention is not flat and the predictions differ between positions
    ids = [0, 2, 1, 3, 5, 4, 2, 6, 7, 2, 9, 10]
    return model, ids, trace(model, ids)


def forward(model, ids, **kw):
    with torch.no_grad():
        return model(torch.tensor([ids]), **kw)


def test_stream_column_shows_the_norms_of_the_models_stream_top_down(setup):
    model, ids, tr = setup
    pos = 7
    fig = TF.stream_figure(stream_steps(tr, pos), selected=2)
    added, after = fig.data
    assert list(fig.layout.yaxis.ticktext) == ["embedding", "L1 attention", "L1 MLP", "L2 attention", "L2 MLP"]
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # reversed: the embedding on top
    with torch.no_grad():  # the stream built here with the model's own modules
        x = model.tok_emb.weight[ids] + model.pos_emb.weight[:len(ids)]
        norms_added, norms_after = [x[pos].norm()], [x[pos].norm()]
        for block in model.blocks:
            a = block.attn(block.ln1(x[None]))
            x = x + a[0]
            norms_added.append(a[0, pos].norm()), norms_after.append(x[pos].norm())
            m = block.mlp(block.ln2(x))
            x = x + m
            norms_added.append(m[pos].norm()), norms_after.append(x[pos].norm())
    np.testing.assert_allclose(added.x, torch.stack(norms_added).numpy(), atol=1e-4)
    np.testing.assert_allclose(after.x, torch.stack(norms_after).numpy(), atol=1e-4)
    assert not isinstance(added.customdata, np.ndarray)  # a typed array reaches a click callback garbled
    assert [list(c) for c in added.customdata] == [[0], [1], [2], [3], [4]]  # what a click reports
    frame = fig.layout.shapes[-1]
    assert (frame.y0, frame.y1) == (1.5, 2.5)  # the selected step is framed


def test_vector_rows_keep_their_order_and_values():
    rows = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    fig = TF.vector_rows(rows, ["first", "second"], "t")
    np.testing.assert_array_equal(fig.data[0].z, rows)
    assert list(fig.layout.yaxis.ticktext) == ["first", "second"] and fig.layout.yaxis.range[0] > 0
    assert fig.data[0].zmin == -3.0 and fig.data[0].zmax == 3.0 and fig.data[0].zmid == 0
    with pytest.raises(ValueError, match="labels"):
        TF.vector_rows(rows, ["one"], "t")


def test_neuron_view_and_terms_rebuild_the_models_score_and_weight(setup):
    model, ids, tr = setup
    layer, head, pos = 1, 2, 9
    with torch.no_grad():
        rec = attention(model, torch.tensor([ids]))[layer]
    q, keys = tr.q[layer][0, head, pos].numpy(), tr.k[layer][0, head, :pos + 1].numpy()
    weights = tr.pattern[layer][0, head, pos, :pos + 1].numpy()
    labels = [TF.char_label(j, CHARS[ids[j]]) for j in range(pos + 1)]
    key = 4
    fig = TF.neuron_view(q, keys, weights, labels, key, labels[pos])
    q_heat, k_heat, bars = fig.data
    np.testing.assert_allclose(q_heat.z[0], q)
    np.testing.assert_allclose(k_heat.z, keys)
    np.testing.assert_allclose(bars.x, rec.pattern[0, head, pos, :pos + 1].numpy(), atol=1e-6)  # the model's weights
    assert list(bars.marker.color).count(TF.CHOSEN) == 1 and bars.marker.color[key] == TF.CHOSEN
    assert fig.layout.yaxis2.range[0] > fig.layout.yaxis2.range[1]  # key 0 at the top
    # the second and sixth keys, counted from 1 as the screen does, their characters made visible
    assert fig.layout.yaxis2.ticktext[1] == "2 '␣'" and fig.layout.yaxis2.ticktext[5] == "6 '⏎'"

    terms = TF.qk_terms(q, keys[key], labels[pos], labels[key])
    bars, running = terms.data
    assert len(bars.y) == model.config.d_head
    score = float(rec.scores[0, head, pos, key])
    assert bars.y.sum() / math.sqrt(model.config.d_head) == pytest.approx(score, abs=1e-4)
    assert running.y[-1] == pytest.approx(bars.y.sum())
    assert f"s_ij = {score:.3f}" in terms.layout.title.text


def test_weighted_values_sum_to_the_heads_output_before_w_o(setup):
    model, ids, tr = setup
    layer, head, pos = 0, 1, 11
    name = f"blocks.{layer}.attn.hook_z"  # every head's output before W_O, (B, n, h, d_h)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([ids]), names=[name])
    z_model = cache[name][0, pos, head].numpy()  # the model's own per-head output, captured before W_O
    weights = tr.pattern[layer][0, head, pos, :pos + 1].numpy()
    values = tr.v[layer][0, head, :pos + 1].numpy()
    labels = [TF.char_label(j, CHARS[ids[j]]) for j in range(pos + 1)]
    fig = TF.weighted_values(weights, values, labels, max_rows=5)
    parts, total = fig.data
    np.testing.assert_allclose(total.z[0], z_model, atol=1e-5)
    np.testing.assert_allclose(parts.z.sum(0), z_model, atol=1e-5)  # the rows shown add up to it
    assert len(parts.z) == 6 and fig.layout.yaxis.ticktext[-1].startswith("other 7 keys")
    heaviest = np.sort(np.argsort(-weights)[:5])
    assert [t.split(" · ")[0] for t in fig.layout.yaxis.ticktext[:5]] == [labels[j] for j in heaviest]
    every = TF.weighted_values(weights, values, labels)  # 12 keys: each its own row, nothing summed
    assert len(every.data[0].z) == pos + 1


def test_mlp_figure_sorts_the_hidden_units_and_counts_the_silent_ones(setup):
    model, ids, tr = setup
    pos, layer = 5, 1
    block = model.blocks[layer]
    with torch.no_grad():
        x = tr.resid_mid[layer][0, pos]
        hidden = torch.relu(block.mlp.w1(block.ln2(x)))  # by the module, not by the trace
    fig = TF.mlp_figure(tr.mlp_hidden[layer][0, pos].numpy(), tr.mlp_out[layer][0, pos].numpy())
    sorted_bars, out = fig.data
    np.testing.assert_allclose(sorted_bars.y, np.sort(hidden.numpy())[::-1], atol=1e-5)
    assert np.all(np.diff(sorted_bars.y) <= 0)
    np.testing.assert_allclose(hidden.numpy()[sorted_bars.customdata], sorted_bars.y, atol=1e-5)  # hover: the unit
    silent = int((hidden == 0).sum())
    assert 0 < silent < len(hidden)
    assert f"{silent} ({silent / len(hidden):.0%}) are exactly 0" in fig.layout.annotations[0].text
    np.testing.assert_allclose(out.y, block.mlp(block.ln2(x)).detach().numpy(), atol=1e-5)


def test_lens_table_ends_with_the_models_prediction_and_shows_the_truth(setup):
    model, ids, tr = setup
    lens = lens_top(model, tr)
    lo, hi = 3, 12
    fig = TF.lens_figure(lens.top_ids[:, lo:hi], lens.top_probs[:, lo:hi], CHARS, ids, lens_stage_names(2), lo,
                         chosen=8)
    table, hits, truth = fig.data
    p = F.softmax(forward(model, ids).logits[0].double(), -1).numpy()  # the model's own prediction
    assert list(table.text[-1]) == [visible(CHARS[t]) for t in p.argmax(-1)[lo:hi]]
    np.testing.assert_allclose(table.z[-1], p.max(-1)[lo:hi], atol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["after the embedding", "after block 1", "after block 2"]
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # the embedding on top
    assert list(truth.text[0]) == [visible(CHARS[t]) for t in ids[lo + 1:hi]] + [""]  # nothing after the end
    assert list(fig.layout.xaxis2.ticktext) == [visible(CHARS[t]) for t in ids[lo:hi]]
    right = {(int(s), int(i)) for s, i in zip(np.round(hits.y - 0.33), hits.x)}
    expected = {(s, i) for s in range(3) for i in range(hi - lo - 1) if lens.top_ids[s, lo + i, 0] == ids[lo + i + 1]}
    assert right == expected and expected
    assert table.customdata[0][0].count("<br>") == 6  # hover: where, then "top 5:", then five lines
    assert fig.layout.shapes[0].x0 == 8 - lo - 0.5  # the chosen position is framed


def test_attribution_bars_sorted_and_summing_to_the_models_logit(setup):
    model, ids, tr = setup
    pos, token = 10, 4
    att = direct_logit_attribution(model, tr, token, pos)
    fig = TF.attribution_figure(att, visible(CHARS[token]))
    bars = fig.data[0]
    assert np.all(np.diff(bars.x) <= 0)  # the largest push up first (on top)
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]
    logit = float(forward(model, ids).logits[0, pos, token])
    beta_term = float(model.head.weight[token].detach() @ model.ln_f.bias.detach())
    assert bars.x.sum() + beta_term == pytest.approx(logit, abs=1e-4)
    colors = dict(zip(bars.customdata, bars.marker.color))
    assert colors["embedding"] == TF.KIND_COLORS["embedding"] and colors["L2 MLP"] == TF.KIND_COLORS["mlp"]
    assert colors["L1 H3"] == TF.KIND_COLORS["head"]
    assert f"logit {logit:.3f}" in fig.layout.title.text


@pytest.mark.parametrize("T", [1.0, 0.5, 3.0, 0.0])
def test_output_bars_follow_the_temperature(setup, T):
    model, ids, tr = setup
    z = forward(model, ids).logits[0, -1].double()
    fig = TF.output_figure(tr.logits[0, -1].numpy(), CHARS, T)
    logit_bars, prob_bars = fig.data
    top = torch.argsort(z, descending=True)[:10].numpy()
    assert list(logit_bars.customdata) == [visible(CHARS[i]) for i in top]
    np.testing.assert_allclose(logit_bars.y, z.numpy()[top], atol=1e-4)
    expected = F.one_hot(z.argmax(), 11).double() if T == 0 else F.softmax(z / T, -1)
    np.testing.assert_allclose(prob_bars.y, expected.numpy()[top], atol=1e-5)
    assert f"T = {T:g}" in fig.layout.annotations[1].text


def test_attribution_of_many_writers_keeps_the_largest_and_sums_the_rest():
    from core.analysis.trace import Attribution

    rng = np.random.default_rng(0)
    names = ["embedding"] + [f"L{l} H{k}" for l in range(1, 13) for k in range(1, 13)] + [f"L{l} MLP" for l in
                                                                                       range(1, 13)]
    values = rng.normal(size=len(names)) * np.linspace(3, 0.1, len(names))
    att = Attribution(token=0, pos=3, names=names, values=values, constant=0.5, logit=float(values.sum() + 0.5),
                      scale=1.0)
    fig = TF.attribution_figure(att, "x", max_bars=20)
    bars = fig.data[0]
    assert len(bars.x) == 20 and np.all(np.diff(bars.x) <= 0)
    assert bars.x.sum() == pytest.approx(values.sum())  # the same total
    top = set(np.argsort(-np.abs(values))[:19])
    drawn = {n for n in bars.customdata if not n.startswith("the other")}
    assert drawn == {names[i] for i in top}
    other = list(bars.customdata).index(f"the other {len(names) - 19} writers")
    assert bars.x[other] == pytest.approx(sum(v for i, v in enumerate(values) if i not in top))
    assert bars.marker.color[other] == TF.KIND_COLORS["others"]
    assert len(TF.attribution_figure(att, "x", max_bars=len(names)).data[0].x) == len(names)


def test_quotes_in_token_labels_show_as_quotes_and_tags_stay_text():
    """Plotly shows '&quot;' literally: a token '"' must reach a title as a quote, while '<' stays escaped."""
    q, k = np.ones(4), np.arange(4.0)
    fig = TF.qk_terms(q, k, TF.char_label(3, '"'), TF.char_label(1, "<b>"))
    assert "query 4 '\"'" in fig.layout.title.text and "&quot;" not in fig.layout.title.text
    assert "&lt;b&gt;" in fig.layout.title.text and "<b>" not in fig.layout.title.text
