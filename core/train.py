"""One training loop for the command line and the training page.

Nothing here is specific to the UI: ``Trainer.step()`` runs one optimisation step and returns its
metrics, ``Trainer.evaluate()`` estimates train and validation loss; callers decide what to show.
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, asdict
from pathlib import Path

import numpy as np
import torch

from core.checkpoint import load_checkpoint, save_checkpoint
from core.induction import HeadRecorder, add_repeats, formation_step, induction_summary
from core.corpus import TRAIN_FRACTION, read_text_file, shakespeare_path, split_description, split_train_val
from core.model import LECTURE, ModelConfig, Transformer
from core.params import count_parameters, per_block_formula
from core.threads import use_threads
from core.tokenizer import BPETokenizer, CharTokenizer, Tokenizer


OPTIMIZERS = ("muon", "adamw")
TOKENIZERS = ("char", "bpe")  # one token per character, or a byte-level BPE learned from the training part
DEFAULT_BPE_VOCAB = 512
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
    # the repeat mixture (core.induction.add_repeats): rows whose random span is written again later, the data
    # on which an induction head pays off. Off by default; the induction model uses it (see its card)
    repeat_fraction: float = 0.0    # share of rows holding a repeated span
    repeat_first_steps: int = 0     # a curriculum: during the first steps every row holds one
    repeat_min_span: int = 20
    repeat_max_span: int = 60
    heads_interval: int = 100       # every so many steps each head is measured on the induction probe (0: never)

    def __post_init__(self):
        problems = train_problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems.values()))
        if self.warmup is None:
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
    tc = TrainConfig.recipe(name, steps=1000)
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
    return isinstance(value, int) and not isinstance(value, bool)


def _rate(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1


def train_problems(values: dict) -> dict[str, str]:
    """Field name -> what is wrong, for the training settings present in ``values``; empty when all is
    well. The one validation of a run's settings: TrainConfig raises with these messages, the training
    form shows them beside its fields."""
    problems: dict[str, str] = {}
    for name in ("batch_size", "steps", "eval_interval", "eval_batches", "muon_ns_steps", "repeat_min_span",
                 "repeat_max_span"):
        if name in values and (not _whole(values[name]) or values[name] < 1):
            problems[name] = f"{name} must be a whole number of at least 1 (got {values[name]!r})"
    if values.get("warmup") is not None and (not _whole(values["warmup"]) or values["warmup"] < 0):
        problems["warmup"] = f"warmup must be a whole number of at least 0 (got {values['warmup']!r})"
    for name in ("lr", "muon_lr"):
        if name in values and not _rate(values[name]):
            problems[name] = f"{name} must be a number above 0 and at most 1 (got {values[name]!r})"
    for name in ("repeat_first_steps", "heads_interval"):
        if name in values and (not _whole(values[name]) or values[name] < 0):
            problems[name] = f"{name} must be a whole number of at least 0 (got {values[name]!r})"
    if ("repeat_min_span" not in problems and "repeat_max_span" not in problems
            and values.get("repeat_min_span", 1) > values.get("repeat_max_span", 1)):
        problems["repeat_max_span"] = (f"repeat_max_span ({values['repeat_max_span']}) must be at least "
                                       f"repeat_min_span ({values['repeat_min_span']})")
    for name in ("warmup_frac", "cooldown_frac", "min_lr_ratio", "muon_momentum", "repeat_fraction"):
        v = values.get(name, 0.5)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1):
            problems[name] = f"{name} must be a number from 0 to 1 (got {v!r})"
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
    if step < tc.warmup:
        return (step + 1) / tc.warmup
    floor = tc.min_lr_ratio
    last = max(1, tc.steps - 1)
    if tc.schedule == "wsd":
        start = max(tc.warmup, round(tc.steps * (1 - tc.cooldown_frac)))
        if step < start:
            return 1.0
        return 1.0 - (1.0 - floor) * min(1.0, (step - start) / max(1, last - start))
    progress = min(1.0, (step - tc.warmup) / max(1, tc.steps - tc.warmup))
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
            groups["vectors"].append((name, p))
        elif name.startswith("blocks."):
            groups["matrices"].append((name, p))
        else:
            groups["other_matrices"].append((name, p))
    return groups


def make_optimizers(model: Transformer, tc: TrainConfig) -> list[torch.optim.Optimizer]:
    """The optimisers of a recipe; every param group remembers its peak rate as "peak_lr"."""
    g = param_groups(model)
    params = lambda key: [p for _, p in g[key]]  # noqa: E731
    adamw_groups = [{"params": params("other_matrices"), "weight_decay": tc.weight_decay, "peak_lr": tc.lr},
                    {"params": params("vectors"), "weight_decay": 0.0, "peak_lr": tc.lr}]
    if tc.optimizer == "adamw":
        adamw_groups[0]["params"] = params("matrices") + adamw_groups[0]["params"]
        return [torch.optim.AdamW(adamw_groups, lr=tc.lr, betas=(0.9, tc.beta2))]
    muon = torch.optim.Muon([{"params": params("matrices"), "peak_lr": tc.muon_lr}], lr=tc.muon_lr,
                            weight_decay=tc.weight_decay, momentum=tc.muon_momentum, ns_steps=tc.muon_ns_steps)
    return [muon, torch.optim.AdamW(adamw_groups, lr=tc.lr, betas=(0.9, tc.beta2))]


def min_corpus_chars(n_ctx: int) -> int:
    """Shortest corpus whose 90/10 split leaves each part one window of n_ctx inputs plus targets, with
    at least two start positions (``get_batch`` draws starts below len - n_ctx)."""
    need, n = n_ctx + 2, n_ctx + 2
    while True:
        train, val = split_train_val(range(n))
        if len(train) >= need and len(val) >= need:
            return n
        n += 1


def encode_corpus(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """``tokenizer.encode(text, errors="drop")`` as a tensor. For characters it is vectorised: a megabyte corpus
    in milliseconds rather than a second, so starting a run from the training page feels immediate (a BPE's
    Rust encoder takes about a second and a half for Tiny Shakespeare). A byte-level BPE encodes the text in
    ``bpe_pieces``, as it learned it: the same ids for ordinary text, in a bounded amount of memory."""
    if isinstance(tokenizer, BPETokenizer) and tokenizer.byte_level:
        pieces = [np.array(tokenizer.encode(p, errors="drop"), dtype=np.int64) for p in bpe_pieces(text)]
        return torch.from_numpy(np.concatenate(pieces))
    if not isinstance(tokenizer, CharTokenizer):
        return torch.tensor(tokenizer.encode(text, errors="drop"), dtype=torch.long)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)     # one code point per character
    vocab = np.array([ord(c) for c in tokenizer.chars], dtype=np.uint32)
    order = np.argsort(vocab)
    pos = np.minimum(np.searchsorted(vocab[order], codes), len(vocab) - 1)
    known = vocab[order][pos] == codes                                     # unknown characters are dropped
    return torch.from_numpy(order[pos[known]].astype(np.int64))


def make_tokenizer(kind: str, train_text: str, vocab_size: int | None = None) -> Tokenizer:
    """The tokenizer of a new run, learned from ``train_text`` alone (the held-out part must stay unseen):
    "char", one token per distinct character; "bpe", a byte-level BPE of ``vocab_size`` tokens (fewer when
    the text runs out of pairs seen twice)."""
    if kind == "char":
        if vocab_size is not None:
            raise ValueError("a character tokenizer's vocabulary is the corpus's characters; vocab_size is for 'bpe'")
        return CharTokenizer.from_text(train_text)
    if kind == "bpe":
        if vocab_size is None:
            raise ValueError("a byte-level BPE needs a vocabulary size (at least 256, the bytes)")
        return BPETokenizer.train(bpe_pieces(train_text), vocab_size)
    raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)} (got {kind!r})")


MAX_PRETOKEN = 128  # characters: the longest run a BPE learns from as one piece (bpe_pieces)
BPE_CHUNK = 1 << 16  # characters: text reaches the tokenizers library in pieces of about this many
# Unicode's White_Space characters: what the byte-level pre-tokenizer's \s matches (Python's \s adds \x1c-\x1f)
_WHITE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# a line break between two non-space characters: the pre-tokenizer always ends a pre-token before the break and
# after it (it is a pre-token of its own), so the text may be cut after it without changing a single pre-token
_LINE_BREAK = re.compile(f"(?<=[^{_WHITE}]\n)(?=[^{_WHITE}])")


def bpe_pieces(text: str, longest: int = MAX_PRETOKEN, chunk: int = BPE_CHUNK) -> list[str]:
    """``text`` cut into the pieces a byte-level BPE learns from and encodes one by one; joined, they are
    ``text``. Two kinds of cut:

    - inside every run of non-space characters (or of spaces) longer than ``longest``, every ``longest``
      characters. The pre-tokenizer splits each piece on its own, and each of its pre-tokens lies inside one such
      run (with at most the space before it), so none is longer than ``longest`` + 1 characters. Why: the
      trainer's time grows with the square of its longest pre-token, and a megabyte of letters without a space
      is one pre-token (11 minutes to learn, bench/results/bpe-learning.md);
    - after a line break between two non-space characters, once a piece has ``chunk`` characters: no pre-token
      changes, and the library holds one piece's pre-tokens and token objects at a time instead of the whole
      text's (about 200 bytes per character at once; bench/results/run-memory.md).

    Text with no run longer than ``longest`` (prose, code, our corpora) keeps every pre-token, so the BPE learned
    from its pieces and the ids they encode to are exactly those of the whole text (tests/test_bpe_bound.py)."""
    cuts = {c for m in re.finditer(f"[^{_WHITE}]{{{longest + 1},}}|[{_WHITE}]{{{longest + 1},}}", text)
            for c in range(m.start() + longest, m.end(), longest)}
    last = 0
    for m in _LINE_BREAK.finditer(text):
        if m.start() - last >= chunk:
            cuts.add(m.start())
            last = m.start()
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def get_windows(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Random windows of n_ctx + 1 tokens: (B, n_ctx + 1), inputs and next-token targets in one."""
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    return torch.stack([data[s:s + n_ctx + 1] for s in starts.tolist()])


def get_batch(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator):
    """Random windows of n_ctx tokens and their next-token targets: (B, n_ctx) each."""
    w = get_windows(data, n_ctx, batch_size, generator)  # (B, n_ctx + 1)
    return w[:, :-1], w[:, 1:]


def _windows(data: torch.Tensor, n_ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every full, non-overlapping window of n_ctx tokens and its next-token targets: (W, n_ctx) each."""
    n_windows = (len(data) - 1) // n_ctx
    if n_windows < 1:
        raise ValueError(f"need at least {n_ctx + 1} tokens to score one window, got {len(data)}")
    x = data[: n_windows * n_ctx].view(n_windows, n_ctx)             # (W, n_ctx)
    y = data[1: n_windows * n_ctx + 1].view(n_windows, n_ctx)        # (W, n_ctx)
    return x, y


@torch.no_grad()
def windowed_total(model: Transformer, data: torch.Tensor, n_ctx: int | None = None,
                   batch_size: int = 64) -> tuple[float, torch.Tensor]:
    """(summed next-token cross-entropy in nats, the target ids it scored) over every full, non-overlapping
    window of n_ctx tokens of ``data``."""
    x, y = _windows(data, n_ctx or model.config.n_ctx)
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, len(x), batch_size):
        out = model(x[i:i + batch_size], targets=y[i:i + batch_size])
        total += out.loss.item() * y[i:i + batch_size].numel()
    model.train(was_training)
    return total, y.reshape(-1)


def windowed_loss(model: Transformer, data: torch.Tensor, n_ctx: int | None = None, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy over every full, non-overlapping window of n_ctx tokens."""
    total, targets = windowed_total(model, data, n_ctx, batch_size)
    return total / len(targets)


def held_out_score(model: Transformer, tokenizer: Tokenizer, data: torch.Tensor, n_ctx: int | None = None) -> dict:
    """The validation numbers of a checkpoint: loss in nats per token over every full window of ``data``, and
    in bits per character, the summed loss over the predicted tokens divided by the characters those tokens
    decode to (and by ln 2). Only bits per character compares a character model with a sub-word one: a token
    that holds three characters is harder to predict than one character, and covers three."""
    total, targets = windowed_total(model, data, n_ctx)
    chars = len(tokenizer.decode(targets.tolist()))
    return {"loss": total / len(targets), "bits_per_char": total / chars / math.log(2),
            "tokens": len(targets), "chars": chars, "chars_per_token": chars / len(targets)}


_INIT_LOCK = threading.Lock()


@contextmanager
def _seeded(seed: int):
    """Torch's global generator seeded for the block, then put back as it was. Building a model draws its
    initial weights from that generator; two sessions starting at the same moment must not interleave
    their draws (or a seed would no longer fix the weights), nor reseed anyone else's sampling."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class Trainer:
    def __init__(self, text: str, model_config: ModelConfig | dict, train_config: TrainConfig | None = None,
                 tokenizer: Tokenizer | None = None, bpe_vocab_size: int | None = None):
        """A run on ``text``: its first 90% trains, the rest is held out. The tokenizer is ``tokenizer`` if given;
        else a byte-level BPE of ``bpe_vocab_size`` tokens learned from the training part alone, or, without a
        size, one token per distinct character of the whole text (so the held-out part has no unknown ones)."""
        self.tc = train_config or TrainConfig()
        train_text, val_text = split_train_val(text)
        if tokenizer is None:
            tokenizer = (make_tokenizer("bpe", train_text, bpe_vocab_size) if bpe_vocab_size is not None
                         else CharTokenizer.from_text(text))
        self.tokenizer = tokenizer
        if isinstance(model_config, dict):
            model_config = ModelConfig(**{**model_config, "vocab_size": self.tokenizer.vocab_size})
        if model_config.vocab_size != self.tokenizer.vocab_size:
            raise ValueError(f"vocab_size={model_config.vocab_size} but the tokenizer has "
                             f"{self.tokenizer.vocab_size} {self.tokenizer.units}")
        self.config = model_config
        # each part encoded on its own: no token straddles the boundary, and the training part is exactly the
        # text the tokenizer learned from
        self.train_data, self.val_data = encode_corpus(tokenizer, train_text), encode_corpus(tokenizer, val_text)
        self.train_chars, self.val_chars = len(train_text), len(val_text)
        need = model_config.n_ctx + 2
        if len(self.train_data) < need or len(self.val_data) < need:
            if isinstance(tokenizer, CharTokenizer):
                raise ValueError(
                    f"corpus too short: with a 90/10 split each part needs more than n_ctx+1={model_config.n_ctx + 1} "
                    f"characters, i.e. at least {min_corpus_chars(model_config.n_ctx):,} characters in all "
                    f"(got {len(self.train_data) + len(self.val_data):,})")
            raise ValueError(
                f"corpus too short: with a 90/10 split each part needs more than n_ctx+1={model_config.n_ctx + 1} "
                f"{tokenizer.units}; the {tokenizer.describe()} makes {len(self.train_data):,} of the training part "
                f"and {len(self.val_data):,} of the held-out part. Use a smaller n_ctx or a longer text")
        with _seeded(self.tc.seed):
            self.model = Transformer(model_config)
        self.model.train()
        self.optimizers = make_optimizers(self.model, self.tc)
        self.batch_gen = torch.Generator().manual_seed(self.tc.seed)
        self.eval_gen_seed = self.tc.seed + 1
        self.step_num = 0
        self.tokens_seen = 0
        self.train_time = 0.0
        self.log: list[dict] = []
        self.heads = (HeadRecorder(self.model, every=self.tc.heads_interval, tokenizer=self.tokenizer)
                      if self.tc.heads_interval else None)  # the pages' probe: for a BPE, its whole tokens

    def repeat_share(self, step: int | None = None) -> float:
        """The share of rows holding a repeated span at 0-based ``step`` (default: the next one)."""
        step = self.step_num if step is None else step
        return 1.0 if step < self.tc.repeat_first_steps else self.tc.repeat_fraction

    def record_heads(self) -> bool:
        """Measure every head on the induction probe if this step is due (and step 0); True if measured."""
        if self.heads is None or not (self.heads.due(self.step_num) or self.done):
            return False
        if self.heads.rows and self.heads.rows[-1]["step"] == self.step_num:
            return False
        self.heads.record(self.model, self.step_num)
        return True

    @property
    def done(self) -> bool:
        return self.step_num >= self.tc.steps

    def step(self) -> dict:
        """One optimisation step; returns step, loss, lr, tokens_per_s of this step."""
        if self.step_num == 0:
            self.record_heads()  # the untrained model, the curve's first point
        t0 = time.perf_counter()
        scale = lr_scale(self.step_num, self.tc)
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["peak_lr"] * scale
        x, y = self.next_batch()
        loss = self.model(x, targets=y).loss
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.grad_clip)
        for opt in self.optimizers:
            opt.step()
        lr = self.tc.lr * scale
        dt = time.perf_counter() - t0
        self.step_num += 1
        self.tokens_seen += x.numel()
        self.train_time += dt
        self.record_heads()  # outside the timed part: the probe is not training
        return {"step": self.step_num, "loss": loss.item(), "lr": lr, "tokens_per_s": x.numel() / max(dt, 1e-9)}

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's inputs and targets, (B, n_ctx) each, with the repeat mixture where it is on."""
        share = self.repeat_share()
        if share <= 0:
            return get_batch(self.train_data, self.config.n_ctx, self.tc.batch_size, self.batch_gen)
        g = self.batch_gen
        w = get_windows(self.train_data, self.config.n_ctx, self.tc.batch_size, g)  # (B, n+1)
        w = add_repeats(w, share, g, self.config.vocab_size, self.tc.repeat_min_span, self.tc.repeat_max_span)
        return w[:, :-1], w[:, 1:]  # (B, n) inputs and the (B, n) next tokens

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Loss estimated on the same eval_batches random windows of each split every time."""
        self.model.eval()
        result = {}
        for split, data in (("train", self.train_data), ("val", self.val_data)):
            gen = torch.Generator().manual_seed(self.eval_gen_seed)
            losses = [self.model(*get_batch(data, self.config.n_ctx, self.tc.batch_size, gen)).loss.item()
                      for _ in range(self.tc.eval_batches)]
            result[f"{split}_loss"] = sum(losses) / len(losses)
        self.model.train()
        return result

    def log_eval(self, tokens_per_s: float | None = None) -> dict:
        row = {"step": self.step_num, **self.evaluate(), "tokens_per_s": tokens_per_s}
        self.log.append(row)
        return row


def training_record(trainer: Trainer, corpus_name: str, corpus_chars: int, wall_time_s: float,
                    command: str | None = None, **extra) -> dict:
    """The ``training`` metadata of a checkpoint, with train and validation loss measured the same way
    for every model: over all full n_ctx windows of the held-out part (and as many training tokens), in nats
    per token, and on the held-out part also in bits per character (``held_out_score``)."""
    c, tc, tok = trainer.config, trainer.tc, trainer.tokenizer
    val = held_out_score(trainer.model, tok, trainer.val_data)
    train_full = windowed_loss(trainer.model, trainer.train_data[: len(trainer.val_data)])
    unit = tok.unit
    record = {
        "corpus": corpus_name,
        "corpus_chars": corpus_chars,
        "split": split_description(),
        "tokenizer": tok.kind,
        "tokenizer_description": tok.describe(),
        "loss_unit": unit,  # the losses below are nats per this
        "train_tokens": len(trainer.train_data),
        "val_tokens": len(trainer.val_data),
        "steps": trainer.step_num,
        "batch_size": tc.batch_size,
        "tokens_seen": trainer.tokens_seen,
        "wall_time_s": round(wall_time_s, 1),
        "train_loss": round(train_full, 4),
        "val_loss": round(val["loss"], 4),
        "val_bits_per_char": round(val["bits_per_char"], 4),
        "val_chars_per_token": round(val["chars_per_token"], 4),
        "val_loss_method": (f"mean next-{unit} cross-entropy over all full {c.n_ctx}-{unit} windows of the held-out "
                            f"{1 - TRAIN_FRACTION:.0%}; bits per character: their summed loss over the "
                            f"{val['chars']:,} characters the {val['tokens']:,} predicted {tok.units} cover, / ln 2"),
        "train_config": asdict(tc),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if command:
        record["command"] = command
    record.update(extra)
    return record


def _progress(step, total, loss, val, tps, elapsed, extra=""):
    eta = (total - step) * elapsed / max(step, 1)
    width = 28
    filled = int(width * step / total)
    bar = "#" * filled + "-" * (width - filled)
    val_s = f" val {val:.3f}" if val is not None else ""
    sys.stderr.write(
        f"\r[{bar}] {step}/{total} loss {loss:.3f}{val_s}{extra} | {tps / 1000:.1f}K tok/s | "
        f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s "
    )
    sys.stderr.flush()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m core.train",
                                description="Train a transformer over characters or byte-level BPE tokens.")
    p.add_argument("--corpus", help="UTF-8 text file (default: Tiny Shakespeare via $TE_CORPUS or ../shared/data)")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    for name in ("d_model", "n_heads", "n_layers", "n_ctx"):  # the lecture's shape by default
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(LECTURE, name))
    p.add_argument("--d-ff", type=int, default=None, help="MLP width (default: 4 d)")
    p.add_argument("--tokenizer", choices=TOKENIZERS, default="char",
                   help="'char': one token per distinct character (the lecture's model); 'bpe': a byte-level BPE "
                        "learned from the training 90%% only, saved as tokenizer.json beside the weights")
    p.add_argument("--vocab-size", type=int, default=None, metavar="N",
                   help=f"the BPE's vocabulary size, at least 256 (default {DEFAULT_BPE_VOCAB}); n_ctx then counts tokens")
    p.add_argument("--optimizer", choices=list(RECIPES), default=DEFAULT_RECIPE,
                   help="the recipe: 'muon' (Muon on the blocks' matrices, AdamW elsewhere, warmup-constant-cooldown) "
                        "or 'adamw' (the usual AdamW with warmup and cosine decay); the flags below override it")
    p.add_argument("--schedule", choices=list(SCHEDULES), default=None)
    defaults = TrainConfig()
    for name in ("batch_size", "steps", "warmup", "eval_interval", "eval_batches", "seed", "repeat_first_steps",
                 "repeat_min_span", "repeat_max_span", "heads_interval"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                       help=f"default: the recipe's ({getattr(defaults, name)} for adamw)")
    for name in ("lr", "muon_lr", "muon_momentum", "warmup_frac", "cooldown_frac", "min_lr_ratio", "weight_decay",
                 "grad_clip", "beta2"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=None)
    p.add_argument("--repeat-fraction", type=float, default=None,
                   help="share of training rows holding a span of random characters written twice at a random "
                        "distance (default 0: plain text); with --repeat-first-steps N every row holds one for the "
                        "first N steps. The data on which an induction head forms")
    p.add_argument("--compare-to", default=None, metavar="CHECKPOINT",
                   help="a model trained without repeats: its validation loss is measured the same way and the card "
                        "states the difference (what the repeat mixture costs on plain text)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.tokenizer == "char" and args.vocab_size is not None:
        p.error("--vocab-size applies to --tokenizer bpe; a character model's vocabulary is the corpus's characters")
    bpe_vocab = (args.vocab_size or DEFAULT_BPE_VOCAB) if args.tokenizer == "bpe" else None
    if bpe_vocab is not None and bpe_vocab < 256:
        p.error(f"--vocab-size must be at least 256 (a byte-level BPE starts from the 256 bytes), got {bpe_vocab}")

    use_threads(args.threads)
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        p.error("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
    text = read_text_file(corpus)
    given = {k: getattr(args, k) for k in asdict(defaults) if k != "optimizer" and getattr(args, k, None) is not None}
    tc = TrainConfig.recipe(args.optimizer, **{"steps": defaults.steps, **given})
    mc = dict(n_ctx=args.n_ctx, d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, d_ff=args.d_ff)
    trainer = Trainer(text, mc, tc, bpe_vocab_size=bpe_vocab)
    counts = count_parameters(trainer.config)
    c = trainer.config
    tok = trainer.tokenizer
    print(f"tokenizer: {tok.describe()}" + (f", learned from the training {TRAIN_FRACTION:.0%}"
                                             if tok.kind == "bpe" else ""))
    if bpe_vocab is not None and tok.vocab_size < bpe_vocab:
        print(f"  (the text ran out of pairs seen twice: {tok.vocab_size:,} tokens, not {bpe_vocab:,})")
    print(f"model: d={c.d_model} h={c.n_heads} L={c.n_layers} d_ff={c.d_ff} n_ctx={c.n_ctx} {tok.units} m={c.vocab_size}")
    print(f"parameters per block: {counts['per_block']:,}  ({per_block_formula(c)})")
    print(f"parameters in total:  {counts['total']:,}")
    print(f"corpus: {corpus} ({len(text):,} chars; {len(trainer.train_data):,} train / {len(trainer.val_data):,} val "
          f"{tok.units}" + (f", {trainer.train_chars / len(trainer.train_data):.2f} characters per token in the "
                            f"training part" if tok.kind != "char" else "") + ")")

    start = time.perf_counter()
    val, tps_window, window_tokens, window_time = None, 0.0, 0, 0.0
    trainer.log_eval()
    while not trainer.done:
        m = trainer.step()
        window_tokens += tc.batch_size * c.n_ctx
        window_time += tc.batch_size * c.n_ctx / m["tokens_per_s"]
        if trainer.step_num % tc.eval_interval == 0 or trainer.done:
            tps_window = window_tokens / max(window_time, 1e-9)
            val = trainer.log_eval(tps_window)["val_loss"]
            window_tokens, window_time = 0, 0.0
        if trainer.step_num % 10 == 0 or trainer.done:
            rows = trainer.heads.rows if trainer.heads else []
            ind = f" induction {max(r['induction'] for r in rows[-c.n_layers * c.n_heads:]):.2f}" if rows else ""
            _progress(trainer.step_num, tc.steps, m["loss"], val, m["tokens_per_s"], time.perf_counter() - start, ind)
    sys.stderr.write("\n")
    wall = time.perf_counter() - start
    print(f"measuring the validation loss over every full window of the held-out {1 - TRAIN_FRACTION:.0%} ...")
    argv_used = argv if argv is not None else sys.argv[1:]
    command = "python -m core.train " + shlex.join(str(a) for a in argv_used)
    training = training_record(trainer, Path(corpus).name, len(text), wall, command)
    if tok.kind == "char":
        print(f"validation loss {training['val_loss']:.4f} nats/char (full {c.n_ctx}-char windows) = "
              f"{training['val_bits_per_char']:.4f} bits/char")
    else:
        print(f"validation loss {training['val_loss']:.4f} nats/token (full {c.n_ctx}-token windows) = "
              f"{training['val_bits_per_char']:.4f} bits/char ({training['val_chars_per_token']:.3f} characters per "
              f"token)")
    if args.compare_to:
        base, base_tok = load_checkpoint(args.compare_to)
        if (base_tok.to_dict(), base_tok.files()) != (tok.to_dict(), tok.files()):
            p.error(f"{args.compare_to} has another tokenizer; its loss per token is not comparable")
        base_val = round(windowed_loss(base, trainer.val_data), 4)
        training["compared_to"] = {"model": Path(args.compare_to).name, "val_loss": base_val,
                                   "difference": round(training["val_loss"] - base_val, 4)}
        print(f"{Path(args.compare_to).name}: validation loss {base_val:.4f}; difference "
              f"{training['val_loss'] - base_val:+.4f}")
    heads = trainer.heads.rows if trainer.heads else None
    if heads:
        formed = formation_step(heads)
        training["induction"] = induction_summary(heads)
        print("induction head: " + ("none reached the threshold" if formed is None else f"formed at step {formed:,}"))
    path = save_checkpoint(args.out, trainer.model, trainer.tokenizer, training, trainer.log, overwrite=args.overwrite,
                           heads=heads)
    print(f"saved {path}")
    return trainer


if __name__ == "__main__":
    main()
