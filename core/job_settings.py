"""The training page's form: what a user may set for a live run, its limits, and what it will cost.

``JobSettings`` holds the fields; ``validate_settings`` names every field that cannot be trained, using
the one validation of a model's shape (``core.model.config_problems``) and of a run's settings
(``core.train.train_problems``) plus the limits of a live run on a shared CPU; ``job_cost`` prices a
run before it starts. Defaults come from the lecture's preset and from TrainConfig, never retyped.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.corpus import TRAIN_FRACTION
from core.cost import training_flops
from core.model import LECTURE, ModelConfig, config_problems
from core.params import count_parameters
from core.train import DEFAULT_RECIPE, RECIPES, TrainConfig, min_corpus_chars, train_problems

MAX_PARAMS = 10_000_000         # a live CPU run of a bigger model would not show anything in a lecture
MAX_TOKENS_PER_STEP = 65_536    # batch_size * n_ctx: bounds the memory of one step
MAX_STEPS = 100_000
LIVE_STEPS = 2000               # a class demo: a couple of minutes on a laptop
_TRAIN = TrainConfig.recipe(DEFAULT_RECIPE)


@dataclass
class JobSettings:
    """What the training page collects; the lecture's class-demo model by default."""
    d_model: int = LECTURE.d_model
    n_heads: int = LECTURE.n_heads
    n_layers: int = LECTURE.n_layers
    d_ff: int | None = None    # None: 4d
    n_ctx: int = LECTURE.n_ctx
    batch_size: int = _TRAIN.batch_size
    lr: float = _TRAIN.lr
    steps: int = LIVE_STEPS
    seed: int = _TRAIN.seed
    recipe: str = DEFAULT_RECIPE  # a name of core.train.RECIPES
    threads: int | None = None  # None: core.threads.training_threads()
    repeat_fraction: float = 0.0  # share of rows holding a repeated random span (core.induction.add_repeats)

    def shape(self, vocab_size: int) -> dict:
        return dict(vocab_size=vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                    n_layers=self.n_layers, d_ff=self.d_ff)

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(**self.shape(vocab_size))

    def train_config(self) -> TrainConfig:
        eval_interval = max(1, min(250, round(self.steps / 20)))  # about 20 points on the validation curve
        extra = {}
        if RECIPES[self.recipe].get("warmup") is not None:
            # a fixed warmup: over a tenth of a short run at most, as over 400 of the shipped model's 12,000 steps
            extra["warmup"] = min(RECIPES[self.recipe]["warmup"], self.steps // 10)
        return TrainConfig.recipe(self.recipe, batch_size=self.batch_size, steps=self.steps, lr=self.lr,
                                  seed=self.seed, eval_interval=eval_interval, eval_batches=8,
                                  repeat_fraction=self.repeat_fraction, heads_interval=heads_interval(self.steps),
                                  **extra)

    @property
    def tokens(self) -> int:
        """D, the number of training tokens the run will see: steps x batch x n_ctx."""
        return self.steps * self.batch_size * self.n_ctx


def validate_settings(s: JobSettings, corpus_chars: int, vocab_size: int) -> dict[str, str]:
    """Field name -> reason for every setting that cannot be trained; empty when all is well."""
    errors = config_problems(s.shape(max(1, vocab_size)))
    errors.pop("vocab_size", None)  # the corpus decides m; check_corpus_bytes bounds it
    errors.update(train_problems(dict(batch_size=s.batch_size, steps=s.steps, lr=s.lr, seed=s.seed,
                                      repeat_fraction=s.repeat_fraction)))
    if s.recipe not in RECIPES:
        errors["recipe"] = f"recipe must be one of {', '.join(RECIPES)} (got {s.recipe!r})"
    if "steps" not in errors and s.steps > MAX_STEPS:
        errors["steps"] = f"at most {MAX_STEPS:,} steps in a live run"
    if "n_ctx" not in errors and corpus_chars < min_corpus_chars(s.n_ctx):
        held_out = 1 - TRAIN_FRACTION
        errors["n_ctx"] = (f"the corpus has {corpus_chars:,} characters; n_ctx = {s.n_ctx} needs at least "
                           f"{min_corpus_chars(s.n_ctx):,} ({held_out:.0%} is held out; each part needs n_ctx + 1). "
                           "Use a smaller n_ctx or a longer text.")
    if "batch_size" not in errors and "n_ctx" not in errors and s.batch_size * s.n_ctx > MAX_TOKENS_PER_STEP:
        errors["batch_size"] = (f"batch x n_ctx = {s.batch_size * s.n_ctx:,} tokens per step; at most "
                                f"{MAX_TOKENS_PER_STEP:,} on a CPU")
    if not errors:
        n = count_parameters(s.model_config(max(1, vocab_size)))["total"]
        if n > MAX_PARAMS:
            errors["d_model"] = f"this model has {n:,} parameters; a live CPU run allows at most {MAX_PARAMS:,}"
    return errors


def heads_interval(steps: int) -> int:
    """How often a live run measures its heads: about 80 points on the formation curve, a round number of steps
    and at most every 10 (each measurement is one forward pass over the probe, a few milliseconds)."""
    return max(10, 10 * round(steps / 800))


# The training page's preset for watching an induction head form: the lecture's model, the default recipe,
# every row holding a repeated span. bench/induction.py measured the phase change near step 500 on this data
# (run "C" in bench/results/induction-search.csv); 1,500 steps leave room to watch the curve settle.
INDUCTION_PRESET = dict(steps=1500, repeat_fraction=1.0)
INDUCTION_FORMS_NEAR = 500  # the step, as measured there; tests/test_induction_live.py checks it still holds


@dataclass(frozen=True)
class JobCost:
    """What a run will cost, known before it starts."""
    config: ModelConfig   # the shape counted (heads do not change the count; see job_cost)
    counts: dict          # core.params.count_parameters of it
    n_params: int         # N
    tokens: int           # D = steps x batch x n_ctx
    flops: float          # 6ND
    epochs: float         # how many times the run reads the training part of the corpus

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.n_params


def job_cost(s: JobSettings, vocab_size: int, corpus_chars: int) -> JobCost | None:
    """N, D, 6ND and the passes over the data for these settings; None when the shape has no count
    (a width, depth, context or MLP width below 1). The count does not depend on h, so it is given even
    while h does not divide d: the shape is counted with one head, which holds the same weights."""
    shape = {**s.shape(max(1, vocab_size)), "n_heads": 1}
    if config_problems(shape):
        return None
    config = ModelConfig(**shape)
    counts = count_parameters(config)
    tokens = s.tokens
    return JobCost(config=config, counts=counts, n_params=counts["total"], tokens=tokens,
                   flops=training_flops(counts["total"], tokens),
                   epochs=tokens / max(1.0, TRAIN_FRACTION * corpus_chars))

