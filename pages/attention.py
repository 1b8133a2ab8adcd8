import streamlit as st

from core.analysis.attention import (
    attention_overview, changed_last, dependence_on_last, head_attention, head_window, induction_chance,
    induction_scores,
)
from core.analysis.induction import model_period
from pages.attention.grid import (GRID_ALL_HEADS, GRID_MAX_LAYERS, ROLE_TITLES, all_heads_figure,
                                  head_overview_figure, head_roles_figure, role_explanations)
from core.figures.attention_panels import MAX_WINDOW, OPEN_WINDOW, future_mass_figure, head_panels, mask_order_figure
from pages.attention.figures import byte_pieces_note
from core.figures.patching_figures import sources_figure
from core.analysis.patching import score_sources, sources_refusal
from core.analysis.circuit import sources_view
from ui import cached_figure, ensure_frame, model_cache, model_key, prompt_input, require_model, shared_chart
from core.serve.fmt import shown_pos
from core.serve.links import Field, LinkSpec
from ui.links import frame_params, link_box, use_link
from ui.code_box import code_box
from core.views import snippets as SN

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "KING:\nThe moon is down; what news from the camp?"
ZOOM_FROM = 32  # a prompt longer than this gets the zoom slider

st.title("Attention, head by head")
st.markdown(
    "Every head compares each position's **query** with the **key** of every position. The result is a "
    "score matrix: row i says how well query i matches each key j. Before the softmax turns a row into "
    "weights, the **causal mask** overwrites every score whose key lies in the future (j > i) with −∞, so "
    "that a position predicting the next token cannot peek at it. Below, the three steps sit side by "
    "side for any head, on your own text."
)
st.latex(r"s_{ij} = \frac{\langle q_i, k_j\rangle}{\sqrt{d_k}}, \qquad "
         r"a_{ij} = \begin{cases} \dfrac{e^{s_{ij}}}{\sum_{l \le i} e^{s_{il}}} & j \le i \\[4pt] 0 & j > i \end{cases}")

entry, model, tok = require_model()
c = model.config
LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), "attn_prompt", cut=True),
                 "layer": Field(("index", c.n_layers), "attn_layer"), "head": Field(("index", c.n_heads), "attn_head"),
                 "pos": Field(("index", c.n_ctx), "attn_pos")})  # the query whose score is taken apart
use_link(LINK)
st.session_state.setdefault("attn_prompt", DEFAULT_PROMPT)  # as state, not value=: a link may set the box
prompt = prompt_input("Your prompt", None, "attn_prompt", tok, c.n_ctx)
if prompt.empty:
    st.info("Type a few characters above (letters, punctuation, newlines) to see what every head attends to.")
    st.stop()

# What is cached is what the page shows, never every head's (n, n) matrices: those are 2 L h n^2 floats, 1.2 GB
# for GPT-2 small at 1,024 tokens. One head's matrices are n^2 floats each, the overview a few numbers per head.
# Each is called with mkey first (ui.model_cache: cached for the server by the model's key and the inputs). The
# heavy work waits in the compute line (core.serve.gate) when the server is busy; work whose result is cached skips it
WHAT = "the attention of every head"
_head = model_cache(lambda ids, layer, head: head_attention(model, list(ids), layer, head), 16, what=WHAT)
_sources = model_cache(lambda ids, layer, head, i, j: score_sources(model, list(ids), layer, head, i, j), 32, what=WHAT)
_overview = model_cache(lambda ids, lo, hi: attention_overview(model, list(ids), lo, hi), 16, what=WHAT,
                        spinner="Running every layer on your prompt ...")
# the probe of Switch heads off and the training log (core.analysis.induction)
_induction = model_cache(lambda: induction_scores(model, tok), 8,
                         spinner="Measuring induction on repeated random sequences ...")

# figures are pure functions of their inputs: a rerun with the same inputs reuses the figure object (ui.cached_figure),
# and ui.shared_chart sends the encoded form it keeps with it
head_panels, all_heads_figure, mask_order_figure, future_mass_figure, head_roles_figure, head_overview_figure = map(
    cached_figure, (head_panels, all_heads_figure, mask_order_figure, future_mass_figure, head_roles_figure,
                    head_overview_figure))
mkey = model_key(entry)  # names the weights for the caches below
ids = tuple(prompt.ids)
tokens = tok.visible_tokens(prompt.ids)  # each position's token text, spaces shown as ␣ (a token may hold several characters)
n = len(tokens)
big = c.n_layers * c.n_heads > GRID_ALL_HEADS  # too many heads to draw them all at once
layers_key = f"attn_grid_layers_{c.n_layers}x{c.n_heads}"  # a model of another shape gets a picker of its own


def _draw_layer(layer: int):
    """Put ``layer`` among the layers drawn head by head (dropping the oldest beyond GRID_MAX_LAYERS)."""
    shown = [l for l in st.session_state.get(layers_key, []) if l != layer]
    st.session_state[layers_key] = (shown + [layer])[-GRID_MAX_LAYERS:]


def _open_clicked_head(chart: str):
    """Selection callback: runs before the script, so it may set the layer and head pickers."""
    points = st.session_state[chart].selection.points
    if points and points[0].get("customdata"):
        layer, head = (int(v) for v in points[0]["customdata"][:2])
        st.session_state["attn_layer"], st.session_state["attn_head"] = layer, head
        _draw_layer(layer)


def _open_from_grid():
    _open_clicked_head("attn_grid")


def _open_from_overview():
    _open_clicked_head("attn_overview")


def _pick_cell():
    """Selection callback: a click on the weights panel opens that (query, key) in "Why does this head attend here?"."""
    points = st.session_state["attn_panels"].selection.points
    if points and points[0].get("customdata") is not None:
        st.session_state["attn_cell"] = (ids, *(int(v) for v in points[0]["customdata"][:2]))
        st.session_state["attn_pos"] = st.session_state["attn_cell"][1]  # the query, kept for the link


pick = st.columns([1, 1, 2])
layer = pick[0].selectbox("Layer", range(c.n_layers), format_func=lambda l: f"layer {l + 1}", key="attn_layer",
                          on_change=lambda: _draw_layer(st.session_state["attn_layer"]))
head = pick[1].selectbox("Head", range(c.n_heads), format_func=lambda k: f"head {k + 1}", key="attn_head")
with pick[2]:
    if n > ZOOM_FROM:
        # opens on the whole prompt while its cells stay readable (OPEN_WINDOW positions), else on its last ones
        lo, hi = (p - 1 for p in st.slider(  # the slider counts from 1, as the screen does
            "Window of positions to show (zoom)", 1, n, (max(1, n - OPEN_WINDOW + 1), n), key="attn_window",
            help=f"At full length the cells get tiny; zoom in on a stretch of the prompt (at most {MAX_WINDOW} "
                 "positions at a time)."))
        if hi - lo + 1 > MAX_WINDOW:
            hi = lo + MAX_WINDOW - 1
            st.caption(f"At most {MAX_WINDOW} positions at a time, or a row of cells would be thinner than a line of "
                       f"text: showing {shown_pos(lo)} to {shown_pos(hi)}. Move the left end to see further.")
    else:
        lo, hi = 0, n - 1
        st.caption(f"{n} {tok.units}: every position is shown.")
note = byte_pieces_note(tok, ids[lo:hi + 1])
if note:
    st.caption(note)
show_unmasked = st.toggle("Also show the softmax without the mask (what the mask prevents)", key="attn_unmasked")

sl = slice(lo, hi + 1)
scores, pattern = _head(mkey, ids, layer, head)  # this head's (n, n) matrices over the whole prompt
view = head_window(scores, pattern, lo, hi)
if lo > 0:
    # keys before the window also receive weight; the window is renormalised only in the viewer's mind
    st.caption(f"Showing positions {shown_pos(lo)} to {shown_pos(hi)}. Keys before position {shown_pos(lo)} are "
               "outside the window, so the "
               "rows shown here may sum to less than 1.")
shared_chart(
    head_panels(view.scores, view.pattern, tokens[sl], offset=lo, unmasked=view.unmasked if show_unmasked else None,
                title=f"Layer {layer + 1}, head {head + 1}: rows are queries i (top to bottom), columns keys j"),
    width="stretch", theme=None, key="attn_panels", on_select=_pick_cell, selection_mode="points")
st.caption("Left: raw scores for every pair, future included (red positive, blue negative). Middle: the mask, "
           "dark where the score is replaced by −∞. Right: the weights; grey cells were masked and hold exactly 0, "
           "which is not the same as a pale, merely small weight. The red staircase marks the diagonal j = i.")
if show_unmasked:
    if lo > 0 or hi < n - 1:
        st.caption(f"The unmasked softmax is taken over each whole row of {n} keys, then cut to the window: on "
                   f"average {view.unmasked.sum(-1).mean():.0%} of a row's weight lands on the keys shown, the rest "
                   "on keys outside the window.")
    shared_chart(future_mass_figure(view.future_mass, tokens[sl], offset=lo), width="stretch", key="attn_future")
    st.caption(f"Averaged over the queries that have a future (all but the last), this head would put "
               f"{view.mean_future_mass:.0%} of its weight on {tok.units} it must not see yet.")

st.subheader("Why does this head attend here?")
if sources_refusal(c):  # a post-norm or residual-free variant: its stream is no sum of writers to split
    st.caption(f"Its scores are not taken apart here: {sources_refusal(c)}.")
else:
    cell, qi = st.session_state.get("attn_cell"), st.session_state.get("attn_pos")
    if cell and cell[0] == ids and cell[2] <= cell[1] < n:
        qi, kj = cell[1], cell[2]
    else:  # the query a link or an earlier click chose, while this prompt has it; else the last; the key it weighs most
        qi = qi if qi is not None and 0 <= qi < n else n - 1
        kj = int(pattern[qi, : qi + 1].argmax())
    full, src_names, score = _sources(mkey, ids, layer, head, qi, kj)
    shown, rows_n, cols_n, reading = sources_view(full, src_names, k=8)
    st.markdown(
        f"**Click any cell of the weights panel** to take its score apart. Now: query {shown_pos(qi)} '{tokens[qi]}', "
        f"key {shown_pos(kj)} "
        f"'{tokens[kj]}', weight {pattern[qi, kj]:.3f}. The score {score:.2f} is a sum of one term per pair of sources "
        "that wrote the two positions' streams (token and position embedding, each earlier head and MLP, the "
        f"LayerNorm's shift). The key's biggest builder is **{reading.key_builder}** ({reading.key_total:+.2f}), the "
        f"query's **{reading.query_builder}** ({reading.query_total:+.2f})"
        + (": an earlier head built the key, **K-composition**." if reading.composition in ("K", "QK") else "."))
    shared_chart(sources_figure(shown, rows_n, cols_n, f"Layer {layer + 1}, head {head + 1}: score of query {shown_pos(qi)} "
                                                       f"for key {shown_pos(kj)}, split by source"),
                 width="stretch", theme=None, key="attn_sources")
    st.page_link("pages/cause_effect.py", label="Open this in Cause and effect (patching, paths, the full table)",
                 icon=":material/swap_horiz:", query_params={**{k: str(v) for k, v in frame_params().items() if v is not None},  # model, step
                                                             "prompt": prompt.text, "layer": str(layer + 1),
                                                             "head": str(head + 1), "pos": str(shown_pos(qi))})

st.header("All heads at a glance")
overview = _overview(mkey, ids, lo, hi)
roles = {**overview.roles, "induction": _induction(mkey)}
pooled = (f" Each head's square covers positions {shown_pos(lo)} to {shown_pos(hi)}, shrunk for the thumbnail: a cell is a block of "
          f"{overview.block} × {overview.block} positions, the weight its queries put on its keys on average."
          if overview.block > 1 else "")
if not big:
    st.markdown("The same prompt through every head of every layer. Each head has learned its own idea of which "
                f"earlier {tok.units} matter; the red frame is the head shown above. **Click any cell of a head** to "
                "open that head in the three panels above." + pooled)
    shared_chart(all_heads_figure(overview.thumbs, selected=(layer, head), block=overview.block), width="stretch",
                 theme=None, key="attn_grid", on_select=_open_from_grid, selection_mode="points")
else:
    st.markdown(f"This model has {c.n_layers} layers of {c.n_heads} heads, {c.n_layers * c.n_heads} heads in all: too "
                "many to draw at once. The table has one cell per head, coloured by one of the measures below (hover "
                "a cell for all of them); **click a cell** to open that head in the panels above. Under it, the "
                "patterns of every head of a few layers.")
    measure = st.radio("Colour the heads by", list(ROLE_TITLES), format_func=ROLE_TITLES.get, horizontal=True,
                       key="attn_overview_measure")
    shared_chart(head_overview_figure(roles, measure, selected=(layer, head)), width="stretch", theme=None,
                 key="attn_overview", on_select=_open_from_overview, selection_mode="points")
    st.session_state.setdefault(layers_key, [layer])
    shown = st.multiselect(f"Layers to draw head by head (up to {GRID_MAX_LAYERS})", range(c.n_layers),
                           format_func=lambda l: f"layer {l + 1}", key=layers_key, max_selections=GRID_MAX_LAYERS,
                           help="Opening a head adds its layer here.")
    if shown:
        st.markdown(f"The pattern of every head of {', '.join(f'layer {l + 1}' for l in sorted(shown))}; the red "
                    "frame is the head shown above. **Click a head** to open it." + pooled)
        shared_chart(all_heads_figure(overview.thumbs, selected=(layer, head), layers=sorted(shown),
                                      block=overview.block),
                     width="stretch", theme=None, key="attn_grid", on_select=_open_from_grid, selection_mode="points")
    else:
        st.caption("Pick a layer above to see the patterns of its heads.")

st.header("Why mask the scores and not the weights?")
st.markdown(
    "Suppose we ran the softmax over all keys first and then zeroed the future weights. Two things break. "
    "The rows no longer sum to 1, so each output is a shrunken average. Worse, the denominator of the "
    "softmax still contains $e^{s_{ij}}$ for future keys, so the surviving weights still depend on " + tok.units +
    " the query must not see. Masking the scores removes the future from numerator and denominator alike."
)
shared_chart(mask_order_figure(scores, tokens[sl], offset=lo), width="stretch", theme=None, key="attn_order")
if n >= 2:
    changed, replacement = changed_last(ids, c.vocab_size)
    dep = dependence_on_last(scores, _head(mkey, tuple(changed), layer, head)[0])
    a, b = st.columns(2)
    a.metric("Change in earlier rows, mask on the scores", f"{dep['mask_on_scores']:.2e}")
    b.metric("Change in earlier rows, mask after the softmax", f"{dep['mask_after_softmax']:.2e}")
    st.caption(f"Experiment: replace the last {tok.unit} '{tokens[-1]}' by "
               f"'{tok.visible_tokens([replacement])[0]}' and measure the largest change in any weight of the "
               f"rows before it (layer {layer + 1}, head {head + 1}). With the mask on the scores nothing moves; with the "
               f"mask after the softmax the earlier rows react to a {tok.unit} in their future.")

st.header("What each head does")
st.markdown("Four measurements of every head in the live model. The first three are taken on your prompt; "
            f"the induction score on random {tok.unit} sequences repeated twice, where the only way to predict "
            "the second copy is to find the earlier occurrence and copy what came next.")
shared_chart(head_roles_figure(roles), width="stretch", key="attn_roles")
chance = induction_chance(c.n_ctx, model_period(model, tok))  # the period of the probe _induction measures on
st.caption(f"For scale: a head spreading its weight evenly over the past would score about {chance:.3f} on "
           "induction. A score far above that marks an induction head; a small model trained briefly on "
           "short windows may have none, and then this row stays near zero.")
for name, text in role_explanations().items():
    st.markdown(f"- **{name}**: {text}")

st.divider()
link_box(LINK)
code_box(SN.attention(entry.path, entry.step, tok, prompt.text, ids, layer, head, st.session_state.get("attn_pos")))
