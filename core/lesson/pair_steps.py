"""The Lesson's steps 11 and 12 (core.lesson.steps lists every step): patching between two prompts, and the
induction circuit followed into one head's keys by path patching, graded by the path that restores most (issue 59:
the head marked right is the one the circuit runs through, and the words never contradict the mark)."""
from __future__ import annotations

import numpy as np

from core.analysis import patching as P
from core.analysis.circuit import CARRIES, PREVIOUS_TOKEN, read_circuit, share_text, sources_view
from core.analysis.prompt_pairs import example_pair
from core.lesson import measures as M
from core.lesson.grading import Grade, grade_choice
from core.lesson.records import Question, Reveal
from core.serve.fmt import head_label

MIN_GAP = 0.5                # step 11: the clean run must beat the corrupted one by this much (logit difference)


def _pair_text(ctx, period, again) -> str:
    u = ctx.tokenizer
    return (f"The prompt: {period} random {u.units}, then the first {again} of them again, so that the next {u.unit} "
            "can only be found by copying from the first copy.")


def _pair_shows(ctx, ids) -> tuple:
    """The example prompt as the step shows it: its text for a character model; token by token (separated by a
    middle dot, spaces as ␣) for a sub-word model, whose random tokens run together into an unreadable string."""
    tok = ctx.tokenizer
    if tok.unit == "character":
        return (("", tok.decode(list(ids))),)
    return ((f"The prompt, {len(ids)} {tok.units} (separated by ·)", " · ".join(tok.visible_tokens(list(ids)))),)


def _patch_ask(ctx):
    clean, bad, period, again = example_pair(ctx.model, ctx.tokenizer, seed=2000)  # Cause and effect's example
    u = ctx.tokenizer.unit
    heads = [(l, h) for l in range(ctx.config.n_layers) for h in range(ctx.config.n_heads)]
    return Question(
        _pair_text(ctx, period, again) + f" A corrupted copy changes one {u}: the earlier occurrence of the last {u} "
        f"(position {bad.position + 1}). The clean run can copy the next {u}; the corrupted one cannot. Run the "
        "corrupted prompt with one head's output put back from the clean run, and see how much of the clean answer "
        "returns.",
        shows=_pair_shows(ctx, clean), ask="Which head's output restores the most?",
        widget="select", choices=tuple(heads), labels=tuple(head_label(*p) for p in heads), button="Patch every head",
        data={"clean": tuple(clean), "corrupt": tuple(bad.ids)})


def _patch_grade(q, m, guess):
    if not m["clean"] - m["corrupt"] >= MIN_GAP:
        return Grade(None, None, f"the clean run's logit difference ({m['clean']:.2f}) is not clearly above the "
                                 f"corrupted run's ({m['corrupt']:.2f})", call="nothing to restore")
    return grade_choice({p: float(m["table"][p]) for p in q.choices}, guess, label=lambda p: head_label(*p),
                        unit=" of the clean answer")


def _patch_reveal(q, m, grade, guess=None):
    if grade.answer is None:
        return Reveal("Corrupting the prompt hardly changes the answer, so no head has anything to put back.")
    return Reveal(f"{head_label(*grade.answer)} restores {m['table'][grade.answer]:.0%}.",
                  figure=("heads", dict(values=m["table"], title="Share restored by one head's output",
                                        selected=grade.answer)))


def _circuit_ask(ctx):
    clean, bad, period, again = example_pair(ctx.model, ctx.tokenizer, seed=2000)
    l, h = ctx.induction_head
    u = ctx.tokenizer.unit
    w = M.key_weights(ctx.model, clean, l, h)
    # the score split shown at the reveal is of the score the head acts on: from the last position to the key it
    # weighs most
    i, j = len(clean) - 1, int(np.nanargmax(w))
    senders = [(s, r) for s in range(l) for r in range(ctx.config.n_heads)]
    text = (_pair_text(ctx, period, again) + f" {head_label(l, h)} (this model's induction head, induction score "
            f"{ctx.scores.induction[l, h]:.2f}) looks from the last position to position {j + 1} (weight {w[j]:.2f}). "
            f"To find it, its key there must say which {u} came before. Corrupt the earlier occurrence of the last "
            f"{u} (position {bad.position + 1}), then put one earlier head's clean output back into **only this "
            "head's keys** (path patching), and see how much of the clean answer returns.")
    if not senders:  # a head of the first layer: no earlier head writes its keys
        return Question(text, blocked=f"{head_label(l, h)} sits in the first layer: no earlier head writes its keys.")
    return Question(
        text, shows=_pair_shows(ctx, clean),
        ask=f"Through which earlier head does the induction circuit reach {head_label(l, h)}'s keys: whose path "
            "restores most of the clean answer?", widget="select",
        choices=tuple(senders), labels=tuple(head_label(*p) for p in senders), button="Follow every path",
        link={"layer": l + 1, "head": h + 1},
        data={"clean": tuple(clean), "corrupt": tuple(bad.ids), "head": (l, h), "i": i, "j": j})


def _circuit_measure(ctx, q):
    # the measure runs at Reveal, not at ask: the path patching below is the step's costliest work
    (l, h), d = q.data["head"], q.data
    # every earlier head's path into the keys (what the step grades: the method the answer keys check) and the score
    # split beside it (what the figure draws), with the previous-token scores that name a head's habit
    clean, bad = list(d["clean"]), list(d["corrupt"])
    paths = P.paths_into(ctx.model, clean, bad, (l, h), P.Metric(*P.default_answers(ctx.model, clean, bad)))
    return dict(M.key_sources(ctx.model, clean, l, h, d["i"], d["j"]), previous_token=ctx.scores.previous_token,
                paths=paths)


def _circuit_grade(q, m, guess):
    paths = {p: m["paths"][p] for p in q.choices}
    g = grade_choice(paths, guess, label=lambda p: head_label(*p), say=share_text, unit=" of the clean answer")
    best = g.answer
    # a path that restores less than CARRIES carries nothing: there is no circuit head to name, so no mark
    if best is not None and not paths[best] >= CARRIES:
        return Grade(None, best, f"no earlier head's path restores {share_text(CARRIES)} of the clean answer; the "
                                 f"largest, {head_label(*best)}'s, restores {share_text(paths[best])}",
                     call="no single head carries it")
    return g


def _circuit_reveal(q, m, grade, guess=None):
    shown, rows, cols, reading = sources_view(m["table"], m["names"], k=10)
    c = read_circuit(reading, m["score"], m["previous_token"], m["paths"])
    (l, h), prev = q.data["head"], np.asarray(m["previous_token"], dtype=float)
    if grade.answer is None:
        words = "Path patching is undefined here: the two runs agree on the measure."
    elif not m["paths"][grade.answer] >= CARRIES:
        words = (f"No single earlier head's path into {head_label(l, h)}'s keys carries the answer: the largest, "
                 f"**{head_label(*grade.answer)}**'s (previous-token score {prev[grade.answer]:.2f}), restores "
                 f"{share_text(m['paths'][grade.answer])} of the clean answer (a path carries it from "
                 f"{share_text(CARRIES)}). What the corruption changed reaches the keys some other way: through more "
                 "than one head, or through a later writer such as an MLP.")
    else:
        p = grade.answer
        looks = prev[p] >= PREVIOUS_TOKEN
        words = (f"**{head_label(*p)}**: its clean output reaching only {head_label(l, h)}'s keys restores "
                 f"{share_text(m['paths'][p])} of the clean answer. Its previous-token score is {prev[p]:.2f} ("
                 + ("a previous-token head). That is the induction circuit, **K-composition**: a previous-token head "
                    "writes at each position which token came before, and this head's keys are read from it."
                    if looks else f"not a previous-token head, below {PREVIOUS_TOKEN:.2f}): the keys are built by "
                    "something other than the induction circuit's first half."))
    # the score split is a different measure: which writer adds most to the score on the clean prompt, whatever the
    # corruption changes; said as such, so that its largest part is not read as the circuit's head
    words += (f" The figure splits the score ({m['score']:.2f}) by source on the clean prompt, a different measure: "
              f"the largest part of the key's side is **{c.builder}**'s, {c.builder_total:+.2f}")
    if c.builder_previous is not None and grade.answer is not None and c.builder != head_label(*grade.answer):
        words += (f" (previous-token score {c.builder_previous:.2f}; its path restores {share_text(c.builder_path)}"
                  "): a large part of the score, but what the corruption changed does not reach the keys through it")
    return Reveal(words + ".", figure=("sources", dict(table=shown, rows=rows, cols=cols,
                                                        title=f"{head_label(l, h)}: score {m['score']:.2f}, split by source")))


