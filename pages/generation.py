import math

import streamlit as st

from core.serve import fmt
from core.analysis import generation as G
from core.figures import generation_figures as GF
from core.analysis.sampling import effective_temperature, temperature_note
from core.analysis.timing import forward_seconds
from core.nn.tokenizer_base import fragment_note
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link
from pages.generation import parts as steering
from ui import chart, ensure_frame, model_cache, model_key, prompt_input, require_model
from ui.cached import shared_draw

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "QUEEN:\nWhat news from the north, good cousin?\n\nGLOUCESTER:\nThe"
MODES = ("greedy", "sample", "top-k", "top-p")

st.title("Generation")
st.markdown(
    "After reading the prompt, the model ends with one score per token of its vocabulary (a character, for a "
    "character-level model), the logits **z**. Generating text is a loop: turn the scores into a distribution, "
    "pick a token, append it, "
    "read again. *Greedy* decoding always picks the highest score; *sampling* draws from the distribution. "
    "The temperature T sits in between: every logit is divided by T before the softmax.")
st.latex(r"p_i(T) = \frac{e^{z_i/T}}{\sum_{j=1}^{m} e^{z_j/T}}, \qquad "
         r"\lim_{T\to 0^+} \mathbf{p}(T) = \mathbf{e}_{i^\star}\ \text{(greedy)}, \qquad "
         r"\lim_{T\to\infty} \mathbf{p}(T) = \left(\tfrac{1}{m}, \ldots, \tfrac{1}{m}\right)")
st.caption("Dividing by a small T stretches the gaps between logits until only the largest matters; a large T "
           "shrinks every gap towards zero, so all m tokens become equally likely. If k logits tie for the "
           "maximum, the T → 0 limit is uniform over those k.")

entry, model, tok = require_model()
c = model.config
m = c.vocab_size

LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), "gen_prompt", cut=True),
                 "decoding": Field(("choice", MODES), "gen_mode"), "T": Field(("float", 0.0, 10_000.0), "gen_temperature"),
                 "k": Field(("int", 1, m), "gen_top_k"), "p": Field(("float", 0.0, 1.0), "gen_top_p"),
                 "seed": Field(("int", 0, 2**31 - 1), "gen_seed"), "new": Field(("int", 1, 2000), "gen_new_tokens"),
                 **steering.link_fields()})  # new: the count asked for, not what fit() allows; feature, alpha: steering
use_link(LINK)
for key, default in (("gen_prompt", DEFAULT_PROMPT), ("gen_temperature", 1.0), ("gen_mode", "sample"),
                     ("gen_top_k", min(10, m)), ("gen_top_p", 0.9), ("gen_seed", 0), ("gen_new_tokens", 200)):
    st.session_state.setdefault(key, default)  # defaults as state, not value=: a link may set them
if not 1 <= st.session_state["gen_top_k"] <= m:  # a k kept from a model with a larger vocabulary
    st.session_state["gen_top_k"] = min(10, m)
prompt = prompt_input("Prompt", None, "gen_prompt", tok, c.n_ctx, height=150)
ids = prompt.ids
if prompt.empty:
    ids = tok.encode("\n", errors="drop")  # a line break, when the vocabulary has one
    if not ids:
        st.info(f"Type a prompt: the model needs at least one {tok.unit} it knows to start from.")
        st.stop()
    st.info("The prompt is empty (or none of its characters is known to the model), so the model starts "
            "from a single line break ⏎, as at the beginning of a new speech.")
start_text = tok.shown_text(ids)
unit, units = tok.unit, tok.units  # "character(s)" for a character model, "token(s)" otherwise
SLIDE_S = 30  # text that would outgrow n_ctx may spend this long re-reading the window, else less prompt is read

# called with the model's key first (ui.model_cache: cached for the server by that key and the inputs)
_next_logits = model_cache(lambda ids: G.next_logits(model, ids), 32)
# a slid step of core.analysis.sampling.stream, on this server
_window_seconds = model_cache(lambda: forward_seconds(model, 1, c.n_ctx, last_only=True), 8)


def fit(ids: list[int], n_new: int, rows: int = 1) -> tuple[list[int], int, str]:
    """(prompt ids to read, new tokens, a note or ""): G.window_plan for ``rows`` texts drawn side by side."""
    plan = G.window_plan(len(ids), n_new, c.n_ctx, lambda: _window_seconds(model_key(entry)), rows, SLIDE_S)
    if not plan.cut:
        return ids, n_new, ""
    note = (f"{len(ids):,} + {n_new:,} {units} outgrow the context of {c.n_ctx:,}: {plan.slid:,} steps would each "
            f"re-read the whole window, about {plan.seconds:.0f} s for this model on this server. So the model reads "
            f"the last {plan.read:,} {units} of the prompt"
            + (f" and writes {plan.new:,} (at most n_ctx / 2)" if plan.new < n_new else "")
            + ", and the key/value cache serves every step.")
    return ids[-plan.read:], plan.new, note


logits = _next_logits(model_key(entry), tuple(ids))  # (m,) scores for the next token

# ------------------------------------------------------------------ generate
st.header("Generate text")
a, b, cmode = st.columns([1, 1, 2])
n_new = int(a.number_input(f"New {units}", 1, 2000, step=50, key="gen_new_tokens",
                           help=f"More than n_ctx = {c.n_ctx} is fine: the window then slides over the text."))
seed = int(b.number_input("Seed", 0, 2**31 - 1, key="gen_seed",
                          help="The same seed gives the same sampled text; greedy ignores it."))
mode = cmode.radio("Decoding", MODES, horizontal=True, key="gen_mode",
                   help="greedy: argmax every step · sample: draw from p(T) · top-k: draw among the k most "
                        f"likely · top-p: draw among the most likely {units} whose total reaches p")
temperature, top_k, top_p = 0.0, None, None
if mode != "greedy":
    t_col, f_col, _ = st.columns([1, 1, 2])
    temperature = float(t_col.number_input("Temperature T", 0.0, 10_000.0, step=0.1, format="%g",
                                           key="gen_temperature"))
    if mode == "top-k":
        top_k = int(f_col.number_input("k", 1, m, key="gen_top_k",
                                       help=f"How many of the m = {m} {units} stay in the draw."))
    elif mode == "top-p":
        top_p = float(f_col.slider("p", 0.0, 1.0, step=0.01, key="gen_top_p",
                                   help=f"The smallest set of most likely {units} whose probabilities add "
                                        "up to at least p stays in the draw; the most likely one always does."))
    used = effective_temperature(temperature)  # T as the softmax can take it: 1e-300 is 0 (core.analysis.sampling)
    notes = [temperature_note(temperature)] if used != temperature else []  # said once, in words
    for note in notes + G.decoding_notes(used, m, top_k, top_p, unit=unit):
        st.info(note)

st.html(GF.legend_html(unit))
byte_box = st.empty()  # what ⟨e2 80⟩ means, said above the first text when any text of the page shows one
gen_ids, n_new, note = fit(ids, n_new)
if note:
    st.info(note)
    start_text = tok.shown_text(gen_ids)
SHOWN = 600  # characters of the prompt shown in grey before the new text: a long prompt would push it off screen
trimmed = len(start_text) > SHOWN
if trimmed:
    start_text = "…" + start_text[-SHOWN:]
box = st.empty()
draw_key = (model_key(entry), tuple(gen_ids), n_new, seed, mode, temperature, top_k, top_p)
steps, elapsed = shared_draw(
    draw_key, lambda repaint: G.draw(model, gen_ids, n_new, temperature, top_k, top_p, seed, tok.pieces, repaint=repaint),
    lambda so_far: box.html(GF.shaded_html(start_text, so_far, boundaries=tok.kind != "char")))  # every few tokens
box.html(GF.shaded_html(start_text, steps, boundaries=tok.kind != "char"))

measures = G.text_measures(steps)
d3, slid_at = measures["distinct_3"], measures["slid_at"]
m1, m2, m3 = st.columns(3)
m1.metric("Distinct 3-grams", "–" if d3 is None else f"{d3:.2f}",
          help=f"Distinct sequences of 3 {units} / all sequences of 3 {units} of the generated text.")
m2.metric("Mean probability the model gave", f"{measures['mean_prob']:.3f}")
m3.metric("Perplexity of the generated text", f"{measures['perplexity']:.2f}",
          help=f"exp of the mean negative log-probability (at T = 1) of the generated {units}.")
grey = f"Prompt in grey (its last {SHOWN} characters; all of it under Plain text)" if trimmed else "Prompt in grey"
caption = (f"{grey}, then {len(steps)} generated {units}, shaded by the probability the model (at T = 1) "
           f"gave each one{'; a thin line marks where each token ends' if tok.kind != 'char' else ''}; hover a {unit} "
           f"for the most likely alternatives at that step. "
           f"Generated in {elapsed * 1000:.0f} ms" + (" with the key/value cache." if slid_at is None else
                                                        f", the first {slid_at} with the key/value cache."))
if slid_at is not None:
    caption += (f" From {unit} {slid_at + 1} on, the text was longer than n_ctx = {c.n_ctx}: the model reads only "
                f"the last {c.n_ctx} {units}, and because positions are learned, every shift of the window makes "
                "the cached keys and values stale, so each step re-reads the whole window instead.")
st.caption(caption)
with st.expander("Plain text"):
    st.code(tok.shown_text(list(gen_ids) + [s["id"] for s in steps]), language=None, wrap_lines=True)
steered = steering.section(entry, model, tok, draw_key, gen_ids, n_new, (temperature, top_k, top_p, seed), start_text,
                           steps)

# ------------------------------------------------------------------ sweep
st.header("The temperature sweep")
st.markdown(
    f"The same logits after the prompt, divided by different temperatures. The panels share their {units} "
    f"(the model's most likely ones at T = 1) and their axis, so you can watch the mass pile onto one "
    f"{unit} as T falls and spread out as T grows."
)
temps_text = st.text_input("Temperatures (comma-separated)", "0, 0.25, 0.5, 1, 2, 5", key="gen_temps",
                           max_chars=300)
temps, messages = G.parse_temperatures(temps_text)
for msg in messages:
    st.warning(fmt.md_escape(msg), icon="⚠️")  # the messages quote what the user typed
for t in (t for t in temps if effective_temperature(t) != t):
    st.info(temperature_note(t))
if not temps:
    temps = list(G.DEFAULT_TEMPERATURES)
    st.info("No usable temperature in the list, so the default list is shown.")
def label(i: int) -> str:  # a token's text, shown inside markdown captions
    return fmt.md_escape(tok.visible_tokens([i])[0])


tied = G.tied_maxima(logits)
chart(GF.sweep_bars(tok.pieces, logits, temps, unit=unit), width="stretch", key="gen_sweep_bars")
if len(tied) == 1:
    st.caption(f"The largest logit is unique ({unit} '{label(tied[0])}'), so the claim applies: T → 0 gives the "
               "one-hot vector on it, which is what greedy decoding picks.")
else:
    names = ", ".join(f"'{label(i)}'" for i in tied[:20])
    st.caption(f"{len(tied)} {units} tie for the largest logit ({names}): as T → 0 the probability splits evenly "
               "between them.")

st.subheader("Move T continuously")


@st.fragment
def move_t(logits, temps: list[float]):
    """The slider and what it drives: dragging it reruns this part only, not the page (the text above, the
    continuations below and their figures stay as they are)."""
    grid = [float(f"{t:.3g}") for t in G.log_grid(1e-2, 1e2, 41)]
    t_slider = st.select_slider("T (log scale)", options=grid, value=1.0, key="gen_slider_T",
                                format_func=lambda t: f"{t:g}")
    now = G.sweep(logits, [t_slider])
    k1, k2, k3, k4 = st.columns(4)
    k1.metric("Entropy H(p(T))", f"{now['entropy'][0]:.3f} nats", help=f"0 for one-hot, log m = {math.log(m):.3f} for uniform")
    k2.metric("Largest probability", f"{now['max_prob'][0]:.3f}", help=f"1 for one-hot, 1/m = {1 / m:.4f} for uniform")
    k3.metric("Distance to one-hot", f"{now['to_one_hot'][0]:.3f}", help="total variation distance to the T → 0 limit")
    k4.metric("Distance to uniform", f"{now['to_uniform'][0]:.3f}", help="total variation distance to the T → ∞ limit")
    chart(GF.distribution_bars(tok.pieces, logits, t_slider, unit=unit), width="stretch", key="gen_dist_bars")
    curves = G.sweep(logits, G.log_grid(1e-3, 1e3, 121))
    chart(GF.sweep_curves(curves, m, mark=t_slider, points=G.sweep(logits, [t for t in temps if t > 0])), width="stretch",
          key="gen_curves")


move_t(logits, temps)
st.markdown("The same measures at your temperatures and at the two limits themselves, computed from the limit "
            "distributions (one-hot on the argmax, and uniform 1/m):")
rows = G.sweep_table(logits, temps)
st.dataframe(rows, hide_index=True, width="stretch",
             column_config={k: st.column_config.NumberColumn(format="%.4f") for k in rows[0] if k != "T"})


# ------------------------------------------------------------------ continuations
# One continuation per temperature, drawn once on this server for the same inputs (st.cache_resource, like the
# texts: no pickling, and a class on one prompt costs one draw); a new draw waits for a compute slot, one the cache
# holds skips the line
_continuations = model_cache(lambda ids, temps, n, seed: G.continuations(model, ids, temps, n, seed, tok.pieces),
                             256, what="the continuations", lane="long", resource=True,
                             spinner="Generating one continuation per temperature ...")
st.header("Continuations, one per temperature")
st.markdown(
    "The same prompt continued at each temperature of the list, every one with the same seed. A repetition "
    f"measure sits on top of each: the share of distinct sequences of 3 {units}. Greedy text tends to fall into "
    "loops (a low share); at high T the text stops looking like words and the shading turns dark, because the "
    f"model keeps being handed {units} it found unlikely."
)
n_cont = int(st.number_input(f"{units.capitalize()} per continuation", 10, 1000, 150, step=50, key="gen_cont_tokens"))
cont_ids, n_cont, note = fit(ids, n_cont, rows=len(temps))
if note:
    st.info(note)
runs = _continuations(model_key(entry), tuple(cont_ids), tuple(temps), n_cont, seed)
ratios = [G.distinct_n([s["id"] for s in r], 3) for r in runs]
per_row = 3
for r0 in range(0, len(temps), per_row):
    cols = st.columns(per_row)
    for col, t, r, d in zip(cols, temps[r0:r0 + per_row], runs[r0:r0 + per_row], ratios[r0:r0 + per_row]):
        with col.container(border=True):
            st.markdown(f"**T = {G.format_t(t)}**" + (" (greedy)" if effective_temperature(t) == 0 else ""))
            st.metric("distinct 3-grams", "–" if d is None else f"{d:.2f}")
            st.html(GF.shaded_html(tok.shown_text(cont_ids)[-GF.CONTEXT_CHARS:], r, font_px=13,
                                   boundaries=tok.kind != "char"))
st.caption(f"Seed {seed} for every column; each shows the last {GF.CONTEXT_CHARS} characters of the prompt in grey. "
           "Change the seed above to draw again.")
chart(GF.distinct_bars(temps, ratios, unit=unit), width="stretch", key="gen_distinct")
if note := fragment_note(" ".join([start_text, steered, *(s["ch"] for run in [steps, *runs] for s in run)])):
    byte_box.caption(note)

st.divider()
link_box(LINK, {"T": temperature if mode != "greedy" else None, "k": top_k, "p": top_p})  # what this decoding uses
