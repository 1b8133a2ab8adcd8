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


def cut_hooks(model, edges) -> list:
    """Hooks that cut each (source, target) edge: the target reads the stream without the source's write (the same
    run's write: a cut upstream changes it too); every other reader still sees it. A head target reads the cut stream
    in its query, key and value; an MLP target in its input; OUTPUT, the logits, in the final stream."""
    c = model.config
    acts: dict[str, torch.Tensor] = {}
    cuts: dict[str, list] = {}  # hook name of the target's input -> sources
    for s, t in edges:
        src, dst = parse_node(s, c), parse_node(t, c)
        if src == OUTPUT or dst == INPUT:
            raise ValueError(f"no edge runs from {s} to {t}")
        if dst == OUTPUT:
            where = f"blocks.{c.n_layers - 1}.hook_resid_post"
        elif dst.kind == "mlp":
            where = f"blocks.{dst.layer}.hook_mlp_in"
        else:
            where = f"blocks.{dst.layer}.attn.head{dst.head}"  # a key of ours: handled by the q/k/v hooks below
        cuts.setdefault(where, []).append(src)

    def keep(x, name):
        acts[name] = x
        return x

    record = ["blocks.0.hook_resid_pre"] + [z_name(l) for l in range(c.n_layers)]
    record += [f"blocks.{l}.hook_mlp_out" for l in range(c.n_layers) if c.mlp]
    record += [f"blocks.{l}.hook_resid_pre" for l in range(1, c.n_layers)]
    record += [f"blocks.{l}.hook_resid_mid" for l in range(c.n_layers) if c.mlp]
    hooks = [(name, keep) for name in dict.fromkeys(record)]

    def removed(sources):
        return sum(_write(model, s, acts) for s in sources)

    for where, sources in cuts.items():
        if where.endswith("hook_resid_post"):
            hooks.append((where, lambda x, name, sources=sources: x - removed(sources)))
        elif where.endswith("hook_mlp_in"):
            layer = int(where.split(".")[1])
            ln = model.blocks[layer].ln2
            hooks.append((where, lambda x, name, ln=ln, layer=layer, sources=sources:
                          ln(acts[f"blocks.{layer}.hook_resid_mid"] - removed(sources))))
        else:
            layer, head = int(where.split(".")[1]), int(where.split("head")[-1])
            for which, part in enumerate(("q", "k", "v")):
                hooks.append((f"blocks.{layer}.attn.hook_{part}",
                              lambda x, name, layer=layer, head=head, which=which, sources=sources:
                              _recompute(model, x, acts[f"blocks.{layer}.hook_resid_pre"] - removed(sources),
                                         layer, head, which)))
    return hooks


def _recompute(model, x, stream, layer: int, head: int, which: int) -> torch.Tensor:
    """x (B, n, h, d/h), the q, k or v (``which`` 0, 1, 2) of every head of ``layer``, with ``head``'s computed from
    ``stream`` (B, n, d) instead."""
    attn, d, dh = model.blocks[layer].attn, model.config.d_model, model.config.d_head
    rows = slice(which * d + head * dh, which * d + (head + 1) * dh)  # the head's rows of the (3d, d) W_QKV
    u = model.blocks[layer].ln1(stream)  # (B, n, d): the pre-norm block reads LN(x)
    part = u @ attn.qkv.weight[rows].T  # (B, n, d) x (d, d/h) -> (B, n, d/h)
    if attn.qkv.bias is not None:
        part = part + attn.qkv.bias[rows]
    x = x.clone()
    x[:, :, head] = part
    return x


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
