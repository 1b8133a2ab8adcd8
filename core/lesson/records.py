"""The records of the Lesson as data (core.lesson.steps holds the 12 steps): ``Step`` (key, title, the page that shows
it in full, what it measures, what counts as too close to call, what it needs of a model, and four functions a page
runs in turn), what a step reads (``Context``), asks (``Question``) and shows once revealed (``Reveal``).

    ask(ctx)               -> Question   the prose, the question, its valid choices (cheap: before any guess)
    measure(ctx, q)        -> dict       the model's numbers, computed only when the learner reveals
    grade(q, m, guess)     -> Grade      the guess against them (core.lesson.grading); None: not marked
    reveal(q, m, g, guess) -> Reveal     the answer in words, a formula, metrics, a figure's data

``question(step, ctx)`` asks only where the model has what the step needs (an induction head, snapshots, the variant
study, the lecture's block); elsewhere it says so in words, and nothing is graded (``answer`` grades)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.analysis import patching as P
from core.analysis.induction import THRESHOLD, HeadScores
from core.analysis.prompt_pairs import strongest_head
from core.lesson.grading import Grade
from core.serve.fmt import head_label


@dataclass
class Context:
    """What a step reads: the model, its tokenizer, the prompt's ids, the model's head scores (the probe of
    core.analysis.induction), and, for the steps that need them, its snapshots and the variant study."""
    model: Any
    tokenizer: Any
    ids: tuple
    scores: HeadScores
    snapshots: tuple = ()                           # training steps with a saved snapshot
    load_step: Callable[[int], tuple] | None = None  # step -> (model, tokenizer); raises CheckpointError
    study: Callable[[], Any] | None = None           # -> core.views.variants_view.Study
    seed: int = 0                                    # step 7's draw

    @property
    def config(self):
        return self.model.config

    @property
    def tokens(self) -> list[str]:
        return self.tokenizer.visible_tokens(list(self.ids))

    @property
    def previous_head(self) -> tuple[int, int]:
        return strongest_head(self.scores.previous_token)  # NaN-safe; the scores are never negative

    @property
    def induction_head(self) -> tuple[int, int] | None:
        try:
            return self.scores.best_head()  # NaN-safe (core.analysis): None when every score is NaN
        except ValueError:
            return None

    @property
    def has_induction(self) -> bool:
        head = self.induction_head
        return head is not None and bool(self.scores.induction[head] >= THRESHOLD)  # NaN: no induction head


@dataclass(frozen=True)
class Question:
    text: str                    # what the step shows first (markdown)
    ask: str = ""                # the question
    widget: str = "radio"        # pills, radio, select, number, slider
    choices: tuple = ()          # the valid answers; the grade ranges over exactly these
    labels: tuple = ()           # how each choice reads
    latex: str | None = None
    shows: tuple = ()            # (name, text) pairs shown before the question (the texts to tell apart)
    button: str = "Check my answer"
    decimal: bool = False        # a number answer may have a fraction or an exponent (1e12)
    slider: tuple = (0, 100, 50)  # min, max, start
    redraw: bool = False         # a button draws other texts (step 7)
    link: dict = field(default_factory=dict)  # the full page's query, beyond model and prompt
    data: dict = field(default_factory=dict)  # what measure, grade and reveal read
    blocked: str | None = None   # set: the model lacks what the step needs; these words instead, and no grade


@dataclass(frozen=True)
class Reveal:
    words: str                   # the model's answer in words
    latex: str | None = None
    metrics: tuple = ()          # (label, value) pairs
    figure: tuple | None = None  # (kind, arguments) for pages.lesson.figures.step_figure
    caption: str | None = None


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    page: str                    # the page that shows it in full
    measures: str                # what it measures on the model and the prompt
    too_close: str               # what counts as too close to call
    ask: Callable[[Context], Question]
    measure: Callable[[Context, Question], dict]
    grade: Callable[[Question, dict, Any], Grade]
    reveal: Callable[[Question, dict, Grade, Any], Reveal]
    needs: tuple = ()            # of "induction", "snapshots", "study", "lecture block"
    on: str = "prompt"           # what a revealed answer belongs to: "prompt" (and model), "model", "nothing"


def unmet(step: Step, ctx: Context) -> str | None:
    """Why ``step`` cannot be asked of ``ctx``'s model, in words; None when it can."""
    if "induction" in step.needs and not ctx.has_induction:
        head = ctx.induction_head
        best = "no head's score is a number" if head is None or not np.isfinite(ctx.scores.induction[head]) else (
            f"its highest is {head_label(*head)}'s, {ctx.scores.induction[head]:.2f}")
        return (f"This model has no induction head: none reaches an induction score of {THRESHOLD:.2f} ({best}, on "
                "repeated random sequences). This step is about what one does, so it has nothing to show here and is "
                "not marked. Pick a shipped model in the sidebar (both have one) to see it.")
    if "snapshots" in step.needs and len(ctx.snapshots) < 2:
        return ("This model has no snapshots saved during training, so this step has nothing to compare. Pick a "
                "shipped model in the sidebar, or train one with snapshots kept.")
    if "study" in step.needs and (ctx.study is None or not ctx.study().has("lecture", "no-residual", "no-mlp")):
        return "The shipped variant study (assets/variants) is missing or lacks these runs: this step needs it."
    why = P.sources_refusal(ctx.config) if "lecture block" in step.needs else None
    if why:  # the score split needs a stream that is a sum of writers
        return f"This step splits an attention score over the writers of the stream, and {why}."
    return None


def question(step: Step, ctx: Context) -> Question:
    """The step's question on ``ctx``, or, where the model lacks what it needs, a Question that says so."""
    why = unmet(step, ctx)
    return Question(text=step.measures, blocked=why) if why else step.ask(ctx)


def answer(step: Step, q: Question, m: dict, guess) -> tuple[Grade, Reveal]:
    """The grade of ``guess`` and what the reveal shows. A measure that could not be made (``m["problem"]``, in
    words) and a model with no number for any option are not graded, and show nothing more."""
    if m.get("problem"):
        return Grade(None, None, m["problem"], call="nothing to compare"), Reveal("")
    grade = step.grade(q, m, guess)
    return grade, (Reveal("") if grade.call == "no answer" else step.reveal(q, m, grade, guess))
