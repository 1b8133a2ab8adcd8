"""Answer keys: small models whose circuit is known, shipped in assets/answer_keys/<name>/, so that a method can be
graded against the truth (issue 59).

A key's folder loads like any model folder (config.json, model.safetensors, README.md) and holds two more files:

- key.json: {"task": str, "components": ["L1 H1", "L2 MLP", ...], "edges": [[source, target], ...], ...}. Components
  are written as the screen writes them (``core.serve.fmt.head_label``; an MLP as the patching and trace pages write
  it, "L1 MLP"); an edge's ends are components, "tokens" (the token and position embedding, one input node) or
  "logits" (the output).
- task.json: {"prompts": [[token ids], ...], "answers": [token id, ...]}: the answer the model must give after each
  prompt's last token.

Here: reading them (``list_keys``, ``load_key``), naming components (``parse_component``, ``all_components``), and
the checks the key rests on (``accuracy`` with components switched off or edges cut, ``chance``). Switching off is
zero ablation: a head's output before W_O (``attn.hook_z``, as ``core.analysis.interventions.ablation_hooks``), an
MLP's output (``hook_mlp_out``). Cutting an edge removes the source's write from what the target reads, and from
nothing else (path ablation). The models are made by ``core.training.answer_keys``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from core.analysis.interventions import ablation_hooks, z_name
from core.nn.checkpoint import load_checkpoint
from core.nn.hooks import HookRun
from core.serve.fmt import head_label
from core.serve.paths import REPO_ROOT

KEYS_DIR = REPO_ROOT / "assets" / "answer_keys"
KEY_FILE, TASK_FILE = "key.json", "task.json"
INPUT, OUTPUT = "tokens", "logits"  # an edge's ends outside the blocks (the attribution graph's node kinds)
_HEAD = re.compile(r"L(\d+) H(\d+)")
_MLP = re.compile(r"L(\d+) MLP")


@dataclass(frozen=True)
class Component:
    kind: str          # "head" or "mlp"
    layer: int         # from 0, as in code
    head: int | None   # from 0; None for an MLP

    @property
    def label(self) -> str:
        return head_label(self.layer, self.head) if self.kind == "head" else f"L{self.layer + 1} MLP"


@dataclass(frozen=True)
class AnswerKey:
    name: str
    task: str                           # the task in words
    components: tuple[str, ...]         # the circuit's heads and MLPs, as the screen writes them
    edges: tuple[tuple[str, str], ...]  # (source, target) pairs of components, INPUT and OUTPUT
    folder: Path


@dataclass(frozen=True)
class TaskSet:
    prompts: tuple[tuple[int, ...], ...]
    answers: tuple[int, ...]


def parse_component(name: str, config=None) -> Component:
    """'L1 H2' -> a head (layer 0, head 1); 'L2 MLP' -> block 1's MLP. ValueError for anything else, or for a
    component ``config`` (when given) does not have."""
    m, n = _HEAD.fullmatch(name), _MLP.fullmatch(name)
    if m:
        comp = Component("head", int(m.group(1)) - 1, int(m.group(2)) - 1)
    elif n:
        comp = Component("mlp", int(n.group(1)) - 1, None)
    else:
        raise ValueError(f"{name!r} is not a component: write a head 'L1 H2' or an MLP 'L1 MLP'")
    if comp.layer < 0 or (comp.head is not None and comp.head < 0):
        raise ValueError(f"{name!r}: layers and heads count from 1")
    if config is not None:
        if comp.layer >= config.n_layers or (comp.kind == "head" and comp.head >= config.n_heads):
            raise ValueError(f"{name!r}: the model has {config.n_layers} layers of {config.n_heads} heads")
        if comp.kind == "mlp" and not config.mlp:
            raise ValueError(f"{name!r}: the model has no MLPs")
    return comp


def parse_node(name: str, config=None) -> Component | str:
    """An edge's end: a Component, or INPUT / OUTPUT as they are."""
    return name if name in (INPUT, OUTPUT) else parse_component(name, config)


def all_components(config) -> list[str]:
    """Every head and MLP of a model, in the forward's order: L1 H1 .. L1 Hh, L1 MLP, L2 H1, ..."""
    out = []
    for layer in range(config.n_layers):
        out += [head_label(layer, h) for h in range(config.n_heads)]
        if config.mlp:
            out.append(f"L{layer + 1} MLP")
    return out


# ------------------------------------------------------------------------------------------------------ reading keys
def list_keys(root=None) -> list[str]:
    """The names of the answer keys under ``root`` (default assets/answer_keys/): folders holding a key.json."""
    root = Path(root) if root is not None else KEYS_DIR
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and (p / KEY_FILE).is_file())


def read_key(folder) -> AnswerKey:
    folder = Path(folder)
    data = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))
    edges = tuple((str(s), str(t)) for s, t in data["edges"])
    return AnswerKey(folder.name, str(data["task"]), tuple(data["components"]), edges, folder)


def read_task(folder) -> TaskSet:
    data = json.loads((Path(folder) / TASK_FILE).read_text(encoding="utf-8"))
    if len(data["prompts"]) != len(data["answers"]):
        raise ValueError(f"{folder}: {len(data['prompts'])} prompts but {len(data['answers'])} answers")
    return TaskSet(tuple(tuple(int(i) for i in p) for p in data["prompts"]), tuple(int(a) for a in data["answers"]))


def load_key(name: str, root=None):
    """(model, tokenizer, AnswerKey, TaskSet) of the answer key ``name``; the model loads as any model folder does."""
    folder = (Path(root) if root is not None else KEYS_DIR) / name
    model, tokenizer = load_checkpoint(folder)
    return model, tokenizer, read_key(folder), read_task(folder)


# ---------------------------------------------------------------------------------------------------- switching off
def off_hooks(config, names) -> list:
    """Hooks that switch the named components off (zero ablation): heads through ``ablation_hooks`` on attn.hook_z,
    as the Switch heads off page does; an MLP's output on hook_mlp_out."""
    comps = [parse_component(n, config) for n in names]
    heads = [(c.layer, c.head) for c in comps if c.kind == "head"]
    hooks = ablation_hooks(config, heads, "zero")
    hooks += [(f"blocks.{c.layer}.hook_mlp_out", lambda x, name: torch.zeros_like(x)) for c in comps if c.kind == "mlp"]
    return hooks


def scale_hooks(config, scales: dict[str, torch.Tensor]) -> list:
    """Hooks that multiply each named component's output by its (B,) scale, one per example: 1 keeps it, 0 switches
    it off. Training gates the components this way (``core.training.answer_keys``), with gradients flowing."""
    by_layer: dict[int, dict[int, torch.Tensor]] = {}
    hooks = []
    for name, s in scales.items():
        c = parse_component(name, config)
        if c.kind == "head":
            by_layer.setdefault(c.layer, {})[c.head] = s
        else:
            hooks.append((f"blocks.{c.layer}.hook_mlp_out", lambda x, name, s=s: x * s[:, None, None]))  # (B, n, d)

    def gate(z, name, heads):  # z: (B, n, h, d/h)
        cols = [heads[h] if h in heads else torch.ones_like(next(iter(heads.values()))) for h in range(z.shape[2])]
        return z * torch.stack(cols, dim=1)[:, None, :, None]  # (B, h) -> (B, 1, h, 1)

    hooks += [(z_name(layer), lambda z, name, heads=heads: gate(z, name, heads)) for layer, heads in by_layer.items()]
    return hooks


def _write(model, comp: Component | str, acts: dict) -> torch.Tensor:
    """What a component (or INPUT) wrote into the stream in the recorded ``acts``: (B, n, d)."""
    if comp == INPUT:
        return acts["blocks.0.hook_resid_pre"]  # token + position embedding
    if comp.kind == "mlp":
        return acts[f"blocks.{comp.layer}.hook_mlp_out"]
    z = acts[z_name(comp.layer)][:, :, comp.head]  # (B, n, d/h)
    w_o = model.blocks[comp.layer].attn.w_o_heads()[:, comp.head]  # (d, d/h)
    return z @ w_o.T  # (B, n, d/h) x (d/h, d) -> (B, n, d)


def _rank(node) -> tuple[int, int]:
    """Where a node writes or reads in the forward: (layer, 0 for a head, 1 for an MLP); the input first, the logits
    last. A reader reads only what a node of lower rank wrote (a block's heads read the stream before its MLP writes)."""
    if node == INPUT:
        return (-1, 1)
    if node == OUTPUT:
        return (1 << 30, 0)
    return (node.layer, 0 if node.kind == "head" else 1)


def _by_target(config, edges):
    """The edges' sources grouped by what reads them: ({layer: {head: sources}}, {layer: the MLP's sources}, the
    logits' sources). ValueError for an edge that does not run downstream."""
    heads: dict[int, dict[int, list]] = {}
    mlps: dict[int, list] = {}
    final: list = []
    for s, t in edges:
        src, dst = parse_node(s, config), parse_node(t, config)
        if src == OUTPUT or dst == INPUT or _rank(src) >= _rank(dst):
            raise ValueError(f"no edge runs from {s} to {t}")
        if dst == OUTPUT:
            final.append(src)
        elif dst.kind == "mlp":
            mlps.setdefault(dst.layer, []).append(src)
        else:
            heads.setdefault(dst.layer, {}).setdefault(dst.head, []).append(src)
    return heads, mlps, final


def cut_hooks(model, edges) -> list:
    """Hooks that cut each (source, target) edge: the target reads the stream without the source's write (the same
    run's write: a cut upstream changes it too); every other reader still sees it. A head target reads the cut stream
    in its query, key and value; an MLP target in its input; OUTPUT, the logits, in the final stream.

    Nothing of the block is written again here: what a head or an MLP would read from the cut stream is a second
    pass of the model's own forward through the target's block, fed the cut stream at its hook point
    (``hook_resid_pre`` for a head, ``hook_resid_mid`` for an MLP) and read at the target's input hooks
    (``attn.hook_q/k/v``, ``hook_mlp_in``); the real run takes the target's part of them there (as
    ``core.analysis.patching``'s path patching splices a receiver's input)."""
    c = model.config
    heads, mlps, final = _by_target(c, edges)
    acts: dict[str, torch.Tensor] = {}  # this run's activations the writes and the second passes need

    def keep(x, name):
        acts[name] = x
        return x

    record = ["blocks.0.hook_resid_pre"] + [z_name(l) for l in range(c.n_layers)]
    record += [f"blocks.{l}.hook_mlp_out" for l in range(c.n_layers) if c.mlp]
    record += [f"blocks.{l}.hook_resid_pre" for l in mlps]
    record += [f"blocks.{l}.hook_resid_mid" for l in mlps]
    hooks = [(name, keep) for name in dict.fromkeys(record)]

    def removed(sources):
        return sum(_write(model, s, acts) for s in sources)

    if final:
        hooks.append((f"blocks.{c.n_layers - 1}.hook_resid_post", lambda x, name: x - removed(final)))
    for layer, sources in mlps.items():
        hooks.append((f"blocks.{layer}.hook_mlp_in", lambda u, name, layer=layer, sources=sources:
                      _mlp_input(model, layer, acts[f"blocks.{layer}.hook_resid_pre"],
                                 acts[f"blocks.{layer}.hook_resid_mid"] - removed(sources))))
    for layer, targets in heads.items():
        read: dict[str, torch.Tensor] = {}  # "q", "k", "v" -> (T B, n, h, d/h), this run's second pass

        def second_pass(x, name, layer=layer, targets=targets, read=read):
            streams = torch.cat([x - removed(sources) for sources in targets.values()])  # T x (B, n, d) -> (T B, n, d)
            read.update(_head_inputs(model, layer, streams))

        def splice(t, name, layer=layer, targets=targets, read=read):  # t: (B, n, h, d/h)
            got, B = read[name.rsplit("_", 1)[-1]], t.shape[0]
            t = t.clone()
            for i, head in enumerate(targets):  # target i's inputs are rows i B .. (i + 1) B of the second pass
                t[:, :, head] = got[i * B:(i + 1) * B, :, head]
            return t
        hooks.append((f"blocks.{layer}.hook_resid_pre", second_pass))
        hooks += [(f"blocks.{layer}.attn.hook_{part}", splice) for part in "qkv"]
    return hooks


def _head_inputs(model, layer: int, streams: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"q", "k", "v": (B, n, h, d/h)}: what the heads of block ``layer`` compute from the streams (B, n, d) entering
    it, read at their hooks on a pass of the model's own forward through that block."""
    run = HookRun(names=[f"blocks.{layer}.attn.hook_{part}" for part in "qkv"], record=True)
    model.blocks_from(streams, layer, layer + 1, hooks=run)
    return {part: run.store[f"blocks.{layer}.attn.hook_{part}"] for part in "qkv"}


def _mlp_input(model, layer: int, resid_pre: torch.Tensor, resid_mid: torch.Tensor) -> torch.Tensor:
    """(B, n, d): what the MLP of block ``layer`` reads (``hook_mlp_in``) when the stream before it is ``resid_mid``,
    read on a pass of the model's own forward through that block with ``hook_resid_mid`` replaced (``resid_pre``, the
    stream entering the block, only starts that pass: what its attention adds is replaced)."""
    name = f"blocks.{layer}.hook_mlp_in"
    run = HookRun([(f"blocks.{layer}.hook_resid_mid", lambda x, _: resid_mid)], names=[name], record=True)
    model.blocks_from(resid_pre, layer, layer + 1, hooks=run)
    return run.store[name]


# ----------------------------------------------------------------------------------------------------- the checks
@torch.no_grad()
def predictions(model, prompts, hooks=()) -> torch.Tensor:
    """The model's answer (argmax after the last token) to each prompt, (N,). Prompts of one length run together."""
    out = torch.empty(len(prompts), dtype=torch.long)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    for rows in by_len.values():
        idx = torch.tensor([prompts[i] for i in rows], dtype=torch.long)  # (B, n)
        logits = model(idx, hooks=list(hooks)).logits[:, -1]  # (B, m)
        out[rows] = logits.argmax(-1)
    return out


def accuracy(model, task: TaskSet, off=(), cut=()) -> float:
    """The share of the task's prompts answered right, with the ``off`` components switched off (zero ablation)
    and the ``cut`` edges cut. Hooks are made per length group: the cut hooks keep what that run wrote."""
    right, total = 0, 0
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(task.prompts):
        by_len.setdefault(len(p), []).append(i)
    for rows in by_len.values():
        hooks = off_hooks(model.config, off) + (cut_hooks(model, cut) if cut else [])
        got = predictions(model, [task.prompts[i] for i in rows], hooks)
        right += int((got == torch.tensor([task.answers[i] for i in rows])).sum())
        total += len(rows)
    return right / total


def chance(task: TaskSet) -> float:
    """The accuracy of the best constant guess: the share of the most common answer."""
    answers = list(task.answers)
    return max(answers.count(a) for a in set(answers)) / len(answers)


def others(config, key: AnswerKey) -> list[str]:
    """Every component of the model that is not in the key."""
    return [n for n in all_components(config) if n not in key.components]
