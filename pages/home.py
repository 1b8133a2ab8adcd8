import streamlit as st

from core.serve.fmt import head_label

from core.nn.checkpoint import CheckpointError, weights_size
from core.nn.model_store import checkpoint_zip
from core.nn.model_card import read_card, read_heads, read_log, read_training
from core.nn.hf import export_zip
from core.figures.common import loss_curve
from core.analysis.induction import THRESHOLD, formation_step
from core.figures.induction_figures import formation_figure
from core.views.training_view import best_head
from core.nn.params import count_parameters, mlp_latex, parameter_table, per_block_latex
from ui import chart, ensure_frame, require_model, session_owner

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

st.title("Transformer Explorer")
st.markdown(
    "Small transformers run live in this app: the shipped ones, trained by the makers of this app on a corpus of "
    "plays, and any you or a classmate train here on the Training page. "
    "Every chart about a model is computed from it on the text you type: the attention of each head, "
    "the next-token distribution and how temperature bends it, its parameter count, the time its "
    "attention takes. The cost and scaling pages compute theirs from the formulas as you move the sliders. "
    "Nothing is a canned picture."
)
st.markdown(
    "**How to use it.** Pick a model in the sidebar (the shipped one is selected), then a page. "
    "Type your own prompt wherever there is a prompt box. A character model only knows the characters it was "
    "trained on, and the app tells you when it has to drop one; a byte-level BPE model reads any text."
)
st.page_link("pages/lesson.py", icon=":material/school:",
             label="New to transformers? Start with the Lesson: twelve steps in the lecture's order, each a prediction "
                   "you make before the live model answers it.")


def trained_by(entry) -> str:
    """Who trained the selected model, in words: the card below says how."""
    if entry.shipped:
        return "Shipped with the app: trained by its makers, the same model for everyone."
    if entry.hf:
        return "A Hugging Face GPT-2 folder from the models folder: trained wherever that folder was made."
    who = "you" if entry.owner == session_owner() else "a classmate" if entry.owner else "someone using this app"
    return f"Trained here, on the Training page, by {who}."


def show_card(card: str) -> None:
    """The card's Markdown with each code fence (its "Reproduce with" command) as code that wraps: in a Markdown
    code block a long command runs off the card's edge. The card's own title repeats the model name shown above."""
    card = "\n".join(line for line in card.splitlines() if not line.startswith("# "))
    for i, part in enumerate(card.split("```")):
        if i % 2:  # inside a fence: its first line is the fence's language tag, empty in the cards this app writes
            st.code(part.partition("\n")[2].rstrip("\n"), language=None, wrap_lines=True)
        elif part.strip():
            st.markdown(part)


entry, model, tok = require_model(", so there is nothing to inspect yet")

c = model.config
d = c.d_model
counts = count_parameters(c)
st.header(f"The selected model: {entry.name}")
st.caption(trained_by(entry))
left, right = st.columns([1, 1], gap="large")
with left:
    st.subheader("Architecture")
    st.markdown(
        f"- **Tokens:** {tok.describe()}.\n"
        f"- **Embedding:** each of the m = {c.vocab_size:,} {tok.units} gets a learned vector of width "
        f"d = {c.d_model}, and each of the n_ctx = {c.n_ctx:,} positions adds a learned position vector.\n"
        f"- **{c.n_layers} pre-norm block{'s' if c.n_layers != 1 else ''}**, each with h = {c.n_heads} "
        f"attention heads of width d/h = {c.d_head} and an MLP of hidden width d_ff = {c.d_ff:,}. "
        + ("Every linear map has a bias, as in GPT-2" if c.bias else "Every linear map is bias-free")
        + "; each LayerNorm has a scale and a shift.\n"
        f"- **Output:** a final LayerNorm, then a linear map back to the {c.vocab_size:,} {tok.units}"
        + (", which is the token embedding matrix again (tied, as in GPT-2)." if c.tie_weights else ".")
    )
    st.markdown("Each block updates the running stream of vectors twice, normalising before each sublayer:")
    st.latex(r"X \leftarrow X + \mathrm{MultiHead}(\mathrm{LN}(X))")
    st.latex(r"X \leftarrow X + \mathrm{MLP}(\mathrm{LN}(X))")
    st.latex(mlp_latex(c))
with right:
    st.subheader("Model card")
    try:
        card = read_card(entry.path)
    except CheckpointError as e:  # a link out of the folder, say: never shown, and said why
        card = None
        st.warning(f"The model card of **{entry.name}** is not shown: {e.problem}", icon="⚠️")
    if card:
        with st.container(border=True):
            show_card(card)
    elif card is not None:
        st.caption("This model has no card.")

st.subheader("Parameters, counted live")
st.markdown(
    "The formula counts each weight matrix from the configuration; the last column counts the tensors of the "
    "model that is actually loaded. A check mark means the two agree."
)
groups = (r"\underbrace{4d^2}_{\text{attention}} + \underbrace{8d^2}_{\text{MLP}} + "
          r"\underbrace{4d}_{\text{norms}} = ") if c.d_ff == 4 * d and not c.bias else ""
st.latex(groups + per_block_latex(c))
st.caption("Per block. The number of heads appears nowhere: heads split the width, they do not add weights.")
m1, m2, m3 = st.columns(3)
m1.metric("Parameters per block", f"{counts['per_block']:,}")
m2.metric(f"All {c.n_layers} blocks", f"{counts['blocks']:,}")
m3.metric("Parameters in total", f"{counts['total']:,}")
table = [{**row, "agree": "✓" if row["agree"] else "✗"} for row in parameter_table(model)]
st.dataframe(table, hide_index=True, width="stretch",
             column_config={"part": st.column_config.TextColumn(width=410),  # a tied output map's name in full
                            "by formula": st.column_config.NumberColumn(format="localized"),
                            "counted in the model": st.column_config.NumberColumn(format="localized")})

MAX_EXPORT_BYTES = 64 * 2**20  # zipping a larger model on every visit would hold the page up


if entry.hf:
    st.caption("This model is a Hugging Face GPT-2 folder already: transformers and TransformerLens read it as it is.")
elif 0 < weights_size(entry.path) <= MAX_EXPORT_BYTES:
    # packed when clicked, not on every visit: two zips per model kept in a cache cost the server up to twice the
    # weights' size for each model anyone looked at
    row = st.container(horizontal=True)  # each button as wide as its label: in fixed columns the labels were cut
    row.download_button("Download the checkpoint folder (.zip)", data=lambda: checkpoint_zip(entry.path),
                        file_name=f"{entry.name}.zip", mime="application/zip", key="home_download", on_click="ignore")
    row.download_button("Download for transformers (.zip)", data=lambda: export_zip(model, tok, f"{entry.name}-gpt2"),
                        file_name=f"{entry.name}-gpt2.zip", mime="application/zip", key="home_download_hf",
                        on_click="ignore",
                        help="The same model as a Hugging Face GPT-2 folder: GPT2LMHeadModel.from_pretrained(folder) "
                             "gives the same logits and AutoTokenizer the same token ids, so you can go on in "
                             "transformers, TransformerLens or any Hugging Face tool.")

try:
    log = read_log(entry.path)
except CheckpointError as e:  # a log that is not UTF-8 or not CSV: the model still works, its curve cannot be drawn
    log = None
    st.error(f"The training log of **{entry.name}** could not be read: {e.shown}", icon="⚠️")
try:
    heads = read_heads(entry.path)
except CheckpointError as e:
    heads = None
    st.error(f"The head scores of **{entry.name}** could not be read: {e.shown}", icon="⚠️")
formed = formation_step(heads) if heads else None
if log:
    marks = {formed: "induction head"} if formed is not None else None
    chart(loss_curve(log, title=f"How {entry.name} was trained", marks=marks, unit=tok.unit),
          width="stretch")
    training = read_training(entry.path)
    bits, cpt = training.get("val_bits_per_char"), training.get("val_chars_per_token")
    if tok.kind != "char" and isinstance(bits, (int, float)) and isinstance(cpt, (int, float)):
        st.caption(f"Losses per token: a token of this model covers {cpt:.2f} characters on average, so its final "
                   f"validation loss is {bits:.3f} bits per character, the number to compare with a character "
                   "model (nats per character ÷ ln 2).")
elif log is not None:
    st.caption("This model has no training log.")

st.subheader("Its heads while it trained")
if heads:
    st.markdown(
        f"While this model trained, every head was measured again and again on a fixed probe: strings of distinct "
        f"random {tok.units}, each written twice. An **induction head** looks, from a {tok.unit} in the second copy, "
        f"at the {tok.unit} that followed the same {tok.unit} in the first copy, and so can predict the rest of "
        f"the copy. Its score is the mean weight it puts there; a head spreading its weight evenly would score "
        f"about 0.01. The previous-token score is the weight on the {tok.unit} just before, the head an induction "
        f"head is built on."
    )
    chart(formation_figure(heads, title=f"Heads of {entry.name} while it trained", units=tok.units),
          width="stretch")
    last, best = best_head(heads)  # NaN-safe (core.analysis.picks)
    st.caption(
        (f"An induction head formed at step {formed:,}: the first measurement where a head's score reached "
         f"{THRESHOLD:.2f}. " if formed is not None else
         f"No head reached the induction threshold {THRESHOLD:.2f} while it trained. ")
        + f"At the end (step {last:,}) the best is {head_label(best['layer'], best['head'])} with {best['induction']:.2f}. "
        "Switch it off on the Switch heads off page to see what it does.")
elif heads is None:
    st.info("Head scores were not recorded for this model (it has no heads.csv), so how its heads formed cannot "
            "be shown. Models trained now record them; the attention page still measures its heads as they are.")
