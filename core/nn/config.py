"""A model's shape and the switches of the block, validated in one place (``config_problems``), and the named shapes
(the lecture's model and published ones). ``core.nn.model`` builds the network from a ModelConfig."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class ModelConfig:
    """A model's shape. The defaults are the lecture's class-demo model (see MODEL_PRESETS below); m and n_ctx
    are those of our character-level corpus. Frozen: a config is shared by caches and never changes."""
    vocab_size: int = 65   # m, the number of distinct tokens (characters here)
    n_ctx: int = 128       # longest sequence the position table covers
    d_model: int = 64      # d, width of the residual stream
    n_heads: int = 4       # h; each head works in d/h dimensions
    n_layers: int = 2      # L, number of transformer blocks
    d_ff: int | None = None  # hidden width of the MLP; None means the conventional 4d
    # What GPT-2 adds to the lecture's model; the defaults are the lecture's (and every checkpoint saved before them)
    bias: bool = False         # a bias on every linear map inside the blocks (W_QKV, W_O, W1, W2)
    activation: str = "relu"   # the MLP's nonlinearity: "relu", "gelu" (exact) or "gelu_tanh" (GPT-2's approximation)
    tie_weights: bool = False  # the output map reuses the token embedding matrix (GPT-2) instead of its own
    ln_eps: float = 1e-5       # LayerNorm's epsilon (PyTorch's default, and GPT-2's)
    # Switches that take one piece of the lecture's block away, to measure what it is for (the "Why each piece"
    # page, core.training.variants). The defaults are the lecture's model, and every checkpoint saved before them.
    mlp: bool = True           # False: attention-only blocks, x <- x + MultiHead(LN(x)) (no MLP, no second LN)
    residual: bool = True      # False: x <- MultiHead(LN(x)), then x <- MLP(LN(x)): nothing carried past a sublayer
    norm: str = "pre"          # "pre": LN before each sublayer; "post": x <- LN(x + sublayer(x)), the 2017 paper's
                               # order (no final LN); "none": no LayerNorm anywhere
    w_o: bool = True           # False: the heads' concatenation is added to the stream as it is (no mixing map)
    positions: bool = True     # False: no position table; attention alone cannot tell where a token is
    mask: str = "scores"       # "scores": future scores set to -inf before the softmax; "after_softmax": softmax over
                               # every key, then future weights set to 0, rows not renormalised; "none": no mask

    def __post_init__(self):
        problems = config_problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems.values()))
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def removed(self) -> dict[str, object]:
        """The switches set away from the lecture's block: {} for the lecture's model (and GPT-2)."""
        return {k: getattr(self, k) for k, v in SWITCH_DEFAULTS.items() if getattr(self, k) != v}

    @property
    def lecture_block(self) -> bool:
        """True when every block is the lecture's (what the trace, the lens and the attribution are written for)."""
        return not self.removed()


SHAPE_FIELDS = ("vocab_size", "n_ctx", "d_model", "n_heads", "n_layers", "d_ff")
NORMS = ("pre", "post", "none")
MASKS = ("scores", "after_softmax", "none")
SWITCH_DEFAULTS = dict(mlp=True, residual=True, norm="pre", w_o=True, positions=True, mask="scores")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh")
# How pages name and write each nonlinearity (one home: the home page's formula, the Inside page's prose and metric)
ACTIVATION_NAMES = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh approximation)"}
ACTIVATION_LATEX = {"relu": r"\operatorname{ReLU}", "gelu": r"\operatorname{GELU}",
                    "gelu_tanh": r"\operatorname{GELU}_{\tanh}"}
# A unit is silent when its input was 0 or below. ReLU then gives exactly 0; GELU gives a small number <= 0
# (x * Phi(x) is at least -0.17 and never exactly 0 for x < 0), so counting exact zeros would find none.
SILENT_WORDS = {"relu": "exactly 0", "gelu": "0 or below", "gelu_tanh": "0 or below"}


def silent_units(hidden, activation: str) -> int:
    """How many of the MLP's hidden values (after ``activation``) come from an input of 0 or below: exactly 0 for
    ReLU, 0 or below for GELU (whose output has the sign of its input)."""
    hidden = torch.as_tensor(hidden)
    return int((hidden == 0).sum()) if activation == "relu" else int((hidden <= 0).sum())


def config_problems(values: dict) -> dict[str, str]:
    """Field name -> what is wrong with it, for a would-be ModelConfig; empty when it can be built. The one
    validation of a model's shape: ModelConfig raises with these messages, the training form shows them
    beside its fields."""
    problems: dict[str, str] = {}
    for name in SHAPE_FIELDS:
        value = values.get(name)
        if name == "d_ff" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems[name] = f"{name} must be a whole number, got {value!r}"
        elif value < 1:
            problems[name] = f"{name} must be at least 1, got {value}"
    if "d_model" not in problems and "n_heads" not in problems and values["d_model"] % values["n_heads"]:
        d, h = values["d_model"], values["n_heads"]
        problems["n_heads"] = (f"d_model={d} is not divisible by n_heads={h}: each head needs a whole width d/h "
                               f"(try n_heads in {head_counts(d)})")
    for name in ("bias", "tie_weights", "mlp", "residual", "w_o", "positions"):
        if not isinstance(values.get(name, False), bool):
            problems[name] = f"{name} must be true or false, got {values[name]!r}"
    if values.get("activation", "relu") not in ACTIVATIONS:
        problems["activation"] = f"activation must be one of {', '.join(ACTIVATIONS)}, got {values['activation']!r}"
    if values.get("norm", "pre") not in NORMS:
        problems["norm"] = f"norm must be one of {', '.join(NORMS)}, got {values['norm']!r}"
    if values.get("mask", "scores") not in MASKS:
        problems["mask"] = f"mask must be one of {', '.join(MASKS)}, got {values['mask']!r}"
    if values.get("norm") == "post" and values.get("residual") is False:
        # post-norm is defined by where LN sits around the residual sum: with no sum there is no "post"
        problems["norm"] = ("norm='post' places LayerNorm after the residual sum x + sublayer(x); without the residual "
                            "there is no sum: use norm='pre' (or 'none') with residual=False")
    eps = values.get("ln_eps", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        problems["ln_eps"] = f"ln_eps must be a number between 0 and 1, got {eps!r}"
    return problems


def head_counts(n: int, limit: int | None = 64) -> list[int]:
    """The numbers of heads (up to ``limit``; None: all) that divide a width n into whole head widths."""
    top = n if limit is None else min(n, limit)
    return [k for k in range(1, top + 1) if n % k == 0]


# The one table of named shapes: the lecture's model and published ones. The training form, the command
# line, the cost page and the benchmarks take their shapes from here. GPT-2 and GPT-3 share the
# 50,257-token BPE vocabulary. These are shapes: GPT-2's biases, GELU and tied output map are the config
# fields bias, activation and tie_weights, which a GPT-2 folder sets when it is loaded (core.nn.hf).
_GPT2 = dict(vocab_size=50257, n_ctx=1024)
MODEL_PRESETS: dict[str, ModelConfig] = {
    "lecture": ModelConfig(),
    "GPT-2 small": ModelConfig(**_GPT2, d_model=768, n_heads=12, n_layers=12),
    "GPT-2 medium": ModelConfig(**_GPT2, d_model=1024, n_heads=16, n_layers=24),
    "GPT-2 large": ModelConfig(**_GPT2, d_model=1280, n_heads=20, n_layers=36),
    "GPT-2 XL": ModelConfig(**_GPT2, d_model=1600, n_heads=25, n_layers=48),
    "GPT-3 175B": ModelConfig(vocab_size=50257, n_ctx=2048, d_model=12288, n_heads=96, n_layers=96),
}
LECTURE = MODEL_PRESETS["lecture"]
