"""A forward pass of the lecture's block written out again here, from the weights alone (not core's ``_forward`` nor
the model's modules), with a hook at every activation a patch replaces: the tests of core.analysis.patching compare
its patches against this one. Biases and GPT-2's GELU included."""
import math

import torch
import torch.nn.functional as F


def _act(config, h):
    if config.activation == "relu":
        return torch.relu(h)
    return F.gelu(h, approximate="tanh" if config.activation == "gelu_tanh" else "none")


def _lin(x, lin):
    """x @ W^T + b, the bias only where the layer has one."""
    y = x @ lin.weight.T
    return y if lin.bias is None else y + lin.bias


@torch.no_grad()
def hand_forward(model, ids, edit=None):
    """(logits (n, m) of one prompt, {(kind, layer): activation}). ``edit(kind, layer, t)`` returns what the run
    continues with, for kind "resid" (the stream entering block l, (n, d); layer L: leaving the last), "q", "k",
    "v", "z" ((h, n, d_h) each), "pattern" ((h, n, n)), "attn_out", "mlp_out" ((n, d))."""
    c = model.config
    n, d, h, dh = len(ids), c.d_model, c.n_heads, c.d_head
    acts = {}

    def at(kind, layer, t):
        t = edit(kind, layer, t) if edit is not None else t
        acts[(kind, layer)] = t
        return t

    idx = torch.as_tensor(ids)
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:n]
    for l, block in enumerate(model.blocks):
        x = at("resid", l, x)
        u = F.layer_norm(x, (d,), block.ln1.weight, block.ln1.bias, block.ln1.eps)
        qkv = _lin(u, block.attn.qkv)                                   # (n, 3d)
        q, k, v = (at(kind, l, qkv[:, i * d:(i + 1) * d].reshape(n, h, dh).permute(1, 0, 2))
                   for i, kind in enumerate("qkv"))
        s = q @ k.transpose(1, 2) / math.sqrt(dh)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        a = at("pattern", l, torch.softmax(s, dim=-1))
        z = at("z", l, a @ v)                                           # (h, n, d_h)
        x = x + at("attn_out", l, _lin(z.permute(1, 0, 2).reshape(n, d), block.attn.out))
        u = F.layer_norm(x, (d,), block.ln2.weight, block.ln2.bias, block.ln2.eps)
        x = x + at("mlp_out", l, _lin(_act(c, _lin(u, block.mlp.w1)), block.mlp.w2))
    x = at("resid", c.n_layers, x)
    return _lin(F.layer_norm(x, (d,), model.ln_f.weight, model.ln_f.bias, model.ln_f.eps), model.head), acts


def logit_diff(logits, answer, wrong):
    return float(logits[-1, answer] - logits[-1, wrong])


def replace_head(kind, layer, head, clean, position=None):
    """An ``edit`` putting head ``head``'s ``kind`` at ``layer`` back from ``clean`` (hand_forward's acts of the
    clean run): everywhere, or at one ``position`` (the query row for q, z and pattern, the key for k and v)."""
    def edit(k, l, t):
        if (k, l) != (kind, layer):
            return t
        t = t.clone()
        if position is None:
            t[head] = clean[(kind, layer)][head]
        else:
            t[head, position] = clean[(kind, layer)][head, position]
        return t
    return edit


def edge_path(model, clean, corrupt, sender, receivers, via):
    """The edge intervention path patching stands for, written out: the sender head's clean-minus-corrupted write
    (its z through its columns of W_O) added to each receiver's input stream alone, that receiver's ``via`` (q, k
    or v) computed from it, everything downstream recomputed. Returns the patched run's logits."""
    _, a_clean = hand_forward(model, clean)
    _, a_corr = hand_forward(model, corrupt)
    ls, hs = sender
    c = model.config
    d, dh = c.d_model, c.d_head
    w_o = model.blocks[ls].attn.out.weight[:, hs * dh:(hs + 1) * dh]    # (d, d_h): the sender's columns of W_O
    delta = (a_clean[("z", ls)][hs] - a_corr[("z", ls)][hs]) @ w_o.T     # (n, d); W_O's bias cancels
    new = {}
    for lr, hr in receivers:
        block = model.blocks[lr]
        u = F.layer_norm(a_corr[("resid", lr)] + delta, (d,), block.ln1.weight, block.ln1.bias, block.ln1.eps)
        i = "qkv".index(via)
        w = block.attn.qkv.weight[i * d + hr * dh: i * d + (hr + 1) * dh]   # (d_h, d)
        b = block.attn.qkv.bias
        new[(lr, hr)] = u @ w.T + (0 if b is None else b[i * d + hr * dh: i * d + (hr + 1) * dh])

    def edit(kind, layer, t):
        heads = [hr for (lr, hr) in new if lr == layer]
        if kind != via or not heads:
            return t
        t = t.clone()
        for hr in heads:
            t[hr] = new[(layer, hr)]
        return t
    return hand_forward(model, corrupt, edit)[0]
