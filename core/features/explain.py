"""What a unit is, in words, and how far to believe it: explanations without a language model (issue 58).

A unit (an SAE latent, a transcoder feature, an MLP neuron) is explained by a **rule** over the context, searched in
a small grammar on held-out text, and the rule is **scored** on other held-out text the search never saw.

Rules are JSON, in the grammar of core.features.rules, and ``matches(rule, ids, tokenizer)`` applies one to any
text (one bool per position).

**Search** (``explain``): the held-out windows alternate between a search split and a scoring split. On the search
split every atomic rule's detection score is computed for every unit at once (one bincount of the firing entries
per family of rules that puts a position in one category: token ids, endings, positions; one per other rule), so
no (positions x units) table is ever multiplied; the token families
(current, previous, two back) also give each unit its best token set (tokens in order of gain, each kept while it adds
MIN_TOKEN_GAIN); then the best conjunction of two of its TOP_PAIRS best rules is kept when it beats the best single
rule by CONJ_GAIN. "Best" is by ``objective``: the detection score, with a little weight on precision (balanced
accuracy hardly tells "'u'" from "'u' after 'o'" for a rare unit) and a little against long token lists.

**Scores** (Paulo et al. 2024, "Automatically interpreting millions of features in LLMs"), on the scoring split. A
context is a position with the text before it; the unit fires there when its activation is > 0.

    detection       balanced accuracy = (TPR + TNR) / 2, where TPR is the mean, over the unit's QUANTILES activation
                    quantiles (its firing positions sorted by activation, cut as np.array_split cuts them; the empty
                    ones of a unit that fires fewer than QUANTILES times left out), of the share of that
                    part the rule matches, and TNR the share of the positions where it does not fire that the rule
                    does not match: the expected score of drawing equally many firing contexts from every quantile and
                    as many non-firing contexts at random, computed exactly (no sampling noise)
    fuzz_precision  on the unit's firing contexts (the CONTEXT-token pieces of the windows that hold a firing
                    position): of the positions the rule matches, the share where the unit fires
    fuzz_recall     of the positions where the unit fires, the share the rule matches
    control         the detection score, for this unit, of the rule found for one other unit: v drawn uniformly from
                    the other units that have a rule, with numpy's default_rng(seed + unit)

A unit whose detection is not above max(control, 0.5) by MARGIN keeps its rule and scores but its words are
"unexplained", never a made-up label; one that fires fewer than MIN_FIRES times in either split cannot be scored:
rule null, words "unexplained", detection and control 0.5 (chance), fuzzing 0.

Stored beside an SAE or transcoder as ``explanations.json`` (a list of {"unit", "rule", "words", "detection",
"fuzz_precision", "fuzz_recall", "control"}), written and read back, checked, by core.features.explanations.

    python -m core.features.explain FOLDER [--overwrite]    (an sae/<site> or transcoders/layer-L folder)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from core.features.explanations import FILE, summary, write_explanations
# matches: the contract names it here too (core.features.explain.matches), beside the scorer
from core.features.rules import CLASSES, PAIRS, POSITIONS, UNEXPLAINED, Context, key, matches, words  # noqa: F401

QUANTILES = 10          # activation quantiles the firing contexts are drawn across
CONTEXT = 32            # tokens of a fuzzing context (Paulo et al. show 32-token contexts)
MARGIN = 0.1            # detection must beat max(control, chance) by this to count as explained
MIN_FIRES = 3           # fewer firing positions in a split: the unit cannot be scored
MAX_SET = 8             # tokens a token-set rule lists at most (a longer list is not words a learner reads)
MIN_TOKEN_GAIN = 0.01   # a token joins a set when it adds this much to TPR - FPR (0.005 detection)
TOP_PAIRS = 6           # a unit's best rules whose pairs are tried as conjunctions
CONJ_GAIN = 0.005       # a conjunction is kept when it beats the best single rule's objective by this much
PRECISION_WEIGHT = 0.05  # the search's objective: detection + this x precision (see ``objective``)
SIZE_COST = 0.001       # and less this per token listed beyond one (a class beats a list of its members)
MAX_NGRAMS = 1500       # "after" candidates: the commonest 2- and 3-character endings of the text before a token
MIN_NGRAM = 5           # an ending seen fewer times in the search split is no candidate
MAX_WINDOWS = 512       # held-out windows read: half search, half scoring
MAX_ACT_BYTES = 256 * 2**20  # and fewer when the units' activations on them would take more (float32)
MAX_CELLS = 2**24       # numbers in one (rules x units) table of the search: units are searched in chunks


# ------------------------------------------------------------------ the units' firing on one split
class Split:
    """One split's windows and the units' activations on them: where each unit fires (``pos[u]``, sorted by
    activation) and each firing position's weight (1 / (quantiles x positions in its quantile), so that TPR is a
    weighted count); and the same as flat entries (``ent_pos``, ``ent_unit``, ``ent_w``) for sums over every unit."""

    def __init__(self, ids, acts, tokenizer):
        W, T = ids.shape
        self.ctx = Context(ids, tokenizer)
        self.n = W * T
        a = np.asarray(acts, dtype=np.float32).reshape(self.n, -1)  # (W, T, U) -> (N, U)
        self.U = a.shape[1]
        self.pos, self.weight = [], []
        for u in range(self.U):
            p = np.flatnonzero(a[:, u] > 0)
            p = p[np.argsort(a[p, u], kind="stable")]  # by activation, then cut in QUANTILES parts as
            sizes = len(p) // QUANTILES + (np.arange(QUANTILES) < len(p) % QUANTILES)  # np.array_split cuts
            self.pos.append(p)
            # each position's weight: 1 / (non-empty parts x its part's size)
            self.weight.append(np.repeat(1.0 / (max(np.count_nonzero(sizes), 1) * np.maximum(sizes, 1)), sizes))
        self.n_fire = np.array([len(p) for p in self.pos])
        self.ent_pos = np.concatenate(self.pos) if self.U else np.zeros(0, dtype=np.int64)
        self.ent_unit = np.repeat(np.arange(self.U), self.n_fire)
        self.ent_w = np.concatenate(self.weight) if self.U else np.zeros(0)
        # the CONTEXT-token piece of its window each position is in (a fuzzing context)
        per = -(-T // CONTEXT)
        self.piece = ((np.arange(T) // CONTEXT)[None, :] + (np.arange(W) * per)[:, None]).reshape(-1)
        self.n_pieces = W * per

    def flat(self, rule) -> np.ndarray:
        return self.ctx.mask(rule).reshape(-1)

    def detection(self, m: np.ndarray, u: int) -> float:
        p = self.pos[u]
        tpr = float(self.weight[u] @ m[p])
        fp = int(m.sum()) - int(m[p].sum())
        return 0.5 * (tpr + 1.0 - fp / max(self.n - len(p), 1))

    def fuzz(self, m: np.ndarray, u: int) -> tuple[float, float]:
        p = self.pos[u]
        hit = int(m[p].sum())
        firing_piece = np.zeros(self.n_pieces, dtype=bool)
        firing_piece[self.piece[p]] = True
        marked = int((m & firing_piece[self.piece]).sum())
        return (hit / marked if marked else 0.0), (hit / len(p) if len(p) else 0.0)


# ------------------------------------------------------------------ the search
def _atoms(split: Split, units: range) -> tuple[list, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Every atomic rule on the search split with, per unit, its weighted firing count (TPR), its firing count and
    its count of positions: (rules, tpw (R, U), tpc (R, U), cnt (R,), {offset: rows of that token family}). A family
    of rules that puts each position in at most one category (tokens, endings, positions) is summed over the firing
    entries with one bincount; the other rules one by one. Only ``units`` (a range): their columns, 0 for the first."""
    ctx, U = split.ctx, len(units)
    rules, tpw, tpc, cnt, families = [], [], [], [], {}
    mine = (split.ent_unit >= units.start) & (split.ent_unit < units.stop)
    ent_pos, ent_unit, ent_w = split.ent_pos[mine], split.ent_unit[mine] - units.start, split.ent_w[mine]

    def family(cats: np.ndarray, labels: list, make):
        K = len(labels)
        c = cats[ent_pos]
        ok = c >= 0
        flat = c[ok] * U + ent_unit[ok]  # (category, unit) of each firing entry, as one index
        tpw.append(np.bincount(flat, ent_w[ok], minlength=K * U).reshape(K, U))
        tpc.append(np.bincount(flat, minlength=K * U).reshape(K, U).astype(np.float64))
        cnt.append(np.bincount(cats[cats >= 0], minlength=K).astype(np.float64))
        start = len(rules)
        rules.extend(make(lab) for lab in labels)
        return list(range(start, len(rules)))

    pieces = {i: s for s, ids in ctx.by_text.items() for i in ids}
    for off in (0, 1, 2):
        ids = ctx.back(off).reshape(-1)
        seen = np.unique(ids[ids >= 0])
        remap = np.full(ctx.V + 1, -1)  # id -1 (no token) stays -1
        remap[seen] = np.arange(len(seen))
        texts = [pieces[int(i)] for i in seen]
        families[off] = family(remap[ids], texts, (lambda t: {"kind": "token_in", "tokens": [t]}) if off == 0 else
                               (lambda t, o=off: {"kind": "prev", "offset": o, "tokens": [t]}))
    for length in (2, 3):
        ends = ctx.ends[length].reshape(-1)
        uniq, inv, counts = np.unique(ends, return_inverse=True, return_counts=True)
        keep = [j for j in np.argsort(-counts, kind="stable")
                if counts[j] >= MIN_NGRAM and len(uniq[j]) == length][:MAX_NGRAMS // 2]
        remap = np.full(len(uniq), -1)
        remap[keep] = np.arange(len(keep))
        family(remap[inv.reshape(-1)], [str(uniq[j]) for j in keep], lambda t: {"kind": "after", "ngram": t})
    flat_pos = ctx.position.reshape(-1)
    pos = np.full(split.n, -1)
    for j, (lo, hi) in enumerate(POSITIONS):
        pos[(flat_pos >= lo) & (flat_pos < hi)] = j
    family(pos, list(POSITIONS), lambda p: {"kind": "position", "lo": p[0], "hi": p[1]})
    binary = [{"kind": "class", "class": c, "offset": o} for o in (0, 1) for c in CLASSES]
    binary += [{"kind": "line_start"}, {"kind": "word_start"}]
    binary += [{"kind": "inside", "pair": p} for p in PAIRS]
    for r in binary:
        m = split.flat(r)
        hit = m[ent_pos]
        tpw.append(np.bincount(ent_unit[hit], ent_w[hit], minlength=U)[None])
        tpc.append(np.bincount(ent_unit[hit], minlength=U)[None].astype(np.float64))
        cnt.append(np.array([m.sum()], dtype=np.float64))
        rules.append(r)
    return rules, np.concatenate(tpw), np.concatenate(tpc), np.concatenate(cnt), families


def _search(split: Split, progress=None) -> list:
    """The best rule of each unit on the search split (None for a unit that fires fewer than MIN_FIRES times), by
    ``objective``. Units go in chunks whose (rules x units) tables hold at most MAX_CELLS numbers each."""
    out, pair_counts = [], {}
    chunk = max(1, MAX_CELLS // (3 * split.ctx.V + MAX_NGRAMS + 32))
    for u0 in range(0, split.U, chunk):
        out += _search_units(split, range(u0, min(split.U, u0 + chunk)), pair_counts)
        if progress is not None:
            progress(len(out), split.U)
    return out


def _search_units(split: Split, units: range, pair_counts: dict) -> list:
    rules, tpw, tpc, cnt, families = _atoms(split, units)
    n_neg = np.maximum(split.n - split.n_fire[units.start:units.stop], 1)
    gain = tpw - (cnt[:, None] - tpc) / n_neg[None, :]  # (R, U): TPR - FPR = 2 x detection - 1
    token_rows = {off: np.array(rows) for off, rows in families.items()}
    single = np.ones(len(rules), dtype=bool)
    for rows in token_rows.values():
        single[rows] = False  # the token families enter through their sets
    other = np.flatnonzero(single)
    out = []
    for c, u in enumerate(units):  # c: the unit's column in the tables
        if split.n_fire[u] < MIN_FIRES:
            out.append(None)
            continue
        cands = []  # (objective, rule)
        for off, rows in token_rows.items():
            g = gain[rows, c]
            top = np.argsort(-g, kind="stable")[:MAX_SET]
            k = 1 + int(np.cumprod(g[top[1:]] >= MIN_TOKEN_GAIN).sum())
            toks = [rules[rows[j]]["tokens"][0] for j in top[:k]]
            rule = {"kind": "token_in", "tokens": toks} if off == 0 else {"kind": "prev", "offset": off,
                                                                          "tokens": toks}
            chosen = rows[top[:k]]
            cands.append((objective(g[top[:k]].sum(), tpc[chosen, c].sum(), cnt[chosen].sum(), k), rule))
        g = gain[other, c]
        for j in np.argsort(-g, kind="stable")[:TOP_PAIRS]:
            r = other[j]
            cands.append((objective(g[j], tpc[r, c], cnt[r], 1), rules[r]))
        cands.sort(key=lambda c: -c[0])  # best first (a stable sort: the earlier of two equals)
        best_obj, best = cands[0]
        top = [c[1] for c in cands[:TOP_PAIRS]]
        masks = [split.flat(r) for r in top]
        p, w = split.pos[u], split.weight[u]
        n_neg_u = max(split.n - len(p), 1)
        pair_obj, pair = -np.inf, None
        for i in range(len(top)):
            for j in range(i + 1, len(top)):
                pk = (key(top[i]), key(top[j]))
                m_p = masks[i][p] & masks[j][p]
                if pk not in pair_counts:
                    pair_counts[pk] = int(np.count_nonzero(masks[i] & masks[j]))
                hit = int(m_p.sum())
                o = objective(float(w @ m_p) - (pair_counts[pk] - hit) / n_neg_u, hit, pair_counts[pk],
                              _size(top[i]) + _size(top[j]))
                if o > pair_obj:
                    pair_obj, pair = o, {"kind": "and", "rules": [top[i], top[j]]}
        out.append(pair if pair_obj > best_obj + CONJ_GAIN else best)
    return out


def _size(rule) -> int:
    return len(rule.get("tokens", [None]))


def objective(gain: float, hits: float, count: float, size: int) -> float:
    """What the search maximises: the detection score (0.5 + gain / 2, gain = TPR - FPR), plus PRECISION_WEIGHT
    times the rule's precision over the search split (hits / positions matched: balanced accuracy hardly sees
    precision when a unit is rare, the fuzzing score does), less SIZE_COST per token a rule lists beyond one."""
    return 0.5 + 0.5 * float(gain) + PRECISION_WEIGHT * float(hits) / max(float(count), 1.0) - SIZE_COST * (size - 1)


def explain(ids, acts, tokenizer, seed: int = 0, progress=None) -> list[dict]:
    """One explanation per unit: ``ids`` (W, T) token windows of held-out text and ``acts`` (W, T, U) the units'
    activations on them. Even windows are the search split, odd ones the scoring split (disjoint); each dict has
    FIELDS. ``progress(done, total)`` is called as the search goes."""
    ids = np.asarray(ids, dtype=np.int64)
    acts = acts.numpy() if isinstance(acts, torch.Tensor) else np.asarray(acts)
    if ids.ndim != 2 or acts.shape[:2] != ids.shape or acts.ndim != 3:
        raise ValueError(f"ids must be (W, T) and acts (W, T, units); got {ids.shape} and {acts.shape}")
    if len(ids) < 2:
        raise ValueError("explaining needs at least two windows: one to search on, one to score on")
    unit = getattr(tokenizer, "unit", "token")
    search = Split(ids[0::2], acts[0::2], tokenizer)
    score = Split(ids[1::2], acts[1::2], tokenizer)
    found = _search(search, progress)
    have = [u for u, r in enumerate(found) if r is not None]
    out = []
    for u, rule in enumerate(found):
        if rule is None or score.n_fire[u] < MIN_FIRES:
            out.append({"unit": u, "rule": None, "words": UNEXPLAINED, "detection": 0.5, "fuzz_precision": 0.0,
                        "fuzz_recall": 0.0, "control": 0.5})
            continue
        m = score.flat(rule)
        det = score.detection(m, u)
        prec, rec = score.fuzz(m, u)
        others = [v for v in have if v != u]
        control = 0.5
        if others:
            v = others[int(np.random.default_rng(seed + u).integers(len(others)))]
            control = score.detection(score.flat(found[v]), u)
        said = words(rule, unit) if det >= max(control, 0.5) + MARGIN else UNEXPLAINED
        out.append({"unit": u, "rule": rule, "words": said, "detection": round(det, 4),
                    "fuzz_precision": round(prec, 4), "fuzz_recall": round(rec, 4), "control": round(control, 4)})
    return out


# ------------------------------------------------------------------ units of a model
@torch.no_grad()
def unit_activations(model, windows: torch.Tensor, site: str, encode=None, batch: int = 64) -> np.ndarray:
    """(W, T, U) float32: ``encode`` (None: identity) of the activations at hook ``site`` (blocks.L.*) over
    ``windows`` (W, T), each batch run only up to block L."""
    from core.nn.hooks import HookRun

    layer = int(site.split(".")[1])
    out = []
    for i in range(0, len(windows), batch):
        run = HookRun(names=[site], record=True)
        model.blocks_from(model.embed(windows[i:i + batch], hooks=run), 0, layer + 1, hooks=run)
        a = run.store[site]
        out.append((encode(a) if encode is not None else a).float().numpy())
    return np.concatenate(out)


def held_windows(model, tokenizer, training, held=None, units: int = 1) -> torch.Tensor:
    """The held-out windows explanations read: at most MAX_WINDOWS of them, and no more than ``units``' float32
    activations on them fit in MAX_ACT_BYTES (at least two: one to search on, one to score on)."""
    if held is None:
        from core.data.held_out import model_held_out

        held = model_held_out(model, tokenizer, training)
    fit = MAX_ACT_BYTES // (4 * held.windows.shape[1] * max(units, 1))
    return held.windows[:max(2, min(MAX_WINDOWS, fit))]


def explain_sae(model, tokenizer, sae, training=None, held=None, reads: str | None = None, progress=None) -> list:
    """Explanations of every latent of ``sae`` (a transcoder: ``reads``, the MLP input it encodes)."""
    windows = held_windows(model, tokenizer, training, held, sae.config.d_sae)
    acts = unit_activations(model, windows, reads or sae.site, sae.encode)
    return explain(windows.numpy(), acts, tokenizer, progress=progress)


def explain_neurons(model, tokenizer, layer: int, training=None, held=None) -> list:
    """Explanations of every MLP neuron of block ``layer`` (its activation after the nonlinearity)."""
    windows = held_windows(model, tokenizer, training, held, model.config.d_ff)
    acts = unit_activations(model, windows, f"blocks.{layer}.mlp.hook_post")
    return explain(windows.numpy(), acts, tokenizer)



def explain_folder(folder, progress=None) -> list:
    """The explanations of the SAE or transcoder saved in ``folder`` (``<model>/sae/<site>`` or
    ``<model>/transcoders/layer-L``), its model read from two folders up."""
    from core.analysis.sae import load_sae, model_fingerprint
    from core.nn.checkpoint import load_checkpoint, read_config

    folder = Path(folder)
    model_folder = folder.parent.parent
    model, tokenizer = load_checkpoint(model_folder)
    _, _, training = read_config(model_folder)
    if folder.parent.name == "transcoders":
        from core.analysis.transcoders import reads

        layer = int(folder.name.removeprefix("layer-"))
        sae = load_sae(folder, trained_on=model_fingerprint(model), root=model_folder, what="transcoder")
        return explain_sae(model, tokenizer, sae, training, reads=reads(layer), progress=progress)
    sae = load_sae(folder, trained_on=model_fingerprint(model), root=model_folder)
    return explain_sae(model, tokenizer, sae, training, progress=progress)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.features.explain",
                                description="Explain every unit of a saved SAE or transcoder and write "
                                            f"{FILE} beside it.")
    p.add_argument("folder", help="an SAE's folder (MODEL/sae/SITE) or a transcoder's (MODEL/transcoders/layer-L)")
    p.add_argument("--overwrite", action="store_true", help=f"replace an {FILE} this command wrote before")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if (folder / FILE).exists() and not args.overwrite:
        print(f"{p.prog}: error: {folder / FILE} exists; --overwrite replaces it", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        out = explain_folder(folder)
        write_explanations(folder, out, replace=args.overwrite)
    except (OSError, ValueError) as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({**summary(out), "seconds": round(time.perf_counter() - t0, 1)}))
    print(f"saved {folder / FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
