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
from core.train import (DEFAULT_BPE_VOCAB, DEFAULT_RECIPE, RECIPES, TOKENIZERS, TrainConfig, min_corpus_chars,
                        train_problems)

MAX_PARAMS = 10_000_000         # a live CPU run of a bigger model would not show anything in a lecture
MAX_TOKENS_PER_STEP = 65_536    # batch_size * n_ctx: bounds the memory of one step
MAX_STEPS = 100_000
LIVE_STEPS = 2000               # a class demo: a couple of minutes on a laptop
MIN_BPE_VOCAB = 256             # a byte-level BPE starts from the 256 bytes
MAX_BPE_VOCAB = 16_384          # learning more merges from an upload takes a while; GPT-2 has 50,257
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
    tokenizer: str = "char"     # "char" or "bpe" (core.train.TOKENIZERS)
    bpe_vocab: int = DEFAULT_BPE_VOCAB  # the BPE's vocabulary size; unused for characters

    @property
    def bpe_vocab_size(self) -> int | None:
        """What core.train.Trainer takes: the BPE's size, or None for a character model."""
        return self.bpe_vocab if self.tokenizer == "bpe" else None

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


def validate_settings(s: JobSettings, corpus_chars: int, vocab_size: int,
                      split_tokens: tuple[int, int] | None = None) -> dict[str, str]:
    """Field name -> reason for every setting that cannot be trained; empty when all is well. ``vocab_size``:
    the tokenizer's (the corpus's characters, or the BPE's size once learned); ``split_tokens``: the training
    and held-out parts' lengths in tokens when the tokenizer is not characters (None: one token per character)."""
    errors = config_problems(s.shape(max(1, vocab_size)))
    errors.pop("vocab_size", None)  # the corpus decides m; check_corpus_bytes bounds it
    if s.tokenizer not in TOKENIZERS:
        errors["tokenizer"] = f"tokenizer must be one of {', '.join(TOKENIZERS)} (got {s.tokenizer!r})"
    elif s.tokenizer == "bpe" and (isinstance(s.bpe_vocab, bool) or not isinstance(s.bpe_vocab, int)
                                   or not MIN_BPE_VOCAB <= s.bpe_vocab <= MAX_BPE_VOCAB):
        errors["bpe_vocab"] = (f"a byte-level BPE's vocabulary is {MIN_BPE_VOCAB} (the bytes alone) to "
                               f"{MAX_BPE_VOCAB:,} tokens (got {s.bpe_vocab!r})")
    errors.update(train_problems(dict(batch_size=s.batch_size, steps=s.steps, lr=s.lr, seed=s.seed,
                                      repeat_fraction=s.repeat_fraction)))
    if s.recipe not in RECIPES:
        errors["recipe"] = f"recipe must be one of {', '.join(RECIPES)} (got {s.recipe!r})"
    if "steps" not in errors and s.steps > MAX_STEPS:
        errors["steps"] = f"at most {MAX_STEPS:,} steps in a live run"
    if "n_ctx" not in errors and split_tokens is not None and min(split_tokens) < s.n_ctx + 2:
        errors["n_ctx"] = (f"the BPE cuts the corpus into {split_tokens[0]:,} training and {split_tokens[1]:,} "
                           f"held-out tokens; n_ctx = {s.n_ctx} needs more than n_ctx + 1 = {s.n_ctx + 1} in each "
                           "part. Use a smaller n_ctx or a longer text.")
    elif "n_ctx" not in errors and split_tokens is None and corpus_chars < min_corpus_chars(s.n_ctx):
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


def job_cost(s: JobSettings, vocab_size: int, corpus_chars: int, train_tokens: int | None = None) -> JobCost | None:
    """N, D, 6ND and the passes over the data for these settings (``train_tokens``: the training part's length
    in tokens, when a token is not one character); None when the shape has no count
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
                   epochs=tokens / max(1.0, train_tokens if train_tokens is not None else TRAIN_FRACTION * corpus_chars))

