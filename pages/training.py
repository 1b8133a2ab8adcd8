import math

import streamlit as st

from core.fmt import clock, head_label, latex_int, latex_sci, pretty_sci, visible
from core.checkpoint import checkpoint_zip, default_model_name, load_checkpoint, sanitise_model_name
from core.hf import export_zip
from core.corpus import PYDOC_NAME, TRAIN_FRACTION, check_corpus_bytes, describe_corpus, pydoc_text, \
    read_text_file, shakespeare_path, split_train_val
from core.figures import loss_curve
from core.folder_files import file_stamp
from core.induction import THRESHOLD, formation_step
from core.induction_figures import formation_figure
from core.job_settings import (INDUCTION_FORMS_NEAR, INDUCTION_PRESET, MAX_BPE_VOCAB, MAX_STEPS, MIN_BPE_VOCAB,
                               JobSettings, job_cost, memory_summary, validate_settings)
from core.params import per_block_latex
from core.speed import measured_flop_rate
from core.train import DEFAULT_BPE_VOCAB, RECIPE_TITLES, RECIPES, describe_recipe, encode_corpus, make_tokenizer
from core.quota import QuotaError, models_of
from core.training_job import SAMPLE_TOKENS, SAMPLE_TEMPERATURE, BusyError, TrainingJob, release_abandoned
from ui import chart, ensure_frame, gated, job_controls, offer_shakespeare_fetch, session_alive, session_id, \
    session_owner, shipped_names, upload_limit_mb, user_models_dir

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request


st.title("Training")
st.markdown(
    "Here you train a transformer yourself, in the background, while you watch. Every step draws a batch of "
    "random windows from the corpus, asks the model to predict each next token (a character, or with byte-level "
    "BPE a piece of a word), and nudges all weights downhill on the average surprise. The loss starts near the "
    "cost of guessing uniformly among the m tokens and falls as the model picks up spelling, then words, then "
    "some grammar; the samples below the curve, drawn from the same prompt with the same random seed each time, "
    "make that visible."
)
st.latex(r"\mathcal{L}(\theta) = -\frac{1}{n}\sum_{i=1}^{n} \log p_\theta\left(x_{i+1} \mid x_1, \dots, x_i\right)")
st.caption("One window of n = n_ctx tokens gives n prediction problems at once, thanks to the causal mask; "
           "the loss is their mean, in nats per token (per character for a character model).")

# ---------------------------------------------------------------- corpus
st.header("1. Corpus")


@st.cache_resource(show_spinner="Reading the corpus ...", max_entries=4)
def _builtin(kind: str, stamp: str):
    """(text, info) of a built-in corpus; strings are immutable, so sessions may share them."""
    if kind == "shakespeare":
        path = shakespeare_path()
        text = read_text_file(path)
        return text, describe_corpus(text, path.name)
    text = pydoc_text()
    return text, describe_corpus(text, PYDOC_NAME)


@st.cache_resource(show_spinner="Checking the text ...", max_entries=8)
def _checked(raw: bytes, name: str, max_bytes: int):
    """(text, info, None) or (None, None, reason) for uploaded or pasted bytes."""
    try:
        text = check_corpus_bytes(raw, name, max_bytes)
    except ValueError as e:
        return None, None, str(e)
    return text, describe_corpus(text, name), None


sources = {"pydoc": "Python's reference documentation (ships with Python)", "upload": "Upload a .txt file",
           "paste": "Paste text"}
shakespeare = shakespeare_path()
if shakespeare is not None:
    sources = {"shakespeare": "Tiny Shakespeare", **sources}
fetched = st.session_state.pop("train_fetched", None)  # set by the fetch button below, the run before this one
if fetched and shakespeare is not None:
    st.session_state["train_corpus"] = "shakespeare"  # the corpus just fetched is the one to train on
source = st.radio("Train on", list(sources), format_func=sources.get, horizontal=True, key="train_corpus",
                  persist_state="session")
if fetched and shakespeare is not None:
    st.success(f"Tiny Shakespeare was fetched, checked and saved as `{shakespeare}`; it is offered from now on.")
if shakespeare is None and offer_shakespeare_fetch(key="train_fetch"):
    st.session_state["train_fetched"] = True
    st.rerun()

limit_mb = upload_limit_mb()  # the server's cap: the uploader, the paste box and the check all use it
limit_bytes = limit_mb * 2**20
text = info = None
try:
    if source == "shakespeare":
        text, info = _builtin("shakespeare", file_stamp(shakespeare))  # gone meanwhile: read fails in words
    elif source == "pydoc":
        text, info = _builtin("pydoc", "")
    elif source == "upload":
        up = st.file_uploader("A plain-text file, UTF-8", type=["txt"], key="train_upload",
                              max_upload_size=limit_mb, help=f"At most {limit_mb} MiB of UTF-8 text.")
        if up is None:
            st.info("Choose a .txt file to train on.")
        else:
            text, info, problem = _checked(up.getvalue(), up.name, limit_bytes)
            if problem:
                st.error(f"This file cannot be used: {problem}.")
    else:
        pasted = st.text_area("Your text", key="train_paste", height=200, max_chars=limit_bytes,
                              persist_state="session", placeholder="Paste a few thousand characters or more.")
        if pasted.strip():
            text, info, problem = _checked(pasted.encode("utf-8"), "the pasted text", limit_bytes)
            if problem:
                st.error(f"This text cannot be used: {problem}.")
        else:
            st.info("Paste some text to train on.")
except ValueError as e:  # an unreadable built-in file
    st.error(f"The corpus could not be read: {e}")

TOKENIZER_TITLES = {"char": "Characters", "bpe": "Byte-level BPE"}


@st.cache_resource(show_spinner=False, max_entries=8)
def _bpe(text: str, vocab: int):
    """(tokenizer, training tokens, held-out tokens) of a BPE learned from the training part of ``text``, as the
    run will learn it; read-only, so sessions may share it."""
    train_text, val_text = split_train_val(text)
    tok = make_tokenizer("bpe", train_text, vocab)
    return tok, encode_corpus(tok, train_text), encode_corpus(tok, val_text)


tok_kind = st.radio("Tokens", list(TOKENIZER_TITLES), format_func=TOKENIZER_TITLES.get, horizontal=True,
                    key="train_tokenizer", persist_state="session",
                    help="Characters: one token per distinct character, the lecture's model. Byte-level BPE: the "
                         "text is read as UTF-8 bytes, and the most frequent neighbouring pairs are merged again and "
                         "again into longer pieces (' the', 'KING') until the vocabulary has the size you choose; "
                         "it is learned from the training 90% only and never meets an unknown character.")
tok_field = None
bpe_vocab = DEFAULT_BPE_VOCAB
if tok_kind == "bpe":
    bc1, _ = st.columns([1, 3])
    with bc1:
        bpe_vocab = st.number_input("BPE vocabulary size m", min_value=0, max_value=10 * MAX_BPE_VOCAB,
                                    value=DEFAULT_BPE_VOCAB, step=64, key="train_bpe_vocab", persist_state="session",
                                    help=f"{MIN_BPE_VOCAB} (the bytes alone) to {MAX_BPE_VOCAB:,}. More tokens: "
                                         "longer pieces, so each window covers more text, but a larger embedding and "
                                         "output layer, and rarer tokens to learn.")
        tok_field = st.empty()
bpe = None  # (tokenizer, training ids, held-out ids) once learned
if info is not None:
    if tok_kind == "bpe" and MIN_BPE_VOCAB <= bpe_vocab <= MAX_BPE_VOCAB:
        with st.spinner(f"Learning a byte-level BPE of {int(bpe_vocab):,} tokens from the training "
                        f"{TRAIN_FRACTION:.0%} ({info.chars * TRAIN_FRACTION / 1e6:,.1f} million characters) and "
                        "cutting the text into its tokens: about a second per million characters on a shared "
                        "server ...", show_time=True):
            # seconds of work for a long text: in line with the pages' other heavy work (ui.gated: a BPE learned
            # already, still in its cache, skips the line)
            bpe = gated(_bpe, "learning the BPE", lane="long")(text, int(bpe_vocab))
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Characters", f"{info.chars:,}")
    c2.metric("Size", f"{info.bytes / 1024:,.0f} KiB" if info.bytes >= 10 * 1024 else f"{info.bytes:,} bytes")
    if tok_kind == "char":
        c3.metric("Vocabulary m", f"{len(info.vocab):,}", help="Distinct characters; each becomes one token.")
        c4.metric("Tokens", f"{info.chars:,}", help="One per character.")
    elif bpe is not None:
        tok, train_ids, val_ids = bpe
        c3.metric("Vocabulary m", f"{tok.vocab_size:,}", help="The 256 bytes and the pieces merged from them.")
        c4.metric("Tokens", f"{len(train_ids) + len(val_ids):,}",
                  help=f"{len(train_ids):,} in the training part and {len(val_ids):,} held out: "
                       f"{len(split_train_val(text)[0]) / max(1, len(train_ids)):.2f} characters per token on average "
                       "in the training part.")
        if tok.vocab_size < bpe_vocab:
            st.caption(f"The text ran out of pairs seen at least twice after {tok.vocab_size:,} tokens: the "
                       f"vocabulary stops there rather than at {int(bpe_vocab):,}.")
    with st.expander("The vocabulary and a sample of the text", expanded=False):
        if tok_kind == "bpe" and bpe is None:
            st.caption(f"Choose a vocabulary size from {MIN_BPE_VOCAB} to {MAX_BPE_VOCAB:,} to see the BPE's tokens.")
        elif bpe is None:
            st.caption("Every distinct character, in code-point order (␣ is the space, ⏎ the line break):")
            st.code(" ".join(visible(ch) for ch in info.vocab), language=None, wrap_lines=True)
            st.caption("A passage from the middle of the corpus:")
            st.code(info.sample, language=None, wrap_lines=True)
        else:
            tok = bpe[0]
            longest = sorted(range(256, tok.vocab_size), key=lambda i: (-len(tok.pieces[i]), i))[:60]
            st.caption("The 60 longest tokens the BPE merged (␣ is the space, ⏎ the line break):")
            st.code("  ".join(visible(tok.pieces[i]) for i in longest), language=None, wrap_lines=True)
            ids = tok.encode(info.sample)
            st.caption(f"A passage from the middle of the corpus, cut into its {len(ids):,} tokens "
                       f"({len(info.sample):,} characters), a bar │ between one token and the next:")
            st.code("│".join(tok.visible_tokens(ids)), language=None, wrap_lines=True)

# ---------------------------------------------------------------- settings
st.header("2. Model and training settings")
st.markdown("The defaults are the lecture's class-demo model. The parameter count and the cost update as you type.")
defaults = JobSettings()
row1 = st.columns(5)
row2 = st.columns(5)
fields = {}


def number(col, key, label, value, max_value, help, step=1, fmt=None, min_value=0):
    """A number box with an empty slot under it for its error message."""
    with col:
        v = st.number_input(label, min_value=min_value, max_value=max_value, value=value, step=step, format=fmt,
                            key=f"train_{key}", help=help, persist_state="session")
        fields[key] = st.empty()
    return v


d = number(row1[0], "d_model", "d, width", defaults.d_model, 1024, "Width of the residual stream.", step=16)
h = number(row1[1], "n_heads", "h, heads", defaults.n_heads, 64, "Attention heads; each works in d/h dimensions.")
L = number(row1[2], "n_layers", "L, blocks", defaults.n_layers, 24, "Number of transformer blocks.")
with row1[3]:
    auto_ff = st.checkbox("d_ff = 4d", value=True, key="train_dff_auto", help="The conventional MLP width.",
                          persist_state="session")
d_ff = None if auto_ff else number(row1[3], "d_ff", "d_ff, MLP width", 4 * defaults.d_model, 8192,
                                   "Hidden width of the MLP.")
n_ctx = number(row1[4], "n_ctx", "n_ctx, context", defaults.n_ctx, 2048, "Longest sequence; also the training window.")
batch = number(row2[0], "batch_size", "batch size B", defaults.batch_size, 1024, "Windows per optimisation step.")
lr = number(row2[1], "lr", "AdamW learning rate", defaults.lr, 1.0,
            "AdamW's peak rate: every parameter with the AdamW recipe; embeddings, norms and the output map with "
            "the Muon recipe (Muon has its own rate for the blocks' matrices).", step=0.0005, fmt="%.4f", min_value=0.0)
steps = number(row2[2], "steps", "steps", defaults.steps, MAX_STEPS, "Optimisation steps.", step=100)
seed = number(row2[3], "seed", "seed", defaults.seed, 2**31 - 1, "Fixes the initial weights and the batches.")
with row2[4]:
    prompt_text = st.text_input("Prompt for the samples", value="The", key="train_prompt", max_chars=100,
                                persist_state="session",
                                help="Every sample continues this text. " + (
                                    "Characters the corpus lacks are left out." if tok_kind == "char" else
                                    "A byte-level BPE reads any text."))

def _recipe_rate():
    """Each recipe brings its own AdamW rate; the box can still be changed afterwards."""
    st.session_state["train_lr"] = RECIPES[st.session_state["train_recipe"]]["lr"]


def _induction_preset():
    """Button callback: the settings in which an induction head forms within minutes (the lecture's model)."""
    base = JobSettings()
    for key in ("d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "seed"):
        st.session_state[f"train_{key}"] = getattr(base, key)
    st.session_state["train_dff_auto"] = True
    st.session_state["train_tokenizer"] = base.tokenizer  # measured on characters (INDUCTION_FORMS_NEAR)
    st.session_state["train_recipe"] = base.recipe
    st.session_state["train_lr"] = base.lr
    st.session_state["train_steps"] = INDUCTION_PRESET["steps"]
    st.session_state["train_repeat_on"] = True
    st.session_state["train_repeat"] = int(round(100 * INDUCTION_PRESET["repeat_fraction"]))


recipe = st.radio("Recipe", list(RECIPES), index=list(RECIPES).index(defaults.recipe), format_func=RECIPE_TITLES.get,
                  horizontal=True, key="train_recipe",
                  persist_state="session", on_change=_recipe_rate,
                  help="How the weights are updated; the model is the same either way.")
st.caption(describe_recipe(recipe))

st.subheader("Repeats in the data: growing an induction head")
units, unit = ("characters", "character") if tok_kind == "char" else ("tokens", "token")
st.markdown(
    f"Plain text rarely rewards copying. Switch this on and a share of the training windows get a span of "
    f"random {units} written twice, the second time at a random later place. Nothing but copying predicts "
    f"the second copy: the model must find the earlier occurrence of the current {unit} and read what "
    "followed it. A head that does this, an **induction head**, appears suddenly after a plateau; the "
    "training view below measures every head on a fixed probe as it trains and marks the step it appears."
)
rc1, rc2 = st.columns([1, 2])
repeat_on = rc1.toggle("Mix in repeated spans", key="train_repeat_on", persist_state="session",
                       help="Off: plain text, as the default shipped model was trained.")
repeat_pct = rc2.slider("Share of windows holding a repeated span (%)", 5, 100, 100, step=5, key="train_repeat",
                        disabled=not repeat_on, persist_state="session",
                        help=f"Each chosen window gets one span of 20 to 60 random {units}, written twice.")
st.button("Preset: watch an induction head form", key="train_induction_preset", on_click=_induction_preset,
          help=f"The lecture's model over characters, the default recipe, {INDUCTION_PRESET['steps']:,} steps, every "
               "window holding a repeated span.")

settings = JobSettings(d_model=int(d), n_heads=int(h), n_layers=int(L), d_ff=None if d_ff is None else int(d_ff),
                       n_ctx=int(n_ctx), batch_size=int(batch), lr=float(lr), steps=int(steps), seed=int(seed),
                       recipe=recipe, repeat_fraction=repeat_pct / 100 if repeat_on else 0.0, tokenizer=tok_kind,
                       bpe_vocab=int(bpe_vocab))
if bpe is not None:
    vocab, split_tokens = bpe[0].vocab_size, (len(bpe[1]), len(bpe[2]))
else:
    vocab, split_tokens = (len(info.vocab) if info else 1), None
    if tok_kind == "bpe":
        vocab = int(bpe_vocab)
errors = validate_settings(settings, info.chars if info else 0, vocab, split_tokens) if info else {}
for key, message in errors.items():
    if key == "memory":
        continue  # said below the cost, with the estimate
    slot = tok_field if key == "bpe_vocab" else (fields.get(key) or fields["d_model"])
    slot.error(message, icon=":material/block:")


cost = job_cost(settings, vocab, info.chars if info else 0, split_tokens[0] if split_tokens else None)
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
        rate, rate_source = measured_flop_rate()
        m1, m2, m3, m4 = st.columns(4)
        m1.metric("Parameters N", f"{cost.n_params:,}")
        m2.metric("Training tokens D", f"{cost.tokens:,}", help="steps × batch size × n_ctx")
        m3.metric("Compute 6ND (FLOP)", pretty_sci(cost.flops))
        if rate:
            seconds = cost.flops / rate
            m4.metric("Estimated time", f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} min",
                      help=f"6ND divided by {rate / 1e9:,.1f} GFLOP/s, measured by {rate_source}. A rough guide: "
                           "small models pay overheads the formula ignores, and other people's runs share the same "
                           "processor.")
        else:
            m4.metric("Estimated time", "–", help=f"No speed measurement is available: {rate_source}.")
        if settings.repeat_fraction >= INDUCTION_PRESET["repeat_fraction"]:
            when = (f": expect it after about {clock(cost.flops / rate * INDUCTION_FORMS_NEAR / settings.steps)} "
                    "of this run" if rate and settings.steps >= INDUCTION_FORMS_NEAR else "")
            st.caption(f"With every window holding a repeat, our runs of the lecture's model grew an induction head "
                       f"near step {INDUCTION_FORMS_NEAR:,}{when}. Fewer repeats, another shape or another recipe "
                       "move that step, sometimes past the end of the run.")
        st.caption(f"D/N = {cost.tokens_per_param:,.1f} tokens per parameter; the run reads the training "
                   f"{TRAIN_FRACTION:.0%} of the corpus about {cost.epochs:,.1f} times over. The count has no h in it: "
                   "heads split the width, they add no weights.")
if "memory" in errors:  # a run this server cannot hold: only Start is refused, the settings stay as typed
    st.error(errors["memory"], icon=":material/memory:")
elif info is not None and not errors:
    st.caption(memory_summary(settings, vocab, info.chars))

# ---------------------------------------------------------------- run
st.header("3. Train")
release_abandoned(session_alive)  # runs of sessions that have ended (tabs closed minutes ago) give their slots back
job: TrainingJob | None = st.session_state.get("train_job")
status = job.status() if job else None
busy = status is not None and not status.can_start
if info is None:
    st.info("Choose a corpus above first.")
start_clicked = st.button("Start training", type="primary", key="train_start",
                          disabled=busy or info is None or bool(errors),
                          help="Starts a new run in the background. The rest of the app stays usable meanwhile.")
if status is not None and not busy:
    st.caption("Starting again replaces the current run; save it first if you want to keep it.")
if errors:
    st.caption("Fix the settings marked above to start.")
if start_clicked and not busy and info is not None and not errors:
    new = TrainingJob(text, info.name, settings, sample_prompt=prompt_text, owner=session_owner(),
                      session=session_id(), alive=session_alive)
    try:
        new.start()
    except BusyError as e:
        st.error(str(e))
    else:
        if job is not None:
            job.stop(wait=None)
        job = st.session_state["train_job"] = new
        st.session_state.pop("train_saved", None)
        st.session_state.pop("train_save_error", None)
        # a name of its own for every run: the corpus and a time stamp, never one shared default
        st.session_state["train_save_name"] = default_model_name({"pydoc": "pydoc", "paste": "pasted"}.get(source, info.name))
        st.rerun()  # draw the page again with the run in place: Start greyed out, the live view polling


def live_view(job: TrainingJob, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "train", BusyError,
                 stop_help="End the run here; the weights trained so far are kept and can be saved.")

    cfg = job.settings
    tokens = "characters" if cfg.tokenizer == "char" else f"byte-level BPE of {s.vocab_size or cfg.bpe_vocab:,} tokens"
    st.caption(f"This run: {job.corpus_name} · {tokens} · d={cfg.d_model} · h={cfg.n_heads} · L={cfg.n_layers} · "
               f"n_ctx={cfg.n_ctx} · batch {cfg.batch_size} · {RECIPE_TITLES[cfg.recipe]}, AdamW lr {cfg.lr:g} · seed {cfg.seed} · "
               f"{job.threads} CPU thread{'s' if job.threads != 1 else ''}")
    label = {"preparing": "Preparing the data and the model ...", "running": "Training",
             "pausing": "Pausing after this step", "paused": "Paused",
             "stopping": "Stopping: finishing the step and a last evaluation", "stopped": "Stopped",
             "finished": "Finished", "failed": "Failed"}[s.state]
    st.progress(s.fraction, text=f"{label}: step {s.step:,} of {s.total_steps:,}")
    if s.state == "failed":
        st.error(f"Training failed: {s.message}")
    elif s.state == "stopped" and not s.resumable:
        st.caption("Too many runs were waiting on this server, so this stopped run handed its weights over and its "
                   "process ended to free memory: it can still be saved below, but no longer resumed.")
    last = s.evals[-1] if s.evals else {}
    m = st.columns(6)
    m[0].metric("Step", f"{s.step:,}")
    per = "character" if s.units == "characters" else "token"
    m[1].metric("Training loss", f"{last['train_loss']:.3f}" if last else "–",
                help=f"Nats per {per}, estimated on a fixed set of training windows at the last evaluation.")
    bits = (f" About {last['val_loss'] / math.log(2) / s.val_chars_per_token:.3f} bits per character: nats per token "
            f"÷ ln 2 ÷ {s.val_chars_per_token:.2f} characters per token, the number to compare with a character "
            "model." if last and per == "token" else "")
    m[2].metric("Validation loss", f"{last['val_loss']:.3f}" if last else "–",
                help=f"The same, on the held-out last 10% of the corpus.{bits}")
    m[3].metric("Tokens/s", f"{s.tokens_per_s:,.0f}" if s.tokens_per_s else "–")
    m[4].metric("Elapsed", clock(s.elapsed_s), help="Time spent training; pauses do not count.")
    m[5].metric("Time left", clock(s.eta_s) if s.active else "–")
    if last and per == "token":
        st.caption(f"Losses in nats per token. At the last evaluation the validation loss is about "
                   f"{last['val_loss'] / math.log(2) / s.val_chars_per_token:.3f} bits per character (÷ ln 2 ÷ "
                   f"{s.val_chars_per_token:.2f} characters per token), the number to compare with a character model; "
                   "the saved model's card gives it measured over the whole held-out part.")
    baseline = math.log(s.vocab_size) if s.vocab_size > 1 else None
    formed = formation_step(s.heads) if s.heads else None
    marks = {formed: "induction head"} if formed is not None else None
    curve = loss_curve(s.evals, title="Loss while training", step_losses=s.step_losses, total_steps=s.total_steps,
                       baseline=baseline, marks=marks, unit=per)
    if s.heads:
        left, right = st.columns(2)
        chart(curve, width="stretch", key="train_curve", where=left)
        chart(formation_figure(s.heads, total_steps=s.total_steps, units=s.units), width="stretch",
              key="train_heads", where=right)
        last = max(r["step"] for r in s.heads)
        best = max((r for r in s.heads if r["step"] == last), key=lambda r: r["induction"])
        st.caption(
            f"Right: every {job.train_config.heads_interval} steps each head is run on a fixed probe, 8 strings of "
            f"distinct random {s.units} written twice. Induction score: the mean weight a {per} in the second "
            f"copy puts on the {per} that followed its first occurrence; previous-token score: the weight on "
            f"the {per} just before. At step {last:,} the best head is {head_label(best['layer'], best['head'])} "
            f"({best['induction']:.2f}); on the probe the model's loss is {best['first_copy_loss']:.2f} nats on the "
            f"first copy and {best['second_copy_loss']:.2f} on the second. "
            + (f"An induction head crossed {THRESHOLD:.2f} at step {formed:,}, marked on the loss curve."
               if formed is not None else f"No head has reached {THRESHOLD:.2f} yet."))
    else:
        chart(curve, width="stretch", key="train_curve")
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
        st.info("Press Start training when the settings suit you. You can leave this page while it runs; "
                "come back to watch it or to save the model. Closing the browser tab ends the run a few minutes "
                "later, and what it trained is lost unless you saved it.")
    st.stop()

polling = job.status().moving
# while the run moves, the fragment alone reruns every two seconds (every second cost a quarter of the
# training speed when the browser shares the two cores); the worker never waits for the page
st.fragment(run_every=2.0 if polling else None)(live_view)(job, polling)

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


def _hf_zip(path: str, name: str) -> bytes:
    """The saved model as a Hugging Face GPT-2 folder, zipped: what was written, read back."""
    model, tok = load_checkpoint(path)
    return export_zip(model, tok, f"{name}-gpt2")


def _save():
    """Button callback: runs before the next script run, so it may still set the sidebar's selection."""
    st.session_state.pop("train_saved", None)
    st.session_state.pop("train_save_error", None)
    job = st.session_state["train_job"]
    try:
        path = job.save(user_models_dir(), st.session_state.get("train_save_name", ""), protected=shipped_names(),
                        overwrite=st.session_state.get("train_overwrite", False), owner=session_owner())
    except (ValueError, OSError) as e:  # a refusal, a full disk or quota, a process not answering: the run is kept
        st.session_state["train_save_error"] = str(e)
        if isinstance(e, QuotaError) and (mine := models_of(user_models_dir(), session_owner())):
            st.session_state["train_save_error"] += f". Yours: {', '.join(mine)}"
        return
    # no zips kept: the download buttons pack the saved folder when clicked (two zips per save, about twice the
    # weights, stayed in the session's memory until it ended)
    st.session_state["train_saved"] = {"name": path.name, "path": str(path), "step": job.status().step}
    if st.session_state.get("train_select", True):
        st.session_state["te_model_name"] = path.name


name = st.text_input("Name", key="train_save_name", max_chars=100, persist_state="session",
                     help="Letters, digits, '-', '_' and '.'; anything else becomes '-'.")
try:
    clean = sanitise_model_name(name)
    if clean != name:
        st.caption(f"It will be saved as **{clean}**.")
except ValueError as e:
    st.caption(str(e))
c1, c2 = st.columns(2)
c1.checkbox("Replace a model of mine with this name", key="train_overwrite", persist_state="session",
            help="Only a model saved from this browser session can be replaced; other people's models never are.")
c2.checkbox("Select it in the sidebar after saving", value=True, key="train_select", persist_state="session")
st.button("Save the model", type="primary", key="train_save", on_click=_save)
if st.session_state.get("train_save_error"):
    st.error(f"Not saved: {st.session_state['train_save_error']}")
saved = st.session_state.get("train_saved")
if saved:
    st.success(f"Saved **{saved['name']}** (step {saved['step']:,}) in {user_models_dir()}. It is in the sidebar's "
               "model picker now; open Home to read its model card and loss curve.")
    z1, z2, _ = st.columns([1, 1, 2])
    z1.download_button("Download the checkpoint folder (.zip)", data=lambda: checkpoint_zip(saved["path"]),
                       file_name=f"{saved['name']}.zip", mime="application/zip", key="train_download",
                       on_click="ignore")
    z2.download_button("Download for transformers (.zip)", data=lambda: _hf_zip(saved["path"], saved["name"]),
                       file_name=f"{saved['name']}-gpt2.zip",
                       mime="application/zip", key="train_download_hf", on_click="ignore",
                       help="The same model as a Hugging Face GPT-2 folder: GPT2LMHeadModel.from_pretrained(folder) "
                            "gives the same logits and AutoTokenizer the same token ids, so you can go on in "
                            "transformers, TransformerLens or any Hugging Face tool.")
