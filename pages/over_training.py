import streamlit as st

from core.analysis.induction import formation_step
from core.analysis.over_training import head_patterns, over_training, pick_steps
from core.analysis.trace import additive, lens_stage_names
from pages.over_training import figures as OF
from core.figures.induction_figures import formation_figure
from core.nn.checkpoint import CheckpointError
from core.nn.model_card import read_heads, read_log, read_training
from core.nn.snapshots import snapshot_losses
from core.serve.fmt import head_label
from core.serve.links import Field, LinkSpec
from pages.over_training.view import plan_view, view_budget
from ui.links import link_box, use_link
from ui import at_step, chart, current, ensure_frame, model_cache, model_key, prompt_input
from ui.steps import listing_words, snapshot_listing_of, snapshot_loader
from ui.models import steps_held

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

# our own sentence, written twice: a learner's first test of an induction head is ordinary text said again
DEFAULT_PROMPT = "The old man walked slowly to the river and sat down.\n" * 2
PROMPT_KEY = "over_prompt"
STRIP = 12  # small multiples of one head: at most this many snapshots side by side

st.title("Over training")
st.markdown(
    "Training kept a copy of the weights at a few steps, close together at the start, where the model changes "
    "fastest, and further apart later. This page runs **your prompt through every one of those copies** and lines "
    "the results up: the loss on each of your tokens, what each head attends to, what each layer already predicts, "
    "and who writes the final prediction. Reading down a column shows one token becoming easy; reading across a "
    "head's panels shows a pattern forming. Write a sentence twice and watch the second copy's loss fall at the step "
    "where the induction head appears.")
st.latex(r"\ell_i(s) = -\log p_{\theta_s}\!\left(x_{i+1} \mid x_{\le i}\right), \qquad "
         r"\text{induction}(s) = \frac{1}{T}\sum_{i=T}^{2T-1} A^{(s)}_{i,\; i-T+1}")
st.caption("θ_s are the weights at snapshot step s; A is a head's attention pattern; on a text of T tokens written "
           "twice, the induction score is the weight each second-copy token puts on the token after its first copy.")

entry, model, tok = current()
if entry is None or tok is None:
    st.info("No model is loaded. Pick one in the sidebar (or see there why none could be loaded).")
    st.stop()
entry = at_step(entry, None)  # this page shows every step itself, whatever the sidebar's step slider says
listing = snapshot_listing_of(entry)
if not listing.steps:
    st.info(f"**{entry.name}** kept no snapshots of its training, so there is nothing to scrub through. The shipped "
            "models keep theirs; a model you train on the Training page keeps its own unless you switch that off. "
            "GPT-2 folders and models saved before snapshots existed have only their final weights.")
    st.stop()
c = model.config  # every snapshot has this shape (a snapshot of another shape is refused)
if not c.lecture_block:  # a variant from the Why each piece page: every view below is its own forward's numbers
    st.info("This model's block is a variant of the lecture's: every number below is the one its own forward computes.")
if (words := listing_words(listing)) is not None:
    st.warning(words, icon="⚠️")

head_key = f"over_head_{c.n_layers}x{c.n_heads}"
LINK = LinkSpec({"prompt": Field(("prompt", tok, c.n_ctx), PROMPT_KEY, cut=True),
                 "layer": Field(("index", c.n_layers)), "head": Field(("index", c.n_heads))})  # one picker: head_key
link = use_link(LINK)
if "layer" in link.values or "head" in link.values:  # one of the two from the link, the other as it was
    was = st.session_state.get(head_key, (0, 0))
    st.session_state[head_key] = (link.values.get("layer", was[0]), link.values.get("head", was[1]))
st.session_state.setdefault(PROMPT_KEY, DEFAULT_PROMPT)
prompt = prompt_input("Your prompt", None, "over_prompt", tok, c.n_ctx, height=110)  # PROMPT_KEY, a literal for tests
if prompt.empty or len(prompt.ids) < 2:
    st.info(f"Type at least two {tok.units} above: the views need one prediction to score.")
    st.stop()
ids = tuple(prompt.ids)
tokens = tok.visible_tokens(prompt.ids)

# ------------------------------------------------------------------ which snapshots, within the server's memory
try:
    budget = view_budget()
except ValueError as e:
    st.error(f"This page cannot run: {e}.", icon="⚠️")
    st.stop()
plan = plan_view(c, list(listing.steps), len(ids), steps_held(entry, model), budget)
for note in plan.notes:
    st.info(note, icon=":material/filter_alt:")
if plan.refused:
    st.warning(plan.refused, icon="⚠️")
    st.stop()
# names the weights of every snapshot read (the folder's stamp changes when one is added, removed or rewritten)
fkey = f"{model_key(entry)}:{listing.stamp}:" + ",".join(map(str, plan.steps))


# ------------------------------------------------------------------ cached computations
# loaded only inside the cached work (so inside the compute slot: ui.model_cache), one snapshot at a time
WHAT = "the views over training"
_over = model_cache(lambda ids: over_training([(s, snapshot_loader(entry, s)) for s in plan.steps], list(ids),
                                              strip=pick_steps(plan.steps, STRIP)), 8,
                    what=WHAT, spinner="Running your prompt through every snapshot ...")
_patterns = model_cache(lambda ids, layer, head, picked: head_patterns([(s, snapshot_loader(entry, s)) for s in picked],
                                                                       list(ids), layer, head), 16, what=WHAT)

ot = _over(fkey, ids)
if ot.skipped:
    more = f"; and {len(ot.skipped) - 5:,} more" if len(ot.skipped) > 5 else ""  # a folder of empty files: 24
    st.warning("Some snapshots could not be loaded and are left out: " +
               "; ".join(f"step {s:,} ({why})" for s, why in ot.skipped[:5]) + more, icon="⚠️")
if len(ot.steps) < 2:
    st.info("Fewer than two snapshots could be loaded: there is no change over training to show.")
    st.stop()
shown_steps = ot.steps
training = read_training(entry.path)
unit = training.get("loss_unit", tok.unit)
heads_rows = read_heads(entry.path) or []
formed = formation_step(heads_rows) if heads_rows else None
losses = snapshot_losses(training)

st.caption(f"{len(shown_steps)} snapshots of **{entry.name}**, steps {shown_steps[0]:,} to {shown_steps[-1]:,}"
           + (f"; its induction head formed at step {formed:,} on the training probe" if formed is not None else
              "; no head reached the induction threshold on the training probe") + ". This page always shows the "
           "snapshots whatever the sidebar's step slider says; the slider sets the step the other pages use.")

# ------------------------------------------------------------------ the loss
st.header("The loss, on the run and on your prompt")
st.markdown("The curves are the run's own training and validation loss; the red points are the mean loss on your "
            "prompt at each snapshot. The step axis is logarithmic, so the first hundred steps get as much room as "
            "the last ten thousand.")
marks = {formed: f"induction head formed (step {formed:,})"} if formed else None
chart(OF.prompt_loss_figure(ot, read_log(entry.path) or [], unit, marks), key="over_loss")
st.markdown(f"Each row below is a snapshot, each column a {tok.unit} of your prompt; the colour is the loss of "
            f"predicting that {tok.unit} from everything before it. Dark means easy.")
chart(OF.token_loss_heatmap(ot, tokens), key="over_heatmap")
if (copies := ot.copy_losses()) is not None:
    first, second = copies
    st.markdown(f"Your prompt is {ot.period} {tok.units} written twice. Mean loss on the first copy / on the second: "
                + " · ".join(f"step {s:,}: {a:.2f} / {b:.2f}" for s, a, b in
                                          zip(shown_steps, first, second) if s in pick_steps(shown_steps, 6)) + ".")

# ------------------------------------------------------------------ heads
st.header("Heads forming")
st.markdown("Two measures per head. The **previous-token** score is the mean weight a position puts on the one "
            "just before it; the **induction** score is the weight on the token that followed an earlier copy of the "
            "current one. Measured here live on your prompt at each snapshot, and below on the training probe "
            f"(random {tok.units} written twice), recorded every few steps while the model trained.")
chart(OF.live_heads_figure(ot, formed), key="over_live_heads")
if heads_rows:
    with st.expander("The same scores on the training probe, recorded during training", expanded=False):
        chart(formation_figure(heads_rows, units=tok.units), key="over_probe_heads")

st.subheader("One head's attention at each snapshot")
pairs = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
if st.session_state.get(head_key) not in pairs:  # the default as state (no index=), so that a link may set it
    st.session_state[head_key] = ot.best_induction_head()
layer, head = st.selectbox("Head", pairs, key=head_key,
                           format_func=lambda p: head_label(*p),
                           help="Opens on the head with the highest induction score on your prompt at the last step.")
picked = tuple(pick_steps(shown_steps, STRIP))
try:  # the head it opens on was kept by the run above; another one reads its snapshots again
    pats = (ot.strip_patterns if (layer, head) == ot.strip_head and list(picked) == ot.strip_steps else
            _patterns(fkey, ids, layer, head, picked))
except CheckpointError as e:  # a snapshot changed on disk since the views above were computed
    st.warning(f"The attention strip could not be drawn: {e.shown}.", icon="⚠️")
    pats = None
if pats is not None:
    chart(OF.pattern_strip(pats, list(picked), tokens, f"{head_label(layer, head)}: queries down, keys across"),
          key="over_strip")
st.caption(f"{len(picked)} of the {len(shown_steps)} snapshots, spread over the run. On a text written twice, an induction "
           "head draws a stripe parallel to the diagonal in the lower half: each token of the second copy looking at "
           "the token after its first copy.")

# ------------------------------------------------------------------ what each layer predicts, and who writes it
st.header("What each layer predicts")
st.markdown("The logit lens reads the residual stream after the embedding and after each block as if it were the "
            "last one (final LayerNorm, then the output map). A stage's line is the share of your prompt's "
            "positions where its favourite is the token that really comes next.")
chart(OF.lens_over_steps(ot, lens_stage_names(c.n_layers)), key="over_lens")

st.header("Who writes the last prediction")
target = tok.visible_tokens([ot.target])[0]
st.markdown(f"The final model's favourite after your prompt is **{target}**. Its logit is a sum of what every "
            "writer added to the stream (embedding, each head, each MLP), read through the final LayerNorm; the lines "
            f"show each writer's share of the logit of {target} at every snapshot, so you can see which writers take "
            "over, and when.")
st.latex(r"z_t = \sum_{\text{writer } w} \frac{W_U[t]\cdot \gamma \odot (c_w - \bar c_w)}{\sigma} + W_U[t]\cdot\beta")
chart(OF.attribution_over_steps(ot, target), key="over_attr")
if not additive(c):
    st.caption("This block is not a plain sum of its writers (post-norm LayerNorms, or no residual), so these shares "
               "are an approximation: they do not add up to the logit (the Inside page says by how much).")
if losses:
    last = shown_steps[-1]
    st.caption(f"Validation loss estimated when each snapshot was taken: step 0 "
               f"{losses.get(shown_steps[0], {}).get('val_loss', float('nan')):.3f}, step {last:,} "
               f"{losses.get(last, {}).get('val_loss', float('nan')):.3f} nats per {unit}.")

link_box(LINK, {"layer": layer, "head": head})
