"""The lecture's transformer, small enough to read in one sitting.

Order as in nanoGPT: config, attention, MLP, block, model. This is the one forward pass: every analysis reads or
changes an activation through its hook points (core.nn.hooks, TransformerLens's names: ``run_with_cache``,
``run_with_hooks``), never through a copy of a sublayer. Every hook point is called on every forward: with no hook
asked for, the run is core.nn.hooks.NO_HOOKS, whose hook points hand their input back. Attention is written out when
someone asks for the scores (before the causal mask) or the pattern (after the masked softmax); otherwise a fused
kernel runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.nn.config import ModelConfig
from core.nn.hooks import NO_HOOKS, ActivationCache, HookRun, as_run, block_hook_names, hook_names


@dataclass
class ModelOutput:
    logits: torch.Tensor                      # (B, n, m)
    loss: torch.Tensor | None = None          # mean cross-entropy when targets were given
    present: "KVCache | None" = field(default=None, repr=False)  # key/value cache after this call


class KVCache:
    """Keys and values of every layer for incremental decoding, in buffers allocated once for n_ctx
    positions: appending a step is a slice copy, not a concatenation of the whole past. The model
    updates it in place and returns it as ``out.present``."""

    def __init__(self, config: "ModelConfig", batch: int, dtype=torch.float32, device=None):
        shape = (config.n_layers, batch, config.n_heads, config.n_ctx, config.d_head)  # (L, B, h, n_ctx, d/h)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        # each layer's (B, h, n_ctx, d/h) view, made once and written and read through ``narrow``: one op each, where
        # indexing [layer, :, :, a:b] is four (a decoding step of the lecture's model is a few dozen small ops)
        self._layers = [(self.k[l], self.v[l]) for l in range(config.n_layers)]
        self.length = 0  # positions filled so far

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write this call's (B, h, n, d/h) keys and values after the cached ones; return all of them."""
        n, end = k.shape[2], self.length + k.shape[2]
        ks, vs = self._layers[layer]
        ks.narrow(2, self.length, n).copy_(k)
        vs.narrow(2, self.length, n).copy_(v)
        return ks.narrow(2, 0, end), vs.narrow(2, 0, end)  # (B, h, length + n, d/h) views

    def __getitem__(self, layer: int):
        """(keys, values) of a layer so far, each (B, h, length, d/h)."""
        ks, vs = self._layers[layer]
        return ks.narrow(2, 0, self.length), vs.narrow(2, 0, self.length)


def future_mask(n: int, n_k: int | None = None, device=None) -> torch.Tensor:
    """Boolean (n, n_k) matrix, True where key j lies in the future of query i. With a cached prefix
    (n_k > n) the n queries are the last n positions, so query i sits at position n_k - n + i."""
    n_k = n if n_k is None else n_k
    return torch.ones(n, n_k, dtype=torch.bool, device=device).triu(n_k - n + 1)


def attention_weights(scores: torch.Tensor, mask: str = "scores") -> torch.Tensor:
    """(..., n, n_k) scores -> the weights, the one place in core/ that turns attention scores into weights (the
    Attention page's what-if panels ask it for the other orders of mask and softmax). The n queries are the last n
    of the n_k positions. mask: "scores", the future's scores set to -inf before the softmax (rows sum to 1 over the
    past); "after_softmax", the softmax over every key and the future's weights then set to 0; "none", no mask."""
    if mask == "none":
        return F.softmax(scores, dim=-1)  # every query reads every key, the future included
    future = future_mask(scores.shape[-2], scores.shape[-1], device=scores.device)  # query i sees keys j <= i only
    if mask == "after_softmax":
        # the order the lecture asks about: the softmax has already spread weight over the future keys, so zeroing
        # them leaves rows summing to less than 1, and every row's weights depend on later tokens
        return F.softmax(scores, dim=-1).masked_fill(future, 0.0)
    return F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def sdpa(q, k, v, **kw):
    """F.scaled_dot_product_attention, kept in fp32 under a bf16 autocast: the CPU's flash-attention backward runs
    about 5x slower in bf16, and bf16 everywhere made the lecture-shape step 0.7-0.8x fp32 (issue 60). Its output is
    fp32; the next product (W_O) casts it back."""
    if torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw)
    return F.scaled_dot_product_attention(q, k, v, **kw)


class MultiHeadAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.d_head = config.d_head
        # W_Q, W_K, W_V of every head stored side by side in one (d, 3d) map; bias-free in the lecture, not in GPT-2
        self.qkv = nn.Linear(d, 3 * d, bias=config.bias)
        # W_O mixes the concatenated heads; without it each head writes only its own d/h coordinates of the stream
        self.out = nn.Linear(d, d, bias=config.bias) if config.w_o else None
        self.mask = config.mask

    def forward(self, x, cache=None, layer=0, last_query=False, hooks=NO_HOOKS):
        """x: (B, n, d), the stream as the attention reads it (after ln1 in a pre-norm block). Returns (B, n, d).
        last_query: the output of the last position only, (B, 1, d); the keys and values of every position are still
        computed (and cached). For the last block when only the next token's logits are read. hooks: the run's
        HookRun, or NO_HOOKS (core.nn.hooks); its names here are "blocks.{layer}.attn.hook_*"."""
        B, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)  # (B, n, 3d) -> 3 x (B, n, d)
        # head k owns coordinates k*d/h..(k+1)*d/h; TransformerLens's shape for q, k, v, where the hooks see them
        q = q.view(B, n, self.n_heads, self.d_head)  # (B, n, d) -> (B, n, h, d/h)
        k = k.view(B, n, self.n_heads, self.d_head)  # (B, n, d) -> (B, n, h, d/h)
        v = v.view(B, n, self.n_heads, self.d_head)  # (B, n, d) -> (B, n, h, d/h)
        pre = f"blocks.{layer}.attn."
        q, k, v = hooks(pre + "hook_q", q), hooks(pre + "hook_k", k), hooks(pre + "hook_v", v)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, n, h, d/h) -> (B, h, n, d/h)
        if cache is not None:  # incremental decoding: the cached keys and values come first
            k, v = cache.append(layer, k, v)  # (B, h, n_past + n, d/h) each
        written = hooks.wants_any(pre, ("hook_attn_scores", "hook_pattern"))  # the fused kernel never forms them
        if last_query and not written and n > 1:  # (a cached decoding step has one query already)
            q, n = q[:, :, -1:], 1  # (B, h, n, d/h) -> (B, h, 1, d/h): the last query sees every key
        n_k = k.shape[2]
        if written or self.mask == "after_softmax":  # the weights written out (the variant has no fused kernel)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)  # (B, h, n, d/h) x (B, h, d/h, n_k) -> (B, h, n, n_k)
            # before the mask, as the Attention page shows them (TransformerLens: after it)
            scores = hooks(pre + "hook_attn_scores", scores)
            pattern = hooks(pre + "hook_pattern", attention_weights(scores, self.mask))  # (B, h, n, n_k)
            y = pattern @ v  # (B, h, n, n_k) x (B, h, n_k, d/h) -> (B, h, n, d/h)
            if last_query:
                y, n = y[:, :, -1:], 1  # the scores were asked for in full; only the last query goes on
        elif n == 1 or self.mask == "none":
            # a single new query sees every cached key: no mask needed
            y = sdpa(q, k, v)
        elif n == n_k:
            # fused fast path: same math, the (n, n) matrix is never materialised
            y = sdpa(q, k, v, is_causal=True)
        else:
            y = sdpa(q, k, v, attn_mask=~future_mask(n, n_k, device=x.device))
        z = hooks(pre + "hook_z", y.transpose(1, 2))  # (B, h, n, d/h) -> (B, n, h, d/h), TransformerLens's shape
        if hooks.wants(pre + "hook_result"):  # each head's write after W_O, (B, n, h, d): h times the work, when asked
            # (B, n, h, d/h) x (d, h, d/h) -> (B, n, h, d): head k's z through its own d/h columns of W_O
            result = hooks(pre + "hook_result", torch.einsum("bnhk,dhk->bnhd", z, self.w_o_heads()))
            out = result.sum(dim=2)  # (B, n, h, d) -> (B, n, d)
            return out + self.out.bias if self.out is not None and self.out.bias is not None else out
        y = z.reshape(B, n, d)  # concatenate heads: (B, n, h, d/h) -> (B, n, d)
        return self.out(y) if self.out is not None else y

    def w_o_heads(self) -> torch.Tensor:
        """W_O split by head, (d, h, d/h): head k writes z_k through columns k*d/h..(k+1)*d/h of W_O (weight is
        (d_out, d_in), d_in = h * d/h side by side). Without W_O, the identity: each head writes its own coordinates."""
        d = self.n_heads * self.d_head
        w = self.out.weight if self.out is not None else torch.eye(d, device=self.qkv.weight.device,
                                                                     dtype=self.qkv.weight.dtype)
        return w.view(d, self.n_heads, self.d_head)  # (d, d) -> (d, h, d/h)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.d_ff, bias=config.bias)  # W1 in R^{d x d_ff}
        self.w2 = nn.Linear(config.d_ff, config.d_model, bias=config.bias)  # W2 in R^{d_ff x d}
        self.activation = config.activation

    def act(self, h):
        """The nonlinearity on W1's output (B, n, d_ff). The ReLU may overwrite its input in place: the linear
        map's backward needs its input, not its output, so this saves a (B, n, d_ff) buffer (about 3% per step)."""
        if self.activation == "relu":
            return F.relu(h, inplace=True)
        # GELU needs its input for the backward pass, so it cannot work in place
        return F.gelu(h, approximate="tanh" if self.activation == "gelu_tanh" else "none")

    def forward(self, x, hooks=NO_HOOKS, layer=0):
        """W2^T f(W1^T u) at every position: (B, n, d) -> (B, n, d)."""
        name = f"blocks.{layer}.mlp.hook_pre"
        pre = hooks(name, self.w1(x))  # (B, n, d_ff) before the nonlinearity
        # the in-place ReLU would overwrite hook_pre under a hook that kept or read it: then it works on a copy
        post = self.act(pre.clone() if self.activation == "relu" and hooks.wants(name) else pre)
        return self.w2(hooks(f"blocks.{layer}.mlp.hook_post", post))


def layer_norm(ln, x, hooks=NO_HOOKS, name: str = ""):
    """``ln(x)``; written out when a hook asks for ``name``, so that its scale sigma = sqrt(var + eps), (B, n, 1), is
    that hook point (TransformerLens's ``hook_scale``): a hook may read it or freeze it at another run's value. Else the
    fused kernel (the same numbers up to rounding). Identity stays identity."""
    if not (hooks.wants(name) and isinstance(ln, nn.LayerNorm)):
        return ln(x)
    centred = x - x.mean(dim=-1, keepdim=True)
    scale = hooks(name, (centred.pow(2).mean(dim=-1, keepdim=True) + ln.eps).sqrt())  # (B, n, 1)
    return centred / scale * ln.weight + ln.bias


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        norm = (lambda: nn.LayerNorm(config.d_model, eps=config.ln_eps)) if config.norm != "none" else nn.Identity
        self.ln1 = norm()  # scale and shift: 2d parameters
        self.attn = MultiHeadAttention(config)
        self.ln2 = norm() if config.mlp else None  # no MLP, nothing for a second LayerNorm to feed
        self.mlp = MLP(config) if config.mlp else None
        self.residual, self.post = config.residual, config.norm == "post"

    def forward(self, x, cache=None, layer=0, last_only=False, hooks=NO_HOOKS):
        """x: (B, n, d) the stream entering the block. last_only: return the stream at the last position only,
        (B, 1, d). Its attention still reads every position's keys and values, but the queries, W_O and the MLP of
        the other positions are skipped. hooks: the run's HookRun, names "blocks.{layer}.hook_*"."""
        pre = f"blocks.{layer}."
        x = hooks(pre + "hook_resid_pre", x)
        # pre-norm residual updates: the stream x is read from and added to, never overwritten
        u = x if self.post else layer_norm(self.ln1, x, hooks, pre + "ln1.hook_scale")
        a = self.attn(u, cache=cache, layer=layer, last_query=last_only, hooks=hooks)
        if last_only and x.shape[1] > 1:
            x = x[:, -1:]  # (B, n, d) -> (B, 1, d)
        a = hooks(pre + "hook_attn_out", a)
        x = self._add(x, a, self.ln1, hooks, pre + "ln1.hook_scale")
        if self.mlp is not None:
            x = hooks(pre + "hook_resid_mid", x)
            u = x if self.post else layer_norm(self.ln2, x, hooks, pre + "ln2.hook_scale")
            u = hooks(pre + "hook_mlp_in", u)  # what the MLP reads (a transcoder's input)
            m = hooks(pre + "hook_mlp_out", self.mlp(u, hooks, layer))
            x = self._add(x, m, self.ln2, hooks, pre + "ln2.hook_scale")
        return hooks(pre + "hook_resid_post", x)

    def _add(self, x, update, ln, hooks=NO_HOOKS, name=""):
        """The stream after a sublayer wrote ``update``: x + update (pre-norm), LN(x + update) (post-norm), or the
        update alone without the residual connection."""
        x = x + update if self.residual else update
        return layer_norm(ln, x, hooks, name) if self.post else x


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        # learned absolute positions; without them the model sees a bag of tokens (a causal mask still orders them)
        self.pos_emb = nn.Embedding(config.n_ctx, config.d_model) if config.positions else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self._block_hooks = tuple(block_hook_names(config))  # asked per block per forward: built once
        self._hook_names = frozenset(hook_names(config))  # checked on every run_with_cache: built once
        # pre-norm leaves the stream's scale to grow, so it is normalised before the output map; post-norm's stream
        # leaves a LayerNorm already, and "none" has none
        self.ln_f = nn.LayerNorm(config.d_model, eps=config.ln_eps) if config.norm == "pre" else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # back to the m vocabulary entries
        if config.tie_weights:  # GPT-2: one (m, d) matrix reads tokens in and scores them out
            self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init for the maps that write into the residual stream
        for name, p in self.named_parameters():
            if name.endswith("attn.out.weight") or name.endswith("mlp.w2.weight"):  # absent in some variants
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    # forward in three steps, each callable alone: interventions that change only block l onwards run the
    # blocks before l once and start the rest from the stream they leave (core.analysis.interventions.head_losses)

    def embed(self, idx, offset: int = 0, hooks=NO_HOOKS) -> torch.Tensor:
        """The residual stream entering block 0: (B, n) token ids at positions offset.. -> (B, n, d). The ids are
        moved to the device of the weights here, once for every analysis (CPU here, a GPU where the model is on one)."""
        tok = hooks("hook_embed", self.tok_emb(idx.to(self.tok_emb.weight.device)))  # (B, n, d)
        if self.pos_emb is None:
            return tok  # the same vector for a token wherever it stands
        # a slice of the position table, not a lookup: same values, one op fewer per decoding step
        pos = self.pos_emb.weight[offset:offset + idx.shape[1]]  # (n, d)
        if hooks.wants("hook_pos_embed"):  # the expand costs a decoding step about what the add does: when asked
            pos = hooks("hook_pos_embed", pos.expand(idx.shape[0], -1, -1))  # (n, d) -> (B, n, d), as TransformerLens
        return tok + pos  # (B, n, d) + (n, d) or (B, n, d)

    def blocks_from(self, x, start: int = 0, stop: int | None = None, cache=None, last_only=False, hooks=NO_HOOKS):
        """Blocks start..stop-1 (stop: default all) on the stream x (B, n, d) entering block ``start``; returns the
        stream leaving block stop-1. last_only: the last block run computes the last position only (its stream comes
        back as (B, 1, d)). hooks: a HookRun (core.nn.hooks) whose hook points of these blocks run."""
        stop = len(self.blocks) if stop is None else stop
        for i in range(start, stop):
            # a block no hook reads or changes runs with the identity hooks, whose questions cost no lookup: a steered
            # generation step costs what a plain one does outside the steered block
            run = hooks if self._hooks_touch(hooks, i) else NO_HOOKS
            x = self.blocks[i](x, cache=cache, layer=i, last_only=last_only and i == stop - 1, hooks=run)
        return x

    def readout(self, x, hooks=NO_HOOKS) -> torch.Tensor:
        """Final LayerNorm and output map: the stream leaving the last block (..., d) -> logits (..., m)."""
        return self.head(layer_norm(self.ln_f, x, hooks, "ln_final.hook_scale"))

    def hook_names(self) -> list[str]:
        """Every hook point of this model's forward, TransformerLens's names, in the order the forward meets them."""
        return hook_names(self.config)

    def forward(self, idx, targets=None, past=None, use_cache=False, last_only=False, hooks=None):
        """idx: (B, n) token ids. Returns a ModelOutput with logits (B, n, m).

        last_only: logits of the last position only, (B, 1, m): all that generation reads. The output map is the
        largest matrix of a GPT-2-sized model, and (B, n, m) logits of a long prompt are gigabytes (nanoGPT's
        inference-time shortcut). Not with targets, whose loss needs every position.
        hooks: a HookRun (core.nn.hooks), or a list of (name, fn) pairs as ``run_with_hooks`` takes (None or []: none).
        The attention of every layer is ``run_with_cache``'s ``attn.hook_attn_scores`` and ``attn.hook_pattern``; a
        head's output before W_O, to read or change, ``attn.hook_z`` (B, n, h, d/h).
        use_cache / past: incremental decoding. use_cache=True returns ``out.present``, a KVCache; pass it
        back as ``past`` with the next token(s), whose positions continue after it. It is updated in place.
        """
        B, n = idx.shape
        offset = 0 if past is None else past.length
        if offset + n > self.config.n_ctx:
            raise ValueError(
                f"sequence of {offset + n} tokens is longer than the model's context n_ctx={self.config.n_ctx}"
            )
        if last_only and targets is not None:
            raise ValueError("last_only gives no loss: the loss needs the logits of every position")
        hooks = as_run(hooks, self.hook_names)
        cache = past
        if cache is None and use_cache:
            cache = KVCache(self.config, B, dtype=self.tok_emb.weight.dtype, device=self.tok_emb.weight.device)
        # with last_only, the last block skips what no later block reads: the queries, W_O and MLP of every position
        # but the last (about 40% of a slid generation step for the lecture's two-layer model). Not when a hook reads
        # or changes that block (a hook sees every position); hooks on earlier blocks keep it (steering, for one).
        shortcut = last_only and not self._hooks_touch(hooks, self.config.n_layers - 1)
        x = self.blocks_from(self.embed(idx, offset, hooks), 0, cache=cache, last_only=shortcut, hooks=hooks)
        if cache is not None:
            cache.length += n
        # (B, n, m), or (B, 1, m); the shortcut's last block already left (B, 1, d): no slice of it (a decoding step
        # is a few dozen small ops, each a few microseconds)
        logits = self.readout(x[:, -1:] if last_only and x.shape[1] > 1 else x, hooks)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * n, -1), targets.reshape(B * n).to(logits.device))  # (B*n, m) vs (B*n,)
        return ModelOutput(logits=logits, loss=loss, present=cache if use_cache else None)

    def _hooks_touch(self, hooks, layer: int) -> bool:
        """Whether ``hooks`` reads or changes any hook point of block ``layer``."""
        return hooks.wants_any(f"blocks.{layer}.", self._block_hooks)

    def run_with_cache(self, idx, names=None, hooks=(), **kwargs):
        """(logits (B, n, m), ActivationCache): the forward with the activations named in ``names`` kept (a list of
        hook names, a predicate on a name, or None for all of them; a GPT-2's patterns at 1,024 tokens are 600 MB, so
        ask for what you read). ``hooks``: (name, fn) pairs that run too (the cache holds what they return)."""
        run = HookRun(hooks, names=names, record=True)
        run.check_names(self._hook_names)
        if isinstance(names, (list, tuple, set, frozenset)):
            unknown = sorted(set(names) - self._hook_names)
            if unknown:
                raise ValueError(f"this model has no hook {unknown[0]!r} (model.hook_names() lists its hooks)")
        out = self(torch.as_tensor(idx), hooks=run, **kwargs)
        return out.logits, ActivationCache(run.store, self._hook_names)

    def run_with_hooks(self, idx, hooks=(), **kwargs) -> torch.Tensor:
        """The logits of a forward in which each (name, fn) of ``hooks`` runs at its hook point: ``fn(tensor, name)``
        returns the tensor the run continues with, or None to leave it (a hook can read, replace or add)."""
        return self(torch.as_tensor(idx), hooks=list(hooks), **kwargs).logits
