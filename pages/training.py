import streamlit as st

from core.training import training_setup as setup
from core.views import training_view as view
from core.nn.model_store import default_model_name
from core.data.corpus import TRAIN_FRACTION, shakespeare_path
from core.serve.fmt import latex_int, latex_sci
from core.training.job_settings import FORM_FIELDS, FORM_HELP, memory_summary
from core.nn.params import per_block_latex
from core.training.speed import form_estimate, with_estimate
from core.training.train_data import DEFAULT_BPE_VOCAB
from core.training.recipes import DEFAULT_RECIPE, RECIPE_TITLES, RECIPES, describe_recipe
from core.training.training_child import SAMPLE_TEMPERATURE, SAMPLE_TOKENS
from core.training.training_job import TrainingJob
from core.jobs import JobBusy
from ui.cached import builtin_corpus, checked_corpus, learned_bpe
from ui import chart, ensure_frame, gated, job_controls, keep_alive, metric_row, offer_shakespeare_fetch, reset_save_form, \
    save_form, session_alive, session_id, session_owner, upload_limit_mb

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

st.title("Training")
st.markdown("Here you train a transformer yourself, in the background, while you watch. Every step draws a batch of "
            "random windows from the corpus, asks the model to predict each next token (a character, or with "
            "byte-level BPE a piece of a word), and nudges all weights downhill on the average surprise. The loss "
            "starts near the cost of guessing uniformly among the m tokens and falls as the model picks up spelling, "
            "then words, then some grammar; the samples below the curve, drawn from the same prompt with the same "
            "random seed each time, make that visible.")
st.latex(r"\mathcal{L}(\theta) = -\frac{1}{n}\sum_{i=1}^{n} \log p_\theta\left(x_{i+1} \mid x_1, \dots, x_i\right)")
st.caption("One window of n = n_ctx tokens gives n prediction problems at once, thanks to the causal mask; "
           "the loss is their mean, in nats per token (per character for a character model).")
# ---------------------------------------------------------------- corpus
st.header("1. Corpus")

shakespeare = shakespeare_path()
sources = setup.corpus_sources(shakespeare is not None)
# set by the fetch button below, the run before this one: the corpus just fetched is the one to train on
fetched = st.session_state.pop("train_fetched", None) and shakespeare is not None
if fetched:
    st.session_state["train_corpus"] = "shakespeare"
source = st.radio("Train on", list(sources), format_func=sources.get, horizontal=True, key="train_corpus",
                  persist_state="session")
if fetched:
    st.success(f"Tiny Shakespeare was fetched, checked and saved as `{shakespeare}`; it is offered from now on.")
if shakespeare is None and offer_shakespeare_fetch(key="train_fetch"):
    st.session_state["train_fetched"] = True
    st.rerun()

limit_mb = upload_limit_mb()  # the server's cap: the uploader, the paste box and the check all use it
text = info = problem = raw = None  # raw: (bytes, name) uploaded or pasted
if source == "upload":
    up = st.file_uploader("A plain-text file, UTF-8", type=["txt"], key="train_upload", max_upload_size=limit_mb,
                          help=f"At most {limit_mb} MiB of UTF-8 text.")
    raw = (up.getvalue(), up.name) if up is not None else None
elif source == "paste":
    pasted = st.text_area("Your text", key="train_paste", height=200, max_chars=limit_mb * 2**20,
                          persist_state="session", placeholder="Paste a few thousand characters or more.")
    raw = (pasted.encode("utf-8"), "the pasted text") if pasted.strip() else None
try:
    if source in setup.BUILTIN:
        text, info = builtin_corpus(source, setup.builtin_stamp(source))
    elif raw is None:
        st.info("Choose a .txt file to train on." if source == "upload" else "Paste some text to train on.")
    else:
        text, info, problem = checked_corpus(*raw, limit_mb * 2**20)
except ValueError as e:  # an unreadable built-in file
    st.error(f"The corpus could not be read: {e}")
if problem:
    st.error(f"This {'file' if source == 'upload' else 'text'} cannot be used: {problem}.")

tok_kind = st.radio("Tokens", list(setup.TOKENIZER_TITLES), format_func=setup.TOKENIZER_TITLES.get, horizontal=True,
                    key="train_tokenizer", persist_state="session", help=FORM_HELP["tokenizer"])
tok_field, bpe_vocab, bpe = None, DEFAULT_BPE_VOCAB, None  # bpe: a setup.LearnedBPE once learned
if tok_kind == "bpe":
    with st.columns([1, 3])[0]:
        bpe_vocab = st.number_input("BPE vocabulary size m", min_value=0, max_value=setup.BPE_BOX_MAX,
                                    value=DEFAULT_BPE_VOCAB, step=64, key="train_bpe_vocab", persist_state="session",
                                    help=FORM_HELP["bpe_vocab"])
    tok_field = st.empty()  # its error, full width under the box
if info is not None:
    if tok_kind == "bpe" and setup.bpe_size_ok(bpe_vocab):
        with st.spinner(setup.bpe_spinner(int(bpe_vocab), info.chars), show_time=True):
            # seconds of work for a long text: in line with the pages' other heavy work (ui.gated: a BPE learned
            # already, still in its cache, skips the line)
            bpe = gated(learned_bpe, "learning the BPE", lane="long")(text, int(bpe_vocab))
    metric_row(setup.corpus_metrics(info, tok_kind, bpe), 4)
    if note := setup.bpe_shortfall(bpe, bpe_vocab):
        st.caption(note)
    with st.expander("The vocabulary and a sample of the text", expanded=False):
        for caption, shown in setup.vocabulary_preview(info, tok_kind, bpe):
            st.caption(caption)
            if shown is not None:
                st.code(shown, language=None, wrap_lines=True)
# ---------------------------------------------------------------- settings
st.header("2. Model and training settings")
st.markdown("The defaults are the lecture's class-demo model. The parameter count and the cost update as you type.")
cols, boxes = st.columns(5) + st.columns(5), {}
defaults = setup.form_defaults()
for col, (key, (label, top, step, help)) in zip(cols, FORM_FIELDS.items()):
    with col:
        if key == "d_ff" and st.checkbox("d_ff = 4d", value=True, key="train_dff_auto",
                                         help="The conventional MLP width.", persist_state="session"):
            boxes[key] = None  # 4d, and no box
            continue
        boxes[key] = st.number_input(label, min_value=0.0 if key == "lr" else 0, max_value=top, value=defaults[key],
                                     step=step, format="%.4f" if key == "lr" else None, key=f"train_{key}",
                                     help=help, persist_state="session")
form_errors = st.container()  # the settings' errors, full width under the boxes: never squeezed into one column
prompt_text = cols[-1].text_input("Prompt for the samples", value="The", key="train_prompt", max_chars=100,
                                  persist_state="session", help=FORM_HELP["prompt"][tok_kind])
recipe = st.radio("Recipe", list(RECIPES), index=list(RECIPES).index(DEFAULT_RECIPE), format_func=RECIPE_TITLES.get,
                  horizontal=True, key="train_recipe", persist_state="session",
                  help="How the weights are updated; the model is the same either way.",
                  on_change=lambda: st.session_state.update(  # each recipe brings its own rate
                      train_lr=setup.recipe_lr(st.session_state["train_recipe"])))
st.caption(describe_recipe(recipe))

st.subheader("Repeats in the data: growing an induction head")
units, unit = setup.UNITS[tok_kind]
st.markdown(f"Plain text rarely rewards copying. Switch this on and a share of the training windows get a span of "
            f"random {units} written twice, the second time at a random later place. Nothing but copying predicts "
            f"the second copy: the model must find the earlier occurrence of the current {unit} and read what "
            "followed it. A head that does this, an **induction head**, appears suddenly after a plateau; the "
            "training view below measures every head on a fixed probe as it trains and marks the step it appears.")
rc1, rc2 = st.columns([1, 2])
repeat_on = rc1.toggle("Mix in repeated spans", key="train_repeat_on", persist_state="session",
                       help=FORM_HELP["repeat_on"])
repeat_pct = rc2.slider("Share of windows holding a repeated span (%)", 5, 100, 100, step=5, key="train_repeat",
                        disabled=not repeat_on, persist_state="session", help=FORM_HELP["repeat"].format(units=units))
st.button("Preset: watch an induction head form", key="train_induction_preset", help=FORM_HELP["preset"],
          on_click=lambda: st.session_state.update(  # a callback: it runs before the boxes are drawn again
              {f"train_{key}": value for key, value in setup.induction_preset_form().items()}))

keep = st.toggle("Keep snapshots through training", value=True, key="train_snapshots", persist_state="session",
                 help=FORM_HELP["snapshots"])
settings = setup.settings_from_form(boxes, recipe, repeat_pct if repeat_on else None, tok_kind, bpe_vocab, keep)
form = setup.check_form(settings, info, bpe)
errors, cost, pace = form.errors, form.cost, None  # pace: what the estimate below is timed at, for the run's own
for key, message in errors.items():
    if key != "memory":  # said below the cost, with the estimate
        slot = tok_field if key == "bpe_vocab" and tok_field is not None else form_errors
        slot.error((f"**{FORM_FIELDS[key][0]}**: " if key in FORM_FIELDS else "") + message, icon=":material/block:")
if cost is not None:
    st.latex(r"\text{per block: } " + per_block_latex(cost.config))
    if info is None:
        st.caption("Choose a corpus to see the whole count and the cost: the embedding and the output layer "
                   "depend on its vocabulary m.")
    elif cost.tokens < 1:
        st.caption("Set the batch size and the number of steps to see the cost.")
    else:
        st.latex(rf"N = L \cdot \text{{block}} + \underbrace{{m d}}_{{\text{{embedding}}}} + "
                 rf"\underbrace{{n_{{ctx}} d}}_{{\text{{positions}}}} + 2d + \underbrace{{d m}}_{{\text{{output}}}} "
                 rf"= {latex_int(cost.n_params)}")
        st.latex(rf"C \approx 6\,N\,D = 6 \times {latex_int(cost.n_params)} \times {latex_int(cost.tokens)} \approx "
                 rf"{latex_sci(cost.flops)}\ \text{{FLOP}}")
        estimate, pace, rate = form_estimate(settings, form, info.chars)  # a few of its own steps, timed here
        metric_row(with_estimate(setup.cost_metrics(cost, rate, "the settings cannot be trained"), estimate), 4)
        if note := setup.induction_note(settings, cost, rate):
            st.caption(note)
        st.caption(f"D/N = {cost.tokens_per_param:,.1f} tokens per parameter; the run reads the training "
                   f"{TRAIN_FRACTION:.0%} of the corpus about {cost.epochs:,.1f} times over. The count has no h in it: "
                   "heads split the width, they add no weights.")
if "memory" in errors:  # a run this server cannot hold: only Start is refused, the settings stay as typed
    st.error(errors["memory"], icon=":material/memory:")
elif info is not None and not errors:
    st.caption(memory_summary(settings, form.vocab, info.chars))

# ---------------------------------------------------------------- run
st.header("3. Train")
job: TrainingJob | None = st.session_state.get("train_job")
keep_alive(job)  # a run this tab stops touching is stopped (core.jobs.runner)
status = job.status() if job else None
busy = status is not None and not status.can_start
if info is None:
    st.info("Choose a corpus above first.")
startable = not busy and info is not None and not errors
start_clicked = st.button("Start training", type="primary", key="train_start", disabled=not startable,
                          help="Starts a new run in the background. The rest of the app stays usable meanwhile.")
if status is not None and not busy:
    st.caption("Starting again replaces the current run; save it first if you want to keep it.")
if errors:
    st.caption("Fix the settings marked above to start.")
if start_clicked and startable:
    try:
        job = st.session_state["train_job"] = setup.start_run(
            job, text, info.name, settings, sample_prompt=prompt_text, owner=session_owner(), session=session_id(),
            alive=session_alive, pace=pace)
    except JobBusy as e:
        st.error(str(e))
    else:  # a name of its own for every run, the corpus and a time stamp, never one shared default
        reset_save_form("train", "train_save_name", default_model_name(setup.name_stem(source, info.name)))
        st.rerun()  # draw the page again with the run in place: Start greyed out, the live view polling


def live_view(job: TrainingJob, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "train",
                 stop_help="End the run here; the weights trained so far are kept and can be saved.")
    st.caption(view.run_summary(job.corpus_name, job.settings, s.vocab_size, job.threads, s.precision))
    st.progress(s.fraction, text=f"{view.STATE_LABELS[s.state]}: step {s.step:,} of {s.total_steps:,}")
    if s.state == "failed":
        st.error(f"Training failed: {s.message}")
    elif s.state == "stopped" and not s.resumable:
        st.caption("Too many runs were waiting on this server, so this stopped run handed its weights over and its "
                   "process ended to free memory: it can still be saved below, but no longer resumed.")
    metric_row(view.live_metrics(s), 6)
    if note := view.bits_caption(s):
        st.caption(note)
    curve, heads, formed = view.live_figures(s)
    if heads is None:
        chart(curve, width="stretch", key="train_curve")
    else:
        left, right = st.columns(2)
        chart(curve, width="stretch", key="train_curve", where=left)
        chart(heads, width="stretch", key="train_heads", where=right)
        st.caption(view.heads_caption(s, job.train_config.heads_interval, formed))
    if s.samples:
        step, sample = s.samples[-1]
        st.markdown(f"**Sample at step {step:,}**: the prompt, then {SAMPLE_TOKENS} {s.units} drawn at temperature "
                    f"{SAMPLE_TEMPERATURE} with the same random seed each time, so only the weights differ.")
        st.code(s.sample_prompt + sample, language=None, wrap_lines=True)
    if len(s.samples) > 1:
        with st.expander("Earlier samples", key="train_earlier"):  # a fixed label keeps it open as samples arrive
            for step, sample in reversed(s.samples[:-1]):
                st.caption(f"step {step:,}")
                st.code(s.sample_prompt + sample, language=None, wrap_lines=True)


if job is None:
    if info is not None and not errors:
        st.info("Press Start training when the settings suit you. You can leave this page while it runs; come back "
                "to watch it or to save the model. Closing the browser tab ends the run a few minutes later, and what "
                "it trained is lost unless you saved it.")
    st.stop()
polling = job.status().moving
st.fragment(run_every=view.LIVE_POLL_S if polling else None)(live_view)(job, polling)  # the live view alone reruns

# ---------------------------------------------------------------- save
status = job.status()
if not status.can_save:
    if status.active:
        st.caption("Pause or stop the run, or let it finish, to save the model.")
    st.stop()
st.header("4. Save and explore")
st.markdown("A saved model joins the model picker in the sidebar, so the other pages can show its attention "
            "and let you generate with it. Everyone on this server sees every saved model there (a class gallery), "
            "but only the browser session that saved a model may replace it.")
save_form("train", "train_save_name")  # name box, ticks, Save, downloads; the key written out for test_bad_input
