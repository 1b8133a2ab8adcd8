"""The Generation page's section "Steer with a feature": pick an SAE, a feature and alpha, and read the plain and the
steered text side by side (same prompt, seed and decoding). Each SAE's typical feature sizes (alpha's unit) are
measured once per model and SAE for the server. The hooks and the measure are core's (core.analysis.steering,
core.features.steering)."""
from __future__ import annotations

import hashlib

import streamlit as st

from core.analysis import generation as G
from core.data.held_out import model_held_out
from core.analysis.sae import MAX_D_SAE
from core.analysis.sites import site_words
from core.features.steering import DEFAULT_ALPHA, FeatureScales, default_feature, feature_hooks, feature_scales
from core.figures import generation_figures as GF
from core.serve import fmt
from core.serve.links import Field
from ui.cached import shared_draw
from ui.caching import model_cache
from ui.explanations import sae_explanations, unit_line
from ui.features import fingerprint, training_record
from ui.models import model_key
from ui.saes import available_saes

ALPHA_MAX = 10.0
FEATURES_PAGE = "pages/features.py"


def typical_sizes(entry, model, tok, sae) -> FeatureScales:
    """``feature_scales`` of ``sae`` on the model's held-out text, measured once per model and SAE for the server
    (about a second), in the compute line."""
    training = training_record(entry)
    measure = model_cache(lambda fp: feature_scales(model, sae, model_held_out(
        model, tok, training, max_tokens=64 * model.config.n_ctx).windows), 8, resource=True,
        what="each feature's typical size", spinner="Measuring each feature's typical size on held-out text ...")
    return measure(model_key(entry), fingerprint(sae))  # the SAE's weights name it: two of one label stay apart


def direction_digest(direction) -> str:
    """A short fingerprint of the exact vector a steered text adds (its float32 bytes): two SAEs, or two sessions'
    SAEs of one label, share a drawn text only when they add the same numbers."""
    return hashlib.sha1(direction.detach().float().contiguous().numpy().tobytes()).hexdigest()[:16]


def link_fields() -> dict:
    """The page's link keys for steering: feature= (a latent, from 0 as SAEs count them) and alpha=."""
    return {"feature": Field(("int", 0, MAX_D_SAE - 1), "gen_steer_feature"),
            "alpha": Field(("float", -ALPHA_MAX, ALPHA_MAX), "gen_steer_alpha")}


def _no_sae(refused: list[str]):
    st.info("This model has no sparse autoencoder yet: none is saved beside it, and none was trained on it in this "
            "session. Train one on the Features page (about a minute on a laptop), then come back here to steer "
            "with its features.")
    st.page_link(FEATURES_PAGE, label="Open the Features page", icon=":material/hub:")


def _pickers(choices, scales_of, pieces):
    """(choice, scales, feature, alpha) from the three widgets; a feature out of this SAE's range (a link, or
    another SAE's number) goes back to the default one, said in words."""
    labels = [c.label for c in choices]
    if st.session_state.get("gen_steer_sae") not in labels:
        st.session_state["gen_steer_sae"] = labels[0]
    a, b, c = st.columns([2, 1, 2])
    choice = choices[labels.index(a.selectbox("Autoencoder", labels, key="gen_steer_sae"))]
    scales, d_sae = scales_of(choice.sae), choice.sae.config.d_sae
    asked = st.session_state.get("gen_steer_feature")
    if not isinstance(asked, int) or not 0 <= asked < d_sae:
        if asked is not None:
            st.info(f"Feature {asked} is not one of this autoencoder's 0 to {d_sae - 1}: showing the default one.")
        st.session_state["gen_steer_feature"] = default_feature(scales, pieces)
    st.session_state.setdefault("gen_steer_alpha", DEFAULT_ALPHA)
    feature = int(b.number_input("Feature", 0, d_sae - 1, key="gen_steer_feature",
                                 help=f"One of the {d_sae} latents, numbered from 0 as the Features page numbers them."))
    alpha = float(c.slider("α, in units of the feature's typical size", -ALPHA_MAX, ALPHA_MAX, step=0.1,
                           key="gen_steer_alpha", help=f"0: the plain text. 1: the feature added once more at its "
                                                       f"typical size. Negative: taken away. It starts at "
                                                       f"{DEFAULT_ALPHA:g}: see the note below the formula."))
    return choice, scales, feature, alpha


def section(entry, model, tok, draw_key: tuple, gen_ids, n_new: int, decoding: tuple, start_text: str,
            plain: list) -> str:
    """The whole section, under the page's text: ``draw_key`` and ``plain`` are that text's key and steps, ``decoding``
    (temperature, top_k, top_p, seed) its settings. Returns the text it showed beyond the plain one (the steered
    text, the feature's tokens), for the page's note on pieces of characters."""
    st.header("Steer with a feature")
    st.markdown(
        "An SAE feature is a direction **d**ᵢ in one activation of the model (a row of the decoder, of length 1), and "
        "when the feature fires it writes fᵢ **d**ᵢ there. Steering writes it in by force: at every position, for "
        "the prompt and every new token, the activation gets α times the feature's typical size added, and the model "
        "reads on from there. A feature early in the model often stands for the token just read (a line break after a "
        "blank line, say): steering it makes every position look as if that token had just been read, so the text "
        "fills with what usually follows it (capitals of a speaker's name), not with the token itself.")
    st.latex(r"\mathbf{x}_t \;\leftarrow\; \mathbf{x}_t + \alpha\, s_i\, \mathbf{d}_i \qquad \text{at every position } t")
    st.caption("sᵢ is the feature's typical size: its mean activation over the held-out vectors where it fires. "
               "So α = 1 adds as much as the feature itself adds when it is on; α = 0 adds nothing, and the text is "
               "exactly the plain one.")
    st.markdown(
        "**α trades effect against sense.** Added at every position, even a fraction of a feature's typical size is "
        "a lot: each step the model reads a stream it has seldom seen, and the text drifts further from anything it "
        "was trained on. A small α leaves the text as readable as the plain one, with the feature's mark on it; a "
        "larger one makes the mark plain but the words break up, and α = 1 can leave no words at all. The slider "
        "starts at the largest α at which, on the shipped model and its default feature, a typical steered text's "
        "runs of three characters are still found in the training text as often as those of nearly every plain "
        "text, while the feature's mark shows (measured over many seeds by bench/steering.py).")
    choices, refused = available_saes(entry, model)
    for line in refused:
        st.warning(f"Not usable: {fmt.md_escape(line)}", icon="⚠️")
    if not choices:
        _no_sae(refused)
        return ""
    choice, scales, feature, alpha = _pickers(choices, lambda sae: typical_sizes(entry, model, tok, sae), tok.pieces)
    if said := unit_line(f"Feature {feature}", (sae_explanations(entry, choice)[0] or {}).get(feature)):
        st.markdown(said)  # its explanation (issue 58), when the SAE has them
    s_i = scales.scale(feature)
    described = _describe(tok, choice, scales, feature, s_i)
    hooks = feature_hooks(choice.sae, feature, alpha, s_i)
    added = choice.sae.W_dec[feature].detach() * (alpha * s_i)  # (d_in,): what the hooks add, for the text's key
    key = draw_key + ("steer", choice.site, direction_digest(added)) if hooks else draw_key  # alpha = 0: the plain text
    temperature, top_k, top_p, seed = decoding
    boundaries = tok.kind != "char"
    left, right = st.columns(2)
    left.markdown("**Plain** (α = 0)")
    left.html(_wrapped(GF.shaded_html(start_text[-GF.CONTEXT_CHARS:], plain, font_px=13, boundaries=boundaries)))
    right.markdown(f"**Steered**: feature {feature}, α = {alpha:g} (adds {alpha * s_i:.3g} along **d**{feature})")
    box = right.empty()

    def show(so_far):
        box.html(_wrapped(GF.shaded_html(start_text[-GF.CONTEXT_CHARS:], so_far, font_px=13, boundaries=boundaries)))

    steered, elapsed = shared_draw(key, lambda repaint: G.draw(model, gen_ids, n_new, temperature, top_k, top_p, seed,
                                                              tok.pieces, repaint=repaint, hooks=hooks),
                                   show, slot="gen_steer_memo")
    show(steered)
    same = next((i for i, (p, q) in enumerate(zip(plain, steered)) if p["id"] != q["id"]), None)
    st.caption(f"Same prompt, seed and decoding on both sides; the last {GF.CONTEXT_CHARS} characters of the prompt "
               "in grey. " + ("The two texts are identical." if same is None else
                              f"They part at new {tok.unit} {same + 1}.") + f" Steered text: {elapsed * 1000:.0f} ms.")
    return described + "".join(s["ch"] for s in steered)


def _wrapped(body: str) -> str:
    """A shaded text that breaks anywhere: a steered text can lose every space and would run out of its column."""
    return f'<div style="word-break: break-all; overflow-wrap: anywhere;">{body}</div>'


def _describe(tok, choice, scales, feature: int, s_i: float) -> str:
    top = scales.top_tokens(feature)
    where = ", ".join(f"{n} sit on '{fmt.md_escape(tok.visible_tokens([t])[0])}'" for t, n in top)
    fired = int(scales.fired[feature])
    text = (f"The autoencoder reads {site_words(choice.site)} (`{choice.site}`). Feature {feature} fired on "
            f"{fired:,} of {scales.n_vectors:,} held-out vectors")
    if fired:
        n_top = int((scales.top_ids[feature] >= 0).sum())
        text += f", with typical size sᵢ = {s_i:.3g}. Of its {n_top} largest activations, {where}."
    else:
        text += (f": it never fired there, so α counts in the median typical size of the features that did, "
                 f"{s_i:.3g}.")
    st.markdown(text)
    return text
