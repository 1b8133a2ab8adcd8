import math

import numpy as np
import streamlit as st

from core.analysis import head_ranking as HR
from core.figures import intervention_figures as IF
from core.analysis.attention import head_attention, induction_chance
from core.serve.fmt import code_text, head_label, heads_label, shown_pos
from core.analysis.induction import THRESHOLD, head_scores, induction_score, model_period, probe_choices
from core.analysis.interventions import (MODES, greedy_continuation, layer_head_losses, next_token_probs, repeat_ids,
                                repeat_period, token_losses)
from core.analysis.timing import forward_seconds
from core.serve.links import Field, LinkSpec, format_heads
from ui.links import link_box, use_link
from pages.heads.controls import controls_section
from pages.heads.parts import random_twice, repeat_prompt
from ui import (approved, cached_figure, ensure_frame, in_steps, model_cache, model_key, prompt_input, require_model,
                shared_chart)

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?\n"  # a newline: the repeat reads well
CONTINUE = 60  # tokens of greedy continuation
PROMPT_KEY = "heads_prompt"
RANK_AUTO_S = 15  # a ranking expected to take longer waits for a button press
SLIDE_S = 10      # continuing past n_ctx may cost this long in slid steps, else the continuation reads less prompt

st.title("Switch heads off")
st.markdown(
    "Each attention head writes its own small vector into the residual stream. A good way to find out what a "
    "head is for is to take it away and watch what breaks. Here you pick heads, the model runs again on your "
    "prompt without them, and every view below shows the model **with all heads on** next to the model **with "
    "your heads off**. Switching off is done just before the output map $W_O$ mixes the heads: head h's output "
    "$z^h$ is replaced by zero, or by its mean over the positions of your prompt. The mean keeps the head's "
    "average push and removes only what depends on which tokens it looked at.")
st.latex(r"\operatorname{attn}(x) = \sum_{h} z^h W_O^h, \qquad z^h = A^h\, x W_V^h, \qquad "
         r"\text{off:}\quad z^h_i \leftarrow 0 \quad\text{(zero)} \qquad\text{or}\qquad "
         r"z^h_i \leftarrow \tfrac{1}{n}\textstyle\sum_{j=1}^{n} z^h_j \quad\text{(mean)}")

entry, model, tok = require_model()
c = model.config
mkey = model_key(entry)  # names the weights for the caches below

# ------------------------------------------------------------------ cached computations (ui.model_cache: for the
# server, by mkey and the inputs); "the interventions" wait in the compute line when the server is busy, unless cached
WHAT = "the interventions"
# the probe of the Attention page and the training log: for a BPE, its whole tokens (core.analysis.induction.probe_choices)
_scores = model_cache(lambda: head_scores(model, tokenizer=tok), 8, what=WHAT,
                      spinner="Measuring induction on repeated random sequences ...")
_losses = model_cache(lambda ids, heads, mode: token_losses(model, list(ids), list(heads), mode), 128, what=WHAT)
# one position's row: the whole (n, m) table is 400 MB for GPT-2 small at 1,024 tokens
_probs = model_cache(lambda ids, heads, mode, pos: next_token_probs(
    model, list(ids), list(heads), mode, positions=[pos])[0], 64, what=WHAT)
_greedy = model_cache(lambda ids, steps, heads, mode: tok.decode(greedy_continuation(
    model, list(ids), steps, list(heads), mode)), 64, what=WHAT, spinner="Continuing the text ...")
# (h, n-1), a layer at a time: a progress bar between
_layer_losses = model_cache(lambda ids, mode, layer: layer_head_losses(model, list(ids), layer, mode), 256, what=WHAT)
# one head: the blocks after its layer never run
_pattern = model_cache(lambda ids, layer, head: head_attention(model, list(ids), layer, head)[1], 16, what=WHAT)
# on this server now: a slid step, or a ranking's batch; one pass, which only sizes the work (no compute line)
_seconds = model_cache(lambda rows, length: forward_seconds(model, rows, length), 64)
next_token_bars, stripe_figure = map(cached_figure, (IF.next_token_bars, IF.stripe_figure))  # the figure itself (ui)


# ------------------------------------------------------------------ the prompt
# the default text goes into the box's state, not its value: the Repeat button writes that state too, and a
# box given both logs a warning. The key is PROMPT_KEY, written out: tests/test_bad_input.py finds boxes by key
heads_key = f"heads_off_{c.n_layers}x{c.n_heads}"  # a model of another shape gets a box of its own
LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), PROMPT_KEY, cut=True),
                 "off": Field(("heads", c.n_layers, c.n_heads), heads_key, to_url=format_heads),  # off=none: all on
                 "mode": Field(("choice", MODES), "heads_mode")})
use_link(LINK)
st.session_state.setdefault(PROMPT_KEY, DEFAULT_PROMPT)
prompt = prompt_input("Your prompt", None, "heads_prompt", tok, c.n_ctx, height=150)
b, note = st.columns([1, 4], vertical_alignment="center")
b.button("Repeat my prompt", key="heads_repeat", on_click=repeat_prompt, args=(PROMPT_KEY, tok, c.n_ctx), disabled=prompt.empty)
b.button(f"Random {tok.units}, twice", key="heads_random", on_click=random_twice, args=(PROMPT_KEY, model, tok),
         help=f"Replaces your prompt by distinct random {tok.units} written twice: text no language model can predict "
              "the first time, and only copying can predict the second time."
              + ("" if tok.kind == "char" else " Only tokens that are whole printable text are drawn, so the box "
                 "shows what the model reads."))
done = st.session_state.get("heads_repeat_note")
if done and done[0] == prompt.text and done[1]:
    note.caption(f"Your prompt had {done[2]} {tok.units}, but two copies must fit in n_ctx = {c.n_ctx}: only its "
                 f"last {c.n_ctx // 2} {tok.units} were written twice.")
else:
    note.caption(f"Writes your prompt twice. In the second copy every {tok.unit} has been seen before, followed by "
                 f"the {tok.unit} that comes next: a model with an induction head can copy it from the first copy "
                 f"(at most {c.n_ctx // 2} {tok.units} are repeated, so that both copies fit in n_ctx = {c.n_ctx}).")
if prompt.empty:
    st.info("Type a few characters above (letters, punctuation, newlines) to see what switching heads off changes.")
    st.stop()
ids, n, period = tuple(prompt.ids), len(prompt.ids), repeat_period(prompt.ids)
scores = _scores(mkey)
best = scores.best_head()

# ------------------------------------------------------------------ which heads, how
options = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
pick, how = st.columns([3, 1])
with pick:
    st.session_state.setdefault(heads_key, [best])  # the default as state, not default=: a link may set it
    chosen = st.multiselect(
        "Heads to switch off", options, key=heads_key, format_func=lambda p: head_label(*p),
        help=f"Layers and heads count from 1, as on the Attention page: L1 H1 is the first head of the first layer "
             f"(this model has {c.n_layers} of {c.n_heads}). The page opens with the head that scores highest on "
             "induction switched off.")
    a1, a2, _ = st.columns([1, 1, 3])
    a1.button("Switch all off", key="heads_all", on_click=st.session_state.update, args=({heads_key: options},))
    a2.button("Switch all on", key="heads_none", on_click=st.session_state.update, args=({heads_key: []},))
mode = how.radio("Switched off means", MODES, key="heads_mode", horizontal=True,
                 format_func={"zero": "zero", "mean": "mean over positions"}.get,
                 help="zero: the head's output is 0 at every position. mean: it is the head's average output over "
                      "your prompt, the same at every position.")
heads = tuple(sorted(chosen))
off = f"{heads_label(heads)} off" if len(heads) < len(options) else "every head off"
if not heads:
    st.info("All heads on: before = after. Pick heads above to switch them off; the ranking further down shows "
            "which heads matter most on this prompt.")
elif len(heads) == len(options):
    st.info("Every head is off: no position can read any other, so each prediction rests on the current "
            f"{tok.unit} and its position alone, as in a bigram model. Expect the loss to rise a lot.")

# ------------------------------------------------------------------ losses
st.header(f"Loss on your prompt, {tok.unit} by {tok.unit}")
if n < 2:
    st.info(f"One {tok.unit}: there is nothing inside the prompt to predict, so there are no losses to compare. "
            f"Type at least two {tok.units}; the next-{tok.unit} view and the continuation below still work.")
else:
    before, after = _losses(mkey, ids, (), mode), _losses(mkey, ids, heads, mode)
    m1, m2, _ = st.columns([1, 1, 2])
    m1.metric("Mean loss, all heads on", f"{before.mean():.3f} nats")
    m2.metric(f"Mean loss, {off}", f"{after.mean():.3f} nats", delta=f"{after.mean() - before.mean():+.3f} nats",
              delta_color="inverse")
    # a long prompt scrolls in a box of its own, so that the views below stay within reach
    with st.container(height=420 if n > 400 else "content", border=False):
        st.html(IF.loss_change_html(tok.token_strings(ids), before, after, boundaries=tok.kind != "char"))
    st.html(IF.loss_change_legend(IF.change_scale(after - before), tok.unit))
    st.caption(f"A {tok.unit}'s loss is −log of the probability the model gave it, reading everything before it. "
               f"The first {tok.unit} has no loss: nothing comes before it.")
    if period:
        table = HR.copy_table(before, after, period)
        st.markdown(f"**Your prompt is {period} {tok.units} written twice.** Mean loss (nats) on each copy:")
        st.table({"": ["all heads on", off], **{k: [f"{v:.3f}" for v in vals] for k, vals in table.items()}})
        st.caption(HR.copy_verdict(*table["drop (first − second)"], off))
    else:
        st.caption("Press **Repeat my prompt** to see the loss on a second copy of your text: that is where an "
                   "induction head helps, and where switching it off hurts.")

# ------------------------------------------------------------------ next token
st.header(f"The next {tok.unit}, before and after")
pos = st.slider(f"Position i (counting from 1): the distribution for the {tok.unit} after position i", 1, n, n,
                key=f"heads_pos_{n}") - 1 if n > 1 else 0  # on screen from 1, as layers and heads
p_before, p_after = _probs(mkey, ids, (), mode, pos), _probs(mkey, ids, heads, mode, pos)
seen = code_text("".join(tok.visible_tokens(ids[max(0, pos - 29):pos + 1])))  # the last 30 tokens read
actual = ids[pos + 1] if pos + 1 < n else None
st.caption(f"The model has read …`{seen}` (position {shown_pos(pos)}); " + (
    "this is the end of your prompt." if actual is None else
    f"the next {tok.unit} in your text is `{code_text(tok.visible_tokens([actual])[0])}`."))
shared_chart(next_token_bars(tok.pieces, p_before, p_after, off, actual, unit=tok.unit), width="stretch",
             theme=None, key="heads_bars")

# ------------------------------------------------------------------ continuation
st.header("Greedy continuation")
steps = min(CONTINUE, c.n_ctx)
read = ids[-HR.continuation_read(n, steps, c.n_ctx, lambda: _seconds(mkey, 1, n), SLIDE_S):]
if len(read) < n:
    st.caption(HR.continuation_note(len(read), n, steps, c.n_ctx, _seconds(mkey, 1, n), tok.unit, tok.units))
cont_on, cont_off = _greedy(mkey, read, steps, (), mode), _greedy(mkey, read, steps, heads, mode)
left, right = st.columns(2)
left.markdown("**All heads on**")
left.html(IF.continuation_html(prompt.text[-30:], cont_on))
right.markdown(f"**{off}**")
right.html(IF.continuation_html(prompt.text[-30:], cont_off, reference=cont_on))
st.caption(f"{steps} {tok.units}, each the most likely one; the end of your prompt is grey. On the right, yellow marks "
           "the text that differs from the left.")

# ------------------------------------------------------------------ ranking
st.header("Which heads matter on this prompt")
expected = HR.rank_seconds(c, n, _seconds(mkey, *HR.rank_timing(c, n))) if n >= 2 else 0.0
if n < 2:
    st.info(f"Ranking the heads needs losses, so at least two {tok.units}.")
elif approved((mkey, ids, mode), expected, RANK_AUTO_S, "Rank every head", HR.rank_cost_note(c, n, expected, tok.units),
                  "heads_rank_go"):
    per_head = np.stack(in_steps(c.n_layers, lambda layer: _layer_losses(mkey, ids, mode, layer),  # L x (h, n-1)
                                 "Switching off every head in turn, layer by layer"))
    ranking = HR.rank(_losses(mkey, ids, (), mode), per_head, period)
    st.dataframe(IF.ranking_table(ranking.effects, ranking.second, scores.induction), hide_index=True,
                 width="stretch", key="heads_rank")
    st.markdown(HR.ranking_text(ranking, scores.induction, mode, scores.previous_token))
    controls_section(model, mkey, ids, mode, period, expected)

# ------------------------------------------------------------------ the induction stripe
st.header("The induction stripe")
period_probe = model_period(model, tok)
st.markdown(
    f"An **induction head** completes patterns seen earlier in the context: at a {tok.unit} A it looks for the "
    f"earlier A and attends to the {tok.unit} right after it, then copies it. We measure this on random "
    f"{tok.units if probe_choices(tok) is None else tok.units + ' (whole printable ones)'} written twice "
    f"({period_probe} of them, then the same again), where nothing else predicts the second copy. A head's "
    "**induction score** is the weight its second-copy queries give, on average, to the key right after the "
    f"earlier occurrence. We call a head an induction head from **{THRESHOLD:.2f}** on: it then puts at least that "
    "share of its attention on one key out of dozens.")
st.dataframe(IF.induction_table(scores.induction, THRESHOLD), width="content", key="heads_induction")
st.caption(f"Highlighted: at or above {THRESHOLD:.2f}. A head spreading its weight evenly over the past would score "
           f"about {induction_chance(c.n_ctx, period_probe):.3f}. On the probe this model's loss is "
           f"{scores.first_copy_loss:.2f} nats on the first copy (random {tok.units}: a model of English expects "
           f"something else, so it can do worse than guessing, log m = {math.log(c.vocab_size):.2f}) and "
           f"{scores.second_copy_loss:.2f} on the second.")
if float(scores.induction.max()) < THRESHOLD:
    st.info(f"No head of this model reaches {THRESHOLD:.2f}: it has no induction head (yet). The stripe below stays "
            "faint, and switching the head off changes the second copy little. A model trained longer, or on text "
            "with repeats, grows one.")

rep = ids if period else tuple(repeat_ids(list(ids), c.n_ctx)[0])
T = len(rep) // 2
layer, head = st.selectbox("Head to look at", options, index=options.index(best), key=f"heads_stripe_{heads_key}",
                           format_func=lambda p: head_label(*p) + (" (highest induction score)" if p == best else ""))
if T < 2:
    st.info(f"The stripe needs a prompt of at least two {tok.units}.")
else:
    pattern = _pattern(mkey, rep, layer, head)
    where = "your prompt" if period else "your prompt written twice"
    shared_chart(stripe_figure(pattern, tok.visible_tokens(rep), T, f"{head_label(layer, head)} on {where} "
                               f"(period {T})", tok.unit), width="stretch", theme=None, key="heads_stripe")
    on, off1 = (HR.copy_means(_losses(mkey, rep, h, mode), T)[1] for h in ((), ((layer, head),)))
    st.caption(f"Rows are queries, columns keys; grey cells lie in the future and are masked. An induction head "
               f"lights up the dotted line j = i − {T} + 1: from each {tok.unit} of the second copy to the one after "
               f"its twin in the first. On {where} this head gives that line {float(induction_score(pattern, T)):.2f} "
               f"of its weight on average. Switching it off ({mode}) moves the second copy's loss from {on:.3f} to "
               f"{off1:.3f} nats.")

st.divider()
link_box(LINK)
