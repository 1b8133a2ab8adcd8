"""Grading the explorer's methods against the answer keys (issue 59 §2): a method run on a key's task gives every
component (or edge) a score; the key says which are the circuit; the grade is the ROC AUC of the scores against the
key, and precision and recall at the threshold the method's page uses. Beside each grade, two null controls of the
method's *finding*, the kind core.analysis.null_controls puts beside a page's claim.

Every method runs through the project's own functions:

- ``patching``: activation patching of each head's output z (``core.analysis.patching.patch_heads``, the Cause and
  effect page's heads table). Score: the share of the clean answer a head restores, over the examples.
  Threshold: ``core.analysis.circuit.CARRIES`` (10 %), the share at which the page says a path carries the answer.
- ``ablation``: each head switched off alone (zero: ``core.analysis.interventions.ablate_heads``, the switch Switch
  heads off's ranking ``rank_heads`` batches another way; a test checks the two agree), the rise of the answer's
  loss, mean over the examples. Threshold: ``core.analysis.head_ranking.COPY_GAIN`` (0.1 nats), the rise at which
  that page calls a head part of the copy.
- ``dla``: direct logit attribution (``core.analysis.trace.direct_logit_attribution``, the Inside page's "who wrote
  the prediction") of the logit difference answer - wrong, over heads and MLPs, mean over the examples. The page
  draws bars and sets no threshold; here a writer counts when it holds at least CARRIES of the bars' total size.
- ``path_patching``: for every head of a later layer, each earlier head's path into its queries, keys and values
  (``core.analysis.patching.paths_into``, the page's "which earlier head's path"); an edge's score is the largest
  share over q, k and v. Scores head -> head edges only: graded on the key's head -> head edges (a key without one
  has no edge grade). Threshold: CARRIES.
- ``edge_ablation``: each edge between two nodes (the input, heads, MLPs, the logits) cut alone, scored by the
  rise of the answer's loss (``core.analysis.answer_keys.cut_hooks``, path ablation). It is the key's own check
  (the key's edges were tested with it), not a page of the explorer: an upper bound for edge methods, no rival.
  Threshold: COPY_GAIN, as for the heads.
- ``attribution_graph``, ``attribution_graph_edges``: the attribution graph, edges split by head, on the key's own
  transcoders: each head's and MLP's (edge's) share of the answer's influence in the page's pruned graph; threshold
  CARRIES. What is faithful, and what it cannot see, in ``core.analysis.grading_graph``; no twin (``TWINLESS``).

The examples: ``EXAMPLES`` prompts of the key's task.json, each paired with a corrupted counterpart for the methods
that patch: another example of the same length whose answer differs. The metric is the logit difference between
the clean answer and the corrupted one's, as the Cause and effect page's default. Only prompts shorter than the
context are used. A share over the examples is the summed restored difference (in logits) over the summed gap
(clean - corrupted metric); scores keep their sign (a share restores the answer or pushes against it).

The null controls (``Grade.control``, a ``core.analysis.null_controls.Control``). They used to be AUROCs: the same
method on a random twin and on the task with shuffled answers, graded against the key. That asks the wrong thing:
on the nonsense task the circuit still moves every logit, so the method still ranks the circuit's heads first and
the AUROC stays at 1 whatever the labels. A null control asks whether the method's *finding*, what its page would
claim, is larger than what the same method finds where there is nothing to find. So, per key and method:

- the finding: the method's largest score on the trained model and the real task (largest in size for shares,
  largest rise for nats), in the claim's own unit;
- ``random_twin``: the largest score the same method gives to anything on ``null_controls.random_twin`` (its
  ``TWIN_SEED``) on the same examples with the real answers;
- ``nonsense_task``: the largest score it gives on the same examples when each is measured on two tokens drawn at
  random (``nonsense_labels``: ``null_controls.random_labels``, never the example's answer nor its counterpart's):
  the prompts, and so the circuit the corruption breaks, stay; what any head does to two arbitrary tokens' logits is
  noise, which cancels over the examples. Where only the labels differ, the nonsense metric is read off the very
  runs that measure the real one (no run of its own: ``_tapped`` for the patching methods, the kept logits for the
  ablations, the same trace for DLA).

Units: patching and path patching, restored logits over the trained model's summed gaps on the same examples (a
twin's share of its own gap would be scale-free: a random net's tiny gap gives huge shares of nothing); DLA, the
mean direct logit difference over the trained model's total |DLA|: the size of the heads' and MLPs' bars the page
draws for one example, mean over the examples (a share, so one unit and one margin with patching; the answer's own
logit difference can be small while writers cancel; and a share of the mean's own size could not fail, as the
largest of K writers holds at least 1/K of it, while a writer that only adds noise fills each example's bars and
leaves no mean); ablation and edge ablation, nats of the answer's (or the random token's) loss. The finding stands
when it is at least the method's margin above both controls (``MARGINS``: CARRIES, 10 points, for shares;
COPY_GAIN, 0.1 nats). The controls' own noise at EXAMPLES examples is about 0.1 to 0.3 of a share on a random
network, so on a random network used as "the model" the verdict is mostly, not always, "does not stand".
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.analysis.answer_keys import (AnswerKey, TaskSet, cut_hooks, load_key,
                                       parse_component)
from core.analysis.circuit import CARRIES, share_text
from core.analysis.head_ranking import COPY_GAIN
from core.analysis.interventions import ablate_heads
from core.analysis.grading_graph import score_graph, score_graph_edges
from core.analysis.grading_scores import Scores, _effect, _largest, candidate_edges
from core.analysis.null_controls import TWIN_GRAPH, Control, random_labels, random_twin
from core.analysis.patching import Metric, patch_heads, paths_into
from core.analysis.trace import direct_logit_attribution, trace
from core.serve.fmt import head_label

EXAMPLES = 64       # examples of the task a method is run on (each with its corrupted counterpart)
PAIR_SEED = 0       # which examples, and which counterpart each gets
NONSENSE_SEED = 1   # the nonsense task's random labels
MARGINS = {"share": CARRIES, "nats": COPY_GAIN}  # the finding above both controls by at least this: it stands
METHODS = ("patching", "ablation", "dla", "path_patching", "edge_ablation", "attribution_graph",
           "attribution_graph_edges")
SKIPPED: dict[str, str] = {}  # a method the keys cannot grade: its reason (none now)
TWINLESS = {"attribution_graph": TWIN_GRAPH, "attribution_graph_edges": TWIN_GRAPH}  # no twin to run: why
NONSENSE_IS = ("the same examples, each measured on two tokens drawn at random (never its answer nor its "
               "counterpart's; the graph explains the first)")


@dataclass(frozen=True)
class Pair:
    clean: tuple[int, ...]
    corrupt: tuple[int, ...]  # another example of the same length
    answer: int               # the clean prompt's answer
    wrong: int                # the corrupted prompt's answer (never the clean one)


@dataclass
class Grade:
    key: str
    method: str
    level: str                 # "components" or "edges"
    auroc: float               # NaN where the key has nothing (or everything) of what the method scores
    precision: float
    recall: float
    random_twin: float = math.nan    # the method's largest score on the random twin, in ``unit``
    nonsense_task: float = math.nan  # its largest score on the nonsense labels, in ``unit``
    finding: float = math.nan        # its largest score on the trained model and the real task, in ``unit``
    unit: str = ""
    margin: float = math.nan
    threshold: float = math.nan
    positives: int = 0
    negatives: int = 0
    seconds: float = 0.0             # the method on the key (the nonsense labels read off the same runs)
    control_seconds: float = 0.0     # the random twin
    scores: Scores | None = field(default=None, repr=False)
    control: Control | None = field(default=None, repr=False)

    @property
    def stands(self) -> bool:
        """The finding is at least the margin above both controls' largest scores (``Control.stands``)."""
        return self.control is not None and self.control.stands

    @property
    def verdict(self) -> str:
        """The verdict in words (null_controls' wording), after "no grade" where the key holds nothing scored."""
        text = self.control.verdict if self.control is not None else "No controls were run."
        if math.isnan(self.auroc):
            return f"No grade: the key holds nothing of what this method scores. {text}"
        return text


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


def nonsense_labels(examples: list[Pair], vocab_size: int, seed: int = NONSENSE_SEED) -> list[Metric]:
    """The nonsense task: for each example a metric on two tokens drawn at random (``random_labels``), never its
    answer nor its counterpart's. The loss methods read the first token's loss."""
    seeds = np.random.default_rng(seed).integers(2**32, size=len(examples))
    return [random_labels(Metric(e.answer, e.wrong), vocab_size, 1, int(s))[0] for e, s in zip(examples, seeds)]


# ------------------------------------------------------------------------------------------------ the methods
@dataclass(frozen=True)
class _Tap(Metric):
    """The page's metric, which also reads ``other`` off every run it is shown (both kept in ``seen``, in order)."""
    other: Metric | None = None
    seen: list = field(default_factory=list, compare=False, repr=False)

    def of_logits(self, logits: torch.Tensor) -> torch.Tensor:
        real = super().of_logits(logits)
        self.seen.append((real, real if self.other is None else self.other.of_logits(logits)))
        return real


def _tapped(run, metric: Metric, other: Metric | None) -> tuple[np.ndarray, float, np.ndarray]:
    """``run(metric)``, a patching function of core.analysis.patching, with ``other`` read off the same runs:
    (restored (R,), gap, restored for ``other`` (R,)), in logits: each patched run's metric minus the corrupted run's,
    over every row of the patched batches in order, and M(clean) - M(corrupted). The patching functions show a
    metric the clean run, then the corrupted run (``_runs``), then each patched batch (``_patched``)."""
    tap = _Tap(metric.answer, metric.wrong, other)
    run(tap)
    (c, _), (x, x_other), *rows = tap.seen
    real = torch.cat([r.reshape(-1) for r, _ in rows]) - x
    fake = torch.cat([o.reshape(-1) for _, o in rows]) - x_other
    return real.numpy(), float(c[0] - x[0]), fake.numpy()


def _each(examples, labels):
    return zip(examples, labels if labels is not None else [None] * len(examples))


def score_patching(model, examples: list[Pair], labels: list[Metric] | None = None, norm: float | None = None) -> Scores:
    """Each head's output put back from the clean run (``patch_heads``, what "z"): the logits it restores over the
    summed gaps (``norm``, the trained model's, for a twin), signed. ``labels``: the nonsense task's, read off the
    same runs."""
    c = model.config
    real, fake, gaps = 0.0, 0.0, 0.0
    for e, bad in _each(examples, labels):
        r, g, f = _tapped(lambda m: patch_heads(model, list(e.clean), list(e.corrupt), m, what="z"),
                          Metric(e.answer, e.wrong), bad)
        real, fake, gaps = real + r, fake + f, gaps + abs(g)
    names = [head_label(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]  # patch_heads' (L, h) order
    norm = gaps if norm is None else norm
    values = real / norm
    at = _largest(values, "share")
    return Scores(names, values, CARRIES, "components", _effect(values, "share"),
                  _effect(fake / norm, "share") if labels is not None else math.nan, norm, "share",
                  f"{names[at]}'s z restores {share_text(values[at])} of the clean answer")


def score_dla(model, examples: list[Pair], labels: list[Metric] | None = None, norm: float | None = None) -> Scores:
    """Each head's and MLP's direct logit difference answer - wrong (``direct_logit_attribution``), mean over
    examples; the threshold CARRIES of the mean's total size. The finding is a share of ``norm`` (the trained
    model's, for a twin): the total size of the bars the page draws for one example, mean over the examples (a
    writer that only adds noise, pushing one way on one example and the other on the next, fills the bars and
    leaves no mean). ``labels``: the nonsense task's, attributed on the same traces."""
    total, fake, size = 0.0, 0.0, 0.0
    for e, bad in _each(examples, labels):
        tr, pos = trace(model, list(e.clean)), len(e.clean) - 1
        a = direct_logit_attribution(model, tr, e.answer, pos)
        keep = [i for i, n in enumerate(a.names) if _is_component(n)]  # not the embedding, nor a W_O bias
        v = (a.values - direct_logit_attribution(model, tr, e.wrong, pos).values)[keep]
        total, size = total + v, size + float(np.abs(v).sum())
        if bad is not None:
            fake = fake + (direct_logit_attribution(model, tr, bad.answer, pos).values
                           - direct_logit_attribution(model, tr, bad.wrong, pos).values)[keep]
    names, values = [a.names[i] for i in keep], total / len(examples)
    norm = size / len(examples) if norm is None else norm
    at = _largest(values, "share")
    return Scores(names, values, CARRIES * float(np.abs(values).sum()), "components", _effect(values / norm, "share"),
                  _effect(fake / len(examples) / norm, "share") if labels is not None else math.nan, norm,
                  "share", f"{names[at]} writes {share_text(values[at] / norm)} of the heads' and MLPs' direct "
                           "logit difference")


def score_paths(model, examples: list[Pair], labels: list[Metric] | None = None, norm: float | None = None) -> Scores:
    """Every earlier head's path into each later head's q, k and v (``paths_into``): an edge (sender, receiver)
    scores its largest share over the three; the finding is the largest path in size. ``labels``, ``norm``: as
    ``score_patching``."""
    c = model.config
    receivers = [(l, h) for l in range(1, c.n_layers) for h in range(c.n_heads)]
    real: dict[tuple, np.ndarray] = {}
    fake: dict[tuple, np.ndarray] = {}
    gaps = 0.0
    # example by example, every receiver and input of one pair together: the page's cache of the pair's clean and
    # corrupted runs (core.analysis.patching._runs, the last few pairs) then serves them all
    for e, bad in _each(examples, labels):
        m = Metric(e.answer, e.wrong)
        for r in receivers:
            for via in ("q", "k", "v"):
                got, g, f = _tapped(lambda t: paths_into(model, list(e.clean), list(e.corrupt), r, t, via), m, bad)
                real[r, via], fake[r, via] = real.get((r, via), 0.0) + got, fake.get((r, via), 0.0) + f
        gaps += abs(g) if receivers else 0.0
    norm = gaps if norm is None else norm
    best: dict[tuple[str, str], float] = {}
    paths, nonsense = [], []
    for (r, via), rows in real.items():
        senders = [(l, h) for l in range(r[0]) for h in range(c.n_heads)]  # paths_into's order
        for s, v, f in zip(senders, rows / norm, fake[r, via] / norm):
            edge = (head_label(*s), head_label(*r))
            best[edge] = max(best.get(edge, -math.inf), float(np.nan_to_num(v, nan=-math.inf)))
            paths.append((f"{edge[0]}'s path into {edge[1]}'s {via}", float(v)))
            nonsense.append(float(f))
    names = list(best)
    at = _largest([v for _, v in paths], "share")
    return Scores(names, np.array([best[n] for n in names]), CARRIES, "edges",
                  _effect([v for _, v in paths], "share"),
                  _effect(nonsense, "share") if labels is not None else math.nan, norm, "share",
                  "" if at is None else f"{paths[at][0]} restores {share_text(paths[at][1])} of the clean answer")


@torch.no_grad()
def _rises(model, examples: list[Pair], labels: list[Metric] | None, items: list, logits_with) -> tuple:
    """(rise (K,), nonsense rise (K,)): for each of ``items`` switched off (``logits_with(idx, item)``: the last
    position's logits (B, m)), the rise of the answer's loss over the intact model's, mean over the examples; and of
    the nonsense token's loss, read off the same logits (zeros without ``labels``). Examples of one length run as one
    batch."""
    rise, fake = np.zeros(len(items)), np.zeros(len(items))
    by_len: dict[int, list[int]] = {}
    for i, e in enumerate(examples):
        by_len.setdefault(len(e.clean), []).append(i)
    for group in by_len.values():
        idx = torch.tensor([examples[i].clean for i in group], dtype=torch.long)  # (B, n)
        rows = torch.arange(len(group))
        ans = torch.tensor([examples[i].answer for i in group])
        bad = torch.tensor([labels[i].answer for i in group]) if labels is not None else ans

        def losses(logits):  # (B, m) -> the answer's and the nonsense token's losses, (B,) each
            logp = logits.double().log_softmax(-1)
            return -logp[rows, ans], -logp[rows, bad]
        base, base_bad = losses(model(idx).logits[:, -1])
        for k, item in enumerate(items):
            off, off_bad = losses(logits_with(idx, item))
            rise[k] += float((off - base).sum())
            fake[k] += float((off_bad - base_bad).sum())
    return rise / len(examples), (fake / len(examples) if labels is not None else None)


def _nats(names, rise, fake, level: str, claim) -> Scores:
    at = _largest(rise, "nats")
    return Scores(names, rise, COPY_GAIN, level, _effect(rise, "nats"),
                  _effect(fake, "nats") if fake is not None else math.nan, 1.0, "nats",
                  "" if at is None else f"{claim(names[at])} raises the answer's loss by {rise[at]:+.3f} nats")


def score_ablation(model, examples: list[Pair], labels: list[Metric] | None = None, norm=None) -> Scores:
    """Each head switched off alone (``ablate_heads``, zero): the rise of the answer's loss, mean over examples.
    ``labels``: the nonsense tokens' losses, read off the same runs. ``norm``: unused (nats need none)."""
    c = model.config
    heads = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    rise, fake = _rises(model, examples, labels, heads, lambda idx, hd: ablate_heads(model, idx, [hd]).logits[:, -1])
    return _nats([head_label(*hd) for hd in heads], rise, fake, "components", lambda n: f"switching off {n}")


def score_edges(model, examples: list[Pair], labels: list[Metric] | None = None, norm=None) -> Scores:
    """Each candidate edge cut alone (``cut_hooks``: hooks per run, they keep its writes): the rise of the answer's
    loss, mean over examples; ``labels`` as ``score_ablation``."""
    edges = candidate_edges(model.config)
    rise, fake = _rises(model, examples, labels, edges,
                        lambda idx, edge: model(idx, hooks=list(cut_hooks(model, [edge]))).logits[:, -1])
    return _nats(edges, rise, fake, "edges", lambda e: f"cutting {e[0]} → {e[1]}")


SCORERS = {"patching": score_patching, "ablation": score_ablation, "dla": score_dla, "path_patching": score_paths,
           "edge_ablation": score_edges, "attribution_graph": score_graph, "attribution_graph_edges": score_graph_edges}


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


def grade(name: str, method: str, count: int = EXAMPLES, controls: bool = True, root=None, loaded=None) -> Grade:
    """The grade of ``method`` on the answer key ``name``: AUROC, precision and recall at the page's threshold, and
    (``controls``) the finding against its two null controls: the method's largest score on the random twin and on
    the nonsense labels (read off the method's own runs). ``loaded``: ``load_key``'s tuple, to skip loading (or to
    grade another model, e.g. a random one, on the key)."""
    if method not in SCORERS:
        raise ValueError(f"method must be one of {', '.join(SCORERS)} (got {method!r})")
    model, _, key, task = loaded or load_key(name, root)
    examples = pairs(task, model.config.n_ctx, count)
    if not examples:
        raise ValueError(f"{key.name}: no example has a counterpart of its length with another answer")
    labels = nonsense_labels(examples, model.config.vocab_size) if controls else None
    t0 = time.perf_counter()
    s = SCORERS[method](model, examples, labels)
    seconds = time.perf_counter() - t0
    members = truth(key, s)
    p, r = precision_recall(s.values, members, s.threshold)
    g = Grade(key.name, method, s.level, auroc(s.values, members), p, r, finding=s.effect, unit=s.unit,
              margin=MARGINS[s.unit], threshold=s.threshold, positives=int(members.sum()),
              negatives=int((~members).sum()), seconds=seconds, scores=s)
    if controls:
        t0 = time.perf_counter()
        twin = None if method in TWINLESS else SCORERS[method](random_twin(model), examples, norm=s.norm)  # its unit
        g.control_seconds = time.perf_counter() - t0
        g.random_twin, g.nonsense_task = twin.effect if twin else math.nan, s.nonsense
        g.control = Control(s.claim, s.effect, g.random_twin, s.nonsense, g.margin, s.unit, NONSENSE_IS,
                            TWINLESS.get(method), seconds=g.control_seconds)
    return g
