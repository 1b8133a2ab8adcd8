"""The feature browser: one unit's card (as Neuronpedia and sae_vis draw it), the units firing on a prompt, a unit
switched off on a prompt, and one measured comparison of neurons against features.

Units (core.features.units) make an SAE latent and an MLP neuron the same thing to every function here; the index
(core.features.index) holds what a card reads from the held-out text."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from core.analysis.trace import direct_read
from core.data.held_out import HeldOut
from core.features.index import BANDS, UnitIndex, token_losses
from core.features.units import Units
from core.nn.hooks import HookRun
from core.analysis.sites import as_site

PROMOTED = 10


@dataclass(frozen=True)
class Context:
    """A stretch of held-out text around one token: ``tokens`` (visible strings), each one's activation, and the
    index in ``tokens`` of the token it is centred on."""
    tokens: list[str]
    acts: list[float]
    at: int
    value: float
    window: int
    pos: int


@dataclass(frozen=True)
class UnitCard:
    kind: str
    unit: int
    site: str
    contexts: list[Context]
    bands: list[tuple[tuple[float, float], list[Context]]]  # ((lo, hi) as fractions of the max, samples)
    hist_counts: np.ndarray       # (BINS,)
    hist_edges: np.ndarray        # (BINS + 1,) activation values
    density: float                # share of held-out tokens where the unit is active
    fires: int
    total: int
    promoted: list[tuple[str, float]]
    suppressed: list[tuple[str, float]]
    ln_words: str                 # how the direct path's final LayerNorm was treated
    loss_top: float | None        # mean next-token loss change, switched off, at its top contexts' tokens
    loss_all: float | None        # ... at every eval token where it fires
    n_all: int = 0                # how many eval tokens that is
    eval_tokens: int = 0
    notes: list[str] = field(default_factory=list)


@torch.no_grad()
def site_acts(model, units: Units, windows: torch.Tensor) -> torch.Tensor:
    """(B, T, n) the units' activations on ``windows`` (B, T), the model run only up to their site."""
    site = as_site(model.config, units.site)  # a Site (feature_units, neuron_units) passes as it is
    run = HookRun(names=[site.name], record=True)
    model.blocks_from(model.embed(windows, hooks=run), 0, site.layer + 1, hooks=run)
    return units.encode(run.store[site.name])


def _contexts(tokenizer, index: UnitIndex, acts: dict, rows) -> list[Context]:
    """The contexts of flat token indices ``rows``; ``acts``: {window: (T,) the unit's activations}."""
    out = []
    for w, p in index.where(rows):
        a, b = max(0, p - index.radius), min(index.n_ctx, p + index.radius + 1)
        row = acts[w]
        out.append(Context(tokenizer.visible_tokens(index.held.windows[w, a:b].tolist()), row[a:b].tolist(), p - a,
                           float(row[p]), w, p))
    return out


def _unit_on(model, units, index, i, rows) -> dict:
    """{window: (T,) unit i's activations} for the windows of flat token indices ``rows``, in one run."""
    wins = sorted({w for w, _ in index.where(rows)})
    if not wins:
        return {}
    acts = site_acts(model, units, index.held.windows[wins])[..., i]  # (len(wins), T)
    return dict(zip(wins, acts))


@torch.no_grad()
def direct_logits(model, units: Units, index: UnitIndex, i: int) -> tuple[torch.Tensor, str]:
    """(m,) what unit ``i``'s write direction adds to each logit straight through the final LayerNorm, its scale
    frozen at the held-out mean, and the output map (core.analysis.trace.direct_read); and those words."""
    d = units.write_direction(i)
    if model.config.norm == "pre" and index.ln_scale is not None:
        words = (f"through the final LayerNorm with its scale frozen at σ = {index.ln_scale:.3f}, its mean over "
                 f"{index.total:,} held-out tokens, then the output map W_U")
        return direct_read(model, d, 1 / index.ln_scale), words
    # the index holds no scale exactly when the model has no final LayerNorm (core.features.index): W_U alone
    return direct_read(model, d), "straight through the output map W_U (this model has no final LayerNorm)"


@torch.no_grad()
def _switch_off_losses(model, units, index, i, top_spots) -> tuple[float | None, float | None, int]:
    """(mean loss change at the top contexts' tokens, at every eval token where the unit fires, that count): one run
    with the unit off over the top contexts' windows and the first eval windows, against the index's clean loss."""
    held, E = index.held, index.eval_windows
    tops = sorted({w for w, _ in top_spots} - set(range(E)))
    wins = list(range(E)) + tops  # the eval windows, then the top contexts' windows not among them
    seen = {}

    def fired(x, name):  # reads the unit on the clean site activation, before the off hook changes it
        seen["on"] = units.encode(x)[..., i] > 0  # (B, T)

    off = token_losses(model(held.windows[wins], hooks=[(str(units.site), fired)] + units.off_hooks(i)).logits,
                       held.targets[wins])
    change = off - index.clean_loss[wins]  # (len(wins), T)
    at = {w: j for j, w in enumerate(wins)}
    loss_top = float(np.mean([float(change[at[w], p]) for w, p in top_spots])) if top_spots else None
    on = seen["on"][:E]
    n_all = int(on.sum())
    return loss_top, (float(change[:E][on].mean()) if n_all else None), n_all


def unit_card(model, tokenizer, units: Units, index: UnitIndex, i: int) -> UnitCard:
    """Everything a unit's card shows (its contexts from the held-out windows the index was built on)."""
    i = units.check(i)
    top_rows = index.top_rows[:, i][index.top_values[:, i] > 0]  # only tokens where it is active
    # band_rows[:, :, i] (bands, PER_BAND) -> (bands PER_BAND,), after the top rows
    acts = _unit_on(model, units, index, i, torch.cat([top_rows, index.band_rows[:, :, i].reshape(-1)]))
    contexts = _contexts(tokenizer, index, acts, top_rows)
    bands = [(band, _contexts(tokenizer, index, acts, index.band_rows[j, :, i])) for j, band in enumerate(BANDS)]
    logits, words = direct_logits(model, units, index, i)
    pieces = tokenizer.visible_tokens(range(len(logits)))
    order = torch.argsort(logits, descending=True)
    promoted = [(pieces[int(t)], float(logits[t])) for t in order[:PROMOTED]]
    suppressed = [(pieces[int(t)], float(logits[t])) for t in order.flip(0)[:PROMOTED]]
    loss_top, loss_all, n_all = _switch_off_losses(model, units, index, i, [(c.window, c.pos) for c in contexts])
    vmax = float(index.vmax[i])
    edges = np.linspace(0.0, vmax, index.hist.shape[1] + 1)
    return UnitCard(units.kind, i, str(units.site), contexts, bands, index.hist[i].numpy(), edges,
                    float(index.density[i]), int(index.fires[i]), index.total, promoted, suppressed, words, loss_top,
                    loss_all, n_all, index.eval_windows * index.n_ctx)


@dataclass(frozen=True)
class PromptUnits:
    tokens: list[str]      # visible strings of the prompt's tokens
    units: np.ndarray      # (T, top) the units with the largest activations at each position
    values: np.ndarray     # (T, top) their activations, descending


def prompt_units(model, units: Units, ids, top: int = 5, tokenizer=None) -> PromptUnits:
    """Per position of ``ids`` the ``top`` units with the largest activation (those ≤ 0 included at the end: the
    view leaves out what does not fire)."""
    x = torch.as_tensor(list(ids), dtype=torch.long)[None]  # (1, T)
    f = site_acts(model, units, x)[0]  # (T, n)
    t = f.topk(min(top, units.n), dim=-1)
    tokens = tokenizer.visible_tokens(x[0].tolist()) if tokenizer is not None else [str(v) for v in x[0].tolist()]
    return PromptUnits(tokens, t.indices.numpy(), t.values.numpy())


@dataclass(frozen=True)
class OffLosses:
    clean: np.ndarray   # (T - 1,) loss of each next token of the prompt
    off: np.ndarray     # (T - 1,) with the unit switched off everywhere
    acts: np.ndarray    # (T,) the unit's activation at each position

    @property
    def change(self) -> np.ndarray:
        return self.off - self.clean


@torch.no_grad()
def unit_off_losses(model, units: Units, i: int, ids) -> OffLosses:
    """Per-token next-token loss on ``ids`` with and without unit ``i`` (switched off at every position)."""
    x = torch.as_tensor(list(ids), dtype=torch.long)[None]  # (1, T)
    if x.shape[1] < 2:
        raise ValueError("the prompt needs at least two tokens: the loss is of each token after the first")
    hooks = units.off_hooks(i)
    y = x[:, 1:]
    clean = token_losses(model(x).logits[:, :-1], y)[0]
    off = token_losses(model(x, hooks=hooks).logits[:, :-1], y)[0]
    acts = site_acts(model, units, x)[0, :, i]
    return OffLosses(clean.numpy(), off.numpy(), acts.numpy())


def token_purity(index: UnitIndex, held: HeldOut, top: int = 20) -> np.ndarray:
    """(n,) per unit, the share of its top ``top`` activations (those > 0) whose own token is the most common one
    among them; NaN for a unit that never fires."""
    flat = held.windows.reshape(-1)  # (W, T) -> (W * T,): a flat row is a token
    k = min(top, len(index.top_values))
    out = np.full(index.n, np.nan)
    vals, rows = index.top_values[:k], index.top_rows[:k]
    for u in range(index.n):
        keep = rows[:, u][vals[:, u] > 0]
        if len(keep):
            _, counts = torch.unique(flat[keep], return_counts=True)
            out[u] = float(counts.max()) / len(keep)
    return out


def purity_summary(purity: np.ndarray) -> dict:
    """mean, median, share above 0.5 over the units that fire, and how many fire."""
    p = purity[~np.isnan(purity)]
    if len(p) == 0:
        return {"units": 0, "mean": float("nan"), "median": float("nan"), "above_half": float("nan")}
    return {"units": int(len(p)), "mean": float(p.mean()), "median": float(np.median(p)),
            "above_half": float((p > 0.5).mean())}
