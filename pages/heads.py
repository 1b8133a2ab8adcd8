import time

import numpy as np
import streamlit as st
import torch

from core import intervention_figures as IF
from core.attention import head_attention, induction_chance
from core.induction import THRESHOLD, head_scores, probe_period, repeat_probe, stripe_scores
from core.interventions import (MODES, copy_slices, greedy_continuation, head_losses_cost, layer_head_losses,
                                next_token_probs, rank_from_losses, repeat_ids, repeat_period, token_losses)
from ui import (cached_figure, ensure_frame, gated, model_key, prompt_ids_now, prompt_input, require_model,
                set_prompt_ids, shared_chart)

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
    "average push and removes only what depends on which tokens it looked at."
)
st.latex(r"\operatorname{attn}(x) = \sum_{h} z^h W_O^h, \qquad z^h = A^h\, x W_V^h, \qquad "
         r"\text{off:}\quad z^h_i \leftarrow 0 \quad\text{(zero)} \qquad\text{or}\qquad "
         r"z^h_i \leftarrow \tfrac{1}{n}\textstyle\sum_{j=1}^{n} z^h_j \quad\text{(mean)}")

entry, model, tok = require_model()
c = model.config
mkey = model_key(entry)  # names the weights for the caches below


# ------------------------------------------------------------------ cached computations

@st.cache_data(max_entries=8, show_spinner="Measuring induction on repeated random sequences ...")
def _scores(model_key: str):
    # the probe of the Attention page and the training log: for a BPE, its whole tokens (core.induction.probe_choices)
    return head_scores(model, tokenizer=tok)


@st.cache_data(max_entries=128, show_spinner=False)
def _losses(model_key: str, ids: tuple[int, ...], heads: tuple, mode: str):
    return token_losses(model, list(ids), list(heads), mode)


@st.cache_data(max_entries=64, show_spinner=False)
def _probs(model_key: str, ids: tuple[int, ...], heads: tuple, mode: str, pos: int):
    # one position's row: the whole (n, m) table is 400 MB for GPT-2 small at 1,024 tokens
    return next_token_probs(model, list(ids), list(heads), mode, positions=[pos])[0]


@st.cache_data(max_entries=64, show_spinner="Continuing the text ...")
def _greedy(model_key: str, ids: tuple[int, ...], steps: int, heads: tuple, mode: str):
    return tok.decode(greedy_continuation(model, list(ids), steps, list(heads), mode))


@st.cache_data(max_entries=256, show_spinner=False)
def _layer_losses(model_key: str, ids: tuple[int, ...], mode: str, layer: int):
    return layer_head_losses(model, list(ids), layer, mode)  # (h, n-1), a layer at a time: a progress bar between


@st.cache_data(max_entries=64, show_spinner=False)
def _pass_seconds(model_key: str, ids: tuple[int, ...]) -> float:
    """How long one forward pass on these tokens takes on this server now (what a slid step of a continuation costs)."""
    t0 = time.perf_counter()
    model(torch.tensor([list(ids)]))
    return time.perf_counter() - t0


@st.cache_data(max_entries=16, show_spinner=False)
def _rows_seconds(model_key: str, rows: int, length: int) -> float:
    """How long one forward pass of ``rows`` sequences of ``length`` tokens takes on this server now."""
    t0 = time.perf_counter()
    model(torch.zeros(rows, length, dtype=torch.long))
    return time.perf_counter() - t0


def rank_seconds(n: int) -> float:
    """The expected time of ranking every head on n tokens: head_losses_cost passes of the model, each timed as one
    row of a batch of h (the ranking runs h rows at once, much faster per row than one alone on a short prompt),
    on at most 64 tokens, scaled up to n."""
    length = min(n, 64)
    return head_losses_cost(c, n) * _rows_seconds(mkey, c.n_heads, length) / c.n_heads * n / length


@st.cache_data(max_entries=16, show_spinner=False)
def _pattern(model_key: str, ids: tuple[int, ...], layer: int, head: int):
    return head_attention(model, list(ids), layer, head)[1]  # one head: the blocks after its layer never run


next_token_bars, stripe_figure = map(cached_figure, (IF.next_token_bars, IF.stripe_figure))  # the figure itself (ui)


# ------------------------------------------------------------------ the prompt

def _repeat(tok, n_ctx: int):
    """Button callback (runs before the script, so it may set the prompt box): the ids the model reads, written
    twice as ids. Their text encoded again could differ for a BPE (the copies can merge at the seam)."""
    ids = prompt_ids_now(PROMPT_KEY, tok)
    if ids:
        doubled, cut = repeat_ids(ids, n_ctx)
        set_prompt_ids(PROMPT_KEY, tok, doubled)
        st.session_state["heads_repeat_note"] = (tok.decode(doubled), cut, len(ids))


def _random_twice(tok, n_ctx: int):
    """Button callback: distinct random tokens written twice, the probe's kind of text, where nothing but copying
    predicts the second copy (a fresh draw each press)."""
    readable = tok.readable_ids()  # a BPE's random tokens must be whole text, or the box shows '�'
    period = probe_period(n_ctx, tok.vocab_size if readable is None else len(readable))
    seed = int(st.session_state.get("heads_random_draws", 0))
    st.session_state["heads_random_draws"] = seed + 1
    ids = repeat_probe(tok.vocab_size, n_seqs=1, period=period, seed=1000 + seed, choices=readable)[0].tolist()
    set_prompt_ids(PROMPT_KEY, tok, ids)
    st.session_state.pop("heads_repeat_note", None)


# the default text goes into the box's state, not its value: the Repeat button writes that state too, and a
# box given both logs a warning. The key is PROMPT_KEY, written out: tests/test_bad_input.py finds boxes by key
st.session_state.setdefault(PROMPT_KEY, DEFAULT_PROMPT)
prompt = prompt_input("Your prompt", None, "heads_prompt", tok, c.n_ctx, height=150)
half = c.n_ctx // 2
b, note = st.columns([1, 4], vertical_alignment="center")
b.button("Repeat my prompt", key="heads_repeat", on_click=_repeat, args=(tok, c.n_ctx),
         disabled=prompt.empty)
b.button(f"Random {tok.units}, twice", key="heads_random", on_click=_random_twice, args=(tok, c.n_ctx),
         help=f"Replaces your prompt by distinct random {tok.units} written twice: text no language model can predict "
              "the first time, and only copying can predict the second time."
              + ("" if tok.kind == "char" else " Only tokens that are whole printable text are drawn, so the box "
                 "shows what the model reads."))
done = st.session_state.get("heads_repeat_note")
if done and done[0] == prompt.text and done[1]:
    note.caption(f"Your prompt had {done[2]} {tok.units}, but two copies must fit in n_ctx = {c.n_ctx}: only its "
                 f"last {half} {tok.units} were written twice.")
else:
    note.caption(f"Writes your prompt twice. In the second copy every {tok.unit} has been seen before, followed by "
                 f"the {tok.unit} that comes next: a model with an induction head can copy it from the first copy "
                 f"(at most {half} {tok.units} are repeated, so that both copies fit in n_ctx = {c.n_ctx}).")
if prompt.empty:
    st.info("Type a few characters above (letters, punctuation, newlines) to see what switching heads off changes.")
    st.stop()

ids = tuple(prompt.ids)
n = len(ids)
period = repeat_period(ids)
# in the compute line when the server is busy (core.gate); results already cached skip it
_scores, _losses, _probs, _greedy, _layer_losses, _pattern = (
    gated(f, "the interventions") for f in (_scores, _losses, _probs, _greedy, _layer_losses, _pattern))
scores = _scores(mkey)
best = scores.best_head()

# ------------------------------------------------------------------ which heads, how

options = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
heads_key = f"heads_off_{c.n_layers}x{c.n_heads}"  # a model of another shape gets a box of its own


def _set_heads(value):
    st.session_state[heads_key] = value


pick, how = st.columns([3, 1])
with pick:
    chosen = st.multiselect(
        "Heads to switch off", options, default=[best], key=heads_key, format_func=lambda p: IF.head_label(*p),
        help="Layers and heads count from 1, as on the Attention page: L1 H1 is the first head of the first layer. "
             "The page opens with the head that scores highest on induction switched off.")
    a1, a2, _ = st.columns([1, 1, 3])
    a1.button("Switch all off", key="heads_all", on_click=_set_heads, args=(options,))
    a2.button("Switch all on", key="heads_none", on_click=_set_heads, args=([],))
mode = how.radio("Switched off means", MODES, key="heads_mode", horizontal=True,
                 format_func={"zero": "zero", "mean": "mean over positions"}.get,
                 help="zero: the head's output is 0 at every position. mean: it is the head's average output over "
                      "your prompt, the same at every position.")
heads = tuple(sorted(chosen))
off = f"{IF.heads_label(heads)} off" if len(heads) < len(options) else "every head off"
st.caption(f"Layers and heads count from 1 (L1 H1 is the first head of the first layer). This model has "
           f"{c.n_layers} layer(s) of {c.n_heads} heads.")
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
    before = _losses(mkey, ids, (), mode)
    after = _losses(mkey, ids, heads, mode)
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
        first, second = copy_slices(period)
        table = {"first copy": [before[first].mean(), after[first].mean()],
                 "second copy": [before[second].mean(), after[second].mean()]}
        table["drop (first − second)"] = [f - s for f, s in zip(table["first copy"], table["second copy"])]
        st.markdown(f"**Your prompt is {period} {tok.units} written twice.** Mean loss (nats) on each copy:")
        st.table({"": ["all heads on", off], **{k: [f"{v:.3f}" for v in vals] for k, vals in table.items()}})
        gain_on, gain_off = table["drop (first − second)"]

        def compared(gain):
            return f"{abs(gain):.3f} nats {'lower' if gain >= 0 else 'higher'} than on the first"

        verdict = ("the model reads the first copy to predict the second" if gain_on > 0.1 else
                   "the model barely uses the first copy: it has no working induction head")
        st.caption(f"With all heads on, the loss on the second copy is {compared(gain_on)}: {verdict}. With {off} "
                   f"it is {compared(gain_off)}. An induction head shows as a large drop that shrinks when the head "
                   "is switched off.")
    else:
        st.caption("Press **Repeat my prompt** to see the loss on a second copy of your text: that is where an "
                   "induction head helps, and where switching it off hurts.")

# ------------------------------------------------------------------ next token

st.header(f"The next {tok.unit}, before and after")
if n > 1:
    pos = st.slider(f"Position i (counting from 0): the distribution for the {tok.unit} after position i", 0, n - 1,
                    n - 1, key=f"heads_pos_{n}")
else:
    pos = 0
p_before, p_after = _probs(mkey, ids, (), mode, pos), _probs(mkey, ids, heads, mode, pos)
tail = tok.visible_tokens(ids[max(0, pos - 29):pos + 1])  # the last 30 tokens read (characters, for a character model)
actual = ids[pos + 1] if pos + 1 < n else None
seen = "".join(tail).replace("`", "'")  # shown as code: no Markdown escapes inside
nxt = "" if actual is None else tok.visible_tokens([actual])[0].replace("`", "'")
st.caption(f"The model has read …`{seen}` (position {pos}); "
           + ("this is the end of your prompt." if actual is None else f"the next {tok.unit} in your text is `{nxt}`."))
shared_chart(next_token_bars(tok.pieces, p_before, p_after, off, actual, unit=tok.unit), width="stretch",
             theme=None, key="heads_bars")

# ------------------------------------------------------------------ continuation

st.header("Greedy continuation")
steps = min(CONTINUE, c.n_ctx)
read = ids
slid = n + steps - c.n_ctx  # new tokens that would each rerun the whole window of n_ctx positions
if slid > 0 and slid * _pass_seconds(mkey, ids) > SLIDE_S:
    read = ids[-(c.n_ctx - steps):]
    st.caption(f"The continuations read the last {len(read):,} of your {n:,} {tok.units}, so that {steps} new ones fit "
               f"in the context of {c.n_ctx:,}: past it the window slides, and every new {tok.unit} would rerun all "
               f"{c.n_ctx:,} positions (about {_pass_seconds(mkey, ids):.1f} s each on this server).")
cont_on = _greedy(mkey, read, steps, (), mode)
cont_off = _greedy(mkey, read, steps, heads, mode)
context = prompt.text[-30:]
left, right = st.columns(2)
with left:
    st.markdown("**All heads on**")
    st.html(IF.continuation_html(context, cont_on))
with right:
    st.markdown(f"**{off}**")
    st.html(IF.continuation_html(context, cont_off, reference=cont_on))
st.caption(f"{steps} {tok.units}, each the most likely one; the end of your prompt is grey. On the right, yellow marks "
           "the characters that differ from the left.")

# ------------------------------------------------------------------ ranking

st.header("Which heads matter on this prompt")
ranked = st.session_state.setdefault("heads_ranked", set())  # (model, ids, mode) this session has ranked
wait = False
if n >= 2 and (mkey, ids, mode) not in ranked:
    expected = rank_seconds(n)
    if expected > RANK_AUTO_S:  # said beforehand, and only on request
        st.markdown(f"Ranking switches each of the {c.n_layers * c.n_heads} heads off in turn: on this prompt of "
                    f"{n:,} {tok.units} that is about {head_losses_cost(c, n):.0f} forward passes of the whole model, "
                    f"**about {expected:.0f} s** on this server now.")
        wait = not st.button("Rank every head", key="heads_rank_go")
if n < 2:
    st.info(f"Ranking the heads needs losses, so at least two {tok.units}.")
elif not wait:
    bar = st.progress(0.0, text="Switching off every head in turn ...")
    per_head = []
    for layer in range(c.n_layers):
        per_head.append(_layer_losses(mkey, ids, mode, layer))
        bar.progress((layer + 1) / c.n_layers, text=f"Switching off every head in turn: layer {layer + 1} of "
                                                   f"{c.n_layers} done")
    bar.empty()
    ranked.add((mkey, ids, mode))
    base, per_head = _losses(mkey, ids, (), mode), np.stack(per_head)
    effects = rank_from_losses(base, per_head)
    second = rank_from_losses(base, per_head, slice(period, None)) if period else None
    frame = IF.ranking_frame(effects, second, scores.induction)
    rises = [col for col in frame.columns if col.endswith("rise")]
    styled = frame.style.format({col: "{:.3f}" for col in frame.columns if col != "head"}).highlight_max(
        subset=rises, color="#ffd6d6")
    st.dataframe(styled, hide_index=True, width="stretch", key="heads_rank")
    top = effects[0]
    text = (f"Each head switched off alone ({mode}), every other head on. The rise is the mean loss with the head off "
            f"minus {effects[0].loss - effects[0].increase:.3f} nats with all heads on. Here "
            f"**{IF.head_label(top.layer, top.head)}** matters most: {top.increase:+.3f} nats over the whole prompt.")
    if second:
        s = max(second, key=lambda e: e.increase)
        score = float(scores.induction[s.layer, s.head])
        text += f" On the second copy alone it is **{IF.head_label(s.layer, s.head)}** ({s.increase:+.3f} nats), " + (
            f"an induction head (score {score:.2f}): the head that copies from the first copy." if score >= THRESHOLD
            else f"which is no induction head (score {score:.2f}): it matters for reading text in general, not for "
                 "copying.")
    st.markdown(text)

# ------------------------------------------------------------------ the induction stripe

st.header("The induction stripe")
readable = tok.readable_ids()
period_probe = probe_period(c.n_ctx, c.vocab_size if readable is None else len(readable))
st.markdown(
    f"An **induction head** completes patterns seen earlier in the context: at a {tok.unit} A it looks for the "
    f"earlier A and attends to the {tok.unit} right after it, then copies it. We measure this on random "
    f"{tok.units if readable is None else tok.units + ' (whole printable ones)'} written twice ({period_probe} of "
    "them, then the same again), where nothing else predicts the "
    "second copy. A head's **induction score** is the weight its second-copy queries give, on average, to the "
    f"key right after the earlier occurrence. We call a head an induction head from **{THRESHOLD:.2f}** on: "
    "it then puts at least that share of its attention on one key out of dozens.")
st.dataframe(IF.induction_frame(scores.induction).style.format("{:.3f}").highlight_between(
    left=THRESHOLD, right=None, color="#c7ecc7"), width="content", key="heads_induction")
st.caption(f"Highlighted: at or above {THRESHOLD:.2f}. A head spreading its weight evenly over the past would score "
           f"about {induction_chance(c.n_ctx, period_probe):.3f}. On the probe this model's loss is "
           f"{scores.first_copy_loss:.2f} nats on the first copy (random {tok.units}: a model of English expects "
           f"something else, so it can do worse than guessing, log m = {np.log(c.vocab_size):.2f}) and "
           f"{scores.second_copy_loss:.2f} on the second.")
if float(scores.induction.max()) < THRESHOLD:
    st.info(f"No head of this model reaches {THRESHOLD:.2f}: it has no induction head (yet). The stripe below stays "
            "faint, and switching the head off changes the second copy little. A model trained longer, or on text "
            "with repeats, grows one.")

rep = list(ids) if period else repeat_ids(list(ids), c.n_ctx)[0]
T = len(rep) // 2
layer, head = st.selectbox("Head to look at", options, index=options.index(best), key=f"heads_stripe_{heads_key}",
                           format_func=lambda p: IF.head_label(*p) + (" (highest induction score)" if p == best else ""))
if T < 2:
    st.info(f"The stripe needs a prompt of at least two {tok.units}.")
else:
    pattern = _pattern(mkey, tuple(rep), layer, head)
    here = float(stripe_scores(pattern[None], T)[1])
    where = "your prompt" if period else "your prompt written twice"
    shared_chart(stripe_figure(pattern, tok.visible_tokens(rep), T,
                               f"{IF.head_label(layer, head)} on {where} (period {T})", tok.unit),
                 width="stretch", theme=None, key="heads_stripe")
    on = _losses(mkey, tuple(rep), (), mode)
    off1 = _losses(mkey, tuple(rep), ((layer, head),), mode)
    _, sec = copy_slices(T)
    st.caption(f"Rows are queries, columns keys; grey cells lie in the future and are masked. An induction head "
               f"lights up the dotted line j = i − {T} + 1: from each {tok.unit} of the second copy to the one after "
               f"its twin in the first. On {where} this head gives that line {here:.2f} of its weight on average. "
               f"Switching it off ({mode}) moves the second copy's loss from {on[sec].mean():.3f} to "
               f"{off1[sec].mean():.3f} nats.")
