"""The learner's hunt (issue 59 §3): a learner runs a method on an answer key's model, picks the components they
believe form its circuit, and the pick is scored against the key (``score_pick``); the table of every method's grade
on every key, as ``python -m bench.answer_keys`` measured it (``read_grades``), and which method fails on which key
(``failures``); the head a Class round asks for (``induction_head``).

Precision: the share of the picked components that the key holds; recall: the share of the key's components that
were picked; F1: their harmonic mean (0 when both are 0). A pick is a set: naming a component twice counts it once.
"""
from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path

from core.analysis.answer_keys import INPUT, OUTPUT, AnswerKey, TaskSet, all_components, parse_component
from core.analysis.grading import SCORERS, pairs
from core.analysis.grading_scores import Scores
from core.serve.fmt import head_label
from core.serve.paths import REPO_ROOT

GRADES_CSV = REPO_ROOT / "bench" / "results" / "answer-keys.csv"  # written by python -m bench.answer_keys
RECOVERS = 0.9  # the bar: a method recovers a key when its AUROC is at least this
ARROW = "→"
NODE_WORDS = {INPUT: "tokens", OUTPUT: "logits"}
CONTROLS = {"random_twin": "a random-weight twin", "nonsense_task": "random labels"}  # the table's columns, in words


@dataclass(frozen=True)
class PickScore:
    picked: tuple[str, ...]   # the pick, each component once, in the order given
    hits: tuple[str, ...]     # picked and in the key
    extra: tuple[str, ...]    # picked, not in the key
    missed: tuple[str, ...]   # in the key, not picked
    precision: float
    recall: float
    f1: float


def score_pick(key: AnswerKey, picked, config=None) -> PickScore:
    """The pick scored against the key's components. ValueError, in words, for an empty pick or a name that is not
    a component (of ``config``'s model, when given: a pick made on another key's model names heads this one lacks)."""
    pick = tuple(dict.fromkeys(str(p) for p in picked))
    if not pick:
        raise ValueError("pick at least one component: the heads and MLPs you believe form the circuit")
    bad = []
    for name in pick:
        try:
            parse_component(name, config)
        except ValueError:
            bad.append(name)
    if bad:
        raise ValueError(f"{', '.join(bad)}: not {'a component' if len(bad) == 1 else 'components'} of this model"
                         + (f" ({', '.join(all_components(config))})" if config is not None else ""))
    truth = set(key.components)
    hits = tuple(p for p in pick if p in truth)
    precision = len(hits) / len(pick)
    recall = len(hits) / len(truth) if truth else math.nan
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return PickScore(pick, hits, tuple(p for p in pick if p not in truth),
                     tuple(c for c in key.components if c not in pick), precision, recall, f1)


def method_scores(model, task: TaskSet, method: str, count: int) -> tuple[Scores, float]:
    """``method``'s scores (core.analysis.grading's scorer) on ``count`` examples of the task, and their seconds."""
    if method not in SCORERS:
        raise ValueError(f"method must be one of {', '.join(SCORERS)} (got {method!r})")
    examples = pairs(task, model.config.n_ctx, count)
    t0 = time.perf_counter()
    return SCORERS[method](model, examples), time.perf_counter() - t0


def pick_words(s: PickScore) -> str:
    """The score in a sentence: what was right, what was extra, what was missed."""
    n = len(s.picked)
    parts = [f"{len(s.hits)} of your {n} {'pick' if n == 1 else 'picks'} {'is' if len(s.hits) == 1 else 'are'} in "
             "the key" + (f" ({', '.join(s.hits)})" if s.hits else "")]
    if s.extra:
        parts.append(f"{', '.join(s.extra)} {'is' if len(s.extra) == 1 else 'are'} not")
    parts.append(f"you missed {', '.join(s.missed)}" if s.missed else "you missed none of the key's components")
    return "; ".join(parts) + "."


def edge_lines(key: AnswerKey) -> list[str]:
    """The key's edges as the screen writes them: "tokens → L1 H2", "L2 H1 → logits"."""
    return [f"{NODE_WORDS.get(s, s)} {ARROW} {NODE_WORDS.get(t, t)}" for s, t in key.edges]


def edge_label(edge) -> str:
    """A scored edge (source, target) as one label."""
    return f"{edge[0]} {ARROW} {edge[1]}"


def induction_head(key: AnswerKey) -> str:
    """The head the key's head -> head edge runs into (the later layer's): in the previous-token -> induction circuit,
    the induction head. ValueError when the key has no such edge, or several that disagree."""
    heads = set()
    for s, t in key.edges:
        if INPUT in (s, t) or OUTPUT in (s, t):
            continue
        a, b = parse_component(s), parse_component(t)
        if a.kind == b.kind == "head":
            heads.add(t if b.layer > a.layer else s)
    if len(heads) != 1:
        raise ValueError(f"the key {key.name!r} has {'no' if not heads else len(heads)} head-to-head edge "
                         f"targets: it names no single induction head")
    return heads.pop()


def induction_question(key: AnswerKey, config) -> tuple[str, tuple[str, ...], str, str]:
    """A Class round on the key: (question, every head of the model as a choice, the key's induction head, the
    answer's words). The answer is read from the key (``induction_head``), never typed in."""
    right = induction_head(key)
    heads = tuple(head_label(l, h) for l in range(config.n_layers) for h in range(config.n_heads))
    sender = next(s for s, t in key.edges if t == right and s not in (INPUT, OUTPUT))
    question = (f"This small model was trained so that its circuit is known (the answer key “{key.name}”). Its task: "
                f"{key.task}. Which of its {len(heads)} heads is the induction head, the one that finds the earlier "
                "occurrence and copies the token after it?")
    words = (f"The key says {right}: the circuit runs {sender} {ARROW} {right}. {sender}, in the earlier layer, "
             f"writes at each position what came before it; {right} reads that to find the earlier occurrence of the "
             "current token and copies the token that followed it.")
    return question, heads, right, words


# ------------------------------------------------------------------------------------------------ the measured table
def _num(x: str) -> float:
    return float(x) if x not in ("", None) else math.nan


def read_grades(path=None) -> list[dict]:
    """The rows of bench/results/answer-keys.csv: key, method, auroc, precision, recall, random_twin, nonsense_task,
    finding and margin (floats, NaN where empty; the last four in the finding's ``unit``, "share" or "nats"), stands
    (True, False or None: no grade) and note. [] without the file."""
    path = Path(path) if path is not None else GRADES_CSV
    if not path.is_file():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            out = {k: _num(r.get(k, "")) for k in ("auroc", "precision", "recall", "random_twin", "nonsense_task",
                                                   "finding", "margin")}
            out.update(key=r["key"], method=r["method"], note=r.get("note", ""), unit=r.get("unit", ""),
                       stands={"True": True, "False": False}.get(r.get("stands", "")))
            rows.append(out)
    return rows


def _within(r: dict, control: str) -> bool:
    """Whether a control's largest score comes within the margin of the finding (NaN: it cannot be told apart)."""
    gap = r["finding"] - r[control]
    return not gap >= r["margin"] - 1e-9  # a NaN anywhere compares False: within


def failures(rows: list[dict]) -> dict[str, dict[str, list[str]]]:
    """For each method, the keys it fails on, grouped by why (in words): not graded at all, no grade (the key holds
    nothing it scores; said to be right when the finding there does not stand), an AUROC below RECOVERS (the scores
    miss the key), or a finding that does not stand: the method's largest score is not the margin above the largest
    it gives on the random twin, or on random labels. A graded row fails in part, too, where the call its page would
    make (score at or above the threshold) misses part of the key (recall below 1) or takes in what the key does not
    hold (precision below 1); a row can fail in more than one way."""
    out: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        for why in _whys(r):
            out.setdefault(r["method"], {}).setdefault(why, []).append(r["key"])
    return out


def _whys(r: dict) -> list[str]:
    if r["stands"] is None:
        why = "not graded" if r["note"].startswith("not graded") else "no grade (the key holds nothing it scores)"
        if why != "not graded" and math.isfinite(r["finding"]) and any(_within(r, c) for c in CONTROLS):
            why = "no grade (the key holds nothing it scores; rightly, its finding there does not stand)"
        return [why]
    whys = []
    if r["auroc"] < RECOVERS:
        whys.append(f"its scores miss the key (AUROC below {RECOVERS})")
    elif not r["stands"]:  # (a miss of the key says enough)
        nulls = [w for c, w in CONTROLS.items() if math.isfinite(r[c]) and _within(r, c)]  # NaN: not run
        verb = "scores" if nulls == ["a random-weight twin"] else "score"  # random labels score
        whys.append(f"its finding does not stand: {' and '.join(nulls) or 'the controls'} {verb} within the margin of it")
    if math.isfinite(r.get("recall", math.nan)) and r["recall"] < 1:
        whys.append("at its page's threshold it misses part of the key (recall below 1)")
    if math.isfinite(r.get("precision", math.nan)) and r["precision"] < 1:
        whys.append("at its page's threshold it also calls what the key does not hold (precision below 1)")
    return whys


def stands_on(rows: list[dict]) -> dict[str, list[str]]:
    """For each method, the keys where its finding stands above both controls."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r["stands"]:
            out.setdefault(r["method"], []).append(r["key"])
    return out
