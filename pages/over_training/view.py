"""What the Over training page reads before any snapshot is loaded: which snapshots one view reads, within a cap
on their number and the server's memory budget for the page's work, and the sentences that say what was left out.
The page only lays these out."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.analysis.over_training import MAX_VIEW_SNAPSHOTS, pick_steps, view_memory
from core.serve.fmt import binary_bytes
from core.serve.sizes import size_setting

DEFAULT_VIEW_MEMORY = 384 * 2**20  # the page's work on one prompt; a 9.5 M-parameter model's needs about 170 MiB
MEMORY_ENV = "TE_OVER_TRAINING_MEMORY"


def view_budget(value: str | None = None) -> int | None:
    """Bytes the Over training page's work on one prompt may take: ``value``, by default the environment's
    TE_OVER_TRAINING_MEMORY (a size: 384M, 1G), else DEFAULT_VIEW_MEMORY. None: no limit (0). ValueError, in
    words, when it is not a size."""
    return size_setting(MEMORY_ENV, DEFAULT_VIEW_MEMORY, value)


@dataclass
class ViewPlan:
    """The snapshots one view reads, and why others are not."""
    listed: list[int]                 # every step the folder lists
    steps: list[int]                  # the ones this view reads: spread over the run, the first and last kept
    memory: int                       # the estimate for ``steps`` (bytes)
    budget: int | None                # the server's budget (None: no limit)
    refused: str | None = None        # why nothing is read (the prompt does not fit the budget even with 2)
    notes: list[str] = field(default_factory=list)  # what was left out, in words

    @property
    def left_out(self) -> int:
        return len(self.listed) - len(self.steps)


def plan_view(config, listed: list[int], n_tokens: int, held: int, budget: int | None,
              cap: int = MAX_VIEW_SNAPSHOTS) -> ViewPlan:
    """The snapshots a view of a prompt of ``n_tokens`` reads: at most ``cap`` of ``listed`` (pick_steps: spread
    over the run, the first and the last kept), fewer when their estimate (view_memory, with ``held`` models in
    memory at once: a cache may keep them all) is over ``budget``; none, with the reason, when even the first and
    the last do not fit."""
    listed = list(listed)
    k = min(cap, len(listed))
    steps = pick_steps(listed, k)
    notes = []
    if len(steps) < len(listed):
        notes.append(f"This view reads {len(steps)} of the {len(listed):,} snapshots, spread over the run (the first "
                     f"and the last kept): {len(listed) - len(steps):,} are left out, as the page reads at most {cap} "
                     "per view.")

    def need(count):
        return view_memory(config, count, n_tokens, held=held)

    if budget is None or need(len(steps)) <= budget:
        return ViewPlan(listed, steps, need(len(steps)), budget, notes=notes)
    fit = next((c for c in range(len(steps) - 1, 1, -1) if need(c) <= budget), None)
    if fit is None:
        most = max((n for n in range(2, n_tokens) if view_memory(config, 2, n, held=held) <= budget), default=None)
        shorten = (f" A prompt of at most {most:,} tokens would fit." if most is not None else
                   " This model is too large for the page within that budget.")
        return ViewPlan(listed, [], need(2), budget, refused=(
            f"Running this prompt ({n_tokens:,} tokens) through even the first and the last snapshot needs about "
            f"{binary_bytes(need(2))} of memory; the server allows {binary_bytes(budget)} for this page's work "
            f"({MEMORY_ENV}).{shorten}"), notes=notes)
    kept = pick_steps(listed, fit)
    notes.append(f"Only {fit} snapshots fit the memory the server allows this page's work ({binary_bytes(budget)}; "
                 f"all {len(steps)} would need about {binary_bytes(need(len(steps)))}): {fit} of them are read, spread "
                 "over the run, the first and the last kept.")
    return ViewPlan(listed, kept, need(fit), budget, notes=notes)
