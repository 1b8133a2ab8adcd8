"""The Lesson's 12 steps as data (core.lesson.records says what a Step is), in the lecture's order: ``STEPS``, and
``STEP`` by key. Each step's prose, question and answer are written from the model and the prompt, never typed."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from core.analysis.circuit import CARRIES
from core.analysis.cost import training_flops
from core.analysis.generation import draw
from core.analysis.induction import head_scores
from core.analysis.scaling import CHINCHILLA
from core.lesson import measures as M
from core.lesson.pair_steps import (MIN_GAP, _circuit_ask, _circuit_grade, _circuit_measure, _circuit_reveal,
                                    _patch_ask, _patch_grade, _patch_reveal)
from core.lesson.grading import (AMBIGUOUS_SHARE, MASK_CHANGE, Grade, grade_choice, grade_direction, grade_number,
                                 grade_yes_no)
from core.lesson.records import Question, Reveal, Step
from core.nn.checkpoint import CheckpointError
from core.nn.params import per_block_latex, share_latex
from core.serve.fmt import change, head_label, number_word, percent, pretty_sci

COST_TOKENS = 10_000_000     # the D of the cost question
CHINCHILLA_AT = (1e9, 20e9)  # step 8's N and D: 20 tokens per parameter


# a radio question's fields: its choices are the options' keys (what a guess, a grade and a reveal hold), its
# labels what the screen shows
def _radio(ask: str, options: dict, **kw) -> dict:
    return dict(ask=ask, widget="radio", choices=tuple(options), labels=tuple(options.values()), **kw)


# ---------------------------------------------------------------- 1. one head, one question
def _key_ask(ctx):
    l, h = ctx.previous_head
    toks, n, unit = ctx.tokens, len(ctx.ids), ctx.tokenizer.unit
    # a long prompt offers its first position (where many heads park their weight) and the last few: a pill per
    # position would not fit, and offering and grading the same keys keeps the grade fair
    keys = M.key_choices(n)
    return Question(
        f"A head compares the query of the last position with the key of every position up to it, and turns the "
        f"scores into weights that add up to 1. Different heads learn different habits. {head_label(l, h)} is the "
        f"head of this model that looks **one step back** most often on random text (previous-token score "
        f"{ctx.scores.previous_token[l, h]:.2f}, where 1 means always).",
        latex=r"a_{nj} = \operatorname{softmax}_j\Big(\tfrac{q_n \cdot k_j}{\sqrt{d_h}}\Big), \quad j \le n",
        ask=f"From the last position ('{toks[-1]}'), which {unit} will {head_label(l, h)} weigh most?"
        + (f" (the first {unit}, or one of the last {len(keys) - 1})" if len(keys) < n else ""),
        widget="pills", choices=tuple(keys), labels=tuple(f"{j + 1}: '{toks[j]}'" for j in keys),
        link={"layer": l + 1, "head": h + 1}, data={"head": (l, h), "tokens": toks})


def _key_grade(q, m, guess):
    w, toks = m["weights"], q.data["tokens"]
    return grade_choice({j: float(w[j]) for j in q.choices}, guess, label=lambda j: f"position {j + 1} '{toks[j]}'")


def _key_reveal(q, m, grade, guess=None):
    w, toks, (l, h) = m["weights"], q.data["tokens"], q.data["head"]
    words = f"The head puts most weight on position {grade.answer + 1} ('{toks[grade.answer]}')."
    top = int(np.nanargmax(w))
    # the grade is over the offered keys; the head's heaviest key overall is said when it was not one of them,
    # so a right answer is not read as the head's whole habit
    if top not in q.choices:
        words += f" Of every position, {top + 1} ('{toks[top]}') has most, {w[top]:.2f}, but it was not offered."
    return Reveal(words, figure=("tokens", dict(tokens=toks, values=[float(x) for x in w], answer=grade.answer,
                                                guess=guess, title=f"{head_label(l, h)}: weights from the last position",
                                                y_title="weight")))


# ---------------------------------------------------------------- 2. the mask
def _mask_ask(ctx):
    l, h = ctx.previous_head
    return Question(
        "The mask stops a position from reading the future. It is applied to the **scores**, before the softmax: the "
        "future scores become −∞ and their weights exactly 0. Suppose instead we ran the softmax over every key and "
        "zeroed the future weights afterwards.",
        latex=r"\text{before: } \operatorname{softmax}(s + M) \qquad \text{after: } \operatorname{softmax}(s)\odot "
              r"\mathbb{1}[j \le i]",
        **_radio(f"With the mask after the softmax, would the weights of the earlier rows of {head_label(l, h)} "
                 f"change when only the last {ctx.tokenizer.unit} changes?", {"yes": "yes", "no": "no"}),
        button="Run the experiment", link={"layer": l + 1, "head": h + 1},
        data={"head": (l, h), "unit": ctx.tokenizer.unit})


def _mask_reveal(q, m, grade, guess=None):
    return Reveal(
        "Yes: the earlier rows move, because the softmax's denominator still holds the future score." if grade.answer
        else "No: nothing moves.",
        metrics=(("largest change, mask on the scores", pretty_sci(m['mask_on_scores'])),
                 ("largest change, mask after the softmax", pretty_sci(m['mask_after_softmax']))),
        caption=f"The last {q.data['unit']} was replaced by the next id of the vocabulary; the numbers are the largest "
                "change of any weight in the rows before it. On the scores, the future never enters a row: 0.")


# ---------------------------------------------------------------- 3. switching a head off
def _off_ask(ctx):
    l, h = ctx.induction_head
    u = ctx.tokenizer.unit
    return Question(
        f"Write your prompt twice. In the second copy every {u} has been seen, followed by the one that comes next, so "
        f"a head that finds the earlier occurrence can copy. {head_label(l, h)} has this model's highest induction "
        f"score ({ctx.scores.induction[l, h]:.2f}). Switch it off (its output set to 0) and measure the loss on the "
        "second copy.",
        **_radio(f"With {head_label(l, h)} off, will the loss on the second copy go up, down, or stay the same?",
                 {"up": "up", "down": "down", "same": "same"}),
        button="Switch it off", link={"off": f"L{l + 1}H{h + 1}"}, data={"head": (l, h)})


def _off_measure(ctx, q):
    change, noise, rep = M.copy_loss_change(ctx.model, ctx.ids, [q.data["head"]], ctx.config.n_ctx)
    return {"change": change, "noise": noise, "predictions": len(rep) // 2 - 1}


def _off_reveal(q, m, grade, guess=None):
    return Reveal({"up": "It goes up: the head was doing the copying.", "down": "It goes down.",
                   "same": "It barely moves."}[grade.answer],
                  caption=f"Mean over the {m['predictions']} predictions of the second copy; the noise is two standard "
                          "errors of the per-token changes.")


# ---------------------------------------------------------------- 4, 5. one block, counted
def _block_words(c) -> str:
    attn = (r"$W_Q, W_K, W_V, W_O$, each $d \times d$" if c.w_o
            else r"$W_Q, W_K, W_V$, each $d \times d$; no $W_O$, so the heads are not mixed")
    norms = 0 if c.norm == "none" else (2 if c.mlp else 1)
    return (f"A block of this model is attention ({attn}), "
            + ("the MLP (up to $d_{ff}$ and back)" if c.mlp else "no MLP (attention only)") + " and "
            + ["no LayerNorm", "one LayerNorm (a scale and a shift)", "two LayerNorms (a scale and a shift each)"][norms]
            + f". This model has d = {c.d_model}, h = {c.n_heads}" + (f", d_ff = {c.d_ff}" if c.mlp else "")
            + (", and biases" if c.bias else "") + ". The number of heads does not enter: they split the width.")


def _block_ask(ctx):
    return Question(_block_words(ctx.config), ask="How many parameters does one block have?", widget="number",
                    data={"config": ctx.config})


def _block_reveal(q, m, grade, guess=None):
    return Reveal(f"One block has {m['per_block']:,}.", latex=per_block_latex(q.data["config"], general=True))


def _share_ask(ctx):
    n = M.block_numbers(ctx.config)["per_block"]
    return Question(f"Of a block's {n:,} parameters, some sit in attention, some in the MLP, a few in the LayerNorms.",
                    ask="What percentage sits in the MLP?", widget="slider", data={"config": ctx.config})


def _share_reveal(q, m, grade, guess=None):
    c = q.data["config"]
    return Reveal(f"The MLP holds {percent(m['mlp_share'])} of the block.",
                  latex=rf"\frac{{\text{{MLP}}}}{{\text{{block}}}} = {share_latex(c)[1]} = {m['mlp_share']:.3f}"
                  if c.lecture_block else None,
                  figure=("bars", dict(labels=["attention", "MLP", "LayerNorms"], values=[m["attention"], m["mlp"],
                                       m["norms"]], title="One block's parameters", y_title="parameters", answer=1)))


# ---------------------------------------------------------------- 6. what training costs
def _cost_ask(ctx):
    N = M.parameter_count(ctx.model)
    return Question(
        f"Training reads every token once forward and twice backward: about 6 floating-point operations per parameter "
        f"and token. This model has N = {N:,} parameters. Train it on D = {COST_TOKENS:,} tokens.",
        latex=r"C \approx 6\,N\,D", ask="How many FLOPs? (scientific notation works: 1e12)", widget="number", decimal=True,
        data={"N": N})


# ---------------------------------------------------------------- 7. temperature
def _temp_ask(ctx):
    model, tok = ctx.model, ctx.tokenizer
    ids, new = M.fitted_prompt(ctx.ids, ctx.config.n_ctx)
    pair = M.temperature_pair(model, ids, lambda t, s: [r["id"] for r in draw(model, ids, new, t, seed=s,
                                                                               chars=tok.pieces)[0]], ctx.seed)
    cut = (f" Your prompt is long: the model continues its last {len(ids):,} {tok.units}, so that the {new} drawn "
           "ones fit in its context.") if len(ids) < len(ctx.ids) else ""
    return Question(
        "Dividing the logits by a temperature T before the softmax sharpens the distribution (T < 1) or flattens it "
        "(T > 1). Below, two continuations of your prompt: one drawn at T = 0.2, one at T = 2, in an order you do "
        "not know." + cut,
        latex=r"p_i = \frac{e^{z_i / T}}{\sum_j e^{z_j / T}}",
        shows=tuple((name, tok.shown_text(list(t)) or "(nothing)") for name, t in zip("AB", pair["texts_ids"])),
        **_radio("Which one was drawn at T = 0.2?", {0: "A", 1: "B"}), redraw=True, link={"T": 0.2},
        data={"pair": pair})


def _temp_reveal(q, m, grade, guess=None):
    return Reveal(f"{'AB'[m['cold']]} was drawn at T = 0.2: the model finds it more typical.")


# ---------------------------------------------------------------- 8. scaling
def _scaling_ask(ctx):
    N0, D0 = CHINCHILLA_AT
    return Question(
        "The Chinchilla law predicts the loss of a model of N parameters trained on D tokens. Take "
        f"N = {pretty_sci(N0)} and D = {pretty_sci(D0)} ({pretty_sci(D0 / N0)} tokens per parameter).",
        latex=r"L(N, D) = E + \frac{A}{N^{\alpha}} + \frac{B}{D^{\beta}}",
        **_radio("Which lowers the predicted loss more?", {"N": "doubling the parameters", "D": "doubling the data"}))


def _scaling_measure(ctx, q):
    N0, D0 = CHINCHILLA_AT
    base = float(CHINCHILLA.loss(N0, D0))
    return {"base": base, "drops": {"N": base - float(CHINCHILLA.loss(2 * N0, D0)),
                                    "D": base - float(CHINCHILLA.loss(N0, 2 * D0))}}


def _scaling_reveal(q, m, grade, guess=None):
    return Reveal(f"Doubling {'the parameters' if grade.answer == 'N' else 'the data'} helps more, from "
                  f"L = {m['base']:.4f}.")


# ---------------------------------------------------------------- 9. the induction head forms
def _forming_ask(ctx):
    return Question(
        "An induction head is not there from the start: it forms during training, and when it does the loss on a "
        "repeated text's second copy falls far below the first copy's. The lesson compares the first and the last "
        "saved snapshot of this model, on repeated random sequences.",
        **_radio("From the first snapshot to the last, which loss fell more?",
                 {"first": "the first copy's", "second": "the second copy's"}),
        link={"step": ctx.snapshots[0]}, data={"step": ctx.snapshots[0]})


def _forming_measure(ctx, q):
    s0, end = q.data["step"], ctx.scores
    try:
        early = head_scores(ctx.load_step(s0)[0], tokenizer=ctx.tokenizer)
    # a snapshot deleted or damaged since the list was read: said in words, the step shows no comparison
    except CheckpointError as e:
        return {"problem": f"The snapshot of step {s0:,} could not be read ({Path(e.path).name}: {e.problem}), so "
                           "there is nothing to compare the end of training with."}
    return {"step": s0, "early": (early.first_copy_loss, early.second_copy_loss),
            "end": (end.first_copy_loss, end.second_copy_loss)}


def _forming_grade(q, m, guess):
    (e1, e2), (f1, f2) = m["early"], m["end"]
    drops = {"first": e1 - f1, "second": e2 - f2}
    if not max(drops.values()) > 0:  # both rose (or stayed): "which fell more" has no answer
        return Grade(None, None, f"the first copy's loss {change(drops['first'], ' nats')} and the second's "
                                 f"{change(drops['second'], ' nats')}", call="neither loss fell")
    return grade_choice(drops, guess, label=lambda k: f"the {k} copy's loss", say=lambda v: change(v, " nats"))


def _forming_reveal(q, m, grade, guess=None):
    (e1, e2), (f1, f2) = m["early"], m["end"]
    return Reveal(f"At step {m['step']:,}: first copy {e1:.2f}, second {e2:.2f} nats; at the end: {f1:.2f} and "
                  f"{f2:.2f}.")


# ---------------------------------------------------------------- 10. taking a piece out
PIECES = {"no-residual": "the residual connections", "no-mlp": "the MLP"}
DEEP = ("deep-L6", "deep-L12")  # the study's deeper stacks, each with its twin without residual or LayerNorm ("-bare")


def _piece_ask(ctx):
    blocks = ctx.study().rows["lecture"]["n_layers"]
    return Question(
        f"The shipped variant study trained the lecture's model ({number_word(blocks)} blocks) again with one piece "
        "taken out, on the same text with the same recipe. The held-out loss says what each piece was worth.",
        **_radio("Which hurts the held-out loss more when taken out?", PIECES))


def _piece_measure(ctx, q):
    study = ctx.study()
    base = study.loss("lecture")
    deep = {v: {"n_layers": study.rows[v]["n_layers"], "d_model": study.rows[v]["d_model"], "with": study.loss(v),
                "bare": study.loss(v + "-bare")} for v in DEEP if study.has(v, v + "-bare")}
    return {"base": base, "rises": {v: study.loss(v) - base for v in PIECES},
            "blocks": study.rows["lecture"]["n_layers"], "deep": deep}


def _piece_reveal(q, m, grade, guess=None):
    words = (f"The full block: {m['base']:.3f} nats per character (the study's character models); without "
             f"{PIECES[grade.answer]} the loss rises most. But this model has only {number_word(m['blocks'])} blocks, "
             "and the lecture brings in the residual stream for deep stacks: without it every block must pass on "
             "everything through its own maps, and the gradient fades through many of them.")
    deep = m.get("deep") or {}
    if deep:
        words += (f" The study's deeper stacks (d = {next(iter(deep.values()))['d_model']}, on Why each piece) show "
                  "it, each trained with and without residual connections and LayerNorm:")
    metrics = tuple(pair for r in deep.values() for pair in (
        (f"{r['n_layers']} blocks, with residual and LayerNorm", f"{r['with']:.3f}"),
        (f"{r['n_layers']} blocks, without either", f"{r['bare']:.3f}")))
    return Reveal(words, metrics=metrics,
                  caption="Held-out loss in nats per character, under the causal mask." if deep else None)


# ---------------------------------------------------------------- the steps, in the lecture's order
# Step(key, title, the page that goes deeper, what it measures, when an answer is too close to call, ask,
# measure, grade, reveal, needs=..., on=...): core.lesson.records.Step. A step's functions are pure and take the
# Context, so a test runs each on a tiny model without a page
STEPS = [
    Step("key", "One head, one question", "pages/attention.py",
         "Where one head of the model looks from the last position of your prompt.",
         f"the two heaviest of the offered keys within {AMBIGUOUS_SHARE:.0%} of each other",
         _key_ask, lambda ctx, q: {"weights": M.key_weights(ctx.model, ctx.ids, *q.data["head"])}, _key_grade,
         _key_reveal),
    Step("mask", "Why the mask sits before the softmax", "pages/attention.py",
         "How far the earlier rows' weights move when only the last token changes, with the mask before or after "
         "the softmax.", "never: a change above float rounding (1e-6) is a yes",
         _mask_ask, lambda ctx, q: M.mask_experiment(ctx.model, ctx.ids, *q.data["head"]),
         lambda q, m, guess: grade_yes_no(m["mask_after_softmax"], MASK_CHANGE, guess == "yes"), _mask_reveal),
    Step("off", "Switching a head off", "pages/heads.py",
         "How the loss on the second copy of your prompt written twice changes when the induction head is off.",
         "a change within two standard errors of the per-token changes (at least 0.01 nats)",
         _off_ask, _off_measure, lambda q, m, guess: grade_direction(m["change"], m["noise"], guess), _off_reveal,
         needs=("induction",)),
    Step("block", "One block, counted", "pages/parameters.py", "The parameters of one block of this model.",
         "never: answers within 2% count", _block_ask, lambda ctx, q: M.block_numbers(ctx.config),
         lambda q, m, guess: grade_number(float(guess), m["per_block"], 0.02, say=lambda v: pretty_sci(round(v))),
         _block_reveal, on="model"),
    Step("share", "Where a block's parameters sit", "pages/parameters.py", "The MLP's share of one block.",
         "never: answers within 8% of the share count", _share_ask, lambda ctx, q: M.block_numbers(ctx.config),
         lambda q, m, guess: grade_number(guess / 100, m["mlp_share"], 0.08, say=percent), _share_reveal, on="model"),
    Step("cost", "What training costs", "pages/parameters.py", "The FLOPs of training this model, C = 6ND.",
         "never: answers within 10% count", _cost_ask,
         lambda ctx, q: {"N": q.data["N"], "flops": training_flops(q.data["N"], COST_TOKENS)},
         lambda q, m, guess: grade_number(float(guess), m["flops"], 0.10),
         lambda q, m, grade, guess=None: Reveal(f"C = 6 × {m['N']:,} × {COST_TOKENS:,} = {pretty_sci(m['flops'])} "
                                                "FLOPs."), on="model"),
    Step("temp", "Temperature", "pages/generation.py",
         "Two continuations of your prompt, one drawn cold and one hot, and how typical the model finds each.",
         "the two texts alike: the same, or mean log-probabilities within 0.1 nats",
         _temp_ask, lambda ctx, q: q.data["pair"], lambda q, m, guess: M.which_is_cold(m, guess), _temp_reveal),
    Step("scaling", "More parameters or more data?", "pages/scaling.py",
         "The Chinchilla law's loss after doubling N or D.", "the two drops within 5% of each other",
         _scaling_ask, _scaling_measure,
         lambda q, m, guess: grade_choice(m["drops"], guess, label={"N": "doubling N", "D": "doubling D"}.get,
                                          unit=" nats"), _scaling_reveal, on="nothing"),
    Step("forming", "The induction head forms", "pages/over_training.py",
         "The loss on both copies of repeated random sequences, at the first snapshot and at the end of training.",
         "the two drops within 5% of each other; neither loss fell: no answer", _forming_ask, _forming_measure,
         _forming_grade, _forming_reveal, needs=("induction", "snapshots"), on="model"),
    Step("piece", "Taking a piece out", "pages/variants.py",
         "The held-out loss of the lecture's model trained again without its residual connections or its MLP.",
         "the two rises within 5% of each other", _piece_ask, _piece_measure,
         lambda q, m, guess: grade_choice(m["rises"], guess, label={"no-residual": "no residual",
                                                                     "no-mlp": "no MLP"}.get, unit=" nats"),
         _piece_reveal, needs=("study",), on="nothing"),
    Step("patch", "Patching between two prompts", "pages/cause_effect.py",
         "How much of the clean answer each head's output brings back into a corrupted copying prompt.",
         f"the two best heads within 5% of each other, or a clean run less than {MIN_GAP} above the corrupted one",
         _patch_ask, lambda ctx, q: M.head_patching(ctx.model, q.data["clean"], q.data["corrupt"]), _patch_grade,
         _patch_reveal, needs=("induction",), on="model"),
    Step("circuit", "The induction circuit", "pages/cause_effect.py",
         "How much of the clean answer each earlier head's output brings back when it reaches only the induction "
         "head's keys (path patching), and the head's score split by the sources that wrote its query and its key.",
         f"the two best paths within 5% of each other; no path restoring {CARRIES:.0%}: no head to name",
         _circuit_ask, _circuit_measure, _circuit_grade, _circuit_reveal,
         needs=("induction", "lecture block"), on="model"),
]
STEP = {s.key: s for s in STEPS}
