"""Attribution graphs (issue 46; Ameisen et al. 2025, "Circuit Tracing", and the open circuit-tracer): from a prompt's
tokens through transcoder features to the output logits, every edge a direct effect.

The *replacement model* of one prompt is the real model with every attention pattern and every LayerNorm scale
frozen at the real run's values and each MLP's output replaced by its transcoder's output plus an *error node*
(the real output minus the transcoder's, at each position), so it gives the model's logits exactly. With the
patterns and scales frozen and the features' activations held as they are, everything between two nodes is
linear: the residual stream, attention's OV maps, the LayerNorms. An edge s -> t is the source's activation times
the derivative of the target's input along those paths; a target's incoming edges plus its constant terms (biases,
LayerNorm shifts, transcoder decoder biases, the position embeddings) add up to its real input.

The conventions are circuit-tracer's (``attribute``), so that its scores and pruning come out the same:
- a logit target is the logit minus the mean logit over the vocabulary (``target="demeaned"``, the default):
  circuit-tracer injects the unembedding column minus the mean column (``compute_salient_logits``), whose
  derivative this is; the bias part b_U[t] - mean(b_U) is a constant. ``target="raw"``, ours, attributes the logit
  itself (the shift every logit shares then counts in every edge);
- an input node is a position's token embedding alone (kind "tokens", circuit-tracer's "embedding" node):
  circuit-tracer lets gradients into ``hook_embed`` only, so a learned position embedding is a constant, like a
  bias, and its part of every target sits in ``constants``.
Not copied: circuit-tracer zeroes the features and error at position 0 when the first token is a special one (a
BOS; the shipped models have none); and a capped graph's left-out features join their block's error node here,
where circuit-tracer drops them.

It all runs through hooks on the model's one forward (core.nn.hooks): the frozen values replace ``hook_scale`` and
``attn.hook_pattern``, the replacement MLP output (a leaf: the transcoder's write plus the error) replaces
``hook_mlp_out``, and the token embeddings are leaves fed at ``hook_embed``. One forward pass of B copies of the
prompt, its graph kept, then one backward pass per B targets (circuit-tracer's order of work): a source's edge is the
gradient where it writes (its block's MLP output, or ``hook_embed``) dotted with what it writes.

Nodes, in order (circuit-tracer's): active features (layer, position, feature), error nodes (layer, position),
token embeddings (position), logits; ``adjacency[t, s]`` is the edge from s to t. N nodes hold N x N float64
numbers (the page estimates it first, core.analysis.attribution_cost; pruned in core.analysis.attribution_prune);
``max_feature_nodes`` keeps the most influential features, as circuit-tracer does, and what the others write joins
their block's error node (still exact).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from core.analysis.sae import SAE

BATCH = 128             # targets per backward pass
MAX_LOGITS = 10         # the most output tokens attributed
LOGIT_MASS = 0.95       # ... or fewer, once they cover this much probability
TARGETS = ("demeaned", "raw")  # a logit target: minus the mean logit (circuit-tracer's), or the logit itself (ours)


@dataclass
class Graph:
    ids: list[int]
    features: np.ndarray          # (F, 3) layer, position, feature index of each active feature
    activations: np.ndarray       # (F,)
    n_layers: int
    logit_tokens: list[int]
    logit_probs: np.ndarray       # (K,)
    adjacency: np.ndarray         # (N, N): rows targets, columns sources; zero rows for errors and embeddings
    inputs: np.ndarray            # (N,): each target's real input (a feature's pre-activation, a logit target); 0
    #                               otherwise. A logit target: the logit minus the mean logit, or the logit ("raw")
    constants: np.ndarray         # (N,): each target's input no edge carries (biases, LayerNorm shifts, position embeddings)
    logits: np.ndarray = field(repr=False, default=None)  # (m,) the model's logits at the last position
    dropped: int = 0              # active features left out by max_feature_nodes (folded into the error nodes)
    target: str = "demeaned"      # what a logit node is (TARGETS): the logit minus the mean logit, or the logit

    @property
    def n_pos(self) -> int:
        return len(self.ids)

    @property
    def n_features(self) -> int:
        return len(self.features)

    def slices(self) -> dict[str, slice]:
        f, e, n = self.n_features, self.n_layers * self.n_pos, self.n_pos
        return {"features": slice(0, f), "errors": slice(f, f + e), "tokens": slice(f + e, f + e + n),
                "logits": slice(f + e + n, None)}

    @property
    def n_nodes(self) -> int:
        return self.adjacency.shape[0]


def _record(model, ids: torch.Tensor, transcoders: dict[int, SAE]):
    """The real run's frozen values: every LayerNorm scale, every pattern, each MLP's input and output, the logits."""
    L = model.config.n_layers
    names = [n for n in model.hook_names() if n.endswith("hook_scale") or n.endswith("attn.hook_pattern")
             or n.endswith("hook_mlp_in") or n.endswith("hook_mlp_out")]
    with torch.no_grad():
        logits, cache = model.run_with_cache(ids[None], names=names)
    acts, errors = [], []
    for l in range(L):
        tc = transcoders[l]
        f = tc.encode(cache[f"blocks.{l}.hook_mlp_in"][0])  # (n, F_l)
        acts.append(f)
        errors.append(cache[f"blocks.{l}.hook_mlp_out"][0] - tc.decode(f))  # (n, d): what the transcoder misses
    return logits[0, -1], cache, acts, errors


def _replacement(model, ids, transcoders, cache, acts, errors, B: int, requires_grad: bool,
                 zero_embeddings: bool = False, gates: dict | None = None, capture=(), live: dict | None = None):
    """B copies of the replacement run, from leaves: (leaves, mlp inputs by layer, logits (B, n, m)). The leaves are
    "tok", the token embeddings (B, n, d) at ``hook_embed``, and "w{l}", block l's MLP output (B, n, d) at
    ``hook_mlp_out``: its transcoder's decoding of the held activations plus the error node. Every source of block l
    writes there (a feature a x its decoder row, an error node its vector), so its edge is the gradient at "w{l}" dotted
    with that write (``_source_row``; circuit-tracer's feature_output_hook), and no (B, n, F) leaf of activations is
    decoded or differentiated. ``live``: {layer: (n, F) 0/1 active mask}: the MLP output also gets (mask x
    pre-activation) @ W_dec, so that the gradient flows through later features. The position embedding is no leaf: the
    model adds its own, a constant (circuit-tracer's convention), also when ``zero_embeddings`` zeroes the tokens'."""
    tok = model.tok_emb.weight[ids].detach()  # (n, d)
    if zero_embeddings:
        tok = torch.zeros_like(tok)
    leaves = {"tok": tok.expand(B, -1, -1).clone().requires_grad_(requires_grad)}
    for l in range(model.config.n_layers):
        write = transcoders[l].decode(acts[l].detach()) + errors[l].detach()  # (n, F) -> (n, d)
        leaves[f"w{l}"] = write.expand(B, -1, -1).clone().requires_grad_(requires_grad)
    mlp_in = {}

    def frozen(name):
        value = cache[name].detach()
        return lambda x, name: value.expand_as(x) if value.shape[0] == 1 and x.shape[0] != 1 else value

    hooks = [("hook_embed", lambda x, name: leaves["tok"])]
    for name in cache:
        if name.endswith("hook_scale") or name.endswith("attn.hook_pattern"):
            hooks.append((name, frozen(name)))
    for l, tc in transcoders.items():
        hooks.append((f"blocks.{l}.hook_mlp_in", lambda x, name, l=l: mlp_in.__setitem__(l, x) or x))
        # the MLP's output: the held write (the transcoder's decoding plus the error node), the live features' too
        hooks.append((f"blocks.{l}.hook_mlp_out", lambda y, name, l=l, tc=tc: leaves[f"w{l}"] + (
            (live[l] * tc.pre_acts(mlp_in[l])) @ tc.W_dec if live else 0)))
    for l, gate in (gates or {}).items():  # a head switched off: its output is zero; its frozen pattern is unchanged
        # gate (h,) -> (1, 1, h, 1): one factor per head, over z (B, n, h, d_head)
        hooks.append((f"blocks.{l}.attn.hook_z", lambda z, name, g=gate: z * g.view(1, 1, -1, 1)))
    for name in capture:  # any other activation of the run, kept with its graph (the queries and keys of a head)
        hooks.append((name, lambda x, name: mlp_in.__setitem__(name, x) or x))
    logits = model(ids[None].expand(B, -1), hooks=hooks).logits  # (B, n, m)
    return leaves, mlp_in, logits


def replacement_logits(model, transcoders: dict[int, SAE], ids) -> tuple[torch.Tensor, torch.Tensor]:
    """(the real model's logits, the replacement model's) at every position, (n, m) each: equal up to rounding."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    with torch.no_grad():
        real = model(ids[None]).logits[0]
        _, cache, acts, errors = _record(model, ids, transcoders)
        _, _, logits = _replacement(model, ids, transcoders, cache, acts, errors, 1, False)
    return real, logits[0]


def _target_values(chunk, mlp_in: dict, logits: torch.Tensor, rows, transcoders: dict[int, SAE], n: int,
                   target: str = "demeaned") -> torch.Tensor:
    """(len(chunk),) each target's input, target i read in copy ``rows[i]`` of a replacement run: a feature's
    pre-activation, or a logit at the last position (``target`` "demeaned": minus the mean logit over the vocabulary,
    as circuit-tracer's; "raw": the logit). One gather per block and one for the logits, not one op per target."""
    rows = torch.as_tensor(rows)
    z = torch.zeros(len(chunk), dtype=logits.dtype)
    kinds = np.array([kind == "f" for kind, _ in chunk])
    keys = [key for _, key in chunk]
    for l in {key[0] for kind, key in chunk if kind == "f"}:
        at = [i for i, (kind, key) in enumerate(chunk) if kind == "f" and key[0] == l]
        pos, feat = torch.tensor([keys[i][1] for i in at]), torch.tensor([keys[i][2] for i in at])
        x = mlp_in[l][rows[at], pos]  # (k, d): each target's own copy and position
        # (k, d) x (d, k) -> (k, k), the diagonal: target i's own encoder row on its own input
        z = z.index_put((torch.tensor(at),), transcoders[l].pre_acts(x, feat).diagonal())
    if not kinds.all():
        at = np.flatnonzero(~kinds)
        row = logits[rows[at], n - 1]  # (k, m)
        if target == "demeaned":
            row = row - row.mean(-1, keepdim=True)
        z = z.index_put((torch.as_tensor(at),), row[torch.arange(len(at)), torch.tensor([keys[i] for i in at])])
    return z


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"a logit target is one of {TARGETS}, not {target!r}")
    return target


def _targets(acts, logit_row: torch.Tensor, max_logits: int, mass: float):
    feats = [(l, int(p), int(f)) for l, a in enumerate(acts) for p, f in (a > 0).nonzero().tolist()]
    probs = torch.softmax(logit_row.double(), -1)
    order = torch.argsort(probs, descending=True)
    keep = int(torch.searchsorted(torch.cumsum(probs[order], 0), torch.tensor(mass, dtype=torch.float64))) + 1
    tokens = order[: max(1, min(max_logits, keep))].tolist()
    return feats, tokens, probs[tokens].numpy()


@dataclass
class _Run:
    """One prompt's real run and what the graph's rows need from it."""
    ids: torch.Tensor
    cache: dict
    acts: list
    errors: list
    feats: list
    tokens: list
    by_layer: dict
    dropped: int = 0  # active features left out (by a cap), written through the error nodes
    target: str = "demeaned"  # what a logit target is (TARGETS)
    writes: list = field(default_factory=list)  # per block (_by_position): what its features write, by position

    @property
    def n_sources(self) -> int:
        return len(self.feats) + (len(self.acts) + 1) * len(self.ids)  # features, errors, token embeddings


def _influence(model, transcoders, ids, cache, acts, errors, tokens, probs, target="demeaned") -> torch.Tensor:
    """(F,) per active feature (``_targets``' order) |activation x d(output)/d(activation)|, the output the explained
    logit targets weighted by their probabilities, the derivative through the later features too (each linear in its
    pre-activation, its active set frozen): circuit-tracer's influence ranking to first order, in one backward pass."""
    leaves, _, logits = _replacement(model, ids, transcoders, cache, [torch.zeros_like(a) for a in acts], errors, 1,
                                     True, live={l: (a > 0).to(a.dtype) for l, a in enumerate(acts)})
    row = logits[0, -1] - (logits[0, -1].mean() if target == "demeaned" else 0)  # (m,) the logit targets' row
    out = (row[list(tokens)] * torch.as_tensor(np.asarray(probs), dtype=logits.dtype)).sum()
    grads = torch.autograd.grad(out, [leaves[f"w{l}"] for l in range(len(acts))], allow_unused=True)
    # d(out)/d(activation) = W_dec (the MLP output's gradient): (n, d) x (d, F) -> (n, F); [a > 0] reads row-major
    # (position, feature): the order of _targets' features
    return torch.cat([(a * (0 if g is None else g[0] @ transcoders[l].W_dec.T)).abs()[a > 0]
                      for l, (a, g) in enumerate(zip(acts, grads))]).detach()


def _run(model, transcoders, ids, max_logits=MAX_LOGITS, logit_mass=LOGIT_MASS, logit_tokens=None, cap=None,
         keep=None, target="demeaned"):
    """The graph's run; ``cap``: keep at most that many features, those of most influence (``_influence``);
    ``keep``: exactly these (layer, position, feature) triples (a capped graph's, to split its edges again);
    ``target``: what a logit target is (TARGETS)."""
    _check_target(target)
    logit_row, cache, acts, errors = _record(model, ids, transcoders)
    feats, tokens, probs = _targets(acts, logit_row, max_logits, logit_mass)
    if logit_tokens is not None:
        tokens = list(logit_tokens)
        probs = torch.softmax(logit_row.double(), -1)[tokens].numpy()
    if keep is None and cap is not None and len(feats) > cap:
        with torch.enable_grad():
            score = _influence(model, transcoders, ids, cache, acts, errors, tokens, probs, target)
        keep = [feats[int(i)] for i in torch.argsort(score, descending=True, stable=True)[:max(0, int(cap))]]
    active = len(feats)
    if keep is not None:  # the features left out write through their block's error node: the run is unchanged
        kept = {tuple(int(v) for v in k) for k in keep}
        feats = [f for f in feats if f in kept]
        fa = np.array(feats, dtype=np.int64).reshape(-1, 3)  # (F, 3): (layer, position, latent) rows
        masks = [torch.zeros_like(a).index_put_((torch.as_tensor(fa[fa[:, 0] == l, 1]),
                                                 torch.as_tensor(fa[fa[:, 0] == l, 2])), torch.tensor(1.0))
                 for l, a in enumerate(acts)]
        errors = [e + (a * (1 - m)) @ transcoders[l].W_dec for l, (a, e, m) in enumerate(zip(acts, errors, masks))]
        acts = [a * m for a, m in zip(acts, masks)]
    fa = np.array(feats, dtype=np.int64).reshape(-1, 3)  # (F, 3): (layer, position, latent); (0, 3) if none
    by_layer = {l: (np.flatnonzero(fa[:, 0] == l), torch.as_tensor(fa[fa[:, 0] == l, 1]),
                    torch.as_tensor(fa[fa[:, 0] == l, 2])) for l in range(len(acts))}
    # (k_l,) activations x (k_l, d) decoder rows: what each kept feature writes into its block's MLP output
    writes = [_by_position(p, acts[l][p, f][:, None] * transcoders[l].W_dec[f], len(ids))
              for l, (_, p, f) in by_layer.items()]
    return (_Run(ids, cache, acts, errors, feats, tokens, by_layer, active - len(feats), target, writes), logit_row,
            probs)


def _by_position(pos: torch.Tensor, writes: torch.Tensor, n: int):
    """((n, d, k_max) the writes (k, d) of the features at each position side by side, zero-padded; (k,) each
    feature's slot there): at each position one small product reads all its features' edges (``_source_row``)."""
    counts = torch.bincount(pos, minlength=n)  # (n,) features per position
    order = torch.argsort(pos, stable=True)
    slot = torch.empty_like(pos)
    slot[order] = torch.arange(len(pos)) - (torch.cumsum(counts, 0) - counts)[pos[order]]  # rank within its position
    padded = writes.new_zeros(n, int(counts.max()) if len(pos) else 0, writes.shape[1])  # (n, k_max, d)
    padded[pos, slot] = writes
    return padded.transpose(1, 2).contiguous(), slot  # (n, k_max, d) -> (n, d, k_max)


def _source_row(run: _Run, grads: dict, leaves: dict) -> np.ndarray:
    """(B, S): every source's edge into each of the batch's B targets, in node order: the gradient at the MLP output
    its block writes into (at its position) dotted with what it writes there (a feature: activation x decoder row; an
    error node: its vector); a token embedding's, the gradient at ``hook_embed`` dotted with the embedding."""
    n, L, F_n = len(run.ids), len(run.acts), len(run.feats)
    B = leaves["tok"].shape[0]
    out = np.zeros((B, run.n_sources))
    for l in range(L):
        idx, pos, _ = run.by_layer[l]  # node indices and positions of layer l's active features
        g = grads[f"w{l}"]  # (B, n, d)
        padded, slot = run.writes[l]  # (n, d, k_max), (k_l,)
        # (n, B, d) x (n, d, k_max) -> (n, B, k_max): at each position, the gradient . each of its features' writes;
        # then each feature's (B,) column, (k_l, B) -> (B, k_l)
        out[:, idx] = torch.bmm(g.transpose(0, 1), padded)[pos, :, slot].T.numpy()
        out[:, F_n + l * n: F_n + (l + 1) * n] = (g * run.errors[l]).sum(-1).numpy()  # (B, n, d) -> (B, n)
    at = F_n + L * n
    out[:, at: at + n] = (grads["tok"] * leaves["tok"]).sum(-1).numpy()  # (B, n, d) -> (B, n)
    return out


def _edges(model, transcoders, run: _Run, rows: list, batch: int = BATCH, gates=None, out=None, at=None):
    """(edges (R, S), inputs (R,), constants (R,)) of the targets ``rows`` ([("f", (l, p, f)) or ("logit", t)]).
    One forward pass of ``batch`` copies of the replacement run, its graph kept; then one backward pass per batch of
    targets, target i of a batch read in copy i (circuit-tracer's order of work: the forward is not repeated). The
    constants are measured on their own: the replacement run with every source set to zero (it is linear in them), so
    that edges + constants = input is a check of the edges, not a definition. ``out``: the array the edges are written
    into, target i's to row ``at[i]`` (default i)."""
    n = len(run.ids)
    edges = np.zeros((len(rows), run.n_sources)) if out is None else out
    at = np.arange(len(rows)) if at is None else np.asarray(at)
    inputs, constants = np.zeros(len(rows)), np.zeros(len(rows))
    zero = [torch.zeros_like(a) for a in run.acts], [torch.zeros_like(e) for e in run.errors]
    with torch.no_grad():
        _, mlp0, logits0 = _replacement(model, run.ids, transcoders, run.cache, *zero, 1, False,
                                        zero_embeddings=True, gates=gates)
        constants[:] = _target_values(rows, mlp0, logits0, [0] * len(rows), transcoders, n, run.target).numpy()
    B = max(1, min(batch, len(rows)))
    leaves, mlp_in, logits = _replacement(model, run.ids, transcoders, run.cache, run.acts, run.errors, B, True,
                                          gates=gates)
    names = list(leaves)
    for start in range(0, len(rows), B):
        chunk = rows[start:start + B]
        z = _target_values(chunk, mlp_in, logits, range(len(chunk)), transcoders, n, run.target)
        # the forward's graph is kept for the next batch, freed after the last
        grads = torch.autograd.grad(z.sum(), [leaves[k] for k in names], allow_unused=True,
                                    retain_graph=start + B < len(rows))
        # a leaf no target of this batch depends on (the last block's output, for targets in block 0) has none
        grads = {k: torch.zeros_like(leaves[k]) if v is None else v for k, v in zip(names, grads)}
        with torch.no_grad():
            edges[at[start:start + len(chunk)]] = _source_row(run, grads, leaves)[:len(chunk)]
            inputs[start:start + len(chunk)] = z.detach().numpy()
    return edges, inputs, constants


def attribution_graph(model, transcoders: dict[int, SAE], ids, max_logits: int = MAX_LOGITS,
                      logit_mass: float = LOGIT_MASS, batch: int = BATCH, logit_tokens: list[int] | None = None,
                      max_feature_nodes: int | None = None, target: str = "demeaned") -> Graph:
    """The attribution graph of ``model`` on ``ids`` with a transcoder for every block (``transcoders``: {layer: SAE}).
    ``logit_tokens``: the outputs to explain (default: the top ones covering ``logit_mass``, at most ``max_logits``);
    ``max_feature_nodes``: at most that many feature nodes, those of most influence on them (None: every one);
    ``target``: a logit node is the logit minus the mean logit over the vocabulary ("demeaned", circuit-tracer's), or
    the logit itself ("raw", ours)."""
    _check_target(target)
    ids = torch.as_tensor(ids, dtype=torch.long)
    L = model.config.n_layers
    if sorted(transcoders) != list(range(L)):
        raise ValueError(f"the graph needs a transcoder for every block (0 to {L - 1}); it has {sorted(transcoders)}")
    was = model.training
    model.eval()
    run, logit_row, probs = _run(model, transcoders, ids, max_logits, logit_mass, logit_tokens, cap=max_feature_nodes,
                                 target=target)
    F, S, N = len(run.feats), run.n_sources, run.n_sources + len(run.tokens)
    adjacency, inputs, constants = np.zeros((N, N)), np.zeros(N), np.zeros(N)
    # the features' rows, then the logits', in one pass of _edges (one forward): each written straight into its row
    # of the adjacency, not held twice
    rows = [("f", k) for k in run.feats] + [("logit", t) for t in run.tokens]
    targets = np.r_[np.arange(F), np.arange(S, N)]  # the rows' node indices
    _, inputs[targets], constants[targets] = _edges(model, transcoders, run, rows, batch, out=adjacency[:, :S],
                                                    at=targets)
    model.train(was)
    # (F, 3) rows of (layer, position, latent)
    return Graph(ids=ids.tolist(), features=np.array(run.feats, dtype=np.int64).reshape(-1, 3),
                 activations=np.array([float(run.acts[l][p, f]) for l, p, f in run.feats]), n_layers=L,
                 logit_tokens=run.tokens, logit_probs=np.asarray(probs, dtype=float), adjacency=adjacency,
                 inputs=inputs, constants=constants, logits=logit_row.detach().numpy(), dropped=run.dropped,
                 target=target)


def _rows_of(g: Graph, targets) -> list:
    sl = g.slices()
    out = []
    for t in targets:
        if t < g.n_features:
            out.append(("f", tuple(int(v) for v in g.features[t])))
        elif t >= sl["logits"].start:
            out.append(("logit", g.logit_tokens[t - sl["logits"].start]))
        else:
            raise ValueError(f"node {t} is an error or an embedding: it has no incoming edges")
    return out


def head_split(model, transcoders: dict[int, SAE], g: Graph, targets) -> dict:
    """Each edge into ``targets`` (node indices) split by the attention heads it passes: {"direct": (R, N) the part
    along the residual stream alone, "L{l}H{h}": the part through that head alone (its single hop), "composed": the
    rest, through two heads in turn}; the parts of an edge add up to it. Exact, since the patterns are frozen: each
    part is the graph with every head but those switched off."""
    ids = torch.as_tensor(g.ids, dtype=torch.long)
    L, h = model.config.n_layers, model.config.n_heads
    run, _, _ = _run(model, transcoders, ids, logit_tokens=g.logit_tokens, keep=g.features.tolist(), target=g.target)
    rows, S = _rows_of(g, targets), run.n_sources

    def part(gates):
        return _edges(model, transcoders, run, rows, gates=gates)[0]

    off = {l: torch.zeros(h) for l in range(L)}
    direct = part(off)
    out, total = {"direct": direct}, direct.copy()
    for l in range(L):
        for k in range(h):
            gates = {ll: torch.zeros(h) for ll in range(L)}
            gates[l][k] = 1.0
            out[f"L{l + 1}H{k + 1}"] = part(gates) - direct
            total += out[f"L{l + 1}H{k + 1}"]
    out["composed"] = g.adjacency[list(targets), :S] - total
    return out


def qk_split(model, transcoders: dict[int, SAE], ids, layer: int, head: int, query: int, key: int,
             features=None) -> dict:
    """Why head ``head`` of block ``layer`` (counted from 0) scores key position ``key`` from query position
    ``query``: the score q . k / sqrt(d_head) written as sum over (query-side source s, key-side source t) of
    q_s . k_t / sqrt(d_head), plus the constant parts (q_0 . k_t, q_s . k_0, q_0 . k_0); the sources are the
    graph's (features of the blocks below, error nodes, token embeddings; ``features``: a capped graph's); the
    position embeddings are in the constant parts, as in the graph."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    if not (0 <= key <= query < len(ids)):
        raise ValueError("the key position must be at or before the query position, both inside the prompt")
    was = model.training
    model.eval()
    run, _, _ = _run(model, transcoders, ids, logit_tokens=[], keep=None if features is None else list(features))
    dh = model.config.d_head
    names = (f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.hook_k")
    sides = []
    for name, pos in zip(names, (query, key)):
        leaves, got, _ = _replacement(model, ids, transcoders, run.cache, run.acts, run.errors, dh, True,
                                      capture=names)
        vec = got[name][:, pos, head, :]  # (dh, dh): row b's component b is the target
        z = vec.diagonal()
        grads = dict(zip(leaves, torch.autograd.grad(z.sum(), list(leaves.values()), allow_unused=True)))
        grads = {k: torch.zeros_like(leaves[k]) if v is None else v for k, v in grads.items()}
        with torch.no_grad():
            zero = [torch.zeros_like(a) for a in run.acts], [torch.zeros_like(e) for e in run.errors]
            _, got0, _ = _replacement(model, ids, transcoders, run.cache, *zero, 1, False, zero_embeddings=True,
                                      capture=names)
            # (dh, S) -> (S, dh): a source per row; the constant (dh,); z (dh,)
            sides.append((_source_row(run, grads, leaves).T, got0[name][0, pos, head, :].numpy(), z.detach().numpy()))
    (Q, q0, q), (K, k0, k) = sides  # Q, K: (S, dh) each source's part of the query and the key
    scale = 1 / math.sqrt(dh)
    model.train(was)
    # (S, dh) @ (dh, S) -> (S, S): source i on the query side, j on the key side
    return {"terms": Q @ K.T * scale, "query_const": q0 @ K.T * scale, "key_const": Q @ k0 * scale,
            "const": float(q0 @ k0 * scale), "score": float(q @ k * scale), "sources": run.feats, "n_pos": len(ids),
            "n_layers": model.config.n_layers}
