"""How a run trains: its settings (``TrainConfig``), the two named recipes, the learning-rate schedule and the
optimisers. Nothing here touches data or a tokenizer; ``core.training.trainer`` builds the loop from these pieces."""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict

import torch

from core.nn.model import Transformer
from core.nn.snapshots import MAX_KEPT

OPTIMIZERS = ("muon", "adamw")
SCHEDULES = ("wsd", "cosine")


@dataclass
class TrainConfig:
    """How a run trains. Two named recipes (``RECIPES``, ``TrainConfig.recipe``):

    - "adamw", the usual one: AdamW on every parameter, linear warmup over 400 steps, cosine decay;
    - "muon": Muon on the blocks' weight matrices (their updates orthogonalised, so every direction of a
      matrix moves at the same pace), AdamW on the embeddings, norms and output map; a warmup that scales
      with the run, a constant rate, and a linear cooldown at the end ("wsd": warmup, stable, decay).
    The architecture is the same either way."""
    batch_size: int = 32
    steps: int = 12000
    optimizer: str = "adamw"  # "muon" or "adamw"
    lr: float = 3e-3          # AdamW's peak rate (for "muon": embeddings, norms and the output map)
    muon_lr: float = 0.02     # Muon's peak rate, for the blocks' matrices (unused by "adamw")
    muon_momentum: float = 0.95
    muon_ns_steps: int = 5    # Newton-Schulz iterations that orthogonalise each Muon update
    schedule: str = "cosine"  # "cosine": warmup then cosine decay; "wsd": warmup, constant, final cooldown
    warmup: int | None = 400  # linear warmup steps; None: warmup_frac of the run
    warmup_frac: float = 0.02
    cooldown_frac: float = 0.4  # "wsd": the last fraction of the steps decays linearly
    min_lr_ratio: float = 0.02  # both schedules end at lr * min_lr_ratio
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    beta2: float = 0.99       # small batches of characters: nanoGPT's char recipe uses 0.99
    eval_interval: int = 250
    eval_batches: int = 16
    seed: int = 1337
    # the repeat mixture (core.analysis.induction.add_repeats): rows whose random span is written again later, the data
    # on which an induction head pays off. Off by default; the induction model uses it (see its card)
    repeat_fraction: float = 0.0    # share of rows holding a repeated span
    repeat_first_steps: int = 0     # a curriculum: during the first steps every row holds one
    repeat_min_span: int = 20
    repeat_max_span: int = 60
    # the share of repeated spans made of random tokens; the rest repeat the row's own text, so the head also
    # learns to copy text it could partly predict anyway (natural text written twice)
    repeat_random_share: float = 1.0
    # the random tokens' pool: 0 draws them from the whole vocabulary; N from the training part's N most frequent
    # tokens, for the first repeat_pool_steps steps (0: the whole run). Why: the head's plateau grows with the number
    # of distinct tokens its spans are drawn from (bench/results/bpe-induction.md: 256 bytes formed, 1,024 never)
    repeat_pool: int = 0
    repeat_pool_steps: int = 0
    heads_interval: int = 100       # every so many steps each head is measured on the induction probe (0: never)
    snapshots: int = 20             # weights kept at this many log-spaced steps after step 0 (core.nn.snapshots; 0: none)

    def __post_init__(self):
        # the same messages the training form shows beside its fields: one validation, not two
        problems = train_problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems.values()))
        if self.warmup is None:
            # a warmup that scales with the run: a fixed count is most of a short run and a sliver of a long one
            self.warmup = max(1, round(self.warmup_frac * self.steps))

    @classmethod
    def recipe(cls, name: str, **overrides) -> "TrainConfig":
        """A named recipe of RECIPES, with any field overridden."""
        if name not in RECIPES:
            raise ValueError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
        return cls(**{**RECIPES[name], **overrides})


# The named recipes: only the fields where they differ from TrainConfig's plain defaults.
RECIPES: dict[str, dict] = {
    "adamw": dict(optimizer="adamw", schedule="cosine", lr=3e-3, warmup=400),
    # measured with bench/recipe.py (1,200 steps of the lecture's model): AdamW's rate 6e-3 for the embeddings,
    # norms and output map and a cooldown over the last half beat 3e-3 and 0.4; Muon's rate 0.015-0.03,
    # warmup 2-5% and 4 or 5 Newton-Schulz steps made no difference beyond the noise
    "muon": dict(optimizer="muon", schedule="wsd", lr=6e-3, muon_lr=0.02, warmup=None, warmup_frac=0.02,
                 cooldown_frac=0.5),
}
DEFAULT_RECIPE = "muon"
RECIPE_TITLES = {"muon": "Muon + AdamW", "adamw": "AdamW (the usual recipe)"}


def describe_recipe(name: str) -> str:
    """What a recipe does, in a few plain sentences, with its numbers."""
    tc = TrainConfig.recipe(name, steps=1000)  # any length: the sentences state fractions, not step counts
    if tc.optimizer == "muon":
        return (f"Muon updates each weight matrix of the blocks (W_Q, W_K, W_V, W_O, W1, W2) along an "
                f"orthogonalised version of its momentum: a few Newton-Schulz iterations push every singular "
                f"value of the update towards 1, so all directions of a matrix learn at the same pace instead of "
                f"a few dominant ones. Embeddings, norms and the output map keep AdamW. The rate warms up over "
                f"{tc.warmup_frac:.0%} of the run, stays constant, and falls linearly over the last "
                f"{tc.cooldown_frac:.0%} (Muon peak {tc.muon_lr:g}, AdamW peak {tc.lr:g}).")
    return (f"AdamW on every parameter: each weight gets its own step size from running averages of its "
            f"gradient and squared gradient. The rate warms up over a fixed {RECIPES[name]['warmup']} steps (a tenth "
            f"of a shorter run on the training page) and then follows a cosine down to {tc.min_lr_ratio:.0%} of its "
            f"peak ({tc.lr:g}).")


def _whole(value) -> bool:
    # bool is an int to Python, but True steps is a typo, not a number
    return isinstance(value, int) and not isinstance(value, bool)


def _rate(value) -> bool:
    # a peak rate above 1 is a typo for these optimisers, not a setting
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1


def train_problems(values: dict) -> dict[str, str]:
    """Field name -> what is wrong, for the training settings present in ``values``; empty when all is
    well. The one validation of a run's settings: TrainConfig raises with these messages, the training
    form shows them beside its fields."""
    problems: dict[str, str] = {}
    # a field absent from ``values`` is not checked: the form asks about the fields it shows
    for name in ("batch_size", "steps", "eval_interval", "eval_batches", "muon_ns_steps", "repeat_min_span",
                 "repeat_max_span"):
        if name in values and (not _whole(values[name]) or values[name] < 1):
            problems[name] = f"{name} must be a whole number of at least 1 (got {values[name]!r})"
    if values.get("warmup") is not None and (not _whole(values["warmup"]) or values["warmup"] < 0):
        problems["warmup"] = f"warmup must be a whole number of at least 0 (got {values['warmup']!r})"
    for name in ("lr", "muon_lr"):
        if name in values and not _rate(values[name]):
            problems[name] = f"{name} must be a number above 0 and at most 1 (got {values[name]!r})"
    for name in ("repeat_first_steps", "heads_interval", "snapshots", "repeat_pool", "repeat_pool_steps"):  # 0 is meaningful: no curriculum, probe, snapshot
        if name in values and (not _whole(values[name]) or values[name] < 0):
            problems[name] = f"{name} must be a whole number of at least 0 (got {values[name]!r})"
    if "snapshots" not in problems and values.get("snapshots", 0) > MAX_KEPT:  # a folder lists at most MAX_KEPT + 1
        problems["snapshots"] = f"snapshots must be at most {MAX_KEPT} (got {values['snapshots']!r})"
    # compared only once both spans are whole numbers, or the comparison itself could raise
    if ("repeat_min_span" not in problems and "repeat_max_span" not in problems
            and values.get("repeat_min_span", 1) > values.get("repeat_max_span", 1)):
        problems["repeat_max_span"] = (f"repeat_max_span ({values['repeat_max_span']}) must be at least "
                                       f"repeat_min_span ({values['repeat_min_span']})")
    for name in ("warmup_frac", "cooldown_frac", "min_lr_ratio", "muon_momentum", "repeat_fraction",
                 "repeat_random_share"):
        v = values.get(name, 0.5)  # an absent fraction stands in as a valid one
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1):
            problems[name] = f"{name} must be a number from 0 to 1 (got {v!r})"
    # the optimiser's own numbers: torch refuses some only once the run is built, and takes a NaN or a huge decay
    # without a word (every weight NaN, or wiped, after a step)
    bounds = {"weight_decay": (0, 1, "from 0 to 1"), "beta2": (0, 1 - 1e-12, "from 0 to below 1"),
              "grad_clip": (0, math.inf, "of at least 0 (0: no clipping)")}
    for name, (low, high, words) in bounds.items():
        v = values.get(name, low)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and low <= v <= high):
            problems[name] = f"{name} must be a number {words} (got {v!r})"
    if values.get("optimizer", OPTIMIZERS[0]) not in OPTIMIZERS:
        problems["optimizer"] = f"optimizer must be one of {', '.join(OPTIMIZERS)} (got {values['optimizer']!r})"
    if values.get("schedule", SCHEDULES[0]) not in SCHEDULES:
        problems["schedule"] = f"schedule must be one of {', '.join(SCHEDULES)} (got {values['schedule']!r})"
    seed = values.get("seed", 0)
    if not _whole(seed) or not 0 <= seed < 2**63:
        problems["seed"] = f"seed must be a whole number of at least 0 (got {seed!r})"
    return problems


def lr_scale(step: int, tc: TrainConfig) -> float:
    """The schedule as a factor of the peak rate at 0-based ``step``: linear warmup to 1, then either a
    cosine down to min_lr_ratio at the last step, or ("wsd") 1 until the last cooldown_frac of the run and
    a straight line down to min_lr_ratio at the last step."""
    # warmup: the optimisers' running averages start empty and a fresh model's gradients are at their largest,
    # so full-size first steps could throw the weights far off. (step + 1): step 0 already moves a little
    if step < tc.warmup:
        return (step + 1) / tc.warmup
    floor = tc.min_lr_ratio
    last = max(1, tc.steps - 1)
    if tc.schedule == "wsd":
        # constant until the cooldown, which starts no earlier than the warmup's end; the loss falls most
        # during the cooldown, so a run stopped before it has not yet had its best steps
        start = max(tc.warmup, round(tc.steps * (1 - tc.cooldown_frac)))
        if step < start:
            return 1.0
        return 1.0 - (1.0 - floor) * min(1.0, (step - start) / max(1, last - start))
    progress = min(1.0, (step - tc.warmup) / max(1, tc.steps - tc.warmup))  # 0 after warmup, 1 at the end
    return floor + 0.5 * (1 - floor) * (1 + math.cos(math.pi * progress))


def lr_at(step: int, tc: TrainConfig) -> float:
    """AdamW's rate at ``step``."""
    return tc.lr * lr_scale(step, tc)


def param_groups(model: Transformer) -> dict[str, list[tuple[str, torch.nn.Parameter]]]:
    """The model's parameters split for the optimisers, each exactly once: "matrices", the 2-D weights inside
    the blocks (W_Q, W_K, W_V together, W_O, W1, W2: Muon's share); "other_matrices", the token and position
    embeddings and the output map (AdamW, with weight decay); "vectors", the LayerNorm scales and shifts
    (AdamW, no decay)."""
    groups = {"matrices": [], "other_matrices": [], "vectors": []}
    for name, p in model.named_parameters():
        if p.dim() < 2:
            # decaying a norm's scale towards 0 would only fight the normalisation; vectors have no
            # singular values to orthogonalise either
            groups["vectors"].append((name, p))
        elif name.startswith("blocks."):
            groups["matrices"].append((name, p))
        else:
            # embeddings and the output map stay with AdamW, as Muon's authors advise: its orthogonalised
            # update is meant for the hidden-to-hidden maps
            groups["other_matrices"].append((name, p))
    return groups


def make_optimizers(model: Transformer, tc: TrainConfig) -> list[torch.optim.Optimizer]:
    """The optimisers of a recipe; every param group remembers its peak rate as "peak_lr". AdamW is torch's fused
    kernel (one pass over every tensor): at the lecture's shape the per-tensor loop was ~7 % of a step, fused ~20x
    less (issue 60's profile)."""
    # "peak_lr" per group: the schedule scales each group from its own peak, Muon's and AdamW's differ
    g = param_groups(model)
    params = lambda key: [p for _, p in g[key]]  # noqa: E731
    adamw_groups = [{"params": params("other_matrices"), "weight_decay": tc.weight_decay, "peak_lr": tc.lr},
                    {"params": params("vectors"), "weight_decay": 0.0, "peak_lr": tc.lr}]
    if tc.optimizer == "adamw":
        adamw_groups[0]["params"] = params("matrices") + adamw_groups[0]["params"]  # AdamW takes the blocks too
        return [torch.optim.AdamW(adamw_groups, lr=tc.lr, betas=(0.9, tc.beta2), fused=True)]
    muon = torch.optim.Muon([{"params": params("matrices"), "peak_lr": tc.muon_lr}], lr=tc.muon_lr,
                            weight_decay=tc.weight_decay, momentum=tc.muon_momentum, ns_steps=tc.muon_ns_steps)
    return [muon, torch.optim.AdamW(adamw_groups, lr=tc.lr, betas=(0.9, tc.beta2), fused=True)]
