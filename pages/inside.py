import streamlit as st

from core.figures import trace_figures as TF
from pages.inside import view as TV
from core.serve.fmt import code_text, head_label, human_bytes, md_escape, number_word, shown_pos, visible
from core.nn.config import ACTIVATION_NAMES, SILENT_WORDS
from core.nn.params import mlp_latex
from core.analysis.trace import (LENS_TOP, direct_logit_attribution, lens_accuracy, lens_stage_names, lens_top,
                        max_trace_tokens, stream_steps, trace_bytes)
from ui import chart, ensure_frame, model_cache, model_key, prompt_input, require_model
from ui.cached import traced
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "KING:\nThe moon is down; what news from the camp?\n\nMESSENGER:\nMy lord, the enemy is"
# positions of the logit lens shown at once: more and the cells get too narrow to read (a sub-word token needs
# several characters' room)
LENS_WINDOWS = {"char": 40, "other": 16}

st.title("Inside the model")
st.markdown(
    "Every other page looks at the model from outside or at one part of it. Here we follow your prompt through "
    "one whole forward pass, with the real numbers at every step. Think of each position as owning a vector of "
    "width d, the **residual stream**. The embedding writes the first version of it; then every attention "
    "sublayer and every MLP reads a normalised copy and **adds** its result. Nothing ever replaces what is "
    "already there, so the final vector is literally a sum of all the writers. At the end, one LayerNorm and "
    "one linear map turn it into a score for every token of the vocabulary.")
st.latex(r"x^{(0)}_i = E[t_i] + P[i], \qquad "
         r"x \leftarrow x + \operatorname{attn}_\ell(\operatorname{LN}(x)), \qquad "
         r"x \leftarrow x + \operatorname{MLP}_\ell(\operatorname{LN}(x)), \qquad "
         r"z_i = W_U\, \operatorname{LN}_f\big(x^{(L)}_i\big)")

entry, model, tok = require_model()
c = model.config
notes = TV.block_notes(c)  # what a variant's block (from the Why each piece page) does differently, per section
if not c.lecture_block:
    st.info("This model's block is a variant of the lecture's, and every number below is the one its own forward "
            "computes. Its update:")
    st.latex(notes.update)
LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), "inside_prompt", cut=True),
                 "pos": Field(("index", c.n_ctx)),  # applied below, once the prompt's length is known
                 "layer": Field(("index", c.n_layers), "inside_layer"), "head": Field(("index", c.n_heads), "inside_head")})
link = use_link(LINK)
st.session_state.setdefault("inside_prompt", DEFAULT_PROMPT)  # as state, not value=: a link may set the box
prompt = prompt_input("Your prompt", None, "inside_prompt", tok, c.n_ctx, height=150)
if prompt.empty:
    st.info("Type a few characters above (letters, punctuation, newlines) to follow them through the model.")
    st.stop()

# A trace keeps every intermediate of the pass: for GPT-2 small about 1.1 MB per token plus each head's n x n scores
# and weights, so it is cut to the last tokens that fit TRACE_BUDGET (ui.cached.traced: cached for the server)
TRACE_BUDGET = 384 * 2**20
mkey = model_key(entry)  # names the weights for the caches below
_trace = traced(model)
_lens = model_cache(lambda ids: lens_top(model, _trace(mkey, ids), k=LENS_TOP), 32, what="the logit lens",
                    spinner="Reading out every stage at every position (the logit lens) ...")
ids = tuple(prompt.ids)
keep = max_trace_tokens(c, TRACE_BUDGET)
if len(ids) > keep:
    st.info(f"Your prompt has {len(ids):,} {tok.units}. This page keeps every intermediate of the forward pass, about "
            f"{human_bytes(trace_bytes(c, keep) / keep)} per {tok.unit} for this model at this length, so it follows "
            f"the **last {keep} {tok.units}** only: the model reads those {keep} alone (positions below count from their "
            "first), so its numbers can differ from a run on your whole prompt. Attention and Switch heads off read it all.")
    ids = ids[-keep:]
n = len(ids)
tokens = tok.token_strings(ids)  # the text of each position's token (one character for a character model)
tr = _trace(mkey, ids)
chars = tok.pieces  # the text of every token id (one character each for a character model)

if n > 1:
    # in a form, the slider moves in the browser alone (dragged, or one arrow key at a time) and the page, which
    # recomputes nine figures for a new position, runs once, on the button: not once per step of the arrow keys
    pos_key = f"inside_pos_{n}"
    if "pos" in link.values and link.values["pos"] < n:  # a link's pos= (the slider counts from 1, as the screen)
        st.session_state[pos_key] = shown_pos(link.values["pos"])
    st.session_state.setdefault(pos_key, n)  # the default as state, not value=: a link may set it
    with st.form("inside_pos_form", border=False):
        slot, button = st.columns([6, 1], vertical_alignment="bottom")
        pos = slot.slider(f"Position i to follow (counting from 1): the model's guess for the {tok.unit} after it", 1,
                          n, key=pos_key,
                          help="Drag it, or step it with the arrow keys; then press Follow (keyboard: Tab, Enter).") - 1
        button.form_submit_button("Follow", type="primary", width="stretch", key="inside_pos_follow")
else:
    pos = 0
    st.caption(f"One {tok.unit}: there is one position to follow, position 1.")
guess = TV.prediction(tr, pos)
tail = code_text("".join(tok.visible_tokens(ids[max(0, pos - 39):pos + 1])))  # the last 40 tokens read
actual = ids[pos + 1] if pos + 1 < n else None
st.markdown(
    f"At position **{shown_pos(pos)}** the model has read …`{tail}` and predicts "
    f"**'{md_escape(visible(chars[guess.predicted]))}'** with probability {guess.probs[guess.predicted]:.2f}. "
    + ("That is the end of your prompt." if actual is None else
       f"In your text the next {tok.unit} is '{md_escape(visible(chars[actual]))}' "
       f"(probability {guess.probs[actual]:.2f})."))

# ------------------------------------------------------------------ 1. the residual stream

st.header("1. The residual stream")
st.markdown(
    "The column below is the stream at the chosen position, from the embedding at the top to the last block at the "
    "bottom. For each step, the orange bar is the length of the vector that step adds, the blue bar the length of the "
    "stream after it. Attention and MLP outputs are usually shorter than the stream itself: each sublayer nudges the "
    "vector rather than rewriting it. **Click a row** (or pick it in the box) to open its numbers.")
steps = stream_steps(tr, pos)
step_names = [s.name for s in steps]
STEP_KEY = f"inside_step_{c.n_layers}"  # a model of another depth gets a box of its own


def _open_clicked_step():
    """Selection callback: runs before the script, so it may set the step box."""
    i = TF.clicked_step(st.session_state["inside_stream"].selection.points, len(step_names))
    if i is not None:
        st.session_state[STEP_KEY] = step_names[i]


chosen_name = st.session_state.get(STEP_KEY, step_names[0])
chart(TF.stream_figure(steps, step_names.index(chosen_name)), width="stretch", theme=None,
      key="inside_stream", on_select=_open_clicked_step, selection_mode="points")
step_i = step_names.index(st.selectbox("Step to open", step_names, key=STEP_KEY))
step = steps[step_i]
st.latex({"embed": r"x^{(0)}_i = E[t_i] + P[i]",
          "attn": r"\operatorname{attn}(x)_i = \sum_{h} z^h_i\, W_O^h, \qquad x_i \leftarrow x_i + "
                  r"\operatorname{attn}(\operatorname{LN}(x))_i",
          "mlp": rf"x_i \leftarrow x_i + \operatorname{{MLP}}(\operatorname{{LN}}(x_i)), \qquad {mlp_latex(c)}",
          }[step.kind])
labels, title, adds_up = TF.step_rows_text(step, c.n_heads, visible(chars[ids[pos]]), pos, tok.unit)
chart(TF.vector_rows(TV.step_rows(model, tr, steps, step_i, ids, pos), labels, title), width="stretch", theme=None,
      key="inside_step_rows")
st.caption(f"Each row is a vector of d = {c.d_model} numbers (red positive, blue negative, one colour scale for "
           f"all rows; hover for the values). Column by column, {adds_up}." + (f" {notes.stream}" if notes.stream else ""))

# ------------------------------------------------------------------ 2. attention at this position

st.header("2. Attention at this position")
st.markdown(
    f"Pick a head. Its query at position {shown_pos(pos)} is compared with the key of every position it may see "
    f"(1 to {shown_pos(pos)}); each comparison is a dot product of two vectors of d_h = {c.d_head} numbers, scaled by "
    "1/√d_h, and the softmax over those scores gives the weights. Below the weights, the values of all those "
    "positions are mixed with them: that mix is the head's output here, before W_O maps it back to width d.")
st.latex(r"s_{ij} = \frac{1}{\sqrt{d_h}} \sum_{c=1}^{d_h} q_{i,c}\, k_{j,c}, \qquad "
         r"a_{ij} = \frac{e^{s_{ij}}}{\sum_{l \le i} e^{s_{il}}}, \qquad z_i = \sum_{j \le i} a_{ij}\, v_j")
pick = st.columns(3)
layer = pick[0].selectbox("Layer", range(c.n_layers), format_func=lambda l: f"layer {l + 1}", key="inside_layer")
head = pick[1].selectbox("Head", range(c.n_heads), format_func=lambda h: f"head {h + 1}", key="inside_head")
at = TV.head_at(tr, layer, head, pos)
key_labels = [TF.char_label(j, tokens[j]) for j in range(pos + 1)]
key = pick[2].selectbox("Key j to take apart", range(pos + 1), index=at.heaviest,
                        format_func=lambda j: key_labels[j] + (" (heaviest weight)" if j == at.heaviest else ""),
                        key=f"inside_key_{n}_{pos}_{layer}_{head}")
chart(TF.neuron_view(at.q, at.keys, at.weights, key_labels, key, TF.char_label(pos, tokens[pos])), width="stretch",
      theme=None, key="inside_neuron")
st.caption("Red components are positive, blue negative. A key whose pattern of signs matches the query's gets a "
           "large dot product, so a large score and, after the softmax, a large weight (right)."
           + (f" {notes.attention}" if notes.attention else ""))
chart(TF.qk_terms(at.q, at.keys[key], TF.char_label(pos, tokens[pos]), key_labels[key]), width="stretch",
      theme=None, key="inside_qk")
score, i, j = float(at.scores[key]), shown_pos(pos), shown_pos(key)  # the formula counts as the screen does
st.latex(rf"s_{{{i},{j}}} = \frac{{{at.dot(key):.3f}}}{{\sqrt{{{c.d_head}}}}} = {score:.3f}, \qquad "
         rf"a_{{{i},{j}}} = \frac{{e^{{{score:.3f}}}}}{{\sum_{{l \le {i}}} e^{{s_{{{i},l}}}}}} "
         rf"= {at.weights[key]:.4f}")
chart(TF.weighted_values(at.weights, at.values, key_labels), width="stretch", theme=None, key="inside_values")
st.caption(f"Each row is a key's value times its weight a (the keys with the largest weights, in order; the rest "
           f"summed in the last row); the bottom row is their sum z_i, the head's output at "
           f"position {shown_pos(pos)}. W_O then maps it to a vector of width d of length {at.out_norm:.2f}: "
           f"{head_label(layer, head)}'s share in step 1.")

# ------------------------------------------------------------------ 3. the MLP

st.header("3. The MLP at this position")
if not c.mlp:
    st.info(notes.mlp)
else:
    st.markdown(
        f"The MLP works on each position alone. It maps the normalised stream to d_ff = {c.d_ff} hidden units, "
        + ("clips every negative one to exactly zero (the ReLU)" if c.activation == "relu" else
           f"passes each through a {ACTIVATION_NAMES[c.activation]}, which keeps positive values almost as they are and "
           "squashes negative ones to small values at or below zero")
        + ", and maps the result back to width d. Usually most units are silent for a given input: each unit answers "
        "to its own kind of situation, and only a few situations hold at once.")
    st.latex(mlp_latex(c, hidden=True))
    mlp_layer = st.selectbox("Block", range(c.n_layers), format_func=lambda l: f"block {l + 1}", key="inside_mlp_layer")
    mlp = TV.mlp_at(tr, mlp_layer, pos, c.activation)
    a, b = st.columns(2)
    a.metric(f"Hidden units {SILENT_WORDS[c.activation]}", f"{mlp.silent} of {c.d_ff} ({mlp.silent / c.d_ff:.0%})")
    b.metric("Length of what the MLP adds", f"{mlp.out_norm:.2f}")
    chart(TF.mlp_figure(mlp.hidden, mlp.out, c.activation), width="stretch", theme=None, key="inside_mlp")

# ------------------------------------------------------------------ 4. the logit lens

st.header("4. The logit lens: when does the answer appear?")
st.markdown(
    "The model reads out only the final stream. But nothing stops us from applying that same readout, the "
    "final LayerNorm and the output map, to the stream after the embedding or after block 1, as if the model "
    f"ended there. Each row shows that early readout's favourite next {tok.unit}; the darker the cell, the surer "
    f"it is. A triangle marks a favourite that is right. Hover a cell for its top {LENS_TOP}.")
st.latex(r"\text{lens}_\ell(x_i) = \operatorname{softmax}\big(W_U \operatorname{LN}_f(x^{(\ell)}_i)\big), "
         r"\qquad \ell = 0, 1, \ldots, L")
LENS_WINDOW = LENS_WINDOWS["char" if tok.kind == "char" else "other"]
lo = st.slider("First position shown", 1, n - LENS_WINDOW + 1, shown_pos(TV.window_start(pos, n, LENS_WINDOW)),
               key=f"inside_lens_lo_{n}_{pos}", help=f"The table shows {LENS_WINDOW} positions at a time; it opens on "
               "the ones ending at the chosen position.") - 1 if n > LENS_WINDOW else 0
hi = min(n, lo + LENS_WINDOW)
lens = _lens(mkey, ids)
chart(TF.lens_figure(lens.top_ids[:, lo:hi], lens.top_probs[:, lo:hi], chars, ids, lens_stage_names(c.n_layers),
                     offset=lo, chosen=pos, unit=tok.unit), width="stretch", theme=None, key="inside_lens")
st.caption(TV.lens_caption(lo, hi, pos, tok.unit, lens_stage_names(c.n_layers), lens_accuracy(lens, ids) if n > 1
                           else None) + (f" {notes.lens}" if notes.lens else ""))

# ------------------------------------------------------------------ 5. who wrote the prediction

st.header("5. Who wrote the prediction?")
st.markdown(
    "Because the final stream is a sum, the logit of any token can be split over the writers: the "
    "embedding, every head and every MLP. One step is not linear, the final LayerNorm: it divides by the "
    "standard deviation σ of the whole stream. We **freeze σ at the value it actually has here**; then every "
    "piece of the readout is linear, each writer gets its own bar, and the bars add up exactly to the logit "
    "minus a constant (the LayerNorm's shift read by the output map), which no writer controls.")
st.latex(r"z_t = \sum_{c \,\in\, \text{writers}} \frac{w_t^\top \big(\gamma \odot (c - \bar c)\big)}{\sigma}"
         r" \;+\; w_t^\top \beta, \qquad x^{(L)} = \text{embedding} + \sum \text{heads} + \sum \text{MLPs}")
token = st.selectbox(f"{tok.unit.capitalize()} whose logit to split", [int(t) for t in guess.order],
                     format_func=lambda t: f"'{visible(chars[t])}'  p = {guess.probs[t]:.3f}"
                                           + ("  (the prediction)" if t == guess.predicted else ""),
                     key=f"inside_token_{n}_{pos}")
att = direct_logit_attribution(model, tr, token, pos)
chart(TF.attribution_figure(att, visible(chars[token])), width="stretch", theme=None, key="inside_attribution")
st.caption("Grey: the embedding; blue: heads; orange: MLPs"
           + (f"; light grey: all but the {TF.ATTRIBUTION_BARS - 1} largest of the {len(att.names)} writers, summed"
              if len(att.names) > TF.ATTRIBUTION_BARS else "") + f". Layers and heads count from 1. σ is frozen at "
           f"{1 / att.scale:.3f} (the stream's spread at position {shown_pos(pos)}); with another σ the bars would all scale "
           "together, so their ranking is what to read." + ("" if att.exact else TV.gap_words(att)))

# ------------------------------------------------------------------ 6. the output

st.header("6. The output")
st.markdown(
    "Last, the logits become probabilities. As on the Generation page, every logit is divided by the "
    "temperature T before the softmax: T = 1 is the model's own distribution, a small T sharpens it towards "
    f"the top {tok.unit}, a large T flattens it.")
st.latex(r"p_t(T) = \frac{e^{z_t / T}}{\sum_{u=1}^{m} e^{z_u / T}}")
temperature = float(st.number_input("Temperature T", 0.0, 10_000.0, 1.0, step=0.1, format="%g",
                                    key="inside_temperature"))
chart(TF.output_figure(guess.logits, chars, temperature, unit=tok.unit), width="stretch", theme=None,
      key="inside_output")
st.caption(f"The {number_word(TF.OUTPUT_TOP)} {tok.units} with the largest logits out of m = {c.vocab_size}; their "
           "order does not depend on T, only how the probability is shared among them.")

st.divider()
link_box(LINK, {"pos": pos})
