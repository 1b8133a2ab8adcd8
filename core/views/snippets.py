"""Copy as code: for Attention, Cause and effect, Features and Attribution graph, a short Python program that computes
the view's main numbers with the project's own code (``core``), for the model and settings on the screen.

Pure strings, built from what the page holds. Every value a user chose (a prompt, a folder's path, a site) enters the
program through ``repr``, never pasted raw: a prompt with quotes, backslashes, newlines or triple quotes stays one
string literal, and no text can end it early or add a line of code. Comments carry no user text. The program runs from
the repository's root (``python snippet.py`` there), where ``core`` imports and a model folder inside the repository is
named relative to it."""
from __future__ import annotations

from pathlib import Path

from core.nn.bpe import TokenizerFailed
from core.serve.paths import REPO_ROOT

UNSAVED_SAE = ("This SAE was trained in this session and lives only in its memory, so no program can load it: save "
               "it beside your model (section 1) to copy this view as code.")
EDGES = 8  # the strongest edges into the inspected node (the page's table shows as many)


def model_folder(path) -> str:
    """A model folder as the program names it: relative to the repository's root when inside it, else as it is."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(Path(path).resolve())


def _head(path, step: int | None, imports: list[str]) -> list[str]:
    """The program's start: where to run it, its imports, the model loaded as the page has it (a training step's
    snapshot when the page shows one)."""
    at = "" if step is None else f", step={int(step)!r}"
    return ["# Run from the Transformer Explorer folder (the repository's root), where `core` imports.",
            "from core.nn.checkpoint import load_checkpoint", "from core.nn.tokenizer import Prompt", *imports, "",
            f"model, tok = load_checkpoint({model_folder(path)!r}{at})"]


def _prompt(name: str, tok, text: str, ids) -> list[str]:
    """Lines that set ``name`` (the prompt's text) and ``name_ids`` (the token ids the page ran on): the text
    tokenized as the page does it (core.nn.tokenizer.Prompt, cut to its last tokens when the page reads only those),
    or the page's ids written out where that text does not give them back (ids a button wrote: a BPE may merge them
    differently once they are text)."""
    ids = [int(i) for i in ids]
    try:  # what Prompt(tok, text, n_ctx).ids holds, before its cut to the model's context (ids already fit in it)
        encoded = tok.encode(text, errors="drop")
    except TokenizerFailed:  # the page's ids are written out below
        encoded = None
    lines = [f"{name} = {text!r}"]
    if encoded == ids:
        return lines + [f"{name}_ids = Prompt(tok, {name}, model.config.n_ctx).ids"]
    if ids and encoded and encoded[-len(ids):] == ids:  # the page reads the last tokens only
        return lines + [f"{name}_ids = Prompt(tok, {name}, model.config.n_ctx).ids[-{len(ids)}:]  # the page's last "
                        f"{len(ids)} tokens"]
    return lines + ["# the page's own token ids: this text, tokenized again, would give others",
                    f"{name}_ids = {ids!r}"]


def _program(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def attention(path, step, tok, text: str, ids, layer: int, head: int, query: int | None = None) -> str:
    """One head's attention weights for one query (the page's: ``query``, counted from 0; the last position when
    None or outside the prompt), key by key."""
    n = len(ids)
    query = n - 1 if query is None or not 0 <= int(query) < n else int(query)
    return _program(_head(path, step, ["from core.analysis.attention import head_attention"]) + _prompt(
        "prompt", tok, text, ids) + [
        "tokens = tok.visible_tokens(prompt_ids)",
        f"layer, head, query = {int(layer)!r}, {int(head)!r}, {query!r}  # counted from 0",
        "scores, pattern = head_attention(model, prompt_ids, layer, head)  # (n, n) each: rows queries, columns keys",
        'print(f"layer {layer + 1}, head {head + 1}: the weights of query {query + 1} {tokens[query]!r}")',
        "for key in range(query + 1):",
        '    print(f"key {key + 1} {tokens[key]!r}: {pattern[query, key]:.8f}")'])


def cause_effect(path, step, tok, clean: str, clean_ids, corrupt: str, corrupt_ids, metric, what: str = "z") -> str:
    """The measure M on both prompts and the heads table: the share of the clean answer one head's ``what`` (z, q,
    k, v or pattern), put back from the clean run, restores."""
    wrong = "None" if metric.wrong is None else repr(int(metric.wrong))
    return _program(_head(path, step, ["from core.analysis.patching import Metric, patch_heads"]) + _prompt(
        "clean", tok, clean, clean_ids) + _prompt(
        "corrupt", tok, corrupt, corrupt_ids) + [
        "# M at the last position: the answer's logit minus the wrong one's (wrong None: the answer's log-probability)",
        f"metric = Metric(answer={int(metric.answer)!r}, wrong={wrong})",
        'print(f"M on the clean prompt: {metric(model, clean_ids):.8f}")',
        'print(f"M on the corrupted prompt: {metric(model, corrupt_ids):.8f}")',
        f"table = patch_heads(model, clean_ids, corrupt_ids, metric, what={what!r})  # (layers, heads): share restored",
        "for layer, row in enumerate(table):",
        '    print(f"layer {layer + 1}: " + "  ".join(f"{v:+.8f}" for v in row))'])


def features(path, step, tok, text: str, ids, unit: int, layer: int | None = None,
             site: str | None = None) -> str | None:
    """One unit on the prompt: its activation at every position, largest first, and (with two tokens or more) the
    prompt's mean loss with it switched off. An MLP neuron of block ``layer`` when that is given, else a latent of
    the SAE saved beside the model at ``site``; None when neither (an SAE trained in this session is not on disk)."""
    if layer is None and site is None:
        return None
    if layer is not None:
        imports = ["from core.features.units import neuron_units"]
        units = [f"units = neuron_units(model, {int(layer)!r})  # block counted from 0"]
    else:
        imports = ["from core.analysis.sae import load_sae, sae_folder",
                   "from core.features.units import feature_units"]
        units = [f"sae = load_sae(sae_folder({model_folder(path)!r}, {str(site)!r}))",
                 "units = feature_units(model, sae)"]
    lines = _head(path, step, imports + ["from core.features.browse import site_acts, unit_off_losses",
                                         "import torch"]) + _prompt("prompt", tok, text, ids) + units
    lines += [f"unit = {int(unit)!r}", "tokens = tok.visible_tokens(prompt_ids)",
              "acts = site_acts(model, units, torch.tensor([prompt_ids]))[0, :, unit]  # (n,): one a position",
              'print(f"fires at {int((acts > 0).sum())} of {len(acts)} positions; the largest:")',
              "for p in acts.argsort(descending=True)[:10].tolist():",
              "    if acts[p] > 0:",
              '        print(f"position {p + 1} {tokens[p]!r}: {float(acts[p]):.8f}")']
    if len(ids) >= 2:
        lines += ["off = unit_off_losses(model, units, unit, prompt_ids)  # each next token's loss, clean and off",
                  'print(f"mean loss clean: {off.clean.mean():.8f}, unit off: {off.off.mean():.8f}")']
    return _program(lines)


def attribution(path, step, tok, text: str, ids, logit_tokens, cap: int | None, node_share: float, g,
                node: int) -> str:
    """The graph's replacement and completeness scores, what pruning at ``node_share`` keeps, and the strongest
    edges into ``node`` (a node of ``g``, the page's graph: named here by what it is, a feature's (layer, position,
    latent) or an output's token, so the program finds it in its own graph)."""
    kind = next(k for k, sl in g.slices().items() if node in range(g.n_nodes)[sl])
    if kind == "features":
        find = [f"target = [tuple(f) for f in g.features.tolist()].index({tuple(int(v) for v in g.features[node])!r})"
                "  # (layer, position, latent), counted from 0"]
    elif kind == "logits":
        t = int(g.logit_tokens[node - g.slices()["logits"].start])
        find = [f'target = g.slices()["logits"].start + g.logit_tokens.index({t!r})  # the output token\'s node']
    else:  # errors and embeddings have no inputs: the page inspects only features and outputs
        find = [f"target = {int(node)!r}"]
    tokens = None if logit_tokens is None else [int(t) for t in logit_tokens]
    cap = None if cap is None else int(cap)
    return _program(_head(path, step, [
        "from core.analysis.attribution import attribution_graph",
        "from core.analysis.attribution_prune import prune, scores",
        "from core.analysis.transcoders import load_transcoders", "import numpy as np"]) + _prompt(
        "prompt", tok, text, ids) + [
        f"tcs = load_transcoders({model_folder(path)!r}, model.config)  # one transcoder a block, beside the model",
        f"g = attribution_graph(model, tcs, prompt_ids, logit_tokens={tokens!r}, max_feature_nodes={cap!r})",
        "replacement, completeness = scores(g)",
        'print(f"replacement score: {replacement:.8f}")',
        'print(f"completeness score: {completeness:.8f}")',
        f"pr = prune(g, {float(node_share)!r})",
        'print(f"features kept: {int(pr.node_mask[:g.n_features].sum())}, edges kept: {int(pr.edge_mask.sum())}")',
        *find,
        "",
        "",
        "def name(i):  # a node in words, counted from 1 as the page counts",
        "    kind = next(k for k, sl in g.slices().items() if i in range(g.n_nodes)[sl])",
        "    at = i - g.slices()[kind].start",
        '    if kind == "features":',
        "        l, p, f = g.features[at].tolist()",
        '        return f"feature L{l + 1} #{f} at position {p + 1}"',
        '    if kind == "errors":',
        '        return f"error L{at // g.n_pos + 1} at position {at % g.n_pos + 1}"',
        '    if kind == "logits":',
        '        return f"logit {tok.visible_tokens([g.logit_tokens[at]])[0]!r}"',
        '    if kind == "tokens":',
        '        return f"token {tok.visible_tokens([g.ids[at]])[0]!r} at position {at + 1}"',
        '    return f"position embedding {at + 1}"  # where the graph keeps it apart from the token\'s',
        "",
        "",
        "row = g.adjacency[target]  # every edge into it, one per source node",
        'print(f"strongest edges into {name(target)}:")',
        f"for s in np.argsort(-np.abs(row))[:{EDGES}]:",
        "    if row[s] != 0:",
        '        print(f"from {name(s)}: {row[s]:+.8f}")'])

