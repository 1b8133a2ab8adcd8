"""The training page's form: what a user may set for a live run, its limits, and what it will cost.

``JobSettings`` holds the fields; ``validate_settings`` names every field that cannot be trained, using
the one validation of a model's shape (``core.nn.model.config_problems``) and of a run's settings
(``core.training.trainer.train_problems``) plus the limits of a live run on a shared CPU; ``job_cost`` prices a
run before it starts, and ``run_memory`` estimates its peak memory, which ``validate_settings`` holds to the
server's budget per run (``memory_budget``, TE_RUN_MEMORY). Defaults come from the lecture's preset and from
TrainConfig, never retyped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from core.data.budget import DATA_BYTES_PER_CHAR, PROCESS_BYTES, memory_budget
from core.data.corpus import TRAIN_FRACTION
from core.analysis.cost import training_flops
from core.serve.fmt import binary_bytes
from core.nn.config import LECTURE, ModelConfig, config_problems
from core.nn.params import count_parameters
from core.nn.snapshots import DEFAULT_SNAPSHOTS
from core.training.train_data import DEFAULT_BPE_VOCAB, TOKENIZERS, min_corpus_chars
from core.training.recipes import DEFAULT_RECIPE, RECIPES, TrainConfig, train_problems

MAX_PARAMS = 10_000_000         # a live CPU run of a bigger model would not show anything in a lecture
MAX_TOKENS_PER_STEP = 65_536    # batch_size * n_ctx: bounds the memory of one step
MAX_STEPS = 100_000
LIVE_STEPS = 2000               # a class demo: a couple of minutes on a laptop
MIN_BPE_VOCAB = 256             # a byte-level BPE starts from the 256 bytes
MAX_BPE_VOCAB = 16_384          # learning more merges from an upload takes a while; GPT-2 has 50,257
_TRAIN = TrainConfig.recipe(DEFAULT_RECIPE)

# The form's number boxes, in the page's order: field -> (label, the largest value the box takes, step, help).
# A box only bounds what can be typed; whether it can train is validate_settings' to say (MAX_PARAMS,
# MAX_TOKENS_PER_STEP, memory), in words beside the box, rather than a box that silently clamps.
FORM_FIELDS = {
    "d_model": ("d, width", 1024, 16, "Width of the residual stream."),
    "n_heads": ("h, heads", 64, 1, "Attention heads; each works in d/h dimensions."),
    "n_layers": ("L, blocks", 24, 1, "Number of transformer blocks."),
    "d_ff": ("d_ff, MLP width", 8192, 1, "Hidden width of the MLP."),  # shown only when d_ff = 4d is unticked
    "n_ctx": ("n_ctx, context", 2048, 1, "Longest sequence; also the training window."),
    "batch_size": ("batch size B", 1024, 1, "Windows per optimisation step."),
    "lr": ("AdamW learning rate", 1.0, 0.0005, "AdamW's peak rate: every parameter with the AdamW recipe; embeddings, "
           "norms and the output map with the Muon recipe (Muon has its own rate for the blocks' matrices)."),
    "steps": ("steps", MAX_STEPS, 100, "Optimisation steps."),
    "seed": ("seed", 2**31 - 1, 1, "Fixes the initial weights and the batches."),
}


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
    recipe: str = DEFAULT_RECIPE  # a name of core.training.trainer.RECIPES
    threads: int | None = None  # None: core.serve.threads.training_threads()
    repeat_fraction: float = 0.0  # share of rows holding a repeated random span (core.analysis.induction.add_repeats)
    tokenizer: str = "char"     # "char" or "bpe" (core.training.trainer.TOKENIZERS)
    bpe_vocab: int = DEFAULT_BPE_VOCAB  # the BPE's vocabulary size; unused for characters
    snapshots: bool = True     # keep the weights at log-spaced steps (core.nn.snapshots), for the Over training page
    # core.nn.model's switches that take a piece of the block away ({}: the lecture's block), e.g. {"mlp": False}
    # for a variant trained from the Why each piece page
    switches: dict = field(default_factory=dict)

    @property
    def bpe_vocab_size(self) -> int | None:
        """What core.training.trainer.Trainer takes: the BPE's size, or None for a character model."""
        return self.bpe_vocab if self.tokenizer == "bpe" else None

    def shape(self, vocab_size: int) -> dict:
        return dict(vocab_size=vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                    n_layers=self.n_layers, d_ff=self.d_ff, **self.switches)

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(**self.shape(vocab_size))

    def train_config(self) -> TrainConfig:
        eval_interval = max(1, min(250, round(self.steps / 20)))  # about 20 points on the validation curve
        extra = {}
        if RECIPES[self.recipe].get("warmup") is not None:
            # a fixed warmup: over a tenth of a short run at most, as over 400 of the shipped model's 12,000 steps
            extra["warmup"] = min(RECIPES[self.recipe]["warmup"], self.steps // 10)
        tc = TrainConfig.recipe(self.recipe, batch_size=self.batch_size, steps=self.steps, lr=self.lr,
                                seed=self.seed, eval_interval=eval_interval, eval_batches=8,
                                repeat_fraction=self.repeat_fraction, heads_interval=heads_interval(self.steps),
                                snapshots=DEFAULT_SNAPSHOTS if self.snapshots else 0, **extra)
        # what a run costs at the least, before its corpus is known (the fewest tokens a vocabulary can have,
        # no text): a run built from these settings is refused here even when no page checked them first
        problem = memory_problem(self, MIN_VOCAB.get(self.tokenizer, 1), 0)
        if problem:
            raise ValueError(problem)
        return tc

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
        errors["n_ctx"] = (f"the corpus is too short: {corpus_chars:,} characters; n_ctx = {s.n_ctx} needs at "
                           f"least {min_corpus_chars(s.n_ctx):,} ({held_out:.0%} is held out; each part needs n_ctx + 1). "
                           "Use a smaller n_ctx or a longer text.")
    if "batch_size" not in errors and "n_ctx" not in errors and s.batch_size * s.n_ctx > MAX_TOKENS_PER_STEP:
        errors["batch_size"] = (f"batch x n_ctx = {s.batch_size * s.n_ctx:,} tokens per step; at most "
                                f"{MAX_TOKENS_PER_STEP:,} on a CPU")
    if not errors:
        n = count_parameters(s.model_config(max(1, vocab_size)))["total"]
        if n > MAX_PARAMS:
            errors["d_model"] = f"this model has {n:,} parameters; a live CPU run allows at most {MAX_PARAMS:,}"
    if not errors:
        problem = memory_problem(s, vocab_size, corpus_chars)
        if problem:
            errors["memory"] = problem
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

# The help of the form's other widgets (the number boxes' is in FORM_FIELDS); their numbers come from their homes.
FORM_HELP = {
    "tokenizer": "Characters: one token per distinct character, the lecture's model. Byte-level BPE: the text is read "
                 "as UTF-8 bytes, and the most frequent neighbouring pairs are merged again and again into longer "
                 "pieces (' the', 'KING') until the vocabulary has the size you choose; it is learned from the "
                 f"training {TRAIN_FRACTION:.0%} only and never meets an unknown character.",
    "bpe_vocab": f"{MIN_BPE_VOCAB} (the bytes alone) to {MAX_BPE_VOCAB:,}. More tokens: longer pieces, so each window "
                 "covers more text, but a larger embedding and output layer, and rarer tokens to learn.",
    "prompt": {"char": "Every sample continues this text. Characters the corpus lacks are left out.",
               "bpe": "Every sample continues this text. A byte-level BPE reads any text."},
    "repeat_on": "Off: plain text, as the default shipped model was trained.",
    "snapshots": (f"Keeps the weights at step 0 and at {DEFAULT_SNAPSHOTS} log-spaced steps up to the last (float16, "
                  "saved with the model under checkpoints/), so the Over training page and the sidebar's step slider "
                  "can show the model at any of them. Off: only the final weights are saved."),
    # {units}: characters or tokens, filled in by the page
    "repeat": f"Each chosen window gets one span of {TrainConfig.repeat_min_span} to {TrainConfig.repeat_max_span} "
              "random {units}, written twice.",
    "preset": f"The lecture's model over characters, the default recipe, {INDUCTION_PRESET['steps']:,} steps, every "
              "window holding a repeated span.",
}


def expects_induction(s: JobSettings) -> bool:
    """Whether a run has as many repeats as the preset, the data on which INDUCTION_FORMS_NEAR was measured."""
    return s.repeat_fraction >= INDUCTION_PRESET["repeat_fraction"]


def induction_eta_s(s: JobSettings, cost: JobCost, rate: float | None) -> float | None:
    """Seconds into the run at which its induction head should form: the share INDUCTION_FORMS_NEAR is of its
    steps, of its estimated time. None without a speed (``rate``, FLOP/s), or for a run that ends before."""
    if not rate or s.steps < INDUCTION_FORMS_NEAR:
        return None
    return cost.seconds(rate) * INDUCTION_FORMS_NEAR / s.steps


@dataclass(frozen=True)
class JobCost:
    """What a run will cost, known before it starts."""
    config: ModelConfig   # the shape counted (heads do not change the count; see job_cost)
    counts: dict          # core.nn.params.count_parameters of it
    n_params: int         # N
    tokens: int           # D = steps x batch x n_ctx
    flops: float          # 6ND
    epochs: float         # how many times the run reads the training part of the corpus

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.n_params

    def seconds(self, rate: float) -> float:
        """The run's time at ``rate`` FLOP/s: 6ND over it (small models pay overheads the formula ignores)."""
        return self.flops / rate


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


# ---------------------------------------------------------------- memory
# One training step on the CPU keeps, for its backward pass, every layer's activations: a few vectors of d
# per token, the MLP's d_ff, and the logits' softmax over the whole vocabulary. They grow with the tokens per
# step (batch x n_ctx) times the depth, and a form that accepts 65,536 tokens per step accepts runs of tens
# of GB. Each run has a budget (TE_RUN_MEMORY), and a run the estimate puts over it is not started.

FLOAT = 4                       # bytes per float32
MIN_VOCAB = {"char": 1, "bpe": MIN_BPE_VOCAB}  # the fewest tokens each kind of tokenizer can end up with
# the allocator keeps the blocks one step frees for the next, and the backward pass makes gradients of its own:
# the resident peak of a step was 1.5-2.1 times the activations it keeps
ALLOCATOR_FACTOR = 1.7
EVAL_WINDOWS = 64  # windows per forward pass when a saved run is scored (core.training.trainer.windowed_total's batch)



@dataclass(frozen=True)
class RunMemory:
    """The peak memory of a training run in bytes, estimated from its settings before it starts; within 30% of
    (or above) the peak resident memory of the real runs measured by bench/run_memory.py."""
    process: int       # Python, torch and our modules, before any data
    data: int          # the corpus in the process and its token ids
    weights: int       # parameters, their gradients, the optimiser's state (AdamW: two moments; Muon: one)
    activations: int   # a training step's (what it keeps for its backward pass), or scoring's, the larger

    @property
    def total(self) -> int:
        return self.process + self.data + self.weights + self.activations


def activation_floats_per_token(config: ModelConfig) -> int:
    """Floats one training step keeps per token of its batch for the backward pass (counted by hand from
    core.nn.model, checked against what autograd saves in tests/test_run_memory.py). Per block: its input x and
    LayerNorm's output (d each), the fused W_QKV output (3d), attention's output (d; torch's CPU attention keeps
    a log-sum-exp per head, h, and never the (n, n) matrix), the stream after attention and its LayerNorm (2d),
    the MLP's hidden ReLU (d_ff), and LayerNorm's mean and 1/sigma twice (4). After the blocks: the stream and
    the final LayerNorm (2d), the log-softmax over the m tokens, its mean and 1/sigma and the int64 inputs and
    targets (6)."""
    d, m = config.d_model, config.vocab_size
    return config.n_layers * (8 * d + config.d_ff + config.n_heads + 4) + 2 * d + m + 6


def run_memory(s: JobSettings, vocab_size: int, corpus_chars: int) -> RunMemory:
    """The peak memory of a run of these settings over a corpus of ``corpus_chars`` characters whose tokenizer
    has ``vocab_size`` tokens. The shape must be valid (validate_settings checks it first)."""
    config = s.model_config(max(1, vocab_size))
    counts = count_parameters(config)
    params = counts["total"]
    muon = counts["blocks"] - config.n_layers * counts["norms"] if RECIPES[s.recipe]["optimizer"] == "muon" else 0
    weights = FLOAT * (2 * params + 2 * (params - muon) + muon)  # weights, gradients, AdamW's 2 moments, Muon's 1
    m, d = config.vocab_size, config.d_model
    tokens = s.batch_size * s.n_ctx
    # a training step: what it keeps for the backward pass, then at its start the gradients of the log-softmax
    # and of the logits, (B n, m) each
    step = FLOAT * tokens * (ALLOCATOR_FACTOR * activation_floats_per_token(config) + 2 * m)
    # scoring without gradients (every evaluation, and the held-out score of a saved run, EVAL_WINDOWS at a time):
    # the logits and their log-softmax, and one block's stream, W_QKV output and MLP hidden units at a time
    score = FLOAT * max(s.batch_size, EVAL_WINDOWS) * s.n_ctx * ALLOCATOR_FACTOR * (2 * m + 6 * d + config.d_ff)
    return RunMemory(process=PROCESS_BYTES, data=DATA_BYTES_PER_CHAR * max(0, corpus_chars), weights=weights,
                     activations=round(max(step, score)))


def allowance_words() -> str:
    """What the server allows one run, in words ("allows 1.0 GiB per run", "sets no limit per run"); ValueError for
    a TE_RUN_MEMORY that does not parse."""
    budget = memory_budget()
    return "sets no limit per run" if budget is None else f"allows {binary_bytes(budget)} per run"


def memory_summary(s: JobSettings, vocab_size: int, corpus_chars: int) -> str:
    """One sentence for the form: what the run needs and what the server allows."""
    est = run_memory(s, vocab_size, corpus_chars)
    need = (f"This run needs about {binary_bytes(est.total)} of memory ({binary_bytes(est.process)} for the process and "
            f"torch, {binary_bytes(est.activations)} for a step's activations, which grow with batch × n_ctx × L)")
    try:
        return f"{need}; the server {allowance_words()}."
    except ValueError as e:
        return f"{need}; {e}."


def memory_problem(s: JobSettings, vocab_size: int, corpus_chars: int) -> str | None:
    """Why these settings may not train on this server, memory-wise; None when they may."""
    try:
        budget = memory_budget()
    except ValueError as e:
        return f"No run can start: {e}."
    est = run_memory(s, vocab_size, corpus_chars)
    if budget is None or est.total <= budget:
        return None
    biggest = max(("activations", "weights", "data"), key=lambda k: getattr(est, k))
    advice = {"activations": f"what one step keeps for its backward pass ({binary_bytes(est.activations)}) grows with "
                             "batch × n_ctx, the number of blocks and the width: make one of them smaller",
              "weights": f"the weights with their gradients and optimiser state take {binary_bytes(est.weights)}: "
                         "a narrower or shallower model, or a smaller vocabulary, needs less",
              "data": f"the corpus and its tokens take {binary_bytes(est.data)}: a shorter text needs less"}[biggest]
    return (f"This run needs about {binary_bytes(est.total)} of memory; the server allows {binary_bytes(budget)} per "
            f"run. Most of it: {advice}.")
