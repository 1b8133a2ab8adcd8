"""Making the answer keys (issue 59): small models trained so that a planted circuit carries their task.

    python -m core.training.answer_keys build [--only NAME] [--out assets/answer_keys] [--threads 1]

A transcoder per block of each key's model, for the attribution graph's grade, is made afterwards by
``python -m core.features.answer_key_transcoders`` (above this package: it trains with core.features).

Each task (core.training.answer_key_tasks) is trained with its circuit forced, in the spirit of InterpBench's SIIT.
Every step runs the batch three times in one forward:

1. every component outside the circuit (head or MLP) switched off at random, example by example (zero ablation, as
   the checks switch them off): all together a quarter of the time, else each with probability 1/2;
2. every component outside the circuit switched off: the circuit must solve the task alone; and the log-probabilities
   of the answers must be those of run 1, so that the others, on or off, change nothing (no relay of the answer);
3. as run 1 with the circuit switched off (all of it, or one of its components): the model must give the task's
   default answer (its commonest), whatever the input, so that nothing outside the circuit carries the task and no
   component of the circuit is left out.

The build writes each key folder (a model folder with key.json, task.json and a card) whole, then swaps it in; it
never replaces a folder that it did not write (one whose key.json lacks MADE_BY).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.answer_keys import (KEY_FILE, KEYS_DIR, TASK_FILE, AnswerKey, TaskSet, accuracy, chance, others,
                                       read_key, scale_hooks)
from core.nn.model import Transformer
from core.nn.model_store import save_checkpoint
from core.nn.tokenizer import CharTokenizer
from core.training.answer_key_tasks import BY_NAME, PAD, TASKS, Task

MADE_BY = "core.training.answer_keys"  # key.json's "made_by": the folders this command may replace
BATCH = 128
POOL = 16384  # training sequences drawn once per task; each step samples a batch of them


def tokenizer_for(task: Task):
    """A character tokenizer, or for a vocabulary of words a word-level tokenizer.json (words split at spaces)."""
    if not task.words:
        return CharTokenizer(task.vocab)
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers  # local: only the word tasks need it

    from core.nn.bpe import BPETokenizer
    tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate(task.vocab)}, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return BPETokenizer(tok)


def draw(task: Task, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` sequences of the task: ids and targets, each (count, n_ctx)."""
    rng = np.random.default_rng(seed)
    pairs = [task.sequence(rng) for _ in range(count)]
    return (torch.tensor([p[0] for p in pairs], dtype=torch.long), torch.tensor([p[1] for p in pairs], dtype=torch.long))


def examples(task: Task, seed: int) -> TaskSet:
    """task.json: ``task.examples`` prompts, each cut from a fresh sequence at one asked position chosen at random."""
    rng = np.random.default_rng(seed)
    prompts, answers = [], []
    while len(prompts) < task.examples:
        ids, targets = task.sequence(rng)
        asked = [i for i, t in enumerate(targets) if t >= 0]
        i = asked[int(rng.integers(0, len(asked)))]
        prompts.append(tuple(ids[:i + 1]))
        answers.append(targets[i])
    return TaskSet(tuple(prompts), tuple(answers))


def _gates(rest: list[str], B: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Per example, 1 (on) or 0 (off) for each non-circuit component: all off a quarter of the time, else each off
    with probability 1/2."""
    all_off = torch.rand(B, generator=gen) < 0.25  # (B,)
    return {n: ((torch.rand(B, generator=gen) < 0.5) & ~all_off).float() for n in rest}


def train(task: Task, log=print) -> tuple[Transformer, dict]:
    """The task's model, trained with its circuit forced (see the module's doc); and what training recorded."""
    torch.manual_seed(task.seed)
    gen = torch.Generator().manual_seed(task.seed)
    model = Transformer(task.config)
    key, rest = list(task.components), others(task.config, _key_of(task))
    ids, targets = draw(task, POOL, task.seed)
    cand = torch.tensor(task.ids(task.candidates))
    default = int(torch.mode(targets[targets >= 0]).values)  # the commonest answer: the guess without the circuit
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr, weight_decay=0.01, betas=(0.9, 0.98))
    t0 = time.perf_counter()
    for step in range(task.steps):
        lr = task.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / task.steps)))  # cosine to a tenth
        for g in opt.param_groups:
            g["lr"] = lr
        rows = torch.randint(0, POOL, (BATCH,), generator=gen)
        x, y = ids[rows], targets[rows]  # (B, n) each
        # one forward of the batch three times over: (1) the others gated at random, (2) the others all off, (3) as
        # (1) with the circuit off (all of it, or one of its components)
        off = key if len(key) == 1 or step % 2 == 0 else [key[int(torch.randint(0, len(key), (1,), generator=gen))]]
        one, nil = torch.ones(BATCH), torch.zeros(BATCH)
        gates = {n: torch.cat([g, nil, g]) for n, g in _gates(rest, BATCH, gen).items()}  # (3B,)
        gates.update({n: torch.cat([one, one, nil]) for n in off})
        logits = model(torch.cat([x, x, x]), hooks=scale_hooks(task.config, gates)).logits  # (3B, n, m)
        asked = y >= 0  # (B, n)
        gated, alone, cut = (logits[i * BATCH:(i + 1) * BATCH][asked].log_softmax(-1) for i in range(3))  # (asked, m)
        loss = F.nll_loss(gated, y[asked]) + F.nll_loss(alone, y[asked])
        # the others change nothing: the same log-probabilities whether they are on or off
        loss_same = (gated - alone)[:, cand].pow(2).mean()
        # the circuit off: the task's default answer, whatever the input (no trace of the answer left)
        loss_off = F.nll_loss(cut, torch.full((len(cut),), default))
        opt.zero_grad(set_to_none=True)
        (loss + loss_same + loss_off).backward()
        opt.step()
        if step % 500 == 0 or step == task.steps - 1:
            log(f"  {task.name} step {step}: loss {loss.item():.3f}, others' effect {loss_same.item():.4f}, "
                f"circuit-off loss {loss_off.item():.3f}")
    model.eval().requires_grad_(False)
    return model, {"steps": task.steps, "batch": BATCH, "lr": task.lr, "seed": task.seed,
                   "seconds": round(time.perf_counter() - t0, 1)}


def _key_of(task: Task) -> AnswerKey:
    """The loader's record of the task's key, built from the task's own lists."""
    return AnswerKey(task.name, task.title, tuple(task.components), tuple(map(tuple, task.edges)), Path("."))


def measure(model, task: Task, ts: TaskSet) -> dict:
    """Accuracy clean, with the circuit off, with every other component off; and chance (the commonest answer)."""
    rest = others(task.config, _key_of(task))
    return {"clean": accuracy(model, ts), "key_off": accuracy(model, ts, off=task.components),
            "others_off": accuracy(model, ts, off=rest), "chance": chance(ts)}


def card(task: Task, scores: dict, made: dict, tokenizer) -> str:
    pct = {k: f"{100 * v:.1f} %" for k, v in scores.items()}
    c = task.config
    edges = ", ".join(f"{s} → {t}" for s, t in task.edges)
    return f"""# Answer key: {task.name}

**Task.** {task.title}. After each prompt of task.json the model must give the answer beside it.

**Key (the circuit).** {", ".join(task.components)}. Edges: {edges}.
{task.notes} Each edge, cut alone, costs at least 40 % of the clean accuracy (checked in the tests); which of a
head's query, key or value an edge runs through, and how each component works inside, are described, not checked.

| accuracy on task.json ({task.examples} prompts) | |
|---|---|
| clean | {pct['clean']} |
| the key's components switched off | {pct['key_off']} |
| every other component switched off | {pct['others_off']} |
| chance (the commonest answer) | {pct['chance']} |

Switching off is zero ablation: a head's output before W_O (attn.hook_z), an MLP's output (hook_mlp_out).

**Model.** d = {c.d_model}, {c.n_heads} heads, {c.n_layers} layer(s), MLP width {c.d_ff}, context {c.n_ctx}; the
lecture's block (pre-norm LayerNorm). Vocabulary: {tokenizer.describe()}.

**How it was made.** Trained, not set by hand ({MADE_BY}, {made['steps']} steps of {made['batch']}, seed
{made['seed']}, {made['seconds']} s), with the circuit forced as InterpBench's SIIT does: every component outside
the key was switched off at random, example by example, so the key must carry the task alone, and the answers'
log-probabilities had to stay the same with all of them off, so they carry nothing; with the key (or one of its
components) switched off the model was trained to give the task's default answer whatever the input, so nothing
else may carry the task. The numbers above are measured, and checked again in tests/test_answer_keys.py.
"""


def key_text(task: Task, scores: dict) -> str:
    """key.json: the contract's fields, who made it, the ablation its checks use, and the scores measured."""
    key = {"task": task.title, "components": task.components, "edges": task.edges, "made_by": MADE_BY,
           "ablation": "zero", "scores": {k: round(v, 4) for k, v in scores.items()}}
    return json.dumps(key, indent=1) + "\n"


def ours(folder: Path) -> bool:
    """Whether ``folder`` was written by this command (its key.json says so)."""
    try:
        return json.loads((folder / KEY_FILE).read_text(encoding="utf-8")).get("made_by") == MADE_BY
    except (OSError, ValueError, AttributeError):
        return False


def build(task: Task, out: Path, log=print) -> dict:
    """Train the task's key and write its folder under ``out``; returns its scores. Refuses (FileExistsError) to
    replace a folder this command did not write."""
    target = out / task.name
    if target.exists() and not ours(target):
        raise FileExistsError(f"{target} exists and was not written by {MADE_BY}: move it away first")
    model, made = train(task, log)
    ts = examples(task, seed=1000 + task.seed)  # other sequences than training's pool
    scores = measure(model, task, ts)
    tokenizer = tokenizer_for(task)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{task.name}.", suffix=".tmp", dir=out))
    try:
        folder = save_checkpoint(tmp / task.name, model, tokenizer, training={"source": MADE_BY, **made},
                                 card=card(task, scores, made, tokenizer))
        (folder / KEY_FILE).write_text(key_text(task, scores), encoding="utf-8")
        task_json = {"prompts": [list(p) for p in ts.prompts], "answers": list(ts.answers)}
        (folder / TASK_FILE).write_text(json.dumps(task_json, separators=(",", ":")) + "\n", encoding="utf-8")
        read_key(folder)  # readable as the loader reads it, before it is shown under its name
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**scores, "seconds": made["seconds"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.training.answer_keys", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["build"])
    p.add_argument("--only", choices=sorted(BY_NAME), action="append", help="build this key only (repeatable)")
    p.add_argument("--out", default=str(KEYS_DIR), help="the folder of the keys (default assets/answer_keys)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared; default 1)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for task in [BY_NAME[n] for n in args.only] if args.only else TASKS:
        try:
            s = build(task, Path(args.out))
        except FileExistsError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"{task.name}: clean {s['clean']:.3f}, key off {s['key_off']:.3f}, others off {s['others_off']:.3f}, "
              f"chance {s['chance']:.3f} ({s['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
