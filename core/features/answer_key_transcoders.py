"""Transcoders for the answer keys (issue 59 §2): one per block of each key's model, so that the attribution graph
can be graded against the key (core.analysis.grading_graph) and a key model opens on the Attribution page.

    python -m core.features.answer_key_transcoders [--only NAME] [--out assets/answer_keys] [--threads 1] [--measure]

(``--measure``: no training, the saved transcoders measured again.) Trained as ``python -m core.features --model FOLDER --transcoder`` trains the shipped ones (core.features.transcoder:
its settings, SAESettings' defaults: TopK, k 12, 8 x d_model latents, 2,000 steps of 2,048, lr 2e-3, seed 0, the
same ``train_on`` with AuxK), and saved in the same layout (``transcoders/layer-L/``: sae_weights.safetensors,
config.json, cfg.json, metrics.json), with a card ``transcoders/README.md``. What differs is the data: a key's model
knows its task and nothing else, so the (MLP input, MLP output) pairs come from its task, not from held-out text:

- training: ``SEQUENCES`` fresh sequences of the task's generator (core.training.answer_key_tasks, seed
  ``SEED_BASE`` + the task's seed: neither the model's training pool nor task.json's draw), each read at the
  positions a task prompt covers (from the first token to the last asked position: the positions after it are filler
  no prompt reaches);
- the health numbers: on task.json's prompts, every position of each (the graph's own domain). ``l0``,
  ``dead_fraction``, ``mse``, ``explained_variance`` as core.features.transcoder's ``fit_stats``; the cross-entropies
  at each prompt's last position against its answer (the task's loss; elsewhere the model is asked nothing): clean,
  this block's MLP replaced by its transcoder, this block's MLP zeroed, and ``ce_loss_score`` from them as SAELens
  computes it; then with every block's transcoder spliced in together, that loss (``ce_all_replaced``) and the task's
  accuracy (``accuracy_replaced``, beside ``accuracy_clean``).

It writes only the transcoders of a key folder ``python -m core.training.answer_keys build`` wrote (key.json's made_by), and replaces a
``transcoders/layer-L`` folder only when it wrote it too (its metrics.json's ``source``); anything else is refused."""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.answer_keys import KEYS_DIR, read_task
from core.analysis.sae import SAE, model_fingerprint
from core.features.train import SAESettings, ce_loss_score, train_on
from core.features.transcoder import fit_stats, replace_hooks, save_transcoder, zero_mlp_hooks
from core.analysis.transcoders import TRANSCODER_DIR, load_transcoders, reads, transcoder_folder, writes
from core.nn.checkpoint import load_checkpoint
from core.training.answer_key_tasks import BY_NAME, TASKS, Task
from core.training.answer_keys import MADE_BY, ours

SOURCE = "core.features.answer_key_transcoders"  # metrics.json's "source": the folders this command may replace
SEQUENCES = 8192   # task sequences the pairs are read from (about 60k to 100k pairs per block)
SEED_BASE = 2000   # their draw: SEED_BASE + the task's seed
SETTINGS = SAESettings()  # the shipped transcoders' settings (core.features' defaults)


def prompt_mask(targets: torch.Tensor) -> torch.Tensor:
    """(S, n) bool: the positions a task prompt covers, from the first to each sequence's last asked position."""
    asked = targets >= 0  # (S, n)
    last = torch.where(asked, torch.arange(targets.shape[1]), -1).max(1).values  # (S,) the last asked position
    return torch.arange(targets.shape[1])[None, :] <= last[:, None]


@torch.no_grad()
def pairs_at(model, ids: torch.Tensor, mask: torch.Tensor, layer: int, batch: int = 512) -> tuple:
    """(inputs, outputs), each (N, d): what block ``layer``'s MLP read and wrote at the ``mask``ed positions of
    ``ids`` (S, n)."""
    xs, ys = [], []
    for i in range(0, len(ids), batch):
        _, cache = model.run_with_cache(ids[i:i + batch], names=[reads(layer), writes(layer)])
        m = mask[i:i + batch]
        xs.append(cache[reads(layer)][m])  # (B, n, d)[mask] -> (kept, d)
        ys.append(cache[writes(layer)][m])
    return torch.cat(xs).float(), torch.cat(ys).float()


@torch.no_grad()
def task_losses(model, prompts, answers, hooks=None) -> tuple[float, float]:
    """(mean cross-entropy of the answer at each prompt's last position, accuracy), prompts of one length batched."""
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    loss, right = 0.0, 0
    for rows in by_len.values():
        x = torch.tensor([prompts[i] for i in rows], dtype=torch.long)  # (B, n)
        y = torch.tensor([answers[i] for i in rows])
        logits = model(x, hooks=hooks).logits[:, -1].double()  # (B, m)
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        right += int((logits.argmax(-1) == y).sum())
    return loss / len(prompts), right / len(prompts)


def task_pairs(model, prompts, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position of every prompt (their own lengths: no padding), as (inputs, outputs) of block ``layer``."""
    xs, ys = [], []
    for n in sorted({len(p) for p in prompts}):
        ids = torch.tensor([p for p in prompts if len(p) == n], dtype=torch.long)  # (B, n)
        x, y = pairs_at(model, ids, torch.ones_like(ids, dtype=torch.bool), layer)
        xs.append(x)
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def train_layer(model, task: Task, layer: int, ids: torch.Tensor, mask: torch.Tensor, settings=SETTINGS) -> tuple[SAE, int]:
    x, y = pairs_at(model, ids, mask, layer)
    # as core.features.transcoder.train_transcoder makes it: the weights' fingerprint, no b_dec on the input
    config = replace(settings.config(writes(layer), x.shape[1]), trained_on=model_fingerprint(model, cache=False),
                     apply_b_dec_to_input=False, reads=reads(layer))
    tc = SAE(config, generator=torch.Generator().manual_seed(settings.seed))
    train_on(tc, x, settings, targets=y)
    tc.requires_grad_(False)
    return tc, len(x)


def health(model, tc: SAE, layer: int, prompts, answers) -> dict:
    """The numbers of the module's docstring for one block's transcoder, on task.json's prompts."""
    x, y = task_pairs(model, prompts, layer)
    clean, _ = task_losses(model, prompts, answers)
    replaced, _ = task_losses(model, prompts, answers, replace_hooks({layer: tc}))
    zeroed, _ = task_losses(model, prompts, answers, zero_mlp_hooks([layer]))
    # an MLP the key keeps out of the circuit writes next to nothing: its variance is ~0, so explained_variance and
    # ce_loss_score (a share of ~0 nats) say little; out_norm2 (E||y||^2) and mse show how little there is to miss
    return {**fit_stats(tc, x, y), "out_norm2": float(y.pow(2).sum(-1).mean()), "ce_clean": clean,
            "ce_replaced": replaced, "ce_mlps_zeroed": zeroed,
            "ce_loss_score": ce_loss_score(clean, replaced, zeroed), "eval_tokens": len(x),
            "eval_prompts": len(prompts)}


def _ours(folder: Path) -> bool:
    try:
        return json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("source") == SOURCE
    except (OSError, ValueError, AttributeError):
        return False


def train_key(task: Task, folder: Path, log=print, settings=SETTINGS) -> list[dict]:
    """Train and save a transcoder for every block of the key in ``folder``; returns each block's metrics. Refuses
    (FileExistsError) a layer folder this command did not write."""
    for layer in range(task.config.n_layers):
        target = transcoder_folder(folder, layer)
        if target.exists() and not _ours(target):
            raise FileExistsError(f"{target} exists and was not written by {SOURCE}: move it away first")
    model, _ = load_checkpoint(folder)
    rng = np.random.default_rng(SEED_BASE + task.seed)
    seqs = [task.sequence(rng) for _ in range(SEQUENCES)]
    ids = torch.tensor([s[0] for s in seqs], dtype=torch.long)  # (S, n_ctx)
    mask = prompt_mask(torch.tensor([s[1] for s in seqs], dtype=torch.long))
    records, tcs = [], {}
    for layer in range(task.config.n_layers):
        t0 = time.perf_counter()
        tcs[layer], n = train_layer(model, task, layer, ids, mask, settings)
        records.append({"kind": "transcoder", "reads": reads(layer), "writes": writes(layer), "layer": layer,
                        "d_sae": tcs[layer].config.d_sae, "k": tcs[layer].config.k, "train_vectors": n,
                        "train_sequences": SEQUENCES, "sequence_seed": SEED_BASE + task.seed, "steps": settings.steps,
                        "batch_size": settings.batch_size, "lr": settings.lr, "seed": settings.seed,
                        "train_s": round(time.perf_counter() - t0, 2), "corpus": f"the {task.name} task's generator",
                        "source": SOURCE})
    for layer, tc in tcs.items():
        save_transcoder(tc, folder, layer, records[layer])
    return measure_key(task, folder, log)


def measure_key(task: Task, folder: Path, log=print) -> list[dict]:
    """The health numbers of the key's saved transcoders (the module's doc), loaded as the page loads them, written
    into each metrics.json beside its training record, and the card; returns each block's metrics."""
    model, _ = load_checkpoint(folder)
    tcs = load_transcoders(folder, model.config, trained_on=model_fingerprint(model))
    if not tcs:
        raise FileNotFoundError(f"{folder} holds no transcoders to measure: train them first")
    ts = read_task(folder)
    prompts, answers = [list(p) for p in ts.prompts], list(ts.answers)
    _, acc = task_losses(model, prompts, answers)
    every, acc_all = task_losses(model, prompts, answers, replace_hooks(tcs))
    out = []
    for layer, tc in sorted(tcs.items()):
        path = transcoder_folder(folder, layer) / "metrics.json"
        m = {**json.loads(path.read_text(encoding="utf-8")), **health(model, tc, layer, prompts, answers),
             "ce_all_replaced": every, "accuracy_clean": acc, "accuracy_replaced": acc_all}
        path.write_text(json.dumps(m, indent=2) + "\n", encoding="utf-8")
        out.append(m)
        log(f"  {task.name} layer {layer}: " + ", ".join(f"{k} {m[k]:.4g}" for k in (
            "explained_variance", "ce_loss_score", "mse", "out_norm2", "l0", "dead_fraction", "train_s")))
    (folder / TRANSCODER_DIR / "README.md").write_text(card(task, out), encoding="utf-8")
    return out


def card(task: Task, metrics: list[dict]) -> str:
    rows = "\n".join(f"| {m['layer'] + 1} | {m['d_sae']} | {m['k']} | {m['l0']:.2f} | {m['out_norm2']:.3g} | {m['mse']:.3g} | "
                     f"{m['explained_variance']:.3g} | {m['ce_mlps_zeroed'] - m['ce_clean']:+.4f} | "
                     f"{m['ce_replaced'] - m['ce_clean']:+.4f} | {m['ce_loss_score']:.3g} | {m['dead_fraction']:.2f} | "
                     f"{m['train_vectors']:,} |" for m in metrics)
    m = metrics[0]
    return f"""# Transcoders of the answer key "{task.name}"

One per block, each from what the block's MLP reads (`blocks.L.hook_mlp_in`) to what it writes
(`blocks.L.hook_mlp_out`), so the attribution graph runs on this model (the grade of issue 59 §2, and the
Attribution page). Made by `python -m core.features.answer_key_transcoders --only {task.name}`
(core.features.answer_key_transcoders), with the settings of `python -m core.features --transcoder` (TopK,
{m['steps']:,} steps of {m['batch_size']:,}, lr {m['lr']}, seed {m['seed']}), on the MLPs' inputs and outputs over
{m['train_sequences']:,} fresh sequences of the task (seed {m['sequence_seed']}), at the positions a prompt covers.

Measured on task.json's {m['eval_prompts']} prompts ({m['eval_tokens']:,} positions); the losses at each prompt's
last position, against its answer:

| block | latents | k | l0 | E‖y‖² | mse | explained variance | MLP zeroed (nats) | replaced (nats) | ce_loss_score | dead | pairs |
|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}

E‖y‖² is the MLP's output's size and mse what the transcoder misses of it; the two loss columns are the rise of the
answer's loss over the clean model's with the MLP zeroed and with it replaced. An MLP the key keeps out of the circuit
writes next to nothing (zeroing it costs ~0 nats): its explained variance and ce_loss_score (a share of ~0) mean
little there, and its error nodes are as small as its mse.

Every block's transcoder spliced in at once: the answer's loss {m['ce_all_replaced']:.3f} nats (clean
{m['ce_clean']:.3f}); accuracy {100 * m['accuracy_replaced']:.1f} % (clean {100 * m['accuracy_clean']:.1f} %).
What a transcoder misses is the graph's error node at its block: the lower its explained variance, the larger they are.
"""


def run(task: Task, out: Path, again: bool = False) -> bool:
    """The command on one key (``again``: the saved ones measured again, no training); False (said on stderr) where
    it refuses."""
    folder = out / task.name
    if not ours(folder):
        print(f"{folder} was not written by {MADE_BY} (or is missing): build the key first", file=sys.stderr)
        return False
    try:
        measure_key(task, folder) if again else train_key(task, folder)
    except (FileExistsError, FileNotFoundError) as e:
        print(e, file=sys.stderr)
        return False
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.features.answer_key_transcoders",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=sorted(BY_NAME), action="append", help="this key only (repeatable)")
    p.add_argument("--out", default=str(KEYS_DIR), help="the folder of the keys (default assets/answer_keys)")
    p.add_argument("--measure", action="store_true", help="measure the saved ones again, no training")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared; default 1)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for task in [BY_NAME[n] for n in args.only] if args.only else TASKS:
        if not run(task, Path(args.out), args.measure):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
