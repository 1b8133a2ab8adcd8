import streamlit as st

from core import lesson as LS
from core.analysis.cost import training_flops
from core.analysis.induction import head_scores
from core.analysis.scaling import CHINCHILLA
from core.analysis.variants_view import read_study
from core.figures.lesson_figures import bars
from core.figures.patching_figures import head_table_figure, sources_figure
from core.analysis.generation import draw
from core.patching import Metric, default_answers, example_pair, patch_heads, score_sources, sources_view
from core.serve.fmt import head_label
from ui import (ROOT, at_step, ensure_frame, load_model, model_cache, model_key, prompt_input, require_model,
                shared_chart, snapshot_steps_of)
from ui.links import link_box, read_link

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

DEFAULT_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"
STEPS = [  # (key, title, the page that shows it in full)
    ("key", "One head, one question", "pages/attention.py"),
    ("mask", "Why the mask sits before the softmax", "pages/attention.py"),
    ("off", "Switching a head off", "pages/heads.py"),
    ("block", "One block, counted", "pages/parameters.py"),
    ("share", "Where a block's parameters sit", "pages/parameters.py"),
    ("cost", "What training costs", "pages/parameters.py"),
    ("temp", "Temperature", "pages/generation.py"),
    ("scaling", "More parameters or more data?", "pages/scaling.py"),
    ("forming", "The induction head forms", "pages/over_training.py"),
    ("piece", "Taking a piece out", "pages/variants.py"),
    ("patch", "Patching between two prompts", "pages/cause_effect.py"),
    ("circuit", "The induction circuit", "pages/cause_effect.py"),
]
N_STEPS = len(STEPS)
COST_TOKENS = 10_000_000  # the D of the cost question

st.title("Lesson: the transformer, one prediction at a time")
st.markdown(
    f"{N_STEPS} steps in the lecture's order. Each one shows a small live view of the selected model on your prompt and "
    "asks you to **predict** something first; then the model answers, with its numbers. Nothing is typed in "
    "advance: change the prompt or the model in the sidebar and every answer is computed again. When the model's "
    "own answer is too close to call, the step says so instead of marking you.")
st.latex(r"\text{predict} \;\rightarrow\; \text{run the model} \;\rightarrow\; \text{compare}")

entry, model, tok = require_model()
c = model.config
mkey = model_key(entry)
link = read_link({"lesson": ("int", 1, N_STEPS), "prompt": ("prompt", tok, c.n_ctx)})
if "lesson" in link.values:
    st.session_state["lesson_step"] = link.values["lesson"]
if "prompt" in link.values:
    st.session_state["lesson_prompt"] = link.values["prompt"]
link.show_ignored()
st.session_state.setdefault("lesson_step", 1)
st.session_state.setdefault("lesson_prompt", DEFAULT_PROMPT)
progress = st.session_state.setdefault("lesson_progress", {})  # step key -> True / False / None (not graded)

WHAT = "the lesson's runs"
_scores = model_cache(lambda: head_scores(model, tokenizer=tok), 8, what=WHAT,
                      spinner="Measuring every head on repeated random sequences ...")
_which_key = model_cache(lambda ids, l, h: LS.key_weights(model, list(ids), l, h), 64, what=WHAT)
_mask = model_cache(lambda ids, l, h: LS.mask_experiment(model, list(ids), l, h), 64, what=WHAT)
_off = model_cache(lambda ids, heads: LS.copy_loss_change(model, list(ids), list(heads), c.n_ctx), 64, what=WHAT)
_pair = model_cache(lambda ids, seed: LS.temperature_pair(
    model, list(ids), lambda t, s: [r["id"] for r in draw(model, list(ids), 40, t, seed=s, chars=tok.pieces)[0]], seed), 32,
    what=WHAT)
_heads = model_cache(lambda a, b, m: patch_heads(model, list(a), list(b), m, "z"), 16, what=WHAT)
_answers = model_cache(lambda a, b: default_answers(model, list(a), list(b)), 16)
_sources = model_cache(lambda a, l, h, i, j: score_sources(model, list(a), l, h, i, j), 16, what=WHAT)
_pattern_row = model_cache(lambda a, l, h, i: LS.key_weights(model, list(a)[: i + 1], l, h), 16, what=WHAT)


# ------------------------------------------------------------------ the path
def _go(step: int):
    st.session_state["lesson_step"] = max(1, min(N_STEPS, step))


with st.sidebar:
    st.markdown("### Lesson")
    done = sum(1 for v in progress.values() if v is not None)
    right = sum(1 for v in progress.values() if v)
    st.caption(f"Score: {right} of {done} graded" + (f" ({len(progress) - done} too close to call)"
                                                        if len(progress) > done else ""))
    for k, (key, title, _) in enumerate(STEPS, start=1):
        # material icons, not emoji: a machine without an emoji font shows those as empty boxes
        mark = {True: ":material/check_circle:", False: ":material/cancel:", None: ":material/remove_circle_outline:"
                }.get(progress[key]) if key in progress else ":material/radio_button_unchecked:"
        st.button(f"{k}. {title}", icon=mark, key=f"lesson_goto_{k}", on_click=_go, args=(k,), width="stretch",
                  type="primary" if k == st.session_state["lesson_step"] else "secondary")

prompt = prompt_input("Your prompt (used by every step; change it any time)", None, "lesson_prompt", tok, c.n_ctx,
                      height=80)
if prompt.empty or len(prompt.ids) < 4:
    st.info(f"Type a prompt of at least four {tok.units} above: every step runs the model on it.")
    st.stop()
ids = tuple(prompt.ids)
tokens = tok.visible_tokens(list(ids))
n = len(ids)
step = st.session_state["lesson_step"]
key, title, full_page = STEPS[step - 1]
scores = _scores(mkey)
prev_head = tuple(int(v) for v in divmod(int(scores.previous_token.argmax()), c.n_heads))
ind_head = scores.best_head()
sig = (mkey, ids)  # an answer revealed for this model and prompt; another prompt asks again


def _reveal():
    st.session_state[f"lesson_shown_{key}"] = sig


def revealed() -> bool:
    return st.session_state.get(f"lesson_shown_{key}") == sig


def verdict(grade: LS.Grade, answer_words: str):
    """Show the model's answer and record the mark."""
    progress[key] = grade.correct
    if grade.correct is None:
        st.info(f"**Too close to call.** {answer_words} {grade.why}. The model gives no clear answer here, so this step "
                "is not marked.", icon=":material/remove_circle_outline:")
    elif grade.correct:
        st.success(f"**Right.** {answer_words} ({grade.why}).", icon=":material/check_circle:")
    else:
        st.error(f"**Not this time.** {answer_words} ({grade.why}).", icon=":material/cancel:")


st.progress(step / N_STEPS, text=f"Step {step} of {N_STEPS}: {title}")
st.header(f"{step}. {title}")
query = {"model": entry.name, "prompt": prompt.text}

# ------------------------------------------------------------------ the steps
if key == "key":
    l, h = prev_head
    st.markdown(
        f"A head compares the query of the last position with the key of every position up to it, and turns the "
        f"scores into weights that add up to 1. Different heads learn different habits. {head_label(l, h)} is the "
        f"head of this model that looks **one step back** most often on random text (previous-token score "
        f"{scores.previous_token[l, h]:.2f}, where 1 means always).")
    st.latex(r"a_{nj} = \operatorname{softmax}_j\Big(\tfrac{q_n \cdot k_j}{\sqrt{d_h}}\Big), \quad j \le n")
    window = list(range(max(0, n - 16), n))
    guess = st.pills(f"From the last position ('{tokens[-1]}'), which {tok.unit} will {head_label(l, h)} weigh most?",
                     window, format_func=lambda j: f"{j + 1}: '{tokens[j]}'", key=f"lesson_key_guess_{hash(sig)}")
    st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
    w = _which_key(mkey, ids, l, h)
    if revealed() and guess is not None:
        grade = LS.grade_choice({j: float(w[j]) for j in range(n)}, guess,
                                label=lambda j: f"position {j + 1} '{tokens[j]}'")
        verdict(grade, f"The head puts most weight on position {grade.answer + 1} ('{tokens[grade.answer]}').")
        shared_chart(bars([f"{j + 1} '{tokens[j]}'" for j in range(n)], [float(x) for x in w],
                          f"{head_label(l, h)}: weights from the last position", "weight", answer=grade.answer,
                          guess=guess, tokens=True), width="stretch", theme=None, key="lesson_fig")
    query.update(layer=l + 1, head=h + 1)
elif key == "mask":
    l, h = prev_head
    st.markdown(
        "The mask stops a position from reading the future. It is applied to the **scores**, before the softmax: the "
        "future scores become −∞ and their weights exactly 0. Suppose instead we ran the softmax over every key and "
        "zeroed the future weights afterwards.")
    st.latex(r"\text{before: } \operatorname{softmax}(s + M) \qquad \text{after: } \operatorname{softmax}(s)\odot "
             r"\mathbb{1}[j \le i]")
    guess = st.radio(f"With the mask after the softmax, would the weights of the earlier rows of {head_label(l, h)} "
                     f"change when only the last {tok.unit} changes?", ["yes", "no"], index=None, horizontal=True,
                     key=f"lesson_mask_guess_{hash(sig)}")
    st.button("Run the experiment", key="lesson_check", on_click=_reveal, disabled=guess is None)
    if revealed() and guess is not None:
        dep = _mask(mkey, ids, l, h)
        grade = LS.grade_yes_no(dep["mask_after_softmax"], LS.MASK_CHANGE, guess == "yes")
        verdict(grade, "Yes: the earlier rows move, because the softmax's denominator still holds the future score."
                if grade.answer else "No: nothing moves.")
        a, b = st.columns(2)
        a.metric("largest change, mask on the scores", f"{dep['mask_on_scores']:.2e}")
        b.metric("largest change, mask after the softmax", f"{dep['mask_after_softmax']:.2e}")
        st.caption(f"The last {tok.unit} was replaced by the next id of the vocabulary; the numbers are the largest "
                   "change of any weight in the rows before it. On the scores, the future never enters a row: 0.")
    query.update(layer=l + 1, head=h + 1)
elif key == "off":
    l, h = ind_head
    st.markdown(
        f"Write your prompt twice. In the second copy every {tok.unit} has been seen, followed by the one that comes "
        f"next, so a head that finds the earlier occurrence can copy. {head_label(l, h)} has this model's highest "
        f"induction score ({scores.induction[l, h]:.2f}). Switch it off (its output set to 0) and measure the loss on "
        "the second copy.")
    guess = st.radio(f"With {head_label(l, h)} off, will the loss on the second copy go up, down, or stay the same?",
                     ["up", "down", "same"], index=None, horizontal=True, key=f"lesson_off_guess_{hash(sig)}")
    st.button("Switch it off", key="lesson_check", on_click=_reveal, disabled=guess is None)
    if revealed() and guess is not None:
        change, noise, rep = _off(mkey, ids, ((l, h),))
        grade = LS.grade_direction(change, noise, guess)
        verdict(grade, {"up": "It goes up: the head was doing the copying.", "down": "It goes down.",
                        "same": "It barely moves."}[grade.answer])
        st.caption(f"Mean over the {len(rep) // 2 - 1} predictions of the second copy; the noise is two standard "
                   "errors of the per-token changes.")
    query.update(off=f"L{l + 1}H{h + 1}")
elif key in ("block", "share"):
    nums = LS.block_numbers(c)
    d, d_ff = c.d_model, c.d_ff
    if key == "block":
        st.markdown(
            f"A block is attention ($W_Q, W_K, W_V, W_O$, each $d \\times d$), the MLP (up to $d_{{ff}}$ and back) and "
            f"two LayerNorms (a scale and a shift each). This model has d = {d}, h = {c.n_heads}, d_ff = {d_ff}"
            + (", and biases" if c.bias else "") + ". The number of heads does not enter: they split the width.")
        guess = st.number_input("How many parameters does one block have?", min_value=0, value=None, step=1,
                                key=f"lesson_block_guess_{mkey}")
        st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
        if revealed() and guess is not None:
            verdict(LS.grade_number(float(guess), nums["per_block"], 0.02), f"One block has {nums['per_block']:,}.")
            st.latex(rf"4d^2 + 2\,d\,d_{{ff}} + 4d = 4\cdot{d}^2 + 2\cdot{d}\cdot{d_ff} + 4\cdot{d} = "
                     rf"{nums['per_block']:,}" if not c.bias else rf"{nums['per_block']:,}")
    else:
        st.markdown(f"Of a block's {nums['per_block']:,} parameters, some sit in attention, some in the MLP, a few in "
                    "the LayerNorms.")
        guess = st.slider("What percentage sits in the MLP?", 0, 100, 50, key=f"lesson_share_guess_{mkey}")
        st.button("Check my answer", key="lesson_check", on_click=_reveal)
        if revealed():
            verdict(LS.grade_number(guess / 100, nums["mlp_share"], 0.08),
                    f"The MLP holds {nums['mlp_share']:.1%} of the block.")
            shared_chart(bars(["attention", "MLP", "LayerNorms"], [nums["attention"], nums["mlp"], nums["norms"]],
                              "One block's parameters", "parameters", answer=1), width="stretch", theme=None,
                         key="lesson_fig")
            st.caption("With d_ff = 4d the MLP has 8d² against attention's 4d²: two thirds of the block.")
elif key == "cost":
    N = sum(p.numel() for p in model.parameters())
    st.markdown(
        f"Training reads every token once forward and twice backward: about 6 floating-point operations per parameter "
        f"and token. This model has N = {N:,} parameters. Train it on D = {COST_TOKENS:,} tokens.")
    st.latex(r"C \approx 6\,N\,D")
    guess = st.number_input("How many FLOPs? (scientific notation works: 1e12)", min_value=0.0, value=None,
                            format="%g", key=f"lesson_cost_guess_{mkey}")
    st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
    if revealed() and guess is not None:
        truth = training_flops(N, COST_TOKENS)
        verdict(LS.grade_number(float(guess), truth, 0.10), f"C = 6 × {N:,} × {COST_TOKENS:,} = {truth:.3g} FLOPs.")
elif key == "temp":
    st.markdown(
        "Dividing the logits by a temperature T before the softmax sharpens the distribution (T < 1) or flattens it "
        "(T > 1). Below, two continuations of your prompt: one drawn at T = 0.2, one at T = 2, in an order you do "
        "not know.")
    st.latex(r"p_i = \frac{e^{z_i / T}}{\sum_j e^{z_j / T}}")
    seed = int(st.session_state.get("lesson_temp_seed", 0))
    pair = _pair(mkey, ids, seed)
    for name, new in zip("AB", pair["texts_ids"]):
        st.markdown(f"**{name}**")
        st.code(tok.decode(list(new)) or "(nothing)", language=None, wrap_lines=True)
    guess = st.radio("Which one was drawn at T = 0.2?", [0, 1], format_func=lambda i: "AB"[i], index=None,
                     horizontal=True, key=f"lesson_temp_guess_{hash(sig)}_{seed}")
    b1, b2 = st.columns([1, 4])
    b1.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
    b2.button("Draw two others", key="lesson_temp_new", on_click=st.session_state.update,
              args=({"lesson_temp_seed": seed + 1},))
    if revealed() and guess is not None:
        grade = LS.which_is_cold(pair, guess)
        verdict(grade, f"{'AB'[pair['cold']]} was drawn at T = 0.2: the model finds it more typical.")
    query.update(T=0.2)
elif key == "scaling":
    N0, D0 = 1e9, 20e9
    st.markdown(
        f"The Chinchilla law predicts the loss of a model of N parameters trained on D tokens. Take N = {N0:.0e} and "
        f"D = {D0:.0e} (20 tokens per parameter).")
    st.latex(r"L(N, D) = E + \frac{A}{N^{\alpha}} + \frac{B}{D^{\beta}}")
    guess = st.radio("Which lowers the predicted loss more?", ["N", "D"], index=None, horizontal=True,
                     format_func={"N": "doubling the parameters", "D": "doubling the data"}.get,
                     key="lesson_scaling_guess")
    st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
    if revealed() and guess is not None:
        base = float(CHINCHILLA.loss(N0, D0))
        drops = {"N": base - float(CHINCHILLA.loss(2 * N0, D0)), "D": base - float(CHINCHILLA.loss(N0, 2 * D0))}
        grade = LS.grade_choice(drops, guess, label={"N": "doubling N", "D": "doubling D"}.get, unit=" nats")
        verdict(grade, f"Doubling {'the parameters' if grade.answer == 'N' else 'the data'} helps more, from "
                       f"L = {base:.4f}.")
elif key == "forming":
    steps = snapshot_steps_of(entry)
    st.markdown(
        "An induction head is not there from the start: it forms during training, and when it does the loss on a "
        "repeated text's second copy falls far below the first copy's. The lesson compares the first and the last "
        "saved snapshot of this model, on repeated random sequences.")
    if len(steps) < 2:
        st.info("This model has no snapshots saved during training, so this step has nothing to compare. Pick a shipped "
                "model in the sidebar, or train one with snapshots kept.")
    else:
        guess = st.radio("From the first snapshot to the last, which loss fell more?", ["first", "second"], index=None,
                         horizontal=True, format_func={"first": "the first copy's", "second": "the second copy's"}.get,
                         key=f"lesson_forming_guess_{mkey}")
        st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
        if revealed() and guess is not None:
            early_model, _ = load_model(at_step(entry, steps[0]))
            early = model_cache(lambda s: head_scores(early_model, tokenizer=tok), 8, what=WHAT)(
                model_key(at_step(entry, steps[0])), steps[0])
            drops = {"first": early.first_copy_loss - scores.first_copy_loss,
                     "second": early.second_copy_loss - scores.second_copy_loss}
            grade = LS.grade_choice(drops, guess, label=lambda k: f"the {k} copy's loss fell", unit=" nats")
            verdict(grade, f"At step {steps[0]:,}: first copy {early.first_copy_loss:.2f}, second "
                           f"{early.second_copy_loss:.2f} nats; at the end: {scores.first_copy_loss:.2f} and "
                           f"{scores.second_copy_loss:.2f}.")
        query.update(step=steps[0] if steps else None)
elif key == "piece":
    study = read_study(ROOT / "assets" / "variants")
    st.markdown(
        "The shipped variant study trained the lecture's model again with one piece taken out, on the same text with "
        "the same recipe. The held-out loss says what each piece was worth.")
    if not study.has("lecture", "no-residual", "no-mlp"):
        st.info("The shipped variant study (assets/variants) is missing or lacks these runs: this step needs it.")
    else:
        guess = st.radio("Which hurts the held-out loss more when taken out?", ["no-residual", "no-mlp"], index=None,
                         horizontal=True, format_func={"no-residual": "the residual connections",
                                                       "no-mlp": "the MLP"}.get, key="lesson_piece_guess")
        st.button("Check my answer", key="lesson_check", on_click=_reveal, disabled=guess is None)
        if revealed() and guess is not None:
            base = study.loss("lecture")
            rises = {v: study.loss(v) - base for v in ("no-residual", "no-mlp")}
            grade = LS.grade_choice(rises, guess, label={"no-residual": "no residual", "no-mlp": "no MLP"}.get,
                                    unit=" nats")
            verdict(grade, f"The full block: {base:.3f} nats per character (the study's character models); "
                           f"without {'residual connections' if grade.answer == 'no-residual' else 'the MLP'} the "
                           "loss rises most.")
elif key in ("patch", "circuit"):
    clean, bad, period, again = example_pair(model, tok, seed=2000)  # Cause and effect's example, drawn once
    clean, corrupt = tuple(clean), tuple(bad.ids)
    answer, wrong = _answers(mkey, clean, corrupt)
    metric = Metric(answer, wrong)
    st.markdown(f"The prompt: {period} random {tok.units}, then the first {again} of them again, so that the next "
                f"{tok.unit} can only be found by copying from the first copy.")
    st.code(tok.decode(list(clean)), language=None, wrap_lines=True)
    table = _heads(mkey, clean, corrupt, metric)
    heads_all = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    if key == "patch":
        st.markdown(
            f"A corrupted copy changes one {tok.unit}: the earlier occurrence of the last {tok.unit} (position "
            f"{bad.position + 1}). The clean run can copy the next {tok.unit}; the corrupted one cannot. Run the "
            "corrupted prompt with one head's output put back from the clean run, and see how much of the clean answer "
            "returns.")
        guess = st.selectbox("Which head's output restores the most?", heads_all, index=None,
                             format_func=lambda p: head_label(*p), key="lesson_patch_guess")
        st.button("Patch every head", key="lesson_check", on_click=_reveal, disabled=guess is None)
        if revealed() and guess is not None:
            grade = LS.grade_choice({p: float(table[p]) for p in heads_all}, guess, label=lambda p: head_label(*p),
                                    unit=" of the clean answer")
            verdict(grade, f"{head_label(*grade.answer)} restores {table[grade.answer]:.0%}.")
            shared_chart(head_table_figure(table, "Share restored by one head's output", selected=grade.answer),
                         width="stretch", theme=None, key="lesson_fig")
    else:
        l, h = ind_head
        i = len(clean) - 1
        w = _pattern_row(mkey, clean, l, h, i)
        j = int(w.argmax())
        full, names, score = _sources(mkey, clean, l, h, i, j)
        shown, rows, cols, reading = sources_view(full, names, k=10)
        st.markdown(
            f"{head_label(l, h)} (the induction head) looks from the last position to position {j + 1} "
            f"(weight {w[j]:.2f}), the {tok.unit} after the earlier occurrence. Its score there is a sum of parts, one "
            "per pair of sources that wrote the query's and the key's streams.")
        options = list(dict.fromkeys(cols))
        guess = st.selectbox("Which source wrote the part of the key that adds most to this score?", options,
                             index=None, key=f"lesson_circuit_guess_{mkey}")
        st.button("Take the score apart", key="lesson_check", on_click=_reveal, disabled=guess is None)
        if revealed() and guess is not None:
            totals = {name: float(shown[:, k].sum()) for k, name in enumerate(cols)}
            grade = LS.grade_choice(totals, guess, unit=" of the score")
            verdict(grade, f"**{reading.key_builder}** built the key"
                           + (": an earlier head, K-composition, the induction circuit." if reading.composition
                              and "K" in reading.composition else "."))
            shared_chart(sources_figure(shown, rows, cols, f"{head_label(l, h)}: score {score:.2f}, split by source"),
                         width="stretch", theme=None, key="lesson_fig")
        query.update(layer=l + 1, head=h + 1)

# ------------------------------------------------------------------ moving on
st.divider()
query["lesson"] = step
c1, c2, c3, c4 = st.columns([1, 1, 2, 2])
c1.button("← Back", key="lesson_back", on_click=_go, args=(step - 1,), disabled=step == 1)
c2.button("Next →", key="lesson_next", on_click=_go, args=(step + 1,), disabled=step == N_STEPS)
page_query = {k: v for k, v in query.items() if k not in ("lesson",) and v is not None}
c3.page_link(full_page, label="Open this in the full page", icon=":material/open_in_new:",
             query_params={k: str(v) for k, v in page_query.items()})
with c4:
    link_box({"lesson": step, "prompt": prompt.text, "model": entry.name})
