import streamlit as st

from core.attention import (
    future_dependence, head_roles, head_window, induction_chance, induction_scores, run_attention,
)
from core.attention_figures import (
    all_heads_figure, future_mass_figure, head_panels, head_roles_figure, mask_order_figure, role_explanations,
)
from ui import compute_slot, ensure_frame, model_key, prompt_input, require_model

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "KING:\nThe moon is down; what news from the camp?"

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
prompt = prompt_input("Your prompt", DEFAULT_PROMPT, "attn_prompt", tok, c.n_ctx)
if prompt.empty:
    st.info("Type a few characters above (letters, punctuation, newlines) to see what every head attends to.")
    st.stop()


@st.cache_data(max_entries=64, show_spinner=False)
def _run(model_key: str, ids: tuple[int, ...]):
    return run_attention(model, list(ids))


@st.cache_data(max_entries=8, show_spinner="Measuring induction on repeated random sequences ...")
def _induction(model_key: str):
    return induction_scores(model)


# figures are pure functions of their inputs: a rerun with the same inputs reuses them. cache_resource keeps the
# figure object itself; cache_data would pickle it, and unpickling a Plotly figure re-validates it property by
# property (tens of ms per figure, slower than building it again). st.plotly_chart copies, never mutates it.
_cache = st.cache_resource(max_entries=32, show_spinner=False)
head_panels, all_heads_figure, mask_order_figure, future_mass_figure, head_roles_figure = map(
    _cache, (head_panels, all_heads_figure, mask_order_figure, future_mass_figure, head_roles_figure))


@st.cache_data(max_entries=64, show_spinner=False)
def _future_dependence(model_key: str, ids: tuple[int, ...], layer: int, head: int):
    return future_dependence(model, list(ids), layer, head)


mkey = model_key(entry)  # names the weights for the caches below
# in line when the server is busy (core.gate); work done already skips the line
compute_slot("the attention of every head", key=("attention", mkey, tuple(prompt.ids)))
run = _run(mkey, tuple(prompt.ids))
tokens = tok.visible_tokens(prompt.ids)  # each position's token text, spaces shown as ␣ (a token may hold several characters)
n = len(tokens)

pick = st.columns([1, 1, 2])
layer = pick[0].selectbox("Layer", range(c.n_layers), format_func=lambda l: f"layer {l + 1}", key="attn_layer")
head = pick[1].selectbox("Head", range(c.n_heads), format_func=lambda k: f"head {k + 1}", key="attn_head")
with pick[2]:
    if n > 48:
        lo, hi = st.slider("Window of positions to show (zoom)", 0, n - 1, (max(0, n - 48), n - 1), key="attn_window",
                           help="At full length the cells get tiny; zoom in on a stretch of the prompt.")
    else:
        lo, hi = 0, n - 1
        st.caption(f"{n} {tok.units}: every position is shown.")
show_unmasked = st.toggle("Also show the softmax without the mask (what the mask prevents)", key="attn_unmasked")

sl = slice(lo, hi + 1)
view = head_window(run, layer, head, lo, hi)
if lo > 0:
    # keys before the window also receive weight; the window is renormalised only in the viewer's mind
    st.caption(f"Showing positions {lo} to {hi}. Keys before position {lo} are outside the window, so the "
               "rows shown here may sum to less than 1.")
st.plotly_chart(
    head_panels(view.scores, view.pattern, tokens[sl], offset=lo, unmasked=view.unmasked if show_unmasked else None,
                title=f"Layer {layer + 1}, head {head + 1}: rows are queries i (top to bottom), columns keys j"),
    width="stretch", theme=None, key="attn_panels")
st.caption("Left: raw scores for every pair, future included (red positive, blue negative). Middle: the mask, "
           "dark where the score is replaced by −∞. Right: the weights; grey cells were masked and hold exactly 0, "
           "which is not the same as a pale, merely small weight. The red staircase marks the diagonal j = i.")
if show_unmasked:
    if lo > 0 or hi < n - 1:
        st.caption(f"The unmasked softmax is taken over each whole row of {n} keys, then cut to the window: on "
                   f"average {view.unmasked.sum(-1).mean():.0%} of a row's weight lands on the keys shown, the rest "
                   "on keys outside the window.")
    st.plotly_chart(future_mass_figure(view.future_mass, tokens[sl], offset=lo), width="stretch", key="attn_future")
    st.caption(f"Averaged over the queries that have a future (all but the last), this head would put "
               f"{view.mean_future_mass:.0%} of its weight on {tok.units} it must not see yet.")

st.header("All heads at a glance")
st.markdown("The same prompt through every head of every layer. Each head has learned its own idea of which "
            f"earlier {tok.units} matter; the red frame is the head shown above. **Click any cell of a head** to open "
            "that head in the three panels above.")


def _open_clicked_head():
    """Selection callback: runs before the script, so it may set the layer and head pickers."""
    points = st.session_state["attn_grid"].selection.points
    if points and points[0].get("customdata"):
        st.session_state["attn_layer"], st.session_state["attn_head"] = (int(v) for v in points[0]["customdata"][:2])


st.plotly_chart(all_heads_figure([p[:, sl, sl] for p in run.pattern], selected=(layer, head)), width="stretch",
                theme=None, key="attn_grid", on_select=_open_clicked_head, selection_mode="points")

st.header("Why mask the scores and not the weights?")
st.markdown(
    "Suppose we ran the softmax over all keys first and then zeroed the future weights. Two things break. "
    "The rows no longer sum to 1, so each output is a shrunken average. Worse, the denominator of the "
    "softmax still contains $e^{s_{ij}}$ for future keys, so the surviving weights still depend on " + tok.units +
    " the query must not see. Masking the scores removes the future from numerator and denominator alike."
)
st.plotly_chart(mask_order_figure(run.scores[layer][head], tokens[sl], offset=lo), width="stretch", theme=None,
                key="attn_order")
if n >= 2:
    dep = _future_dependence(mkey, tuple(prompt.ids), layer, head)
    a, b = st.columns(2)
    a.metric("Change in earlier rows, mask on the scores", f"{dep['mask_on_scores']:.2e}")
    b.metric("Change in earlier rows, mask after the softmax", f"{dep['mask_after_softmax']:.2e}")
    st.caption(f"Experiment: replace the last {tok.unit} '{tokens[-1]}' by "
               f"'{tok.visible_tokens([dep['replacement']])[0]}' and measure the largest change in any weight of the "
               f"rows before it (layer {layer + 1}, head {head + 1}). With the mask on the scores nothing moves; with the "
               f"mask after the softmax the earlier rows react to a {tok.unit} in their future.")

st.header("What each head does")
st.markdown("Four measurements of every head in the live model. The first three are taken on your prompt; "
            f"the induction score on random {tok.unit} sequences repeated twice, where the only way to predict "
            "the second copy is to find the earlier occurrence and copy what came next.")
roles = head_roles(run, _induction(mkey))
st.plotly_chart(head_roles_figure(roles), width="stretch", key="attn_roles")
chance = induction_chance(c.n_ctx, vocab_size=c.vocab_size)
st.caption(f"For scale: a head spreading its weight evenly over the past would score about {chance:.3f} on "
           "induction. A score far above that marks an induction head; a small model trained briefly on "
           "short windows may have none, and then this row stays near zero.")
for name, text in role_explanations().items():
    st.markdown(f"- **{name}**: {text}")
