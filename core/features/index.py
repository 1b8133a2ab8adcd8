"""The index of a set of units over held-out text: what every unit's cards and comparisons read.

Two streamed passes over the held-out windows, each running the model only up to the units' site:
  1. per unit its top activations (value, token), its largest activation and how often it fires (> 0);
  2. with the largest known, a histogram of its nonzero activations over (0, max] and a few tokens drawn at
     random from each lower band of activations (a quarter, a half, three quarters of the max), as sae_vis does.
Each chunk holds at most CHUNK_FLOATS activations: the (tokens x units) matrix is never formed whole, and the top-k
are merged chunk by chunk. Also kept: the clean loss of every held-out token (for the switch-off losses) and the final
LayerNorm's mean scale over them (the direct path's frozen sigma). A pure function of model, units, held.

Its memory and time grow with units x tokens and with the firing entries (a densely firing SAE of 16,384 latents took
462 s; one of 131,072 asked for 3.5 GB): ``index_cost`` estimates both from a few tokens before anything is built,
and the Features page refuses an index over its budget (TE_FEATURES_MEMORY, MAX_INDEX_SECONDS) in words."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.analysis.sites import Site, as_site
from core.data.held_out import HeldOut
from core.features.activations import site_batches
from core.serve.fmt import binary_bytes, duration_words
from core.serve.sizes import size_setting

CHUNK_FLOATS = 8 * 2**20   # activations one chunk holds (32 MB)
BINS = 32
BANDS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75))  # lower bands, as fractions of a unit's largest activation
PER_BAND = 5
MAX_ENTRIES = 6 * 2**20     # firing (token, unit) entries kept from the first pass (24 bytes each: 144 MB)
EVAL_TOKENS = 4096          # held-out tokens (the first windows) a unit is switched off on, for its card

MEMORY_ENV = "TE_FEATURES_MEMORY"
DEFAULT_INDEX_MEMORY = 2**30  # the shipped SAE's index peaks near 0.25 GiB
MAX_INDEX_SECONDS = 120       # the shipped SAE's takes 5-10 s on one thread, GPT-2 small's neurons about a minute
# Measured on one thread (bench.run --only features checks them): per (token, unit), the encoding and each chunk's
# top activations and counts; per firing entry, its bin and band sample (and, past MAX_ENTRIES, a second pass); the
# bytes an entry holds at the peak (kept, concatenated, then sorted for the samples); the model's passes
ELEMENT_S, ENTRY_S, ENTRY_BYTES, FLOPS = 1e-7, 1e-6, 200, 2.5e10
PROBE_TOKENS = 16             # tokens the firing rate is measured on before an estimate


@dataclass(eq=False)
class UnitIndex:
    kind: str
    site: str
    n: int
    n_ctx: int
    total: int                  # tokens indexed
    top_values: torch.Tensor    # (top, n) descending; -inf where a unit had fewer tokens
    top_rows: torch.Tensor      # (top, n) flat token index w * n_ctx + t, -1 for none
    band_rows: torch.Tensor     # (bands, PER_BAND, n) flat token index, -1 for none
    fires: torch.Tensor         # (n,) tokens where the unit is > 0
    vmax: torch.Tensor          # (n,) largest activation (0 for a unit that never fires)
    hist: torch.Tensor          # (n, BINS) counts of nonzero activations over (0, vmax]
    eval_windows: int           # the first held-out windows the losses are measured on
    clean_loss: torch.Tensor    # (W, n_ctx) the clean loss of each next token of every held-out window
    ln_scale: float | None      # mean ln_final.hook_scale over the held-out tokens (None: no final LayerNorm)
    held: HeldOut               # the windows it was built on (the cards' contexts come from them)
    radius: int = 8             # tokens a context shows each side of its token

    @property
    def density(self) -> torch.Tensor:
        return self.fires.double() / max(self.total, 1)

    def where(self, rows: torch.Tensor) -> list[tuple[int, int]]:
        """(window, position) of flat token indices (the -1s left out)."""
        return [(int(r) // self.n_ctx, int(r) % self.n_ctx) for r in rows if int(r) >= 0]


def _chunks(model, units, windows: torch.Tensor):
    """Yield (first flat row, (rows, n) unit activations) over ``windows``, each chunk within CHUNK_FLOATS."""
    T = windows.shape[1]
    batch = max(1, CHUNK_FLOATS // (T * units.n))
    start = 0
    for acts in site_batches(model, windows, units.site, batch):
        f = units.encode(acts).reshape(-1, units.n)  # (B, T, n) -> (B * T, n)
        yield start, f
        start += len(f)


def _merge_top(values, rows, new_values, new_rows, k: int):
    """The k largest of two (k', n) sets of (value, row), per unit."""
    v = torch.cat([values, new_values])
    r = torch.cat([rows, new_rows])
    top = v.topk(min(k, len(v)), dim=0)
    return top.values, r.gather(0, top.indices)


def _entries(start: int, f: torch.Tensor) -> torch.Tensor:
    """(rows, n) activations -> (nnz, 3) float64 rows of (flat token, unit, value) where a unit fires (> 0)."""
    r, u = (f > 0).nonzero(as_tuple=True)
    return torch.stack([(r + start).double(), u.double(), f[r, u].double()], dim=1)


@torch.no_grad()
def _first_pass(model, units, windows, top: int, step=None):
    """(top values, their rows, fire counts, every firing entry or None when they are more than MAX_ENTRIES)."""
    n, total = units.n, max(1, windows.numel())
    values, rows = torch.full((top, n), -torch.inf), torch.full((top, n), -1, dtype=torch.long)
    fires = torch.zeros(n, dtype=torch.long)
    kept, count = [], 0
    for start, f in _chunks(model, units, windows):
        k = min(top, len(f))
        t = f.topk(k, dim=0)  # (k, n) the chunk's largest per unit
        values, rows = _merge_top(values, rows, t.values, t.indices + start, top)
        fires += (f > 0).sum(0)
        count += int((f > 0).sum())
        if kept is not None:  # a sparse unit set (an SAE's latents) keeps its firing entries: no second pass
            kept = kept + [_entries(start, f)] if count <= MAX_ENTRIES else None
        if step is not None:
            step(0.6 * (start + len(f)) / total, f"top activations: {start + len(f):,} of {total:,} tokens")
    if kept is not None:
        kept = torch.cat(kept) if kept else torch.zeros(0, 3, dtype=torch.float64)
    return values, rows, fires, kept


class _Sampler:
    """The histogram of nonzero activations per unit and PER_BAND tokens per unit and band, fed entries chunk by
    chunk. A token's random key decides whether it is sampled: the PER_BAND largest keys of a band are a fair draw."""

    def __init__(self, n: int, vmax: torch.Tensor):
        self.n, self.vmax = n, vmax.clamp_min(1e-30).double()
        self.hist = torch.zeros(n * BINS, dtype=torch.long)
        self.kept = torch.zeros(0, 3, dtype=torch.float64)  # (group, key, row) of the samples so far
        self.gen = torch.Generator().manual_seed(0)  # the same samples on every build

    def add(self, e: torch.Tensor):
        unit = e[:, 1].long()
        frac = e[:, 2] / self.vmax[unit]
        b = (frac * BINS).long().clamp_(0, BINS - 1)  # each activation's bin in (0, vmax]
        self.hist += torch.bincount(unit * BINS + b, minlength=self.n * BINS)
        edges = torch.tensor([lo for lo, _ in BANDS] + [BANDS[-1][1]], dtype=torch.float64)
        band = torch.bucketize(frac, edges, right=False) - 1  # (lo, hi] -> j; -1 or len(BANDS): no band
        inside = (band >= 0) & (band < len(BANDS))
        group = (band * self.n + unit)[inside].double()
        key = torch.rand(int(inside.sum()), generator=self.gen, dtype=torch.float64)
        self.kept = _select(torch.cat([self.kept, torch.stack([group, key, e[inside, 0]], 1)]))

    def result(self):
        band_rows = torch.full((len(BANDS) * self.n, PER_BAND), -1, dtype=torch.long)
        g = self.kept[:, 0].long()
        rank = _ranks(g)
        band_rows[g, rank] = self.kept[:, 2].long()
        # (bands * n, PER_BAND) -> (bands, n, PER_BAND) -> (bands, PER_BAND, n)
        return self.hist.view(self.n, BINS), band_rows.view(len(BANDS), self.n, PER_BAND).transpose(1, 2)


def _ranks(group: torch.Tensor) -> torch.Tensor:
    """The place of each entry within its group, for entries sorted by group."""
    _, counts = torch.unique_consecutive(group, return_counts=True)
    starts = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return torch.arange(len(group)) - starts


def _select(c: torch.Tensor) -> torch.Tensor:
    """The PER_BAND entries of largest key per group of (group, key, row) rows, sorted by group then key."""
    order = torch.argsort(c[:, 0] * 2 + (1 - c[:, 1]))  # by group, then by key descending (keys lie in [0, 1))
    c = c[order]
    return c[_ranks(c[:, 0].long()) < PER_BAND]


@torch.no_grad()
def _second_pass(model, units, windows, vmax: torch.Tensor, entries: torch.Tensor | None):
    s = _Sampler(units.n, vmax)
    if entries is not None:
        s.add(entries)
    else:  # too many firing entries to keep: the model runs again, chunk by chunk
        for start, f in _chunks(model, units, windows):
            s.add(_entries(start, f))
    return s.result()


@torch.no_grad()
def clean_losses(model, held: HeldOut, batch: int = 64) -> tuple[torch.Tensor, float | None]:
    """((W, n_ctx) the clean loss of every next token of the held-out windows, the final LayerNorm's mean scale
    over them, None without one)."""
    names = ["ln_final.hook_scale"] if "ln_final.hook_scale" in model.hook_names() else []
    losses, scale, count = [], 0.0, 0
    for i in range(0, len(held.windows), batch):
        logits, cache = model.run_with_cache(held.windows[i:i + batch], names=names)
        losses.append(token_losses(logits, held.targets[i:i + batch]))
        if names:
            scale += float(cache["ln_final.hook_scale"].double().sum())
            count += cache["ln_final.hook_scale"].numel()
    return torch.cat(losses), (scale / count if names else None)


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T, m) logits and (B, T) targets -> (B, T) cross-entropy of each next token."""
    B, T, m = logits.shape
    # (B T, m) -> (B T,) losses -> (B, T)
    return F.cross_entropy(logits.reshape(B * T, m), targets.reshape(B * T), reduction="none").view(B, T)


def build_index(model, units, held: HeldOut, top: int = 20, radius: int = 8, progress=None) -> UnitIndex:
    """The index of ``units`` over the held-out windows of ``held`` (see the module's note). ``progress(share,
    words)``, when given, is called as the passes go."""
    step = progress or (lambda share, words: None)
    W = len(held.windows)
    step(0.0, f"indexing {units.n:,} units over {held.windows.numel():,} held-out tokens")
    values, rows, fires, entries = _first_pass(model, units, held.windows, top, step)
    vmax = values[0].clamp_min(0.0)  # the largest activation (a unit never above 0 has max 0)
    step(0.6, "sampling each unit's lower activations" + (" (a second pass over the text)" if entries is None else ""))
    hist, band_rows = _second_pass(model, units, held.windows, vmax, entries)
    step(0.9, f"the clean loss of {W * held.windows.shape[1]:,} held-out tokens")
    loss, scale = clean_losses(model, held)
    step(1.0, "done")
    E = max(1, min(len(held.windows), EVAL_TOKENS // held.windows.shape[1]))
    return UnitIndex(units.kind, str(units.site), units.n, held.windows.shape[1], held.windows.numel(), values, rows,
                     band_rows, fires, vmax, hist, E, loss, scale, held, radius)


@dataclass(frozen=True)
class IndexCost:
    units: int
    tokens: int
    firing: float     # the share of (token, unit) pairs above 0, measured on PROBE_TOKENS tokens
    passes: int       # 1, or 2 when the firing entries are more than MAX_ENTRIES
    memory: int       # bytes at the peak
    seconds: float


def index_budget(value: str | None = None) -> int | None:
    """Bytes one index may take while it is built: ``value``, by default TE_FEATURES_MEMORY (a size: 1G, 800M),
    else DEFAULT_INDEX_MEMORY. None: no limit (0). ValueError, in words, when it is not a size."""
    return size_setting(MEMORY_ENV, DEFAULT_INDEX_MEMORY, value)


def cost_of(n: int, tokens: int, n_ctx: int, firing: float, flops: tuple) -> IndexCost:
    """The index of ``n`` units over ``tokens`` held-out tokens in windows of ``n_ctx``, firing at ``firing``;
    ``flops``: (the model's per token up to the units' site, per token through the whole model)."""
    entries = firing * tokens * n
    passes = 1 if entries <= MAX_ENTRIES else 2
    chunk = max(1, CHUNK_FLOATS // (n_ctx * n)) * n_ctx * n  # activations one chunk holds (one window at least)
    # one pass keeps every entry; two passes hold one chunk's at a time
    held_entries = entries if passes == 1 else firing * chunk
    memory = n * (20 * 12 + 2 * BINS * 8 + 3 * PER_BAND * 8 + 64) + 16 * chunk + ENTRY_BYTES * held_entries
    model_s = tokens * (passes * flops[0] + flops[1]) / FLOPS  # the passes to the site, then the clean losses
    seconds = passes * tokens * n * ELEMENT_S + entries * ENTRY_S + model_s
    return IndexCost(n, tokens, firing, passes, int(memory), seconds)


def pass_flops(model, site: Site | str) -> tuple[float, float]:
    """(flops per token up to ``site``'s block, through the whole model and its output map): 2 per weight."""
    blocks = [sum(p.numel() for p in b.parameters()) for b in model.blocks]
    upto = sum(blocks[:as_site(model.config, site).layer + 1])
    return 2.0 * upto, 2.0 * (sum(blocks) + model.config.d_model * model.config.vocab_size)


@torch.no_grad()
def index_cost(model, units, held: HeldOut) -> IndexCost:
    """What ``build_index(model, units, held)`` would take, from the units' firing rate on PROBE_TOKENS tokens
    spread over the first window (an SAE's k of n, or a ReLU's density): no index is built, and the probe holds
    PROBE_TOKENS x n activations."""
    acts = next(site_batches(model, held.windows[:1], units.site, 1))[0]  # (n_ctx, width): the site only
    spread = torch.linspace(0, len(acts) - 1, min(PROBE_TOKENS, len(acts))).round().long()
    firing = float((units.encode(acts[spread]) > 0).float().mean())
    return cost_of(units.n, held.windows.numel(), held.windows.shape[1], firing, pass_flops(model, units.site))


def largest_fitting(cost: IndexCost, n_ctx: int, flops: tuple, budget: int | None, max_seconds: float) -> int:
    """The most units of the same firing rate whose index fits ``budget`` bytes and ``max_seconds`` (0: none)."""
    def fits(n):
        c = cost_of(n, cost.tokens, n_ctx, cost.firing, flops)
        return (budget is None or c.memory <= budget) and c.seconds <= max_seconds
    lo, hi = 0, cost.units
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def index_refusal(cost: IndexCost, budget: int | None, n_ctx: int, flops: tuple, word: str = "units",
                  max_seconds: float = MAX_INDEX_SECONDS) -> str | None:
    """Why the page does not build this index, in words with what would fit; None when it fits."""
    if (budget is None or cost.memory <= budget) and cost.seconds <= max_seconds:
        return None
    allowed = f"{binary_bytes(budget)} ({MEMORY_ENV})" if budget is not None else "no memory limit"
    fit = largest_fitting(cost, n_ctx, flops, budget, max_seconds)
    dense = (f" They fire densely: {cost.firing:.0%} of them on an average token, where a TopK SAE's k of its "
             "latents do." if cost.firing > 0.05 else "")
    fix = (f" An SAE of at most {fit:,} latents firing as these do would fit." if fit >= 1 else
           " Nothing of this kind fits on this model's held-out text.")
    return (f"The page cannot index these {cost.units:,} {word}: their index over {cost.tokens:,} held-out tokens would "
            f"take about {binary_bytes(cost.memory)} of memory and {duration_words(cost.seconds)}, where the page "
            f"builds one within {allowed} and {max_seconds:.0f} s.{dense}{fix}")
