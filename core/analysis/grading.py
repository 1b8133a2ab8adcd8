"""Grading the explorer's methods against the answer keys (issue 59 §2): a method run on a key's task gives every
component (or edge) a score; the key says which are the circuit; the grade is the ROC AUC of the scores against the
key, and precision and recall at the threshold the method's page uses. Beside each grade, two null controls: the
same method on a random-weight twin of the model, and on a nonsense version of the task.

Every method runs through the project's own functions, the ones its page calls:

- ``patching``: activation patching of each head's output z (``core.analysis.patching.patch_heads``, the Cause and
  effect page's heads table). Score: the share of the clean answer a head restores, mean over the examples.
  Threshold: ``core.analysis.circuit.CARRIES`` (10 %), the share at which the page says a path carries the answer
  (the heads table itself draws no cut; the page opens on the largest share in size, ``strongest_head``).
- ``ablation``: each head switched off alone (zero), ranked by the rise of the answer's loss
  (``core.analysis.interventions.rank_heads``, what Switch heads off ranks with), the mean taken over the answer's
  position only. Threshold: a rise above ``core.analysis.head_ranking.COPY_GAIN`` (0.1 nats), the rise at which
  that page calls a head part of the copy.
- ``dla``: direct logit attribution (``core.analysis.trace.direct_logit_attribution``, the Inside page's "who wrote
  the prediction") of the logit difference answer - wrong, over heads and MLPs, mean over the examples. The page
  draws bars and sets no threshold; here a writer counts when it holds at least CARRIES of the bars' total size.
- ``path_patching``: for every head of a later layer, each earlier head's path into its queries, keys and values
  (``core.analysis.patching.paths_into``, the page's "which earlier head's path"); an edge's score is the largest
  mean share over q, k and v. Scores head -> head edges only: graded on the key's head -> head edges (a key
  without one has no edge grade). Threshold: CARRIES.
- ``edge_ablation``: each edge between two nodes (the input, heads, MLPs, the logits) cut alone, scored by the
  rise of the answer's loss (``core.analysis.answer_keys.cut_hooks``, path ablation). It is the key's own check
  (the key's edges were tested with it), not a page of the explorer: an upper bound for edge methods, no rival.
  Threshold: COPY_GAIN, as for the heads.

The attribution graph (its edges split by head, ``core.analysis.attribution.head_split``) needs a transcoder per
layer; no answer key ships one, so it is not graded (``SKIPPED``).

The examples: ``EXAMPLES`` prompts of the key's task.json, each paired with a corrupted counterpart for the methods
that patch: another example of the same length whose answer differs (resampling the whole prompt, so the clean and
corrupted runs differ in what the task reads and in the answer). The metric is the logit difference between the
clean answer and the corrupted one's, as the Cause and effect page's default. Only prompts shorter than the context
are used (the ablation reads the answer's loss, so the answer is appended). Shares are averaged weighted by each
pair's gap (clean - corrupted metric): the summed restored difference over the summed gap size. Scores keep their
sign (a share restores the answer or pushes against it): averaged over examples, a share that follows the answer
adds up, one that follows nothing cancels, which is what the nonsense control asks.

The controls: the random twin is ``core.analysis.null_controls.random_twin`` (its ``TWIN_SEED``), graded against the
same key on the same task; the nonsense task is the key's task with its answers shuffled among the examples
(``NONSENSE_SEED``). The verdict: a finding stands when its AUROC exceeds both controls' by at least ``MARGIN``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.analysis.answer_keys import (INPUT, OUTPUT, AnswerKey, TaskSet, all_components, cut_hooks, load_key,
                                       parse_component)
from core.analysis.circuit import CARRIES
from core.analysis.head_ranking import COPY_GAIN
from core.analysis.interventions import rank_heads
from core.analysis.null_controls import random_twin
from core.analysis.patching import Metric, patch_heads, paths_into
from core.analysis.trace import direct_logit_attribution, trace
from core.serve.fmt import head_label

EXAMPLES = 64       # examples of the task a method is run on (each with its corrupted counterpart)
PAIR_SEED = 0       # which examples, and which counterpart each gets
NONSENSE_SEED = 1   # the shuffle of the nonsense task's answers
MARGIN = 0.2        # AUROC above both controls by at least this: the finding stands
DIGITS = 6          # scores are compared to this many decimals (nats, shares, logits)
METHODS = ("patching", "ablation", "dla", "path_patching", "edge_ablation")
SKIPPED = {"attribution_graph": "the attribution graph needs a transcoder per layer; no answer key ships one"}


@dataclass(frozen=True)
class Pair:
    clean: tuple[int, ...]
    corrupt: tuple[int, ...]  # another example of the same length
    answer: int               # the clean prompt's answer
    wrong: int                # the corrupted prompt's answer (never the clean one)


@dataclass
class Scores:
    """A method's scores: one per name (a component "L1 H2", or an edge (source, target)), larger = more in the
    circuit; the threshold the page uses on them; what they are over ("components" or "edges")."""
    names: list
    values: np.ndarray
    threshold: float
    level: str

    def __post_init__(self):
        # differences below DIGITS decimals are rounding (a head trained to do nothing scores +-1e-8): ties, not a rank
        self.values = np.round(np.asarray(self.values, dtype=float), DIGITS)


@dataclass
class Grade:
    key: str
    method: str
    level: str                 # "components" or "edges"
    auroc: float               # NaN where the key has nothing (or everything) of what the method scores
    precision: float
    recall: float
    random_twin: float = math.nan    # the random twin's AUROC
    nonsense_task: float = math.nan  # the nonsense task's AUROC
    threshold: float = math.nan
    positives: int = 0
    negatives: int = 0
    seconds: float = 0.0             # the method on the key
    control_seconds: float = 0.0     # both controls together
    scores: Scores | None = field(default=None, repr=False)

    @property
    def stands(self) -> bool:
        return stands(self.auroc, self.random_twin, self.nonsense_task)

    @property
    def verdict(self) -> str:
        return verdict(self.auroc, self.random_twin, self.nonsense_task)


# ------------------------------------------------------------------------------------------------ the examples
def pairs(task: TaskSet, n_ctx: int, count: int = EXAMPLES, seed: int = PAIR_SEED) -> list[Pair]:
    """``count`` examples of ``task`` shorter than ``n_ctx``, each with a counterpart of the same length, another
    prompt and another answer, drawn in an order fixed by ``seed``. Fewer when the task has fewer such examples."""
    rng = np.random.default_rng(seed)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(task.prompts):
        if len(p) < n_ctx:
            by_len.setdefault(len(p), []).append(i)
    out = []
    for i in rng.permutation(len(task.prompts)):
        p = task.prompts[i]
        mates = [j for j in by_len.get(len(p), []) if task.answers[j] != task.answers[i] and task.prompts[j] != p]
        if len(p) >= n_ctx or not mates:
            continue
        j = mates[int(rng.integers(len(mates)))]
        out.append(Pair(p, task.prompts[j], task.answers[i], task.answers[j]))
        if len(out) == count:
            break
    return out


def nonsense(task: TaskSet, seed: int = NONSENSE_SEED) -> TaskSet:
    """The task with its answers shuffled among the examples: the same prompts, answers that no circuit computes."""
    order = np.random.default_rng(seed).permutation(len(task.answers))
    return TaskSet(task.prompts, tuple(task.answers[i] for i in order))


def _gap_mean(shares: list[np.ndarray], gaps: list[float]) -> np.ndarray:
    """The summed restored difference (share x gap) over the summed gap size; a pair whose share is undefined (NaN:
    no gap) adds nothing."""
    num = sum(np.nan_to_num(s * g) for s, g in zip(shares, gaps))
    den = sum(abs(g) for s, g in zip(shares, gaps) if not np.all(np.isnan(s)))
    return num / den if den > 0 else np.full(np.shape(shares[0]), np.nan)


# ------------------------------------------------------------------------------------------------ the methods
def score_patching(model, examples: list[Pair]) -> Scores:
    """Each head's output put back from the clean run (``patch_heads``, what "z"): the share of the clean answer it
    restores (signed: a head that pushes against the answer scores below one that does nothing)."""
    c = model.config
    shares, gaps = [], []
    for e in examples:
        m = Metric(e.answer, e.wrong)
        shares.append(patch_heads(model, list(e.clean), list(e.corrupt), m, what="z"))  # (L, h)
        gaps.append(m(model, e.clean) - m(model, e.corrupt))
    mean = _gap_mean(shares, gaps)
    names = [head_label(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    return Scores(names, mean.reshape(-1), CARRIES, "components")  # (L, h) -> (L h,), names in the same order


def score_ablation(model, examples: list[Pair]) -> Scores:
    """Each head switched off alone (``rank_heads``, zero), the rise of the answer's loss, mean over examples."""
    rise: dict[str, float] = {}
    for e in examples:
        for eff in rank_heads(model, list(e.clean) + [e.answer], "zero", positions=slice(-1, None)):
            name = head_label(eff.layer, eff.head)
            rise[name] = rise.get(name, 0.0) + eff.increase / len(examples)
    names = [head_label(l, h) for l in range(model.config.n_layers) for h in range(model.config.n_heads)]
    return Scores(names, np.array([rise[n] for n in names]), COPY_GAIN, "components")


def score_dla(model, examples: list[Pair]) -> Scores:
    """Each head's and MLP's direct share of the logit difference answer - wrong (``direct_logit_attribution``),
    mean over examples; the threshold is CARRIES of the scores' total size."""
    total = None
    for e in examples:
        tr = trace(model, list(e.clean))
        pos = len(e.clean) - 1
        a = direct_logit_attribution(model, tr, e.answer, pos)
        b = direct_logit_attribution(model, tr, e.wrong, pos)
        v = a.values - b.values
        total = v if total is None else total + v
    names = a.names
    keep = [i for i, n in enumerate(names) if _is_component(n)]  # not the embedding, nor a W_O bias
    values = total[keep] / len(examples)
    return Scores([names[i] for i in keep], values, CARRIES * float(np.abs(values).sum()), "components")


def score_paths(model, examples: list[Pair]) -> Scores:
    """Every earlier head's path into each later head's q, k and v (``paths_into``): an edge (sender, receiver)
    scores its largest mean share over the three."""
    c = model.config
    receivers = [(l, h) for l in range(1, c.n_layers) for h in range(c.n_heads)]
    # example by example, every receiver and input of one pair together: the page's cache of the pair's clean and
    # corrupted runs (core.analysis.patching._runs, the last few pairs) then serves them all
    shares: dict[tuple, list[np.ndarray]] = {}
    senders: dict[tuple, list] = {}
    gaps = []
    for e in examples:
        m = Metric(e.answer, e.wrong)
        gaps.append(m(model, e.clean) - m(model, e.corrupt))
        for r in receivers:
            for via in ("q", "k", "v"):
                got = paths_into(model, list(e.clean), list(e.corrupt), r, m, via)
                senders[r] = list(got)
                shares.setdefault((r, via), []).append(np.array([got[s] for s in senders[r]]))
    best: dict[tuple[str, str], float] = {}
    for (r, via), rows in shares.items():
        for s, v in zip(senders[r], _gap_mean(rows, gaps)):
            edge = (head_label(*s), head_label(*r))
            best[edge] = max(best.get(edge, -math.inf), float(np.nan_to_num(v, nan=-math.inf)))
    names = list(best)
    return Scores(names, np.array([best[n] for n in names]), CARRIES, "edges")


def candidate_edges(config) -> list[tuple[str, str]]:
    """Every edge a key could hold: from the input or a component to a later component or the logits (a block's
    heads read the stream before its MLP writes; heads of one layer never read each other)."""
    order = [INPUT] + all_components(config) + [OUTPUT]

    def rank(n):  # (layer, 0 for a head, 1 for an MLP); the input before all, the logits after
        if n == INPUT:
            return (-1, 1)
        if n == OUTPUT:
            return (config.n_layers, 0)
        comp = parse_component(n, config)
        return (comp.layer, 0 if comp.kind == "head" else 1)
    return [(s, t) for s in order[:-1] for t in order[1:] if rank(s) < rank(t) and s != t]


@torch.no_grad()
def score_edges(model, examples: list[Pair]) -> Scores:
    """Each candidate edge cut alone (``cut_hooks``): the rise of the answer's loss, mean over examples."""
    edges = candidate_edges(model.config)
    rise = np.zeros(len(edges))
    by_len: dict[int, list[Pair]] = {}
    for e in examples:
        by_len.setdefault(len(e.clean), []).append(e)
    for group in by_len.values():
        idx = torch.tensor([e.clean for e in group], dtype=torch.long)  # (B, n)
        ans = torch.tensor([e.answer for e in group])

        def loss(hooks=()):  # (B,) the answer's loss after the last token
            logits = model(idx, hooks=list(hooks)).logits[:, -1]  # (B, m)
            return -logits.double().log_softmax(-1)[torch.arange(len(group)), ans]
        base = loss()
        for k, edge in enumerate(edges):
            rise[k] += float((loss(cut_hooks(model, [edge])) - base).sum())  # hooks per run: they keep its writes
    return Scores(edges, rise / len(examples), COPY_GAIN, "edges")


SCORERS = {"patching": score_patching, "ablation": score_ablation, "dla": score_dla, "path_patching": score_paths,
           "edge_ablation": score_edges}


def _is_component(name: str) -> bool:
    try:
        parse_component(name)
        return True
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------------ the grade
def truth(key: AnswerKey, scores: Scores) -> np.ndarray:
    """Which of the scored names the key holds: (names,) bool."""
    inside = set(key.components) if scores.level == "components" else {tuple(e) for e in key.edges}
    return np.array([(tuple(n) if scores.level == "edges" else n) in inside for n in scores.names], dtype=bool)


def auroc(values, labels) -> float:
    """ROC AUC: the chance that a key member scores above a non-member, ties counted half (Mann-Whitney U over
    every pair). NaN scores rank below everything; NaN when either class is empty."""
    v = np.nan_to_num(np.asarray(values, dtype=float), nan=-np.inf)
    y = np.asarray(labels, dtype=bool)
    pos, neg = v[y], v[~y]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    diff = pos[:, None] - neg[None, :]  # (P, N) every member against every non-member
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def precision_recall(values, labels, threshold: float) -> tuple[float, float]:
    """Precision and recall of "score >= threshold" as the call "in the circuit" (precision NaN when nothing is
    called, recall NaN when the key holds nothing scored)."""
    called = np.nan_to_num(np.asarray(values, dtype=float), nan=-np.inf) >= threshold
    y = np.asarray(labels, dtype=bool)
    hit = int((called & y).sum())
    return (hit / called.sum() if called.any() else math.nan, hit / y.sum() if y.any() else math.nan)


def stands(value: float, twin: float, nonsense_auc: float, margin: float = MARGIN) -> bool:
    """The rule: the finding's AUROC exceeds both controls' by at least ``margin`` (a NaN anywhere: it does not)."""
    if any(math.isnan(x) for x in (value, twin, nonsense_auc)):
        return False
    return value - max(twin, nonsense_auc) >= margin - 1e-9  # 1.0 - 0.8 is 0.1999... in floats


def verdict(value: float, twin: float, nonsense_auc: float, margin: float = MARGIN) -> str:
    """The verdict in words."""
    if math.isnan(value):
        return "no grade: the key holds nothing of what this method scores"
    ctl = f"the random twin's {twin:.2f} and the nonsense task's {nonsense_auc:.2f}"
    if stands(value, twin, nonsense_auc, margin):
        return f"the finding stands: AUROC {value:.2f} is above {ctl} by at least {margin:.2f}"
    return f"the finding does not stand: AUROC {value:.2f} is not above {ctl} by {margin:.2f}"


def _grade_once(model, key: AnswerKey, task: TaskSet, method: str, count: int) -> tuple[Scores, float]:
    examples = pairs(task, model.config.n_ctx, count)
    if not examples:
        raise ValueError(f"{key.name}: no example has a counterpart of its length with another answer")
    s = SCORERS[method](model, examples)
    return s, auroc(s.values, truth(key, s))


def grade(name: str, method: str, count: int = EXAMPLES, controls: bool = True, root=None, loaded=None) -> Grade:
    """The grade of ``method`` on the answer key ``name``: AUROC, precision and recall at the page's threshold, and
    (``controls``) the random twin's and the nonsense task's AUROC. ``loaded``: ``load_key``'s tuple, to skip
    loading."""
    if method not in SCORERS:
        raise ValueError(f"method must be one of {', '.join(SCORERS)} (got {method!r})")
    model, _, key, task = loaded or load_key(name, root)
    t0 = time.perf_counter()
    s, value = _grade_once(model, key, task, method, count)
    seconds = time.perf_counter() - t0
    labels = truth(key, s)
    p, r = precision_recall(s.values, labels, s.threshold)
    g = Grade(key.name, method, s.level, value, p, r, threshold=s.threshold, positives=int(labels.sum()),
              negatives=int((~labels).sum()), seconds=seconds, scores=s)
    if controls:
        t0 = time.perf_counter()
        g.random_twin = _grade_once(random_twin(model), key, task, method, count)[1]
        g.nonsense_task = _grade_once(model, key, nonsense(task), method, count)[1]
        g.control_seconds = time.perf_counter() - t0
    return g
