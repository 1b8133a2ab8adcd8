"""One training loop for the command line and the training page.

Nothing here is specific to the UI: ``Trainer.step()`` runs one optimisation step and returns its
metrics, ``Trainer.evaluate()`` estimates train and validation loss; callers decide what to show.
The settings, recipes and schedule are ``core.training.recipes``; the tokenizer, batches and scoring
``core.training.train_data``: import those names from there.

The command line, ``python -m core.train``, is core.training.train_cli (its ``main``).
"""
from __future__ import annotations

import copy
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict

import torch

from core.data.corpus import TRAIN_FRACTION, split_description, split_train_val
from core.analysis.induction import HeadRecorder
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.precision import FP32, autocast, choose, worth_probing
from core.serve.paths import user_models_dir
from core.nn.snapshots import snapshot_state, snapshot_steps
from core.nn.tokenizer import CharTokenizer
from core.nn.tokenizer_base import Tokenizer
from core.training.recipes import TrainConfig, lr_scale, make_optimizers
from core.training.train_data import (encode_corpus, frequent_tokens, get_batch, held_out_score, make_tokenizer,
                                      min_corpus_chars, mixed_batch, repeat_share, windowed_loss)


_INIT_LOCK = threading.Lock()  # one model built at a time in this process: see _seeded


@contextmanager
def _seeded(seed: int):
    """Torch's global generator seeded for the block, then put back as it was. Building a model draws its
    initial weights from that generator; two sessions starting at the same moment must not interleave
    their draws (or a seed would no longer fix the weights), nor reseed anyone else's sampling."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):  # devices=[]: the CPU generator only, no CUDA probe
        torch.manual_seed(seed)
        yield


class Trainer:
    # Everything a run needs from the first step to the last: tokenizer, encoded parts, model, optimisers and
    # the generators that make a seed repeat the run exactly. No I/O: the command line below and the training
    # process (core.training.training_child) drive it one step() at a time and decide what to show.
    def __init__(self, text: str, model_config: ModelConfig | dict, train_config: TrainConfig | None = None,
                 tokenizer: Tokenizer | None = None, bpe_vocab_size: int | None = None, precision: str = FP32):
        """A run on ``text``: its first 90% trains, the rest is held out. The tokenizer is ``tokenizer`` if given;
        else a byte-level BPE of ``bpe_vocab_size`` tokens learned from the training part alone, or, without a
        size, one token per distinct character of the whole text (so the held-out part has no unknown ones).
        ``precision``: "float32", or "auto": bf16 products (attention kept fp32) where a few probe steps at this
        shape measure them faster with the same loss (core.nn.precision, cached in the models folder; a run under
        20 x the probe's 10 steps only reads the cache: worth_probing); the choice is ``self.precision`` and the
        card's training record says it. The app's runs pass core.nn.precision.run_precision()."""
        if precision not in (FP32, "auto"):
            raise ValueError(f"precision must be float32 or auto, got {precision!r}")
        self.tc = train_config or TrainConfig()
        train_text, val_text = split_train_val(text)
        if tokenizer is None:
            # a character model's vocabulary comes from the whole text: otherwise a character seen only in the
            # held-out part would be dropped from it; a BPE falls back to bytes, so it can stay unseen
            tokenizer = (make_tokenizer("bpe", train_text, bpe_vocab_size) if bpe_vocab_size is not None
                         else CharTokenizer.from_text(text))
        self.tokenizer = tokenizer
        if isinstance(model_config, dict):  # a shape without m: the tokenizer decides the vocabulary
            model_config = ModelConfig(**{**model_config, "vocab_size": self.tokenizer.vocab_size})
        if model_config.vocab_size != self.tokenizer.vocab_size:
            raise ValueError(f"vocab_size={model_config.vocab_size} but the tokenizer has "
                             f"{self.tokenizer.vocab_size} {self.tokenizer.units}")
        self.config = model_config
        # each part encoded on its own: no token straddles the boundary, and the training part is exactly the
        # text the tokenizer learned from
        self.train_data, self.val_data = encode_corpus(tokenizer, train_text), encode_corpus(tokenizer, val_text)
        self.train_chars, self.val_chars = len(train_text), len(val_text)
        need = model_config.n_ctx + 2  # a window of inputs and targets, from at least two start positions
        if len(self.train_data) < need or len(self.val_data) < need:
            if isinstance(tokenizer, CharTokenizer):  # characters can be counted in advance: say how many
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
        self.precision_probe = self._probe_precision() if precision == "auto" else {}
        self.precision = self.precision_probe.get("precision", FP32)
        # generators of its own, not torch's global one: another session's sampling cannot shift this run's
        # batches, and the evaluation's windows do not consume the training draws
        self.batch_gen = torch.Generator().manual_seed(self.tc.seed)
        self.eval_gen_seed = self.tc.seed + 1
        self.step_num = 0
        self.tokens_seen = 0
        self.train_time = 0.0
        self.log: list[dict] = []
        self.heads = (HeadRecorder(self.model, every=self.tc.heads_interval, tokenizer=self.tokenizer)
                      if self.tc.heads_interval else None)  # the pages' probe: for a BPE, its whole tokens
        # the weights at log-spaced steps (core.nn.snapshots), float16 in memory until the save writes them
        self.snapshot_plan = frozenset(snapshot_steps(self.tc.steps, self.tc.snapshots))
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.snapshot_rows: list[dict] = []  # step, train_loss, val_loss at each snapshot: the loss a view states

    def _probe_precision(self, steps: int = 4) -> dict:
        """core.nn.precision.choose for this run's shape: ``steps`` steps (after one untimed) of each precision on
        copies of the model and optimisers, the same batch, timed, with the loss the last one reached."""
        c, tc = self.config, self.tc
        x, y = get_batch(self.train_data, c.n_ctx, tc.batch_size, torch.Generator().manual_seed(tc.seed + 2))

        def probe(precision: str) -> tuple[float, float]:
            model = copy.deepcopy(self.model)
            opts = make_optimizers(model, tc)
            times = []
            for _ in range(steps + 1):
                t = time.perf_counter()
                with autocast(precision):  # around the forward only: its bf16 weight copies die with it
                    loss = model(x, targets=y).loss
                for opt in opts:
                    opt.zero_grad(set_to_none=True)
                loss.backward()
                for opt in opts:
                    opt.step()
                times.append(time.perf_counter() - t)
            return min(times[1:]), loss.item()  # the fastest step: a load spike on a shared CPU falls on one

        shape = (f"lm d={c.d_model} h={c.n_heads} L={c.n_layers} d_ff={c.d_ff} n_ctx={c.n_ctx} m={c.vocab_size} "
                 f"batch={tc.batch_size} {tc.optimizer} threads={torch.get_num_threads()}")
        return choose(shape, probe, cache_dir=user_models_dir(), may_probe=worth_probing(tc.steps, steps))

    def take_snapshot(self) -> bool:
        """Keep the weights (and the estimated losses) if this step is one of the plan's; True if kept."""
        if self.step_num not in self.snapshot_plan or self.step_num in self.snapshots:
            return False
        self.snapshots[self.step_num] = snapshot_state(self.model)
        losses = self.evaluate()  # the same fixed windows as the curve: the views' loss matches the chart's
        self.snapshot_rows.append({"step": self.step_num, **{k: round(v, 4) for k, v in losses.items()}})
        return True

    def repeat_share(self, step: int | None = None) -> float:
        """The share of rows holding a repeated span at 0-based ``step`` (default: the next one)."""
        return repeat_share(self.step_num if step is None else step, self.tc)

    def record_heads(self) -> bool:
        """Measure every head on the induction probe if this step is due (and step 0); True if measured."""
        # the last step too, due or not: the curve ends where the run did
        if self.heads is None or not (self.heads.due(self.step_num) or self.done):
            return False
        if self.heads.rows and self.heads.rows[-1]["step"] == self.step_num:  # a last step that was also due
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
            self.take_snapshot()
        t0 = time.perf_counter()  # the step alone is timed (batch, forward, backward, update): tokens_per_s
        scale = lr_scale(self.step_num, self.tc)
        for opt in self.optimizers:  # each group from its own peak: Muon's and AdamW's rates differ
            for group in opt.param_groups:
                group["lr"] = group["peak_lr"] * scale
        x, y = self.next_batch()
        with autocast(self.precision):  # bf16 where the probe chose it (core.nn.precision), per forward
            loss = self.model(x, targets=y).loss
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.tc.grad_clip > 0:  # a rare huge gradient (an odd batch) would move the weights by its full size
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.grad_clip)
        for opt in self.optimizers:
            opt.step()
        lr = self.tc.lr * scale  # AdamW's rate: the one the curves and the log show
        dt = time.perf_counter() - t0
        self.step_num += 1
        self.tokens_seen += x.numel()  # B * n_ctx: every position of every row is a prediction
        self.train_time += dt
        self.record_heads()  # outside the timed part: the probe is not training
        self.take_snapshot()
        return {"step": self.step_num, "loss": loss.item(), "lr": lr, "tokens_per_s": x.numel() / max(dt, 1e-9)}

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's inputs and targets, (B, n_ctx) each, with the repeat mixture where it is on."""
        # a method, not a call inlined in step(): bench/induction.py overrides it to try other mixtures
        return mixed_batch(self.train_data, self.config.n_ctx, self.tc.batch_size, self.batch_gen,
                           self.repeat_share(), self.config.vocab_size, self.tc.repeat_min_span,
                           self.tc.repeat_max_span, self.tc.repeat_random_share, self.repeat_pool())

    def repeat_pool(self, step: int | None = None) -> torch.Tensor | None:
        """The ids the repeat mixture's random tokens are drawn from at ``step`` (default: the next one): the
        training part's repeat_pool most frequent tokens while the pool is on, else None (every id)."""
        step = self.step_num if step is None else step
        if not self.tc.repeat_pool or (self.tc.repeat_pool_steps and step >= self.tc.repeat_pool_steps):
            return None
        if getattr(self, "_pool", None) is None:  # counted once: the training part does not change
            self._pool = frequent_tokens(self.train_data, self.tc.repeat_pool)
        return self._pool

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Loss estimated on the same eval_batches random windows of each split every time."""
        self.model.eval()
        result = {}
        for split, data in (("train", self.train_data), ("val", self.val_data)):
            # the same windows at every evaluation: the curve's wiggles are then the model's, not the sample's
            gen = torch.Generator().manual_seed(self.eval_gen_seed)
            losses = [self.model(*get_batch(data, self.config.n_ctx, self.tc.batch_size, gen)).loss.item()
                      for _ in range(self.tc.eval_batches)]
            result[f"{split}_loss"] = sum(losses) / len(losses)
        self.model.train()  # evaluation happens mid-run: back to training mode for the next step
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
    # as many training tokens as held-out ones: the same cost, and the two losses compare like for like
    train_full = windowed_loss(trainer.model, trainer.train_data[: len(trainer.val_data)])
    unit = tok.unit
    record = {
        "corpus": corpus_name,
        "corpus_chars": corpus_chars,
        "split": split_description(),  # in words: a card says which part of its corpus was held out
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
        # how it was measured, on the card: a loss measured any other way is not comparable with it
        "val_loss_method": (f"mean next-{unit} cross-entropy over all full {c.n_ctx}-{unit} windows of the held-out "
                            f"{1 - TRAIN_FRACTION:.0%}; bits per character: their summed loss over the "
                            f"{val['chars']:,} characters the {val['tokens']:,} predicted {tok.units} cover, / ln 2"),
        "train_config": asdict(tc),  # every setting: with the command or the page's form, enough to rerun it
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),  # the wall time above depends on it
        "precision": getattr(trainer, "precision", FP32),  # the matrix products' (core.nn.precision)
    }
    if trainer.snapshot_rows:
        record["snapshots"] = list(trainer.snapshot_rows)  # the losses at each kept step (core.nn.snapshots)
    if command:
        record["command"] = command
    record.update(extra)
    return record
