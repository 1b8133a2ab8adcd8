"""Cause and effect between two prompts of equal length: run the corrupted one, put back one activation from the clean
run, and see how much of the clean answer returns (activation patching; path patching for one path through the
network), and take one attention score apart into who built it (``score_sources``).

Every function runs the model's own forward (core.nn.model, the one block, whatever its variant: GPT-2's biases and
GELU, no MLP, no LayerNorm, post-norm) and reads and replaces activations through its TransformerLens-named hook
points: ``_forward`` only places the hooks (``_HOOKS`` maps a patch's kind to its hook), it writes no block out.
Patches are batched: one forward per stage (or layer) with every position patched at once, one row each, started at
the patched block from the corrupted run's stream there (the blocks before it are the corrupted run's). Only
``score_sources`` needs more of the block: a stream that is the sum of its writers (``sources_refusal``).
"""
from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from core.nn.hooks import HookRun
from core.serve.fmt import head_label

STAGE_KINDS = ("resid", "attn_out", "mlp_out")   # (B, n, d) activations
HEAD_KINDS = ("z", "q", "k", "v", "pattern")     # per-head: (B, h, n, d_h), the pattern (B, h, n, n)
PATH_TOKENS = 4096  # path patching runs at most this many rows x tokens at once (a GPT-2's senders in chunks)


@dataclass(frozen=True)
class Metric:
    """What a patch is judged by, at the last position: the logit difference answer - wrong (default), or, with
    ``wrong`` None, the loss of the answer token (lower is better, so it is negated: larger is always cleaner)."""
    answer: int
    wrong: int | None = None

    def of_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, n, m) logits -> (B,) metric values."""
        last = logits[:, -1].double()
        if self.wrong is not None:
            return last[:, self.answer] - last[:, self.wrong]
        return F.log_softmax(last, dim=-1)[:, self.answer]  # - loss

    def __call__(self, model, ids) -> float:
        return float(self.of_logits(_forward(model, _batch(ids))[0])[0])


def _batch(ids) -> torch.Tensor:
    return torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)  # (n,) -> (1, n): a batch of one


def check_pair(model, clean, corrupt) -> str | None:
    """Why two prompts cannot be patched into each other, in words; None when they can."""
    if len(clean) != len(corrupt):
        return (f"the prompts have {len(clean)} and {len(corrupt)} tokens: patching puts position i of one into "
                "position i of the other, so both must have the same length (pad the shorter one or cut the longer)")
    if len(clean) < 1:
        return "the prompts are empty"
    if len(clean) > model.config.n_ctx:
        return f"the prompts have {len(clean)} tokens, more than the model's context of {model.config.n_ctx}"
    return None


def _check_heads(config, heads):
    """ValueError naming a head the model does not have (layers and heads count from 1 in the message)."""
    for l, h in heads:
        if not (0 <= l < config.n_layers and 0 <= h < config.n_heads):
            raise ValueError(f"the model has no head L{l + 1} H{h + 1}: layers 1..{config.n_layers}, heads "
                             f"1..{config.n_heads}")


Subs = dict[tuple[str, int], Callable[[torch.Tensor], torch.Tensor]]


# (kind, layer) -> the model's hook point (core.nn.hooks). "resid" layer l is the stream entering block l; layer L,
# the stream leaving the last block. q, k, v and z are handed to a substitution heads first, (B, h, n, d_h), as the
# patching grids index them; the hooks hold them as TransformerLens does, (B, n, h, d_h).
_HOOKS = {"resid": "hook_resid_pre", "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "z": "attn.hook_z",
          "pattern": "attn.hook_pattern", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out"}
_HEADS_FIRST = frozenset("qkvz")


def _hook_name(config, kind: str, layer: int) -> str | None:
    """The hook point of (kind, layer), None where the block has none (no MLP: no mlp_out)."""
    L = config.n_layers
    if kind == "resid":
        return f"blocks.{L - 1}.hook_resid_post" if layer == L else f"blocks.{layer}.hook_resid_pre"
    if kind == "mlp_out" and not config.mlp:
        return None
    return f"blocks.{layer}.{_HOOKS[kind]}"


@torch.no_grad()
def _forward(model, idx: torch.Tensor, subs: Subs | None = None, record: bool = False, start: int = 0,
             x0: torch.Tensor | None = None, last_only: bool = False, stop: int | None = None,
             keep: frozenset[str] | None = None):
    """(logits (B, n, m), activations {(kind, layer): tensor} if ``record``): the model's own forward, with a hook at
    every activation a patch can replace. ``subs`` maps (kind, layer) to a function that receives the activation and
    returns what the run continues with. ``start``, ``x0``: begin at block ``start`` with the stream ``x0`` (B, n, d)
    entering it (a patch at layer l leaves every earlier block as the corrupted run had it, so a patched run need not
    compute them again). ``last_only``: logits of the last position only, (B, 1, m), all a metric reads (GPT-2's
    output map is its largest matrix). ``stop``: run blocks before ``stop`` only and return no logits (None);
    ``keep``: record only these kinds (a GPT-2's patterns at 1,024 tokens are 600 MB)."""
    c, subs, acts = model.config, subs or {}, {}
    wanted = set(subs)
    if record:
        kinds = STAGE_KINDS + HEAD_KINDS if keep is None else tuple(keep)
        wanted |= {(kind, l) for kind in kinds for l in range(c.n_layers + (kind == "resid"))}
    hooks = []
    for kind, layer in wanted:
        name = _hook_name(c, kind, layer)
        if name is None:
            continue
        fn, kept = subs.get((kind, layer)), record and (keep is None or kind in keep)
        swap = kind in _HEADS_FIRST

        def hook(t, _name, kind=kind, layer=layer, fn=fn, kept=kept, swap=swap):
            u = t.transpose(1, 2) if swap else t  # (B, n, h, d_h) -> (B, h, n, d_h)
            if fn is not None:
                u = fn(u)
            if kept:
                acts[(kind, layer)] = u
            return None if fn is None else (u.transpose(1, 2) if swap else u)  # back to (B, n, h, d_h) for the forward
        hooks.append((name, hook))
    run = HookRun(hooks)
    x = model.embed(idx, hooks=run) if x0 is None else x0                  # (B, n, d)
    start = start if x0 is not None else 0
    x = model.blocks_from(x, start, stop, hooks=run)
    if start >= c.n_layers:  # no block ran, so the stream leaving the last one is x0 itself: its hook runs here
        x = run(_hook_name(c, "resid", c.n_layers), x)
    if stop is not None:
        return None, acts
    return model.readout(x[:, -1:] if last_only else x), acts


def _normalise(values: torch.Tensor, clean: float, corrupt: float) -> np.ndarray:
    """0 = the corrupted run's metric, 1 = the clean run's; NaN everywhere when the two are equal (nothing to
    restore: the caller says so rather than divide by zero)."""
    gap = clean - corrupt
    if abs(gap) < 1e-9:
        return np.full(values.shape, np.nan)
    return ((values - corrupt) / gap).numpy()


# The clean and corrupted runs of the last few prompt pairs, per model: a page draws several grids of one pair
# (residual stage by stage, sublayers, heads, positions, paths), and each would otherwise run both prompts again
# (L + 11 times for a new pair). A run is kept with the kinds its grid records (a GPT-2's patterns at 1,024 tokens are
# 600 MB) and dropped when the model's weights change in place (tensor version counters) or the model is freed.
RUNS_KEPT = 6
_RUNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_RUNS_LOCK = threading.Lock()


def _runs(model, clean, corrupt, metric: Metric, kinds: tuple[str, ...] | None = None):
    """(corrupted ids (1, n), clean activations, corrupted activations, metric on clean, metric on corrupted). ``kinds``:
    the activations recorded (always the stream, which a patched run starts from); None, every kind."""
    why = check_pair(model, clean, corrupt)
    if why:
        raise ValueError(why)
    if [int(t) for t in clean] == [int(t) for t in corrupt]:
        raise ValueError("the two prompts are the same: both runs agree, so there is nothing to restore")
    kinds = None if kinds is None else tuple(sorted(set(kinds) | {"resid"}))
    key = (tuple(int(t) for t in clean), tuple(int(t) for t in corrupt), kinds,
           sum(p._version for p in model.parameters()))
    with _RUNS_LOCK:
        kept = _RUNS.setdefault(model, OrderedDict())
        hit = kept.get(key)
        if hit is not None:
            kept.move_to_end(key)
    if hit is None:
        keep = None if kinds is None else frozenset(kinds)
        logits_c, acts = _forward(model, _batch(clean), record=True, last_only=True, keep=keep)
        logits_x, acts_x = _forward(model, _batch(corrupt), record=True, last_only=True, keep=keep)
        hit = (acts, acts_x, logits_c, logits_x)
        with _RUNS_LOCK:
            kept[key] = hit
            while len(kept) > RUNS_KEPT:
                kept.popitem(last=False)
    acts, acts_x, logits_c, logits_x = hit
    return (_batch(corrupt), acts, acts_x, float(metric.of_logits(logits_c)[0]),
            float(metric.of_logits(logits_x)[0]))


def _patched(model, corrupt_idx, rows: int, subs: Subs, metric: Metric, acts_x=None, start: int = 0) -> torch.Tensor:
    """The metric of ``rows`` copies of the corrupted prompt run together, each with its own substitution. With the
    corrupted run's activations ``acts_x``, the run begins at block ``start`` from its stream there (the blocks
    before are the corrupted run's: no substitution reaches them)."""
    x0 = None
    if acts_x is not None and start > 0:
        x0 = acts_x[("resid", start)].expand(rows, -1, -1)                    # (rows, n, d)
    logits = _forward(model, corrupt_idx.expand(rows, -1), subs, start=start if x0 is not None else 0, x0=x0,
                      last_only=True)[0]
    return metric.of_logits(logits)  # (rows,)


def _at_positions(clean_act: torch.Tensor, pos_dim: int):
    """A substitution for a batch of n rows: row p gets the clean activation at position p (along ``pos_dim``)."""
    def fn(t):
        t = t.clone()
        for p in range(t.shape[0]):
            idx = [p] + [slice(None)] * (t.dim() - 1)
            idx[pos_dim] = p
            src = [0] + idx[1:]
            t[tuple(idx)] = clean_act[tuple(src)]
        return t
    return fn


def patch_residual(model, clean_ids, corrupt_ids, metric: Metric, stages=None) -> np.ndarray:
    """(L+1, n): the corrupted run with the stream entering block l (row L: leaving the last) at one position put
    back from the clean run; 0 = corrupted, 1 = clean. ``stages`` (default all): only these rows, in this order
    (a page computes a large model's grid a stage at a time, with a progress bar between)."""
    corrupt_idx, acts, acts_x, m_clean, m_corrupt = _runs(model, clean_ids, corrupt_ids, metric, ("resid",))
    n = corrupt_idx.shape[1]
    stages = range(model.config.n_layers + 1) if stages is None else stages
    rows = [_patched(model, corrupt_idx, n, {("resid", l): _at_positions(acts[("resid", l)], 1)}, metric,
                     acts_x, start=l) for l in stages]
    return _normalise(torch.stack(rows), m_clean, m_corrupt)


def patch_sublayers(model, clean_ids, corrupt_ids, metric: Metric) -> np.ndarray:
    """(L, 2, n): what each block's attention (0) and MLP (1) wrote at one position, put back from the clean run;
    (L, 1, n), the attention alone, for a block without an MLP."""
    corrupt_idx, acts, acts_x, m_clean, m_corrupt = _runs(model, clean_ids, corrupt_ids, metric, ("attn_out", "mlp_out"))
    n = corrupt_idx.shape[1]
    kinds = ("attn_out", "mlp_out") if model.config.mlp else ("attn_out",)
    out = [[_patched(model, corrupt_idx, n, {(kind, l): _at_positions(acts[(kind, l)], 1)}, metric, acts_x, start=l)
            for kind in kinds] for l in range(model.config.n_layers)]
    return _normalise(torch.stack([torch.stack(r) for r in out]), m_clean, m_corrupt)


def patch_heads(model, clean_ids, corrupt_ids, metric: Metric, what: str = "z",
                per_position: bool = False) -> np.ndarray:
    """(L, h) one head's ``what`` (q, k, v, z or pattern) put back from the clean run at every position; with
    ``per_position``, (L, h, n) at one position at a time (the query position, or the key position for k and v)."""
    if what not in HEAD_KINDS:
        raise ValueError(f"what must be one of {', '.join(HEAD_KINDS)}, got {what!r}")
    corrupt_idx, acts, acts_x, m_clean, m_corrupt = _runs(model, clean_ids, corrupt_ids, metric, (what,))
    c, n = model.config, corrupt_idx.shape[1]
    out = []
    for l in range(c.n_layers):
        clean = acts[(what, l)]  # (1, h, n, d_h) or (1, h, n, n)
        if not per_position:
            def fn(t, clean=clean):  # row r: head r from the clean run, everywhere
                t = t.clone()
                for r in range(t.shape[0]):
                    t[r, r] = clean[0, r]
                return t
            out.append(_patched(model, corrupt_idx, c.n_heads, {(what, l): fn}, metric, acts_x, start=l))
            continue

        def fn(t, clean=clean):  # row r*n + p: head r at position p
            t = t.clone()
            for r in range(c.n_heads):
                for p in range(n):
                    t[r * n + p, r, p] = clean[0, r, p]
            return t
        out.append(_patched(model, corrupt_idx, c.n_heads * n, {(what, l): fn}, metric, acts_x, start=l)
                   .view(c.n_heads, n))  # (h n,) -> (h, n): row r*n + p is head r at position p
    return _normalise(torch.stack(out), m_clean, m_corrupt)


def patch_head_positions(model, clean_ids, corrupt_ids, metric: Metric, layer: int, head: int,
                         what: str = "z") -> np.ndarray:
    """(n,): one head's ``what`` put back from the clean run at one position at a time (the query position for
    q, z and pattern rows, the key position for k and v): ``patch_heads(per_position=True)[layer, head]`` without
    running every other head (n rows instead of L h n, which a GPT-2 page cannot afford)."""
    if what not in HEAD_KINDS:
        raise ValueError(f"what must be one of {', '.join(HEAD_KINDS)}, got {what!r}")
    _check_heads(model.config, [(layer, head)])
    corrupt_idx, acts, acts_x, m_clean, m_corrupt = _runs(model, clean_ids, corrupt_ids, metric, (what,))
    clean, n = acts[(what, layer)], corrupt_idx.shape[1]

    def fn(t):  # row p: the head at position p
        t = t.clone()
        for p in range(n):
            t[p, head, p] = clean[0, head, p]
        return t
    return _normalise(_patched(model, corrupt_idx, n, {(what, layer): fn}, metric, acts_x, start=layer), m_clean,
                      m_corrupt)


def path_patch(model, clean_ids, corrupt_ids, sender: tuple[int, int], receivers: list[tuple[int, int]],
               via: str = "k", metric: Metric | None = None) -> float:
    """The sender head's clean output reaching only the receivers' ``via`` input (q, k or v), everything else frozen
    at the corrupted run; normalised like the others (0 = corrupted, 1 = clean). No receivers: 0 exactly."""
    return float(path_patch_senders(model, clean_ids, corrupt_ids, [sender], receivers, via, metric)[0])


def path_patch_senders(model, clean_ids, corrupt_ids, senders: list[tuple[int, int]],
                       receivers: list[tuple[int, int]], via: str = "k", metric: Metric | None = None) -> np.ndarray:
    """(S,): ``path_patch`` of each of ``senders`` into the same receivers, one row each, in batches of at most
    PATH_TOKENS rows x tokens (a page asks which earlier head's path into a head's keys restores most: every earlier
    head at once)."""
    if via not in ("q", "k", "v"):
        raise ValueError(f"via must be q, k or v, got {via!r}")
    senders = [(int(l), int(h)) for l, h in senders]
    receivers = [(int(l), int(h)) for l, h in receivers]
    _check_heads(model.config, senders + receivers)
    if any(lr <= ls for ls, _ in senders for lr, _ in receivers):
        raise ValueError("every receiver must sit in a later layer than the sender")
    if metric is None:  # the default the pages use: the clean run's answer against the corrupted run's
        metric = Metric(*default_answers(model, clean_ids, corrupt_ids))
    if not receivers or not senders:  # nothing reaches anything: the corrupted run itself, 0 by definition
        return np.zeros(len(senders))
    corrupt_idx, acts, acts_x, m_clean, m_corrupt = _runs(model, clean_ids, corrupt_ids, metric, ("z", "mlp_out"))
    rows = max(1, PATH_TOKENS // corrupt_idx.shape[1])  # senders per batch
    values = [_paths(model, corrupt_idx, acts, acts_x, senders[i:i + rows], receivers, via, metric)
              for i in range(0, len(senders), rows)]
    return _normalise(torch.cat(values), m_clean, m_corrupt)


def _paths(model, corrupt_idx, acts, acts_x, senders, receivers, via, metric) -> torch.Tensor:
    """``path_patch_senders``' metric values (not normalised) for one batch of senders."""
    S = len(senders)
    # 1. row r: the stream with sender r clean and every other head and MLP frozen at the corrupted run (below the
    # sender's layer the stream is the corrupted run's, so freezing from block 0 changes nothing there)
    subs: Subs = {}
    for l in range(model.config.n_layers):
        def z_fn(t, l=l):
            t = acts_x[("z", l)].expand(S, -1, -1, -1).clone()            # (S, h, n, d_h)
            for r, (ls, hs) in enumerate(senders):
                if l == ls:
                    t[r, hs] = acts[("z", ls)][0, hs]
            return t
        subs[("z", l)] = z_fn
        subs[("mlp_out", l)] = lambda t, l=l: acts_x[("mlp_out", l)].expand(S, -1, -1)
    # run only up to the last receiver's block: nothing after it is read
    _, acts_s = _forward(model, corrupt_idx.expand(S, -1), subs, record=True, keep=frozenset({via}),
                         stop=max(l for l, _ in receivers) + 1)
    # 2. the corrupted run again, row r's receivers' inputs taken from row r of that stream, all else recomputed
    final: Subs = {}
    for lr in sorted({l for l, _ in receivers}):
        heads = [h for l, h in receivers if l == lr]

        def in_fn(t, lr=lr, heads=heads):
            t = t.clone()
            t[:, heads] = acts_s[(via, lr)][:, heads]
            return t
        final[(via, lr)] = in_fn
    return _patched(model, corrupt_idx, S, final, metric)


def paths_into(model, clean_ids, corrupt_ids, receiver: tuple[int, int], metric: Metric,
               via: str = "k") -> dict[tuple[int, int], float]:
    """{sender: its path into ``receiver``'s ``via`` input alone} for every head of the layers before the receiver's
    ({} for a head of the first layer): which earlier head builds what the receiver reads (``path_patch``)."""
    senders = [(l, h) for l in range(receiver[0]) for h in range(model.config.n_heads)]
    if not senders:
        return {}
    values = path_patch_senders(model, clean_ids, corrupt_ids, senders, [tuple(receiver)], via, metric)
    return {s: float(v) for s, v in zip(senders, values)}


def sources_refusal(config) -> str | None:
    """Why a model's attention scores cannot be split over the writers of the stream, in words; None when they can:
    the split needs the stream to be the plain sum of what the embedding and each sublayer wrote (post-norm puts a
    LayerNorm after every sum, and a block without its residual keeps only its last sublayer's output)."""
    if config.norm == "post":
        return ("this model puts its LayerNorm after each residual sum (post-norm), so the stream a head reads is "
                "not a sum of what earlier parts wrote and cannot be split over them")
    if not config.residual:
        return ("this model has no residual connection: each block's stream is its last sublayer's output alone, "
                "not a sum of what earlier parts wrote, so it cannot be split over them")
    return None


@torch.no_grad()
def score_sources(model, ids, layer: int, head: int, i: int, j: int):
    """(table (S, S), source names, score): head (layer, head)'s score s_ij = q_i . k_j / sqrt(d_h) split over the
    writers of the query's stream (rows) and of the key's stream (columns): token and position embedding, every
    earlier head and MLP, and "LN shift" (LayerNorm's beta and the bias of W_Q or W_K). LayerNorm's 1/sigma is
    frozen at its value at i and at j; the entries add up to the score. A block without LayerNorm splits the same
    way with sigma 1; one whose stream is not a sum of writers (``sources_refusal``) raises ValueError."""
    c = model.config
    why = sources_refusal(c)
    if why:
        raise ValueError(why)
    if not (0 <= layer < c.n_layers and 0 <= head < c.n_heads):
        raise ValueError(f"the model has no head L{layer + 1} H{head + 1}: layers 1..{c.n_layers}, heads 1..{c.n_heads}")
    if not (0 <= j <= i < len(ids)):
        raise ValueError(f"need 0 <= j <= i < n (got i={i}, j={j}, n={len(ids)})")
    if len(ids) > c.n_ctx:
        raise ValueError(f"the prompt has {len(ids)} tokens, more than the model's context of {c.n_ctx}")
    idx = _batch(ids)
    # the blocks up to the head's own (its q and k), and only what the sources are made of
    _, acts = _forward(model, idx, record=True, stop=layer + 1, keep=frozenset({"z", "mlp_out", "resid", "q", "k"}))
    d, h, dh, n = c.d_model, c.n_heads, c.d_head, idx.shape[1]
    names, parts = ["token embedding"], [model.tok_emb.weight[idx[0]]]  # (n, d) each
    if model.pos_emb is not None:
        names.append("position embedding")
        parts.append(model.pos_emb.weight[:n])
    for l in range(layer):
        attn = model.blocks[l].attn
        w_o = attn.w_o_heads()                       # (d, h, d_h): head r reads its d_h columns
        z = acts[("z", l)][0]                        # (h, n, d_h)
        for r in range(h):
            names.append(head_label(l, r))
            parts.append(torch.einsum("nk,dk->nd", z[r], w_o[:, r]))  # (n, d_h) x (d, d_h) -> (n, d): head r's write
        if attn.out is not None and attn.out.bias is not None:
            names.append(f"L{l + 1} attention bias")
            parts.append(attn.out.bias.expand(n, d))
        if c.mlp:
            names.append(f"L{l + 1} MLP")
            parts.append(acts[("mlp_out", l)][0])
    ln = model.blocks[layer].ln1
    normed = isinstance(ln, torch.nn.LayerNorm)  # norm="none": the head reads the stream as it is
    stream = acts[("resid", layer)][0].double()     # (n, d)
    w_qkv = model.blocks[layer].attn.qkv.weight.double()
    b_qkv = model.blocks[layer].attn.qkv.bias

    def side(pos, which):  # (S + 1, d_h): each source's share of q_pos (which=0) or k_pos (which=1)
        rows = slice(which * d + head * dh, which * d + (head + 1) * dh)
        w = w_qkv[rows]                                                   # (d_h, d)
        bias = b_qkv[rows].double() if b_qkv is not None else torch.zeros(dh, dtype=torch.float64)
        if not normed:
            return torch.stack([w @ p[pos].double() for p in parts] + [bias])
        sigma = torch.sqrt(stream[pos].var(unbiased=False) + ln.eps)
        gamma = ln.weight.double()
        shares = [w @ (gamma * (p[pos].double() - p[pos].double().mean()) / sigma) for p in parts]
        return torch.stack(shares + [w @ ln.bias.double() + bias])
    q, k = side(i, 0), side(j, 1)
    table = (q @ k.T / math.sqrt(dh)).numpy()                          # (S + 1, S + 1)
    score = float(acts[("q", layer)][0, head, i].double() @ acts[("k", layer)][0, head, j].double() / math.sqrt(dh))
    return table, names + ["LN shift" if normed else "bias"], score


@torch.no_grad()
def top_predictions(model, ids, k: int = 2) -> list[int]:
    """The ``k`` likeliest next tokens after ``ids``, likeliest first."""
    logits, _ = _forward(model, _batch(ids))
    return [int(t) for t in logits[0, -1].topk(k).indices]


def default_answers(model, clean, corrupt) -> tuple[int, int]:
    """(answer, wrong) for the logit-difference metric: the clean run's top prediction, and the corrupted run's
    (its second when both runs agree, so the two are never the same token)."""
    answer = top_predictions(model, clean, 1)[0]
    first, second = top_predictions(model, corrupt, 2)
    return answer, (second if first == answer else first)
