import streamlit as st

from core.views import variants_view as VV
from core.views import training_view as view
from pages.variants import figures as VF
from core.nn.checkpoint import CheckpointError
from core.nn.model_store import default_model_name
from core.serve.fmt import head_label
from core.data.corpus import shakespeare_path
from core.training.job_settings import JobSettings
from core.jobs import JobBusy
from core.training.variants import BY_ID, VARIANTS
from ui import (chart, ensure_frame, job_controls, keep_alive, load_folder, reset_save_form, save_form, session_alive,
                session_id, session_owner)
from core.training import training_setup as setup

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

STUDY = VV.STUDY_DIR  # assets/variants
PROMPT = "KING:\nThe moon is down; what news from the camp?\n"  # our own line: the claims measured live on it
SHOWN = ["lecture", "no-mlp", "no-residual", "no-layernorm", "no-mask"]

st.title("Why each piece")
st.markdown(
    "The lecture builds the block one piece at a time and says what each piece is for. Here each claim is tested "
    "the only honest way: the piece is taken out, the model is trained again on the same text with the same seed, "
    "steps and recipe, and the held-out loss says what was lost. Every number below comes from those runs "
    "(`python -m core.variants`), or is measured live on the models they saved.")
st.latex(r"x_0 = E[t] + P[i], \qquad x \leftarrow x + W_O\,\big[\operatorname{head}_1;\dots;"
         r"\operatorname{head}_h\big](\operatorname{LN}(x)), \qquad x \leftarrow x + \operatorname{MLP}(\operatorname{LN}(x))")
st.latex(r"\operatorname{head}(u) = \operatorname{softmax}\!\Big(\tfrac{QK^\top}{\sqrt{d_k}} + M\Big)V, \qquad "
         r"M_{ij} = -\infty \text{ for } j > i")
st.caption("Each variant removes one term: W_O, the MLP, the residual x +, LN, the mask M, or the positions P.")

study = VV.read_study(STUDY)
for problem in study.problems:
    st.warning(f"Part of the shipped study could not be read: {problem}", icon="⚠️")
if not study.rows:
    st.info("The shipped variant study is missing (assets/variants). Rebuild it with "
            "`python -m core.variants --steps 2000 --out assets/variants`.")
    st.stop()
steps = max(r["steps"] for r in study.rows.values())
st.header("The variants")
st.markdown(f"{len(study.rows)} runs of {steps:,} steps each, batch 32 of 128 characters, the Muon recipe, seed "
            "1337. *As trained* is the held-out loss with the model's own attention; *under the causal mask* is the "
            "same weights made to read only the past, as every model must when it writes text.")
# the verdict next to the names, and widths that fit the page's column: nothing needs scrolling sideways (the long
# texts are cut with "…" and shown whole on hover)
_col = st.column_config
rows = VV.table_rows(study)
st.dataframe(rows, hide_index=True, width="stretch", height=35 * (len(rows) + 1) + 3,  # every row, no inner scroll
             column_order=("variant", "what changed", "verdict", "loss as trained", "loss under the causal mask",
                           "training loss", "parameters", "seconds"),
             column_config={"variant": _col.TextColumn(width=105), "what changed": _col.TextColumn(width=215),
                            "verdict": _col.TextColumn(width=255),
                            "loss as trained": _col.NumberColumn("as trained", format="%.3f", width=75,
                                                                 help="held-out loss, nats per character"),
                            "loss under the causal mask": _col.NumberColumn("causal mask", format="%.3f", width=85,
                                                                            help="the same weights made to read only "
                                                                                 "the past"),
                            "training loss": _col.NumberColumn("training", format="%.3f", width=70),
                            "parameters": _col.NumberColumn(format="localized", width=85),
                            "seconds": _col.NumberColumn("s", format="%d", width=50, help="seconds of training")})
chart(VF.losses_figure(study), key="var_losses")

st.subheader("Loss curves")
pick, which = st.columns([3, 1])
chosen = pick.multiselect("Variants", list(study.rows), default=[v for v in SHOWN if v in study.rows],
                          key="var_curves", format_func=lambda v: f"{v}: {VV.title(v)}")
key = which.radio("Loss", ["val_loss", "train_loss"], key="var_curve_key",
                  format_func={"val_loss": "held-out", "train_loss": "training"}.get)
chart(VF.curves_figure(study, chosen, key=key), key="var_curves_fig")

# ------------------------------------------------------------------ the claims
kept, missing = {}, []
for vid in ("lecture", "no-mask", "mask-after-softmax", "no-positions"):
    try:
        kept[vid] = load_folder(STUDY / "models" / vid)[0]
    except CheckpointError as e:
        missing.append(f"{vid} ({e.shown})")
if missing:
    st.warning("Some of the study's models could not be loaded, so their live numbers are left out: "
               + "; ".join(missing), icon="⚠️")
tok = load_folder(STUDY / "models" / "lecture")[1] if "lecture" in kept else None
ids = tok.encode(PROMPT, errors="drop") if tok else []
other = (ids[-1] + 1) % tok.vocab_size if tok else 0
nums = VV.claim_numbers(study, kept, ids, other) if ids else {}

st.header("The claims, measured")
if "no_mask" in nums:
    n = nums["no_mask"]
    st.subheader("Without the mask, the model cheats")
    st.markdown(f"Trained with every position able to read the whole window, the model's training loss is "
                f"**{n['train_loss'][0]:.3f}** against the lecture model's {n['train_loss'][1]:.3f}: it reads the "
                f"answer instead of predicting it. Made to read only the past, as it must when it writes, its held-out "
                f"loss is **{n['causal_val_loss'][0]:.3f}** against {n['causal_val_loss'][1]:.3f}. Its greedy text:")
    st.code("KING:\n" + study.rows["no-mask"]["sample"], language=None, wrap_lines=True)
    if "stare" in n:
        (layer, head), w, pat = n["stare"]
        chart(VF.stare_figure(pat, tok.visible_tokens(ids),
                              f"{head_label(layer, head)} of the model trained without a mask"), key="var_stare")
        st.caption(f"{head_label(layer, head)} puts a mean weight of {w:.2f} on the *next* position (the line just right "
                   "of the diagonal), the most of any head" + (": it looks up the token it is asked to predict."
                                                              if w > 0.3 else "."))
if "after" in nums:
    a = nums["after"]
    st.subheader("A mask after the softmax leaks the future")
    st.markdown("Zeroing future weights after the softmax leaves the softmax's denominator summed over the future. "
                "Change only the last character of the prompt and the attention weights of the *earlier* rows move "
                + (f"by up to **{a['change'][0]:.2e}** in this model, against {a['change'][1]:.1e} in the lecture's. "
                   if "change" in a else "")
                + f"Its held-out loss under the causal mask: **{a['causal'][0]:.3f}** against {a['causal'][1]:.3f}.")
if "mlp" in nums:
    m = nums["mlp"]
    st.subheader("Attention alone is linear in the values it moves")
    st.markdown(" · ".join(f"{v}: loss **{loss:.3f}** with {p:,} parameters" for v, (loss, p) in m.items())
                + ". Without the MLP, nothing in a block bends the values once attention has mixed them: a softmax "
                  "of weights times linear values" + (", even at about the same parameters (the wider attention-only "
                                                      "model)." if "no-mlp-wide" in m else "."))
if "deep" in nums:
    d = nums["deep"]
    st.subheader("Deep stacks need the residual stream and LayerNorm")
    st.markdown(" · ".join(f"{v}: **{loss:.3f}**" for v, loss in d.items())
                + ". Without residual connections and LayerNorm each block must pass on everything through its own "
                  "maps, and the gradient through twelve of them fades: compare the curves.")
    chart(VF.curves_figure(study, list(d)), key="var_deep")
if "heads" in nums:
    h, loss = nums["heads"]["best"]
    st.subheader("Heads divide the width")
    st.markdown("At d = 64 every head count has the same 4d² attention parameters. Held-out loss: "
                + " · ".join(f"{v}: {x:.3f}" for v, x in nums["heads"]["all"].items())
                + f". The best here: **h = {h}** ({loss:.3f}).")
if "w_o" in nums:
    w = nums["w_o"]
    st.subheader("W_O mixes the heads")
    st.markdown(f"Without W_O each head writes only its own {64 // 4} coordinates of the stream: loss "
                f"**{w['loss'][0]:.3f}** against {w['loss'][1]:.3f}, for {w['saved']:,} parameters saved.")
if "positions" in nums:
    p = nums["positions"]
    st.subheader("Without positions, order is invisible to attention")
    st.markdown(f"Shuffle every character of the prompt before the last: the last position's logits move by at most "
                f"**{p[0]:.3f}** without positions, {p[1]:.3f} with them. With two layers the order still leaks in "
                "through the mask (each earlier position saw only its own prefix); one layer without positions "
                "cannot tell the orders apart at all (tests/test_model_variants.py).")

# ------------------------------------------------------------------ your own run
st.header("Train a variant yourself")
c1, c2 = st.columns([3, 1])
vid = c1.selectbox("Variant", [v.id for v in VARIANTS], key="var_train_variant", format_func=lambda v: f"{v}: {VV.title(v)}")
n_steps = c2.number_input("Steps", 50, 3000, 600, 50, key="var_train_steps", help="600 steps take about a minute on "
                          "one core for the lecture's shape; the deep stacks take longer per step.")
job = st.session_state.get("var_job")
keep_alive(job)  # a run this tab stops touching is stopped (core.jobs.runner)
status = job.status() if job else None
# the study's text where it is here, so the run compares with the shipped curves; else Python's own documentation
kind = "shakespeare" if shakespeare_path() is not None else "pydoc"
if kind == "pydoc":
    st.caption("Tiny Shakespeare is not on this server, so your run trains on Python's documentation: its curve is "
               "not comparable with the shipped ones (fetch the corpus on the Training page to compare).")
if st.button("Start", type="primary", key="var_start", disabled=bool(status and not status.can_start)):
    sw = dict(BY_ID[vid].switches)
    shape = {k: sw.pop(k) for k in ("d_model", "n_heads", "n_layers") if k in sw}
    try:
        text, info = setup.builtin_corpus(kind)
        job = st.session_state["var_job"] = setup.start_run(
            job, text, info.name, JobSettings(steps=int(n_steps), switches=sw, **shape), sample_prompt="KING:\n",
            owner=session_owner(), session=session_id(), alive=session_alive)
        st.session_state["var_train_of"] = vid
        reset_save_form("var", "var_save_name", default_model_name(vid))  # a name of its own: the variant, a stamp
    except (JobBusy, ValueError) as e:  # the server (or this session) is busy, or the corpus could not be read
        st.error(f"The run could not start: {e}")
    else:
        st.rerun()


def live(job, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "var")
    st.progress(s.fraction, text=f"{view.STATE_LABELS[s.state]}: step {s.step:,} of {s.total_steps:,}")
    mine = st.session_state.get("var_train_of", "your run")
    chart(VF.curves_figure(study, ["lecture", mine] if mine in study.rows else ["lecture"], s.evals,
                           live_name=f"your {mine}"), key="var_live")


if job is not None:
    polling = job.status().moving
    st.fragment(run_every=view.LIVE_POLL_S if polling else None)(live)(job, polling)
    if job.status().can_save:
        st.caption("Save it to open it on the other pages (its attention, its heads switched off).")
        save_form("var", "var_save_name")  # the key written out for tests/test_bad_input.py
