"""Null controls beside a page's circuit claim (issue 59 §2): the same method, run by the page's own function, on a
random-weight twin of the model and on a nonsense version of the task, and a verdict in words.

Why: a method always finds *something*. Patching names a strongest head on any network, path patching a best path
for any question, an ablation a head that matters most on any text. A finding counts only when it is clearly larger
than what the same method finds where there is nothing to find: on weights that learned nothing (the twin) and on a
question the model has no circuit for (the nonsense task).

The comparison is of effect sizes, what a page's claim is ("L1 H3 restores 56 % of the clean answer"): the claim's
value against the largest value the same method gives to *anything* on each control (the null's max), in the claim's
own unit, with a margin. The finding stands when it is at least ``margin`` above both maxima (``Control.stands``).

- Patching (``head_patching``, ``path_patching``: Cause and effect's heads table and its paths into a head's keys, the
  Lesson's step 12). Unit: the share of the clean answer's lead, M(clean) - M(corrupted) on the trained model, with
  the page's metric. A control's score is what it restores *in logits* (its own share times its own gap) over that same
  lead: a share is scale-free, and a network whose clean and corrupted runs differ by 0.001 logits has heads that
  "restore 60 %" of nothing. The nonsense task: the page's answer and wrong tokens replaced by ``NONSENSE_DRAWS``
  pairs of tokens drawn at random (``NONSENSE_SEED``; never the real two). The prompt pair stays: the circuit the
  corruption breaks is still there, but it carries nothing towards two arbitrary tokens, so what a head "restores" of
  their difference is what the method finds without an answer (a shuffled prompt would keep repeats an induction head
  can still copy from). Margin: ``CARRIES`` (10 points), the share at which the page says a path carries the answer.
- Head ranking by ablation (``head_ranking``, Switch heads off). Unit: nats, the rise of the mean loss over the
  claim's positions (the second copy of a prompt written twice, else every prediction). The nonsense task: the prompt's
  tokens shuffled (``NONSENSE_SEED``); its labels are its own next tokens, so shuffling them means shuffling the text,
  which keeps every token and loses their order. Margin: ``COPY_GAIN`` (0.1 nats), the rise at which that page calls a
  head part of the copy.
- The attribution graph (``graph_edge``). Unit: the share of the explained output's input x_t (its logit minus the
  mean logit). The nonsense task: a random output the model did not predict (not among the graph's outputs) as the
  target; the claim is the strongest edge into the explained output. Margin: CARRIES. The twin cannot be run: the
  graph needs transcoders trained on the model's own activations, and a random twin has none; the control says so.

Everything runs through the page's own functions (``patch_heads``, ``paths_into``, ``head_losses`` with
``head_ranking.rank``, ``attribution_graph``), so through the model's forward and its TransformerLens-named hooks."""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.circuit import CARRIES, share_text
from core.analysis.head_ranking import COPY_GAIN, rank
from core.analysis.interventions import head_losses
from core.analysis import patching as P
from core.analysis.patching import Metric, patch_heads, paths_into
from core.analysis.picks import nan_argmax
from core.analysis.prompt_pairs import strongest_head
from core.nn.model import Transformer
from core.serve.fmt import head_label

TWIN_SEED = 0        # the random twin's initialisation
NONSENSE_SEED = 1    # the nonsense task's draw (random labels, the shuffle)
NONSENSE_DRAWS = 1   # random label pairs a patching claim is checked against: one patched run per layer each, and
#                      the controls stay within twice the method's time (the twin costs one method run)
PATH_KINDS = ("z", "mlp_out")  # what path patching records of a pair's runs (core.analysis.patching.path_patch_senders)
WHY = ("A method always finds something: the strongest head of a random network, the best path for a question "
       "with no answer. A finding counts only when it is clearly larger than what the same method finds where there "
       "is nothing to find.")


@dataclass(frozen=True)
class Control:
    """A claim and its two null controls: ``value`` the claim's effect, ``twin`` and ``nonsense`` the largest effect
    the same method gives to anything on the random twin and on the nonsense task, in ``unit`` ("share": of what the
    claim explains, printed as %; or "nats"). ``twin`` is NaN with ``twin_missing`` saying why it cannot be run."""
    claim: str
    value: float
    twin: float
    nonsense: float
    margin: float
    unit: str
    nonsense_is: str                 # what the nonsense task was, in words
    twin_missing: str | None = None
    seconds: float = math.nan        # both controls together

    def fmt(self, v: float) -> str:
        return share_text(v) if self.unit == "share" else ("undefined" if not math.isfinite(v) else f"{v:+.3f} nats")

    @property
    def null_max(self) -> float:
        """The larger of the two controls (the twin left out when it cannot be run); NaN when one is undefined."""
        vals = [self.nonsense] + ([] if self.twin_missing else [self.twin])
        return math.nan if any(not math.isfinite(v) for v in vals) else max(vals)

    @property
    def stands(self) -> bool:
        """The claim is at least ``margin`` above every control's largest effect (a NaN anywhere: it does not)."""
        if not (math.isfinite(self.value) and math.isfinite(self.null_max)):
            return False
        return self.value - self.null_max >= self.margin - 1e-9  # 0.3 - 0.2 is 0.0999... in floats

    @property
    def verdict(self) -> str:
        """The verdict in words, with the three numbers."""
        m = f"{100 * self.margin:.0f} points" if self.unit == "share" else f"{self.margin:.1f} nats"
        twin = f"the random twin's {self.fmt(self.twin)}" if not self.twin_missing else None
        ctl = " and ".join(x for x in (twin, f"the nonsense task's {self.fmt(self.nonsense)}") if x)
        both = "both controls" if not self.twin_missing else "the nonsense task"
        if self.stands:
            text = f"The finding stands above {both}: its {self.fmt(self.value)} is at least {m} above {ctl}."
        elif not math.isfinite(self.value):
            text = "It does not stand: the claim's own effect is undefined here."
        else:
            text = f"It does not stand above {both}: its {self.fmt(self.value)} is not {m} above {ctl}."
        if self.twin_missing:
            text += f" The random twin cannot be graded: {self.twin_missing}."
        return text


def random_twin(model, seed: int = TWIN_SEED) -> Transformer:
    """A model of the same config with fresh random weights (the global RNG is left as it was). The same config and
    seed give the same weights, so the last two twins are kept (``_twin``): a page's controls and the runs patching
    keeps per model (core.analysis.patching) then serve the next claim too. Frozen: never train it in place."""
    return _twin(model.config, seed)


@functools.lru_cache(maxsize=2)  # a GPT-2 small twin holds 0.5 GB: two at most
def _twin(config, seed: int) -> Transformer:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        twin = Transformer(config)
    return twin.eval().requires_grad_(False)


def shuffled(ids, seed: int = NONSENSE_SEED) -> list[int]:
    """``ids`` in an order drawn with ``seed``: the same tokens, none of their order."""
    return [int(ids[i]) for i in np.random.default_rng(seed).permutation(len(ids))]


def random_labels(metric: Metric, vocab_size: int, draws: int = NONSENSE_DRAWS, seed: int = NONSENSE_SEED,
                  avoid=()) -> list[Metric]:
    """``draws`` metrics of the same kind as ``metric`` on tokens drawn at random (never its own, nor ``avoid``)."""
    rng = np.random.default_rng(seed)
    used = {metric.answer, metric.wrong, *avoid}
    pool = np.array([t for t in range(vocab_size) if t not in used])
    out = []
    for _ in range(draws):
        a, w = (int(t) for t in rng.choice(pool, size=2, replace=False))
        out.append(Metric(a, w if metric.wrong is not None else None))
    return out


def _random_pairs(draws: int) -> str:
    return f"the same prompts, measured on {'a pair' if draws == 1 else f'{draws} pairs'} of random tokens instead"


def _lead(model, clean, corrupt, metric: Metric, kinds: tuple[str, ...]) -> float:
    """M(clean) - M(corrupted): the lead a share is a share of, read from the pair's runs that the method itself
    kept (core.analysis.patching's cache of the two runs, by the kinds it records): no forward of its own."""
    _, _, _, m_clean, m_corrupt = P._runs(model, clean, corrupt, metric, kinds)
    return m_clean - m_corrupt


def _restored(shares, lead: float, of: float) -> float:
    """The largest restored effect in logits (share x its own lead) as a share of ``of`` (the claim's lead); a share
    that is undefined (no lead) restores nothing."""
    return float(np.nanmax(np.abs(np.nan_to_num(np.asarray(shares, dtype=float))))) * abs(lead) / abs(of)


def head_patching(model, clean, corrupt, metric: Metric, what: str = "z", draws: int = NONSENSE_DRAWS) -> Control:
    """Cause and effect's claim: the strongest head (``strongest_head`` of ``patch_heads``) restores this share."""
    clean, corrupt = list(clean), list(corrupt)
    table = patch_heads(model, clean, corrupt, metric, what=what)
    best = strongest_head(table)
    lead = _lead(model, clean, corrupt, metric, (what,))
    t0 = time.perf_counter()
    twin = random_twin(model)
    t = _restored(patch_heads(twin, clean, corrupt, metric, what=what), _lead(twin, clean, corrupt, metric, (what,)),
                  lead)
    labels = random_labels(metric, model.config.vocab_size, draws)
    n = max(_restored(patch_heads(model, clean, corrupt, m, what=what), _lead(model, clean, corrupt, m, (what,)),
                   lead) for m in labels)
    return Control(f"{head_label(*best)}'s {what} restores {share_text(table[best])} of the clean answer",
                   abs(float(table[best])), t, n, CARRIES, "share",
                   _random_pairs(draws), seconds=time.perf_counter() - t0)


def path_patching(model, clean, corrupt, receiver: tuple[int, int], metric: Metric, via: str = "k",
                  draws: int = NONSENSE_DRAWS) -> Control:
    """The paths claim (Cause and effect's sentence under the score split, the Lesson's step 12): the earlier head
    whose path into ``receiver``'s ``via`` input restores most (``paths_into``) restores this share."""
    clean, corrupt = list(clean), list(corrupt)
    paths = paths_into(model, clean, corrupt, receiver, metric, via)
    if not paths:
        raise ValueError(f"{head_label(*receiver)} sits in the first layer: no earlier head has a path into it")
    senders = list(paths)
    at = nan_argmax([paths[s] for s in senders])
    best = senders[0 if at is None else at[0]]
    lead = _lead(model, clean, corrupt, metric, PATH_KINDS)
    t0 = time.perf_counter()
    twin = random_twin(model)
    t = _restored(list(paths_into(twin, clean, corrupt, receiver, metric, via).values()),
                  _lead(twin, clean, corrupt, metric, PATH_KINDS), lead)
    n = max(_restored(list(paths_into(model, clean, corrupt, receiver, m, via).values()),
                      _lead(model, clean, corrupt, m, PATH_KINDS), lead) for m in random_labels(metric, model.config.vocab_size,
                                                                                    draws))
    return Control(f"{head_label(*best)}'s path into {head_label(*receiver)}'s {via} restores "
                   f"{share_text(paths[best])} of the clean answer", float(np.nan_to_num(paths[best], nan=math.nan)),
                   t, n, CARRIES, "share", _random_pairs(draws),
                   seconds=time.perf_counter() - t0)


def _top_rise(model, ids, mode: str, period: int | None) -> tuple:
    """(the head whose switching off raises the loss most, the rise): over the second copy with ``period``."""
    base, per_head = head_losses(model, list(ids), mode)
    r = rank(base, per_head, period)
    e = r.top_second if period else r.top
    return (None, math.nan) if e is None else ((e.layer, e.head), float(e.increase))


def head_ranking(model, ids, mode: str = "zero", period: int | None = None) -> Control:
    """Switch heads off's claim: the head that matters most (on the second copy, for a prompt written twice) raises
    the loss by this many nats when off alone (``head_losses`` ranked by ``head_ranking.rank``)."""
    head, value = _top_rise(model, ids, mode, period)
    t0 = time.perf_counter()
    t = _top_rise(random_twin(model), ids, mode, period)[1]
    n = _top_rise(model, shuffled(ids), mode, period)[1]  # the same positions (the second copy's) of the shuffle
    where = "the second copy" if period else "the whole prompt"
    claim = (f"switching off {head_label(*head)} raises the loss on {where} by {value:+.3f} nats" if head else
             "no head's rise is a number")
    return Control(claim, value, t, n, COPY_GAIN, "nats", "the prompt's tokens shuffled",
                   seconds=time.perf_counter() - t0)


TWIN_GRAPH = ("the graph replaces each MLP by a transcoder trained on the model's own activations, and a random "
              "twin has none (training them would take longer than the page allows)")


def graph_edge(build, graph, vocab_size: int, label=None, seed: int = NONSENSE_SEED) -> Control:
    """The attribution graph's claim: the strongest edge into the explained output (``graph``'s first logit node)
    carries this share of the output's input. ``build(tokens)``: the page's graph for other outputs
    (``attribution_graph(..., logit_tokens=tokens)``); the nonsense target is a token drawn at random among those the
    graph does not explain. ``label(node)``: a node in words."""
    out = graph.slices()["logits"].start
    row, x_t = graph.adjacency[out], float(graph.inputs[out])
    s = int(np.argmax(np.abs(row)))
    rng = np.random.default_rng(seed)
    pool = [t for t in range(vocab_size) if t not in set(graph.logit_tokens)]
    t0 = time.perf_counter()
    other = build((int(pool[int(rng.integers(len(pool)))]),))
    o = other.slices()["logits"].start
    n = float(np.abs(other.adjacency[o]).max()) / abs(x_t)
    name = label(s) if label else f"node {s}"
    return Control(f"the edge from {name} carries {share_text(row[s] / x_t)} of the output's logit",
                   abs(float(row[s])) / abs(x_t), math.nan, n, CARRIES, "share",
                   "a random output the model did not predict as the target", twin_missing=TWIN_GRAPH,
                   seconds=time.perf_counter() - t0)
