"""One training loop for the command line and the training page.

Nothing here is specific to the UI: ``Trainer.step()`` runs one optimisation step and returns its
metrics, ``Trainer.evaluate()`` estimates train and validation loss; callers decide what to show.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, asdict

import numpy as np
import torch

from core.corpus import TRAIN_FRACTION, read_text_file, shakespeare_path, split_description, split_train_val
from core.model import LECTURE, ModelConfig, Transformer
from core.params import count_parameters, per_block_formula
from core.threads import use_threads
from core.tokenizer import CharTokenizer


@dataclass
class TrainConfig:
    batch_size: int = 32
    steps: int = 12000
    lr: float = 3e-3          # peak learning rate of the one-cycle schedule
    warmup: int = 400         # linear warmup steps, then cosine decay
    min_lr_ratio: float = 0.02  # the cosine ends at lr * min_lr_ratio
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    beta2: float = 0.99       # small batches of characters: nanoGPT's char recipe uses 0.99
    eval_interval: int = 250
    eval_batches: int = 16
    seed: int = 1337

    def __post_init__(self):
        problems = train_problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems.values()))


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def train_problems(values: dict) -> dict[str, str]:
    """Field name -> what is wrong, for the training settings present in ``values``; empty when all is
    well. The one validation of a run's settings: TrainConfig raises with these messages, the training
    form shows them beside its fields."""
    problems: dict[str, str] = {}
    for name in ("batch_size", "steps", "eval_interval", "eval_batches"):
        if name in values and (not _whole(values[name]) or values[name] < 1):
            problems[name] = f"{name} must be a whole number of at least 1 (got {values[name]!r})"
    if "warmup" in values and (not _whole(values["warmup"]) or values["warmup"] < 0):
        problems["warmup"] = f"warmup must be a whole number of at least 0 (got {values['warmup']!r})"
    lr = values.get("lr", 1e-3)
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and 0 < lr <= 1):
        problems["lr"] = f"lr must be a number above 0 and at most 1 (got {lr!r})"
    seed = values.get("seed", 0)
    if not _whole(seed) or not 0 <= seed < 2**63:
        problems["seed"] = f"seed must be a whole number of at least 0 (got {seed!r})"
    return problems


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup to the peak, then cosine decay to lr * min_lr_ratio at the last step."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    progress = min(1.0, progress)
    floor = tc.lr * tc.min_lr_ratio
    return floor + 0.5 * (tc.lr - floor) * (1 + math.cos(math.pi * progress))


def min_corpus_chars(n_ctx: int) -> int:
    """Shortest corpus whose 90/10 split leaves each part one window of n_ctx inputs plus targets, with
    at least two start positions (``get_batch`` draws starts below len - n_ctx)."""
    need, n = n_ctx + 2, n_ctx + 2
    while True:
        train, val = split_train_val(range(n))
        if len(train) >= need and len(val) >= need:
            return n
        n += 1


def encode_corpus(tokenizer: CharTokenizer, text: str) -> torch.Tensor:
    """``tokenizer.encode(text, errors="drop")`` as a tensor, vectorised: a megabyte corpus in milliseconds
    rather than a second, so starting a run from the training page feels immediate."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)     # one code point per character
    vocab = np.array([ord(c) for c in tokenizer.chars], dtype=np.uint32)
    order = np.argsort(vocab)
    pos = np.minimum(np.searchsorted(vocab[order], codes), len(vocab) - 1)
    known = vocab[order][pos] == codes                                     # unknown characters are dropped
    return torch.from_numpy(order[pos[known]].astype(np.int64))


def get_batch(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator):
    """Random windows of n_ctx tokens and their next-token targets: (B, n_ctx) each."""
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + n_ctx] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + n_ctx] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def windowed_loss(model: Transformer, data: torch.Tensor, n_ctx: int | None = None, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy over every full, non-overlapping window of n_ctx tokens."""
    n_ctx = n_ctx or model.config.n_ctx
    n_windows = (len(data) - 1) // n_ctx
    if n_windows < 1:
        raise ValueError(f"need at least {n_ctx + 1} tokens to score one window, got {len(data)}")
    x = data[: n_windows * n_ctx].view(n_windows, n_ctx)             # (W, n_ctx)
    y = data[1: n_windows * n_ctx + 1].view(n_windows, n_ctx)        # (W, n_ctx)
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, n_windows, batch_size):
        out = model(x[i:i + batch_size], targets=y[i:i + batch_size])
        total += out.loss.item() * x[i:i + batch_size].shape[0]
    model.train(was_training)
    return total / n_windows


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
                 tokenizer: CharTokenizer | None = None):
        self.tc = train_config or TrainConfig()
        self.tokenizer = tokenizer or CharTokenizer.from_text(text)
        if isinstance(model_config, dict):
            model_config = ModelConfig(**{**model_config, "vocab_size": self.tokenizer.vocab_size})
        if model_config.vocab_size != self.tokenizer.vocab_size:
            raise ValueError(f"vocab_size={model_config.vocab_size} but the corpus has {self.tokenizer.vocab_size} characters")
        self.config = model_config
        data = encode_corpus(self.tokenizer, text)
        self.train_data, self.val_data = split_train_val(data)
        if len(data) < min_corpus_chars(model_config.n_ctx):
            raise ValueError(
                f"corpus too short: with a 90/10 split each part needs more than n_ctx+1={model_config.n_ctx + 1} "
                f"characters, i.e. at least {min_corpus_chars(model_config.n_ctx):,} characters in all (got {len(data):,})"
            )
        with _seeded(self.tc.seed):
            self.model = Transformer(model_config)
        self.model.train()
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.tc.lr, betas=(0.9, self.tc.beta2),
        )
        self.batch_gen = torch.Generator().manual_seed(self.tc.seed)
        self.eval_gen_seed = self.tc.seed + 1
        self.step_num = 0
        self.tokens_seen = 0
        self.train_time = 0.0
        self.log: list[dict] = []

    @property
    def done(self) -> bool:
        return self.step_num >= self.tc.steps

    def step(self) -> dict:
        """One optimisation step; returns step, loss, lr, tokens_per_s of this step."""
        t0 = time.perf_counter()
        lr = lr_at(self.step_num, self.tc)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(self.train_data, self.config.n_ctx, self.tc.batch_size, self.batch_gen)
        loss = self.model(x, targets=y).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.grad_clip)
        self.optimizer.step()
        dt = time.perf_counter() - t0
        self.step_num += 1
        self.tokens_seen += x.numel()
        self.train_time += dt
        return {"step": self.step_num, "loss": loss.item(), "lr": lr, "tokens_per_s": x.numel() / max(dt, 1e-9)}

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
    for every model: over all full n_ctx windows of the held-out part (and as many training characters)."""
    c, tc = trainer.config, trainer.tc
    val_full = windowed_loss(trainer.model, trainer.val_data)
    train_full = windowed_loss(trainer.model, trainer.train_data[: len(trainer.val_data)])
    record = {
        "corpus": corpus_name,
        "corpus_chars": corpus_chars,
        "split": split_description(),
        "steps": trainer.step_num,
        "batch_size": tc.batch_size,
        "tokens_seen": trainer.tokens_seen,
        "wall_time_s": round(wall_time_s, 1),
        "train_loss": round(train_full, 4),
        "val_loss": round(val_full, 4),
        "val_loss_method": f"mean next-character cross-entropy over all full {c.n_ctx}-character windows of the held-out {1 - TRAIN_FRACTION:.0%}",
        "train_config": asdict(tc),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if command:
        record["command"] = command
    record.update(extra)
    return record


def _progress(step, total, loss, val, tps, elapsed):
    eta = (total - step) * elapsed / max(step, 1)
    width = 28
    filled = int(width * step / total)
    bar = "#" * filled + "-" * (width - filled)
    val_s = f" val {val:.3f}" if val is not None else ""
    sys.stderr.write(
        f"\r[{bar}] {step}/{total} loss {loss:.3f}{val_s} | {tps / 1000:.1f}K tok/s | "
        f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s "
    )
    sys.stderr.flush()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m core.train", description="Train a character-level transformer.")
    p.add_argument("--corpus", help="UTF-8 text file (default: Tiny Shakespeare via $TE_CORPUS or ../shared/data)")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    for name in ("d_model", "n_heads", "n_layers", "n_ctx"):  # the lecture's shape by default
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(LECTURE, name))
    p.add_argument("--d-ff", type=int, default=None, help="MLP width (default: 4 d)")
    defaults = TrainConfig()
    for name in ("batch_size", "steps", "warmup", "eval_interval", "eval_batches", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip", "beta2"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)

    use_threads(args.threads)
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        p.error("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
    text = read_text_file(corpus)
    tc = TrainConfig(**{k: getattr(args, k) for k in asdict(defaults)})
    mc = dict(n_ctx=args.n_ctx, d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, d_ff=args.d_ff)
    trainer = Trainer(text, mc, tc)
    counts = count_parameters(trainer.config)
    c = trainer.config
    print(f"model: d={c.d_model} h={c.n_heads} L={c.n_layers} d_ff={c.d_ff} n_ctx={c.n_ctx} m={c.vocab_size}")
    print(f"parameters per block: {counts['per_block']:,}  ({per_block_formula(c)})")
    print(f"parameters in total:  {counts['total']:,}")
    print(f"corpus: {corpus} ({len(text):,} chars; {len(trainer.train_data):,} train / {len(trainer.val_data):,} val)")

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
            _progress(trainer.step_num, tc.steps, m["loss"], val, m["tokens_per_s"], time.perf_counter() - start)
    sys.stderr.write("\n")
    wall = time.perf_counter() - start
    print(f"measuring the validation loss over every full window of the held-out {1 - TRAIN_FRACTION:.0%} ...")
    from core.checkpoint import save_checkpoint
    from pathlib import Path

    argv_used = argv if argv is not None else sys.argv[1:]
    command = "python -m core.train " + shlex.join(str(a) for a in argv_used)
    training = training_record(trainer, Path(corpus).name, len(text), wall, command)
    print(f"validation loss {training['val_loss']:.4f} nats/char (full {c.n_ctx}-char windows)")
    path = save_checkpoint(args.out, trainer.model, trainer.tokenizer, training, trainer.log, overwrite=args.overwrite)
    print(f"saved {path}")
    return trainer


if __name__ == "__main__":
    main()
