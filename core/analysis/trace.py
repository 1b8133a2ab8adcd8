"""One forward pass with every intermediate kept: the residual stream, what each sublayer adds to it, the
queries, keys and values, the MLP's hidden layer, and the logit lens.

``trace`` reads them from the model's own forward through its TransformerLens-named hook points
(``run_with_cache``): the one block of core.nn.model, nothing written out a second time, and only the hooks it
reads are recorded (a block's own LayerNorm scales are not: asking for one writes that LayerNorm out instead of
its fused kernel). Tests check every field against the model's own forward pass. Names follow TransformerLens'
cache (embed, attn_out, mlp_out, resid): the stream starts as ``embed`` and, where it is a plain sum of its
writers (``additive``: the residual kept, no post-norm LayerNorm inside it), every sublayer adds to it, so

    resid_final = embed + sum_l attn_out[l] + sum_l mlp_out[l],
    attn_out[l] = sum_h head_out[l][:, h] + attn_bias[l]   (attn_bias is 0 for a bias-free model).

Post-norm and a block without its residual keep every field, but the sums above do not hold there.

Layers and heads count from 0 here; pages show them from 1 (core.serve.fmt.head_label).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.serve.fmt import head_label


@dataclass
class Trace:
    """Every intermediate of one forward pass. B batch, n positions, d width, h heads, d_h = d/h, m vocabulary.
    Per-layer fields are lists with one tensor per block, indexed from 0."""
    embed: torch.Tensor             # (B, n, d) token plus position embedding: the stream's start
    attn_out: list[torch.Tensor]    # (B, n, d) what block l's attention sublayer adds to the stream
    head_out: list[torch.Tensor]    # (B, h, n, d) each head's share of attn_out[l], after W_O
    attn_bias: list[torch.Tensor]   # (d,) W_O's bias (zeros without one): the part of attn_out[l] no head writes
    q: list[torch.Tensor]           # (B, h, n, d_h) queries
    k: list[torch.Tensor]           # (B, h, n, d_h) keys
    v: list[torch.Tensor]           # (B, h, n, d_h) values
    scores: list[torch.Tensor]      # (B, h, n, n) q.k/sqrt(d_h) for every pair, before the causal mask
    pattern: list[torch.Tensor]     # (B, h, n, n) weights after the masked softmax
    z: list[torch.Tensor]           # (B, h, n, d_h) each head's weighted sum of values, before W_O
    resid_mid: list[torch.Tensor]   # (B, n, d) the stream after block l's attention, what its MLP reads
    mlp_hidden: list[torch.Tensor]  # (B, n, d_ff) after the nonlinearity (ReLU; GELU for GPT-2)
    mlp_out: list[torch.Tensor]     # (B, n, d) what block l's MLP adds to the stream
    resid: torch.Tensor             # (L+1, B, n, d) the stream after the embedding and after each block
    resid_final: torch.Tensor       # (B, n, d) the stream before the final LayerNorm (= resid[-1])
    ln_scale: torch.Tensor          # (B, n) 1/sigma of the final LayerNorm at each position (its actual scale)
    logits: torch.Tensor            # (B, n, m) the model's output (the lens of the last stage; every stage's
                                    # lens is lens_logits(model, tr, stage), one stage at a time: all of them
                                    # would be (L+1) n m floats, 2.7 GB for GPT-2 small at 1,024 tokens)

    @property
    def n_layers(self) -> int:
        return len(self.attn_out)

    @property
    def n_heads(self) -> int:
        return self.q[0].shape[1]


PER_LAYER = ("attn_out", "head_out", "attn_bias", "q", "k", "v", "scores", "pattern", "z", "resid_mid", "mlp_hidden",
             "mlp_out")


@torch.no_grad()
def trace(model, idx) -> Trace:
    """Run ``model`` on ``idx`` ((B, n) token ids, or a flat list for B = 1) and keep every intermediate, read from
    the model's own forward through its hook points (``run_with_cache``). The model is only read, never changed.
    Works on every variant of the block: a field the block lacks is what the stream equation needs in its place
    (no MLP: ``mlp_out`` zeros and ``mlp_hidden`` None; no final LayerNorm: ``ln_scale`` ones). Raises ValueError for
    an empty input or one longer than n_ctx."""
    idx = torch.as_tensor(idx, dtype=torch.long)
    if idx.dim() == 1:
        idx = idx[None]  # (n,) -> (1, n)
    B, n = idx.shape
    c = model.config
    if n == 0:
        raise ValueError("the input is empty: a forward pass needs at least one token")
    if n > c.n_ctx:
        raise ValueError(f"sequence of {n} tokens is longer than the model's context n_ctx={c.n_ctx}")
    device = model.tok_emb.weight.device
    logits, cache = model.run_with_cache(idx.to(device), names=_traced)
    L = c.n_layers

    def heads_first(t):  # TransformerLens's (B, n, h, x) -> the trace's (B, h, n, x)
        return t.transpose(1, 2)

    keep = {name: [] for name in PER_LAYER}
    for l in range(L):
        at = f"blocks.{l}."
        a = model.blocks[l].attn
        bias = a.out.bias if a.out is not None and a.out.bias is not None else torch.zeros(c.d_model, device=device)
        post = cache[at + "hook_resid_post"]
        values = dict(
            attn_out=cache[at + "hook_attn_out"], head_out=heads_first(cache[at + "attn.hook_result"]), attn_bias=bias,
            q=heads_first(cache[at + "attn.hook_q"]), k=heads_first(cache[at + "attn.hook_k"]),
            v=heads_first(cache[at + "attn.hook_v"]), scores=cache[at + "attn.hook_attn_scores"],
            pattern=cache[at + "attn.hook_pattern"], z=heads_first(cache[at + "attn.hook_z"]),
            # no MLP: the stream after attention is the block's output, and the MLP adds nothing
            resid_mid=cache[at + "hook_resid_mid"] if c.mlp else post,
            mlp_hidden=cache[at + "mlp.hook_post"] if c.mlp else None,
            mlp_out=cache[at + "hook_mlp_out"] if c.mlp else torch.zeros_like(post))
        for name in PER_LAYER:
            keep[name].append(values[name])
    resid = torch.stack([cache["blocks.0.hook_resid_pre"]] + [cache[f"blocks.{l}.hook_resid_post"] for l in range(L)])
    x = resid[-1]  # (B, n, d)
    # 1/sigma of the final LayerNorm at each position: (B, n, 1) -> (B, n); a block without one reads the stream as is
    ln_scale = 1 / cache["ln_final.hook_scale"][..., 0] if c.norm == "pre" else torch.ones(B, n, device=device)
    return Trace(embed=resid[0], resid=resid, resid_final=x, ln_scale=ln_scale, logits=logits, **keep)


# the hooks a Trace reads: not the blocks' own LayerNorm scales (asking for one writes that LayerNorm out instead of
# its fused kernel), nor the MLP's input before its nonlinearity, nor the two embedding halves
_UNREAD = ("ln1.hook_scale", "ln2.hook_scale", "mlp.hook_pre", "hook_embed", "hook_pos_embed")


def _traced(name: str) -> bool:
    return not name.endswith(_UNREAD)


def additive(config) -> bool:
    """Whether the stream is the plain sum of what the embedding and every sublayer wrote (resid_final = embed +
    sum attn_out + sum mlp_out): the residual connection kept and no LayerNorm inside the stream (post-norm puts one
    after every sum). Where it is not, splitting a logit over the writers is an approximation (``Attribution.gap``)."""
    return config.residual and config.norm != "post"


def trace_bytes(config, n: int, batch: int = 1) -> int:
    """Bytes of the float32 tensors a Trace of ``batch`` sequences of n tokens holds, from the shapes above: per
    position, the stream-wide vectors and each block's q, k, v, z, per-head outputs, MLP hidden units and the
    logits; per pair of positions, each head's scores and pattern (2 L h n^2, which dominates long inputs)."""
    d, h, L, m = config.d_model, config.n_heads, config.n_layers, config.vocab_size
    per_position = (
        d * (L + 1)                  # resid: the stream after the embedding and after each block (embed and
                                     # resid_final are views of it)
        + L * d * 3                  # attn_out, resid_mid, mlp_out
        + L * h * d                  # head_out: each head's share, width d
        + L * d * 4                  # q, k, v, z: h heads of d/h each
        + L * config.d_ff            # mlp_hidden
        + 1 + m                      # ln_scale, logits
    )
    return 4 * (batch * (n * per_position + L * 2 * h * n * n) + L * d)  # + scores and pattern, + attn_bias


def max_trace_tokens(config, budget: int) -> int:
    """The most tokens a Trace of one sequence may hold within ``budget`` bytes (at least 1, at most n_ctx), in
    whole multiples of 64 once that many fit, so that a page can name the number."""
    lo, hi = 1, config.n_ctx
    while lo < hi:  # the largest n with trace_bytes(n) <= budget: trace_bytes grows with n
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if trace_bytes(config, mid) <= budget else (lo, mid - 1)
    return lo if lo < 64 or lo == config.n_ctx else lo - lo % 64


# ----------------------------------------------------------------------------- the residual stream, step by step

@dataclass
class StreamStep:
    """One step of the residual stream at one position: what it adds and the stream after it."""
    name: str             # "embedding", "L1 attention", "L1 MLP", ... (layers from 1: screen text)
    layer: int | None     # the block, counted from 0; None for the embedding
    kind: str             # "embed", "attn" or "mlp"
    added: np.ndarray     # (d,) what the step adds (for the embedding: the embedding itself)
    after: np.ndarray     # (d,) the stream after the step


def stream_steps(tr: Trace, pos: int, b: int = 0) -> list[StreamStep]:
    """The stream at position ``pos`` of batch row ``b``: the embedding, then each block's attention and MLP (a block
    without an MLP has no MLP step)."""
    steps = [StreamStep("embedding", None, "embed", _np(tr.embed[b, pos]), _np(tr.embed[b, pos]))]
    for layer in range(tr.n_layers):
        steps.append(StreamStep(f"L{layer + 1} attention", layer, "attn", _np(tr.attn_out[layer][b, pos]),
                                _np(tr.resid_mid[layer][b, pos])))
        if tr.mlp_hidden[layer] is not None:
            steps.append(StreamStep(f"L{layer + 1} MLP", layer, "mlp", _np(tr.mlp_out[layer][b, pos]),
                                    _np(tr.resid[layer + 1][b, pos])))
    return steps


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


# ----------------------------------------------------------------------------- direct logit attribution

@dataclass
class Attribution:
    """How much each writer into the stream contributes to one logit, through the final LayerNorm with its
    scale 1/sigma frozen at the value it has on this input. values.sum() + constant == logit where ``exact``;
    elsewhere ``gap`` says by how much they differ."""
    token: int
    pos: int
    names: list[str]      # "embedding", "L1 H1", ..., "L1 MLP", ... (screen labels, counted from 1)
    values: np.ndarray    # (writers,) each writer's share of the logit, in the order of ``names``: the embedding,
                          # then per block its h heads, W_O's bias (if it has one) and its MLP (if it has one)
    constant: float       # the part no writer controls: the LayerNorm's shift beta read by the output map
    logit: float          # the model's logit for ``token`` at ``pos``
    scale: float          # the frozen 1/sigma of the final LayerNorm at ``pos`` (1 without one)
    exact: bool = True    # False where the block is not a plain sum of writers (post-norm, no residual): see gap

    @property
    def gap(self) -> float:
        """The logit minus what the parts add up to: 0 up to rounding where ``exact``, the approximation's size
        where not (post-norm's LayerNorms and a block without its residual mix the writers non-linearly)."""
        return self.logit - (float(self.values.sum()) + self.constant)


@torch.no_grad()
def direct_read(model, parts: torch.Tensor, scale=1.0, token: int | None = None) -> torch.Tensor:
    """What directions ``parts`` (..., d) written into the stream add to the logits straight through the final
    LayerNorm, its scale 1/sigma frozen at ``scale``, and the output map W_U: (..., m) float64, or (...,) the logit
    of ``token`` alone. The one home of this reading: the direct logit attribution below, a unit's card
    (core.features.browse.direct_logits) and a feature's profile (core.analysis.attribution_probes) call it.

    Pre-norm: LN(x) = gamma (x - mean x) / sigma + beta is linear in x once sigma is frozen, so a part c adds
    W_U (gamma (c - mean c) / sigma); beta adds the same whatever the parts and is left out (``read_shift``).
    Post-norm and "none" have no final LayerNorm (ln_f is the identity): the stream reaches W_U as it is, neither
    centred nor scaled (centring there, as a copy of this once did, ranks the wrong tokens)."""
    x = parts.double()
    if model.config.norm == "pre":
        x = model.ln_f.weight.double() * (x - x.mean(-1, keepdim=True)) * scale
    w = model.head.weight.double()  # (m, d)
    return x @ w[token] if token is not None else x @ w.T  # (..., d) @ (d,) -> (...,) or (..., d) @ (d, m) -> (..., m)


@torch.no_grad()
def read_shift(model, token: int) -> float:
    """The final LayerNorm's shift beta read by W_U's row for ``token``: the part of its logit no writer controls
    (0 without a final LayerNorm, or one without a shift)."""
    ln = model.ln_f
    if model.config.norm != "pre" or getattr(ln, "bias", None) is None:
        return 0.0
    return float(model.head.weight[token].double() @ ln.bias.double())


@torch.no_grad()
def direct_logit_attribution(model, tr: Trace, token: int, pos: int, b: int = 0) -> Attribution:
    """Split the logit of ``token`` at ``pos`` over the embedding, every head and every MLP.

    The final LayerNorm is LN(x) = gamma * (x - mean x) / sigma + beta. With sigma frozen at its actual value
    the map is linear in x: centring is linear, so each part c of x = embed + sum(head_out) + sum(attn_bias) +
    sum(mlp_out) contributes w_t . (gamma * (c - mean c)) / sigma, where w_t is the output map's row for ``token``
    (``direct_read``); the shift beta gives the constant w_t . beta. A model without a final LayerNorm (post-norm,
    "none") reads each part straight through W_U, constant 0; where the stream is not a plain sum of the parts
    (``additive`` False) the split is an approximation and ``Attribution.gap`` its size."""
    c = model.config
    if not 0 <= token < c.vocab_size:
        raise ValueError(f"token {token} is outside the vocabulary of {c.vocab_size}")
    n = tr.embed.shape[1]
    if not 0 <= pos < n:
        raise ValueError(f"position {pos} is outside the input's {n} positions")
    scale = tr.ln_scale[b, pos].double()
    names, parts = ["embedding"], [tr.embed[b, pos]]
    for layer in range(tr.n_layers):
        for head in range(tr.n_heads):
            names.append(head_label(layer, head))
            parts.append(tr.head_out[layer][b, head, pos])
        out = model.blocks[layer].attn.out
        if out is not None and out.bias is not None:  # W_O's bias writes too, the same at every position
            names.append(f"L{layer + 1} attention bias")
            parts.append(tr.attn_bias[layer])
        if c.mlp:
            names.append(f"L{layer + 1} MLP")
            parts.append(tr.mlp_out[layer][b, pos])
    values = direct_read(model, torch.stack(parts), scale, token).cpu().numpy()  # (writers,)
    return Attribution(token=token, pos=pos, names=names, values=values, constant=read_shift(model, token),
                       logit=float(tr.logits[b, pos, token]), scale=float(scale), exact=additive(c))


# ----------------------------------------------------------------------------- the logit lens

@dataclass
class Lens:
    """The logit lens at every (stage, position): stage 0 reads the stream after the embedding, stage l + 1
    after block l. Probabilities at T = 1."""
    top_ids: np.ndarray    # (L+1, n, k) the k most likely tokens, best first
    top_probs: np.ndarray  # (L+1, n, k) their probabilities


@torch.no_grad()
def lens_logits(model, tr: Trace, stage: int) -> torch.Tensor:
    """(B, n, m) the final LayerNorm and output map applied to the stream of one stage: 0 after the embedding,
    l + 1 after block l. Stage L is the model's own logits."""
    return model.readout(tr.resid[stage])


LENS_CHUNK = 2**23  # floats of logits worked on at once by lens_top (32 MB in float32, 64 MB as probabilities)
LENS_TOP = 5        # the most likely tokens the lens keeps at every stage and position (a page's hover shows them)


@torch.no_grad()
def lens_top(model, tr: Trace, k: int = LENS_TOP, b: int = 0) -> Lens:
    """The lens's k most likely tokens at every stage and position of batch row b, a block of positions at a
    time: never more than LENS_CHUNK logits exist at once, whatever n and the vocabulary."""
    L1, _, n, _ = tr.resid.shape
    m = model.config.vocab_size
    k = min(k, m)
    step = max(1, LENS_CHUNK // m)
    ids, probs = np.empty((L1, n, k), dtype=np.int64), np.empty((L1, n, k))
    for stage in range(L1):
        for lo in range(0, n, step):
            p = torch.softmax(model.readout(tr.resid[stage, b, lo:lo + step]).double(), dim=-1)  # (<= step, m)
            top = torch.topk(p, k, dim=-1)
            ids[stage, lo:lo + step], probs[stage, lo:lo + step] = top.indices.cpu().numpy(), top.values.cpu().numpy()
    return Lens(top_ids=ids, top_probs=probs)


def lens_stage_names(n_layers: int) -> list[str]:
    """Row names of the lens, top to bottom: the embedding, then the stream after each block (from 1)."""
    return ["after the embedding"] + [f"after block {l + 1}" for l in range(n_layers)]


def lens_accuracy(lens: Lens, ids) -> np.ndarray:
    """(L+1,) for each stage, the share of positions 0..n-2 whose lens favourite is the token that really comes
    next (the last position has no next token to check)."""
    nxt = np.asarray(ids)[1:]  # (n-1,) the token after each position
    return (lens.top_ids[:, :-1, 0] == nxt).mean(axis=1)  # (L+1, n-1) -> (L+1,)
