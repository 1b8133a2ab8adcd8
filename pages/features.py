import streamlit as st

from core.features.browse import prompt_units, purity_summary
from core.analysis.sites import site_words
from core.serve.fmt import md_escape
from core.views import features_view as FV
from ui import ensure_frame, metric_row, model_key, prompt_input, require_model
from pages.features import cards as FC, share as FS
from pages.features.jobs import forming_panel, training_panel
from ui import explanations as UX
from ui.features import Browser, training_record
from ui.saes import PICK_KEY, available_saes
from ui.code_box import code_box
from core.views import snippets as SN

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "KING:\nThe moon is down; what news from the camp?\n\nQUEEN:\nThe quiet queen is quick to speak."

st.title("Features")
st.markdown(
    "Inside the model shows *how much* each MLP unit fires; this page asks *what* a unit stands for. A single "
    "neuron often answers to several unrelated things at once, because the stream has fewer dimensions than the "
    "model has things to track. A **sparse autoencoder** (SAE) rewrites one activation vector x as a sum of many "
    "more directions than x has numbers, of which only a handful are used on any token. Each direction is a "
    "**feature**; with luck, one feature means one thing: the letter after a 'q', the start of a line.")
st.latex(r"f(x) = \operatorname{TopK}_k\!\big(\operatorname{ReLU}((x - b_{dec})\,W_{enc} + b_{enc})\big), \qquad "
         r"\hat x = f(x)\,W_{dec} + b_{dec} = b_{dec} + \sum_{i:\,f_i(x) > 0} f_i(x)\, d_i")
st.markdown("TopK keeps the k largest pre-activations and sets every other latent to 0, so at most k features "
            "describe a token; d_i, a row of W_dec of length 1, is feature i's direction, and f_i(x) its size there.")

entry, model, tok = require_model(" to look inside")
c = model.config
key = model_key(entry)
choices, refused = available_saes(entry, model)
LINK = FS.link_spec(tok, c.n_ctx)
FS.read_link(LINK, choices)  # before the SAE picker and the prompt box: a link sets them, and the card's feature
for line in refused:
    st.warning(f"An SAE was not used: {md_escape(line)}", icon="⚠️")

st.header("1. The autoencoder")
choice, explained, broken = None, None, None  # the SAE picked; its units' explanations ({unit: explanation}), or why not
if choices:
    labels = [ch.label for ch in choices]
    if st.session_state.get(PICK_KEY) in labels:  # an SAE this session just trained: show it, not the saved one
        st.session_state["feat_sae"] = st.session_state.pop(PICK_KEY)
    if st.session_state.get("feat_sae") not in labels:
        st.session_state["feat_sae"] = labels[0]
    label = st.selectbox("SAE", labels, key="feat_sae",
                         help="Saved beside the model (shipped or saved earlier) or trained on this page in this session.")
    choice = next(ch for ch in choices if ch.label == label)
    cfg = choice.sae.config
    st.markdown(f"It reads **{site_words(choice.site)}** (`{choice.site}`): {cfg.d_sae:,} latents for vectors of "
                f"{cfg.d_in} numbers, " + (f"TopK with k = {cfg.k}." if cfg.kind == "topk" else "ReLU with an L1 penalty.")
                + FV.precision_words(choice.metrics))
    if choice.source == "saved" and entry.step is not None:
        st.warning(f"This SAE was trained on the finished model; you are looking at step {entry.step:,}. Its "
                   "numbers below describe the finished model, and its features may not exist yet at this step "
                   "(section 3's forming panel shows when each appeared).", icon=":material/history:")
    metric_row([(label, value, words) for label, value, words in FV.health_rows(choice.metrics)], 5)
    st.markdown("\n".join(f"- **{label}**: {words}" for label, _, words in FV.health_rows(choice.metrics)))
    explained, broken = UX.sae_explanations(entry, choice)
    if broken:  # said by name; the page goes on without its words
        st.warning(f"This SAE's explanations were not used: {md_escape(broken)}", icon="⚠️")
else:
    st.info("This model has no SAE yet: train one in the panel below. Its MLP neurons are shown on this page "
            "meanwhile, with every view a feature would get.", icon=":material/info:")
training_panel(entry, model, tok, training_record(entry))

if not c.mlp and choice is None:
    st.info("This model's blocks have no MLP, so it has no neurons either: train an SAE above to browse features.")
    st.stop()

browser = Browser(key, entry, model, tok, choice.sae if choice else None)
FEATURES = ("feature", choice.key) if choice else None  # the SAE's weights name its unit set (hashed once, at load)
layers = list(range(c.n_layers)) if c.mlp else []

# ------------------------------------------------------------------ 2. your prompt

st.header("2. Your prompt")
st.markdown("Which units fire at each position of your text: the five largest (only those above 0). Click one "
            "to open its card in section 3.")
st.session_state.setdefault("feat_prompt", DEFAULT_PROMPT)
prompt = prompt_input("Your prompt", None, "feat_prompt", tok, c.n_ctx, height=110)
ids = tuple(prompt.ids)
if len(ids) == 0:
    st.info("Type a few characters above to see which units fire on them.")
    st.stop()
tokens = tok.visible_tokens(ids)
pos = st.select_slider("Position (counting from 1)", options=list(range(1, len(ids) + 1)), value=len(ids),
                       format_func=lambda p: f"{p}: {tokens[p - 1]}", key=f"feat_pos_{len(ids)}") - 1
left, right = st.columns(2)
pu_feat = None
if choice:
    pu_feat = prompt_units(model, browser.units(FEATURES), ids, tokenizer=tok)
    with left:
        st.markdown(f"**SAE features at {pos + 1} ('{md_escape(tokens[pos])}')**")
        FC.firing_buttons(pu_feat, pos, FC.KINDS[0], None, "feat_fire", explained)
if layers:
    with right:
        lay = st.selectbox("MLP of block", [l + 1 for l in layers], key="feat_prompt_block") - 1
        pu_neur = prompt_units(model, browser.units(("neuron", lay)), ids, tokenizer=tok)
        st.markdown(f"**Neurons of block {lay + 1} at {pos + 1} ('{md_escape(tokens[pos])}')**")
        neurons_said = UX.neuron_explanations(browser, lay)
        FC.firing_buttons(pu_neur, pos, FC.KINDS[1], lay, "neur_fire", neurons_said)
        if neurons_said is None:
            UX.explain_neurons_button(browser, lay, "feat_explain_prompt")
with st.expander("Every position at once"):
    if pu_feat is not None:
        st.dataframe(FV.prompt_rows(pu_feat, "feature"), hide_index=True, height=260)
    if layers:
        st.dataframe(FV.prompt_rows(pu_neur, "neuron"), hide_index=True, height=260)
searched = ([(FC.KINDS[0], "feature", None, explained, browser.promoted(FEATURES))] if explained else []) + (
    [(FC.KINDS[1], "neuron", lay, neurons_said, browser.promoted(("neuron", lay)))] if layers and neurons_said else [])
if searched:
    UX.search_box(searched, FC.open_unit, "feat_search")

# ------------------------------------------------------------------ 3. a unit's card

FC.card_heading("3. One unit's card")
kinds = ([FC.KINDS[0]] if choice else []) + ([FC.KINDS[1]] if c.mlp else [])  # no MLP, no neurons
if st.session_state.get(FC.OPEN_KIND) not in kinds:
    st.session_state[FC.OPEN_KIND] = kinds[0]
kind = st.radio("Open", kinds, key=FC.OPEN_KIND, horizontal=True)
if kind == FC.KINDS[0]:
    spec, n = FEATURES, choice.sae.config.d_sae
    st.session_state.setdefault(FC.OPEN_FEATURE, int(pu_feat.units[pos][0]))
    unit = st.number_input(f"Feature (0 to {n - 1})", 0, n - 1, key=FC.OPEN_FEATURE, step=1)
    word = "feature"
else:
    cols = st.columns(2)
    st.session_state.setdefault(FC.OPEN_LAYER, 1)
    layer = cols[0].number_input(f"Block (1 to {c.n_layers})", 1, c.n_layers, key=FC.OPEN_LAYER, step=1) - 1
    spec, n = ("neuron", layer), c.d_ff
    st.session_state.setdefault(FC.OPEN_NEURON, 0)
    unit = cols[1].number_input(f"Neuron (0 to {n - 1})", 0, n - 1, key=FC.OPEN_NEURON, step=1)
    word = "neuron"
st.subheader(f"{kind} {unit}" + (f" of block {spec[1] + 1}" if spec[0] == "neuron" else ""))
said = explained if word == "feature" else UX.neuron_explanations(browser, spec[1])
e = said.get(int(unit)) if said else None
UX.explanation(e, word, tok.unit, f"not searched yet: the button explains every neuron of block {spec[1] + 1}."
               if word == "neuron" else "its explanations.json was refused (section 1 says why)." if broken else
               "none is stored beside this SAE (python -m core.features.explain makes them for a saved one).")
if said is None and word == "neuron":
    UX.explain_neurons_button(browser, spec[1], "feat_explain_card")
too_big = browser.refusal(spec)  # estimated before anything is indexed: a dense or huge SAE took minutes, then failed
if too_big:
    st.warning(too_big, icon=":material/memory:")
else:
    index = browser.index(spec)
    st.caption(f"From {index.total:,} held-out tokens of {md_escape(index.held.corpus)}, which the model never "
               "trained on.")
    card = browser.card(spec, int(unit))
    FC.draw_card(card, word, UX.card_marks(e, card, index.held.windows, tok))

st.markdown(f"**Switch it off on your prompt.** Every position's {word} set to 0 "
            + ("(its share f_i(x)·d_i taken out of the stream, the rest of the vector, the SAE's error included, kept)"
               if word == "feature" else "(its activation after the nonlinearity set to 0)") + ":")
if len(ids) < 2:
    st.info("Your prompt needs at least two tokens for a loss.")
else:
    FC.draw_off(browser.off(spec, int(unit), ids), tokens, word)
code_box(SN.features(entry.path, entry.step, tok, prompt.text, ids, int(unit), spec[1] if word == "neuron" else None,
                     choice.site if choice and choice.source == "saved" else None), SN.UNSAVED_SAE)

if choice:
    st.subheader("When the features formed")
    st.markdown("The model was saved at steps along its training. A small SAE trained at each of them is matched "
                "to this one, feature by feature, by the cosine of their decoder directions: a feature has *formed* "
                "once some latent of the earlier SAE has a cosine of at least 0.7 with it.")
    st.latex(r"\text{match}_i(s) = \max_j \cos\big(d_i,\; d^{(s)}_j\big)")
    forming_panel(entry, model, choice)

# ------------------------------------------------------------------ 4. neurons against features

st.header("4. Neurons against features")
st.markdown("Are features more single-minded than neurons? One measure over every unit: its **token purity**, "
            "the share of its top 20 activations whose own token is the most common one among them (1: it fires on "
            "one token only; a unit that never fires is left out). Purity misses features of context (the start "
            "of a line is not one token), so read it as one measure, not the answer.")
sets = [(name, s) for name, s in ([("SAE features", FEATURES)] if choice else []) +
        [(f"neurons, block {l + 1}", ("neuron", l)) for l in layers[:4]] if not browser.refusal(s)]  # each indexable
if st.button("Measure every unit", key="feat_compare", help="Indexes every unit set (the first time, seconds)") \
        or st.session_state.get("feat_compared") == key:
    st.session_state["feat_compared"] = key
    purities = {name: browser.purity(s) for name, s in sets}
    FC.draw_comparison(purities, {name: purity_summary(p) for name, p in purities.items()})
FS.copy_link(LINK, kind)
