"""A Class question on explanations (issue 58): "which of these three descriptions fits this feature?", graded by
the scores, never by a key typed in advance.

The options are the feature's own words and the words of two other explained units, the **distractors**. Every
option is graded by its rule's **detection** score (core.features.explain's scorer, ``Split.detection``: balanced
accuracy across the activation quantiles) on *this* feature's activations over held-out text. Distractors are picked
among the other explained units whose rules score at most LOW here (chance is 0.5), so that their words are
descriptions that do not fit; when fewer than two do, the lowest-scoring others fill in. The right option is the one
whose rule scores highest: normally the feature's own, but when a distractor's rule fits better, that one is marked
right and the reveal says so, with all three scores beside chance (0.5) and the feature's control.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.features.explain import MIN_FIRES, Split
from core.features.rules import UNEXPLAINED
from core.serve.class_rules import choice_key

OPTIONS = 3   # descriptions a question offers: the feature's own and two distractors
LOW = 0.55    # a distractor's rule scores at most this on the feature (chance: 0.5)


@dataclass(frozen=True)
class Question:
    unit: int                   # the feature asked about
    units: tuple[int, ...]      # whose words each option is, in the order shown
    options: tuple[str, ...]    # the words, in that order
    scores: tuple[float, ...]   # each option's rule's detection on the feature's activations
    right: int                  # the index of the option that scores highest (the feature's own on a tie)
    control: float              # the feature's control score (another unit's rule, from its explanation)

    @property
    def own(self) -> int:
        return self.units.index(self.unit)


def rule_scores(ids, acts, tokenizer, rules: dict) -> dict:
    """{name: detection of ``rules[name]`` on one unit's activations ``acts`` (W, T) over token windows ``ids`` (W, T)},
    by the project's scorer (each rule's mask computed once, however many units share it)."""
    split = Split(np.asarray(ids), np.asarray(acts, dtype=np.float32)[..., None], tokenizer)  # (W, T) -> (W, T, 1)
    return {name: round(split.detection(split.flat(rule), 0), 4) for name, rule in rules.items()}


def explained(explanations) -> dict:
    """{unit: explanation} of the units with a rule and words (not "unexplained")."""
    rows = explanations.values() if isinstance(explanations, dict) else explanations
    return {e["unit"]: e for e in rows if e["rule"] is not None and e["words"] != UNEXPLAINED}


def build_question(unit: int, explanations, ids, acts, tokenizer, seed: int = 0, distractors=None) -> Question:
    """The question on ``unit`` (an explained unit of ``explanations``, a list or {unit: explanation}), graded on its
    activations ``acts`` (W, T) over held-out windows ``ids`` (W, T). ``distractors``: the two other units whose
    words to offer (None: picked here, LOW-scoring ones drawn with numpy's default_rng(seed + unit)). The options are
    shuffled with the same generator. ValueError, in words, when the question cannot be asked."""
    known = explained(explanations)
    if unit not in known:
        raise ValueError(f"unit {unit} has no explanation to ask about (it is unexplained)")
    if int((np.asarray(acts) > 0).sum()) < MIN_FIRES:
        raise ValueError(f"unit {unit} fires fewer than {MIN_FIRES} times on the held-out text: it cannot be scored")
    rng = np.random.default_rng(seed + unit)
    own = known[unit]
    if distractors is None:
        others = [v for v in sorted(known) if v != unit and choice_key(known[v]["words"]) != choice_key(own["words"])]
        scored = rule_scores(ids, acts, tokenizer, {v: known[v]["rule"] for v in others})
        low = [v for v in others if scored[v] <= LOW]
        pool = [low[i] for i in rng.permutation(len(low))]  # LOW-scoring ones first, in a random order ...
        pool += sorted((v for v in others if scored[v] > LOW), key=lambda v: (scored[v], v))  # ... then the lowest
        distractors, said = [], {choice_key(own["words"])}
        for v in pool:  # two whose words read differently from the feature's and from each other
            if len(distractors) < OPTIONS - 1 and choice_key(known[v]["words"]) not in said:
                distractors.append(v)
                said.add(choice_key(known[v]["words"]))
    distractors = list(distractors)
    if len(distractors) != OPTIONS - 1 or any(v not in known or v == unit for v in distractors):
        raise ValueError(f"a question needs {OPTIONS - 1} other explained units as distractors")
    units = [unit, *distractors]
    units = [units[i] for i in rng.permutation(OPTIONS)]
    options = tuple(known[v]["words"] for v in units)
    if len({choice_key(w) for w in options}) < OPTIONS:
        raise ValueError("two of the descriptions read the same")
    got = rule_scores(ids, acts, tokenizer, {v: known[v]["rule"] for v in units})
    scores = tuple(got[v] for v in units)
    best = max(scores)
    right = units.index(unit) if got[unit] == best else scores.index(best)  # a tie goes to the feature's own
    return Question(unit, tuple(units), options, scores, right, float(own["control"]))


def reveal_words(q: Question, name: str = "feature") -> str:
    """What the reveal says: each description's score on the feature, beside chance and the control; and, when a
    distractor's rule fits better than the feature's own description, that it is the one marked right."""
    each = "; ".join(f"“{w}” {s:.2f}" + (" (its own description)" if i == q.own else "")
                     for i, (w, s) in enumerate(zip(q.options, q.scores)))
    said = (f"Each description's rule, scored on {name} {q.unit}'s activations over held-out text (detection: "
            f"chance is 0.50; another unit's rule, the control, scores {q.control:.2f}): {each}.")
    if q.right != q.own:
        said += (f" A distractor's rule fits this {name} better than its own description: “{q.options[q.right]}” "
                 f"({q.scores[q.right]:.2f} against {q.scores[q.own]:.2f}) is marked right.")
    return said
