"""The command line ``python -m core.train`` (core/train.py runs it): train one model and save it.

Every argument is judged before any work, against the limits the Training page holds a live run to
(``core.training.job_settings.validate_settings``: the shape, at most MAX_PARAMS parameters, MAX_TOKENS_PER_STEP
tokens a step, MAX_STEPS steps, a BPE of MIN_BPE_VOCAB to MAX_BPE_VOCAB tokens, and the run's memory estimate
within TE_RUN_MEMORY), and the output folder is checked before the corpus is read: a bad argument costs one line
on stderr and exit status 2, never a traceback, minutes of silence or a run lost at its save.

    python -m core.train --out assets/models/NAME [--tokenizer bpe --vocab-size 1024] [--steps N] ...
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from core.analysis.induction import formation_step, induction_summary
from core.nn.checkpoint import CheckpointError, load_checkpoint
from core.nn.config import LECTURE
from core.nn.params import count_parameters, per_block_formula
from core.serve.fmt import binary_bytes
from core.serve.threads import use_threads
from core.training import trainer as T  # T.Trainer looked up at each run: a test may patch it there
from core.training.cli_args import OneLineParser, model_out_problem, save_model
from core.data.corpus import TRAIN_FRACTION, read_text_file, shakespeare_path
from core.training.job_settings import (MAX_BPE_VOCAB, MIN_BPE_VOCAB, MIN_VOCAB, JobSettings, run_memory,
                                        validate_settings)
from core.data.budget import memory_budget
from core.training.recipes import DEFAULT_RECIPE, RECIPES, SCHEDULES, TrainConfig
from core.training.train_data import DEFAULT_BPE_VOCAB, TOKENIZERS, windowed_loss

PROG = "python -m core.train"
# evaluations read this many batches of each part at most: the shipped models used 16, the Training page 8; each
# evaluation is 2 x eval_batches forward passes, repeated every eval_interval steps and at every snapshot
MAX_EVAL_BATCHES = 256
SNAPSHOT_BYTES = 2  # a snapshot keeps every parameter as float16 in memory until the save writes it


class Refused(ValueError):
    """An argument refused before any work: said in one line, status 2."""


class Usage(Refused):
    """Flags that do not go together, refused as argparse refuses its own (SystemExit, status 2)."""


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Train a transformer over characters or byte-level BPE tokens. Every "
                      "setting is held to the Training page's limits for a live run, memory estimate included "
                      "(TE_RUN_MEMORY, default 1G; 0 lifts the memory limit), and checked before any work.")
    p.add_argument("--corpus", help="UTF-8 text file (default: Tiny Shakespeare via $TE_CORPUS or ../shared/data), "
                                    "a regular file no larger than the run's memory holds")
    p.add_argument("--out", required=True, help="checkpoint folder to write; it must not exist (see --overwrite)")
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
                 "repeat_min_span", "repeat_max_span", "heads_interval", "snapshots", "repeat_pool", "repeat_pool_steps"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                       help=f"default: the recipe's ({getattr(defaults, name)} for adamw)")
    for name in ("lr", "muon_lr", "muon_momentum", "warmup_frac", "cooldown_frac", "min_lr_ratio", "weight_decay",
                 "grad_clip", "beta2"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=None)
    p.add_argument("--repeat-fraction", type=float, default=None,
                   help="share of training rows holding a span of random characters written twice at a random "
                        "distance (default 0: plain text); with --repeat-first-steps N every row holds one for the "
                        "first N steps. The data on which an induction head forms")
    p.add_argument("--repeat-random-share", type=float, default=None,
                   help="share of the repeated spans made of random characters (default 1); the rest repeat the "
                        "row's own text, so the head also copies natural text written twice")
    p.add_argument("--compare-to", default=None, metavar="CHECKPOINT",
                   help="a model trained without repeats: its validation loss is measured the same way and the card "
                        "states the difference (what the repeat mixture costs on plain text)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads, 1 to this machine's cores "
                                                             "(default: torch's choice)")
    p.add_argument("--overwrite", action="store_true", help="replace the saved model in --out: its own files only "
                   "(the SAEs, transcoders and any other file beside it stay as they are); never another kind of "
                   "folder or a file")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)  # a value of the wrong type ends here, in argparse's one line
    started = []  # set once training has begun: an error then starts a fresh line after the progress bar
    try:
        problem = model_out_problem(args.out, args.overwrite)  # before minutes of training, not after them
        if problem:
            p.error(problem)  # an argument's error, as argparse's own: SystemExit with status 2
        return _train(args, argv, started)
    except Usage as e:  # flags that contradict each other: argparse's way, SystemExit with status 2
        p.error(str(e))
    except (ValueError, OSError, CheckpointError) as e:  # bad input (the corpus, a setting, the folder): in words
        sys.stderr.write(("\n" if started else "") + f"{PROG}: error: {e}\n")
        return 2  # as argparse's own errors (and core.study's)
    except KeyboardInterrupt:
        sys.stderr.write("\nstopped: nothing was saved\n")
        return 130  # what a shell reports for Ctrl-C (128 + SIGINT)


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The run's TrainConfig: the recipe --optimizer names, overridden by the flags given (their default None
    means "the recipe's"); ValueError (train_problems' words) for a value no run can take."""
    defaults = TrainConfig()
    given = {k: getattr(args, k) for k in asdict(defaults) if k != "optimizer" and getattr(args, k, None) is not None}
    if args.warmup_frac is not None and args.warmup is None:
        given["warmup"] = None  # a share of the run: the adamw recipe's fixed 400 steps would otherwise ignore it
    return TrainConfig.recipe(args.optimizer, **{"steps": defaults.steps, **given})


REPEAT_SHAPES = ("repeat_min_span", "repeat_max_span", "repeat_random_share", "repeat_pool", "repeat_pool_steps")


def unused_flags(args: argparse.Namespace, tc: TrainConfig) -> None:
    """Usage, in words, for a flag this run would take and never use: its recipe or its other flags leave it
    nothing to do (a Muon rate for AdamW, a cooldown in a cosine schedule, the repeats' spans with no repeats)."""
    # judged on the run's TrainConfig, not on the flags alone: the recipe decides the optimiser and the schedule
    muon = [f for f, v in (("--muon-lr", args.muon_lr), ("--muon-momentum", args.muon_momentum)) if v is not None]
    if muon and tc.optimizer != "muon":  # AdamW then takes the blocks' matrices too: no Muon group to set
        raise Usage(f"{muon[0]} applies to --optimizer muon; the {tc.optimizer} recipe has no Muon")
    if args.cooldown_frac is not None and tc.schedule != "wsd":  # lr_scale reads it only in the wsd branch
        raise Usage(f"--cooldown-frac applies to --schedule wsd; the {tc.schedule} schedule has no cooldown")
    if args.warmup is not None and args.warmup_frac is not None:  # a warmup in steps wins: the share was dropped
        raise Usage("give --warmup (steps) or --warmup-frac (a share of the run), not both")
    if tc.repeat_fraction == 0 and tc.repeat_first_steps == 0:  # no row ever holds a repeated span
        for name in REPEAT_SHAPES:
            if getattr(args, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise Usage(f"{flag} shapes the repeated spans, and this run has none: add --repeat-fraction F or "
                            "--repeat-first-steps N")
    if args.repeat_pool_steps is not None and not tc.repeat_pool:  # a pool of 0 is the whole vocabulary, always
        raise Usage("--repeat-pool-steps applies with --repeat-pool N (the spans' tokens drawn from the N most "
                    "frequent for that many steps)")


def settings(args: argparse.Namespace, tc: TrainConfig) -> JobSettings:
    """The Training page's settings for the same run: what its limits and memory estimate judge."""
    return JobSettings(d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, d_ff=args.d_ff,
                       n_ctx=args.n_ctx, batch_size=tc.batch_size, lr=tc.lr, steps=tc.steps, seed=tc.seed,
                       recipe=args.optimizer, repeat_fraction=tc.repeat_fraction, tokenizer=args.tokenizer,
                       bpe_vocab=args.vocab_size or DEFAULT_BPE_VOCAB, snapshots=tc.snapshots > 0)


def check(s: JobSettings, tc: TrainConfig, vocab: int, chars: int | None) -> None:
    """Refused, in words, when the run may not train: the page's limits and memory estimate for ``vocab`` tokens
    and a corpus of ``chars`` characters (None: not read yet, so its length is not judged), with the snapshots
    this run keeps in memory added to the estimate."""
    # split_tokens stands for "long enough" until the corpus is read; a BPE's parts are only known once it is
    # learned, and the Trainer then says in words when they are too short
    long_enough = (2**62, 2**62) if chars is None or s.tokenizer == "bpe" else None
    errors = validate_settings(s, chars or 0, vocab, long_enough)
    if errors:
        hint = " (TE_RUN_MEMORY sets that limit; 0 lifts it)" if "memory" in errors else ""
        raise Refused("; ".join(dict.fromkeys(errors.values())) + hint)
    budget = memory_budget()
    # the page's estimate leaves the snapshots out (it keeps 21 at most); --snapshots may ask for 199, each a
    # float16 copy of every weight held until the save
    keep = SNAPSHOT_BYTES * count_parameters(s.model_config(vocab))["total"] * (tc.snapshots + 1 if tc.snapshots else 0)
    need = run_memory(s, vocab, chars or 0).total + keep
    if budget is not None and need > budget:
        raise Refused(f"this run needs about {binary_bytes(need)} of memory, {binary_bytes(keep)} of it for its "
                      f"{tc.snapshots} snapshots; TE_RUN_MEMORY allows {binary_bytes(budget)}: ask for fewer "
                      "--snapshots (or none, 0)")


def check_options(args: argparse.Namespace) -> tuple[TrainConfig, JobSettings]:
    """Every option judged before the corpus is read (the fewest tokens its tokenizer can have, no text: what
    any corpus would cost at least)."""
    if args.tokenizer == "char" and args.vocab_size is not None:
        raise Usage("--vocab-size applies to --tokenizer bpe; a character model's vocabulary is the corpus's "
                    "characters")
    if args.tokenizer == "bpe" and args.vocab_size is not None and not MIN_BPE_VOCAB <= args.vocab_size <= MAX_BPE_VOCAB:
        raise Usage(f"--vocab-size must be at least {MIN_BPE_VOCAB} (a byte-level BPE starts from the {MIN_BPE_VOCAB} "
                    f"bytes) and at most {MAX_BPE_VOCAB:,}, got {args.vocab_size:,}")
    cores = os.cpu_count() or 1  # torch starts a thread per count asked: 100,000 ran out of memory
    if args.threads is not None and not 1 <= args.threads <= cores:
        raise Refused(f"--threads must be from 1 to {cores}, this machine's cores (got {args.threads})")
    tc = train_config(args)  # train_problems' checks: TrainConfig raises with the words the form shows
    unused_flags(args, tc)
    if tc.eval_batches > MAX_EVAL_BATCHES:
        raise Refused(f"--eval-batches must be at most {MAX_EVAL_BATCHES} (each evaluation reads that many batches "
                      f"of each part; the shipped models used 16), got {tc.eval_batches:,}")
    s = settings(args, tc)
    # the fewest tokens the tokenizer can have: a run refused now is refused whatever the corpus holds
    check(s, tc, s.bpe_vocab if s.tokenizer == "bpe" else MIN_VOCAB["char"], None)
    return tc, s


def _train(args: argparse.Namespace, argv, started: list) -> int:
    """The run ``main`` parsed: check, train, measure and save; 0 once saved (a process's exit status)."""
    tc, s = check_options(args)
    # checked before training: a base that cannot be read would otherwise fail the run after its last step
    base = load_checkpoint(args.compare_to) if args.compare_to else None
    corpus = args.corpus or shakespeare_path()
    if corpus is None:
        raise Refused("no --corpus given and Tiny Shakespeare not found (set TE_CORPUS)")
    text = read_text_file(corpus)  # a regular file, read up to the memory budget's cap and no further
    vocab = s.bpe_vocab if s.tokenizer == "bpe" else len(set(text))
    check(s, tc, vocab, len(text))  # now with the corpus's m
    if tc.repeat_pool > vocab:  # frequent_tokens would hand back fewer, silently
        raise Refused(f"--repeat-pool {tc.repeat_pool:,} is more than the {vocab:,} tokens of this run's vocabulary")
    # before any work; a process of its own may set the count (core.serve.threads: never so in the server)
    use_threads(args.threads)
    mc = dict(n_ctx=args.n_ctx, d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, d_ff=args.d_ff)
    trainer = T.Trainer(text, mc, tc, bpe_vocab_size=s.bpe_vocab_size)
    tok, c = trainer.tokenizer, trainer.config
    if base is not None:  # losses per token of two tokenizers measure different things; the same one compares
        base_tok = base[1]
        if (base_tok.to_dict(), base_tok.files()) != (tok.to_dict(), tok.files()):
            raise Refused(f"--compare-to {args.compare_to} has another tokenizer; its loss per token is not comparable")
    counts = count_parameters(c)
    print(f"tokenizer: {tok.describe()}" + (f", learned from the training {TRAIN_FRACTION:.0%}"
                                             if tok.kind == "bpe" else ""))
    if s.bpe_vocab_size is not None and tok.vocab_size < s.bpe_vocab:
        print(f"  (the text ran out of pairs seen twice: {tok.vocab_size:,} tokens, not {s.bpe_vocab:,})")
    print(f"model: d={c.d_model} h={c.n_heads} L={c.n_layers} d_ff={c.d_ff} n_ctx={c.n_ctx} {tok.units} m={c.vocab_size}")
    print(f"parameters per block: {counts['per_block']:,}  ({per_block_formula(c)})")
    print(f"parameters in total:  {counts['total']:,}")
    print(f"corpus: {corpus} ({len(text):,} chars; {len(trainer.train_data):,} train / {len(trainer.val_data):,} val "
          f"{tok.units}" + (f", {trainer.train_chars / len(trainer.train_data):.2f} characters per token in the "
                            f"training part" if tok.kind != "char" else "") + ")")

    started.append(True)
    start = time.perf_counter()
    val, window_tokens, window_time = None, 0, 0.0
    trainer.log_eval()
    while not trainer.done:
        m = trainer.step()
        # tokens per second over the steps since the last evaluation: a single step's figure jitters
        window_tokens += tc.batch_size * c.n_ctx
        window_time += tc.batch_size * c.n_ctx / m["tokens_per_s"]
        if trainer.step_num % tc.eval_interval == 0 or trainer.done:
            val = trainer.log_eval(window_tokens / max(window_time, 1e-9))["val_loss"]
            window_tokens, window_time = 0, 0.0
        if trainer.step_num % 10 == 0 or trainer.done:
            rows = trainer.heads.rows if trainer.heads else []
            # the last measurement, one row per head: the best head's score
            ind = f" induction {max(r['induction'] for r in rows[-c.n_layers * c.n_heads:]):.2f}" if rows else ""
            _progress(trainer.step_num, tc.steps, m["loss"], val, m["tokens_per_s"], time.perf_counter() - start, ind)
    sys.stderr.write("\n")
    wall = time.perf_counter() - start
    print(f"measuring the validation loss over every full window of the held-out {1 - TRAIN_FRACTION:.0%} ...")
    argv_used = argv if argv is not None else sys.argv[1:]  # the card records the command, to rerun it
    command = "python -m core.train " + shlex.join(str(a) for a in argv_used)
    training = T.training_record(trainer, Path(corpus).name, len(text), wall, command)
    if tok.kind == "char":
        print(f"validation loss {training['val_loss']:.4f} nats/char (full {c.n_ctx}-char windows) = "
              f"{training['val_bits_per_char']:.4f} bits/char")
    else:
        print(f"validation loss {training['val_loss']:.4f} nats/token (full {c.n_ctx}-token windows) = "
              f"{training['val_bits_per_char']:.4f} bits/char ({training['val_chars_per_token']:.3f} characters per "
              f"token)")
    if base is not None:
        base_val = round(windowed_loss(base[0], trainer.val_data), 4)
        training["compared_to"] = {"model": Path(args.compare_to).name, "val_loss": base_val,
                                   "difference": round(training["val_loss"] - base_val, 4)}
        print(f"{Path(args.compare_to).name}: validation loss {base_val:.4f}; difference "
              f"{training['val_loss'] - base_val:+.4f}")
    heads = trainer.heads.rows if trainer.heads else None  # None: a run that never probed has no heads.csv
    if heads:
        formed = formation_step(heads)
        training["induction"] = induction_summary(heads)
        print("induction head: " + ("none reached the threshold" if formed is None else f"formed at step {formed:,}"))
    # atomically: a run interrupted while saving leaves the old folder as it was, never half a new one
    # the other files of the folder (its SAEs, transcoders) stay: only the model's own are replaced
    path = save_model(args.out, trainer.model, trainer.tokenizer, training, trainer.log, overwrite=args.overwrite,
                      heads=heads, snapshots=trainer.snapshots)
    print(f"saved {path}")
    return 0  # an exit status: python -m core.train raises SystemExit with it (a Trainer there read as failure)


def _progress(step, total, loss, val, tps, elapsed, extra=""):
    # on stderr, redrawn in place (\r): stdout keeps only the lines worth keeping in a log
    eta = (total - step) * elapsed / max(step, 1)  # at the mean pace so far
    width = 28
    filled = int(width * step / total)
    bar = "#" * filled + "-" * (width - filled)
    val_s = f" val {val:.3f}" if val is not None else ""
    sys.stderr.write(
        f"\r[{bar}] {step}/{total} loss {loss:.3f}{val_s}{extra} | {tps / 1000:.1f}K tok/s | "
        f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s "
    )
    sys.stderr.flush()
