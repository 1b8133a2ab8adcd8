"""What steering with an SAE feature adds, in the feature's own units.

A feature i of an SAE writes f_i * W_dec[i] into the stream when it fires (W_dec's rows have unit norm, so f_i is
its size). Its typical size s_i is its mean activation over the held-out vectors where it fires (f_i > 0). The
Generation page counts alpha in those units: alpha = 1 adds what the feature typically adds when it is on, once
more, at every position; alpha = -1 takes as much away. The hooks themselves: core.analysis.steering.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.analysis.steering import steer_hooks
from core.features.activations import collect
from core.analysis.sae import SAE

SCALE_WINDOWS = 32  # held-out windows the typical sizes are measured on (4,096 vectors at n_ctx = 128)
TOP = 20            # top activations per feature whose tokens are kept
# The Generation page's alpha at first: the largest on its slider's grid (0.1) at which the shipped character model,
# steered with its default feature, still writes text whose character 3-grams are found in Tiny Shakespeare as often
# as the plain texts' are (the median steered text against all but the least sensible tenth of the plain ones, over
# 32 seeds), while the feature's mark shows (more capitals: speakers' names). Measured by bench/steering.py
# (bench/results/steering.md); alpha = 1 there wrote "THOMASONBLARWLHTYW..."
DEFAULT_ALPHA = 0.3


@dataclass(frozen=True)
class FeatureScales:
    """Per feature of an SAE: ``mean_active`` (d_sae,) its mean activation where it fires (0 where it never did),
    ``fired`` (d_sae,) on how many of the ``n_vectors`` measured vectors it fired, ``top_ids`` (d_sae, TOP) the
    current token at each of its TOP largest activations there (largest first; -1 past the vectors it fired on)."""
    mean_active: torch.Tensor
    fired: torch.Tensor
    n_vectors: int
    top_ids: torch.Tensor

    def top_tokens(self, feature: int, n: int = 5) -> list[tuple[int, int]]:
        """[(token id, how many of the feature's top activations sit on it)], the most common first, at most n."""
        ids = [i for i in self.top_ids[feature].tolist() if i >= 0]
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        return sorted(counts.items(), key=lambda kv: -kv[1])[:n]

    def fallback(self) -> float:
        """The median typical size of the features that fired: the unit for one that never did (1.0 if none did)."""
        on = self.mean_active[self.fired > 0]
        return float(on.median()) if len(on) else 1.0

    def scale(self, feature: int) -> float:
        """Feature ``feature``'s typical size s_i, or ``fallback()`` when it never fired on the vectors measured."""
        return float(self.mean_active[feature]) if int(self.fired[feature]) > 0 else self.fallback()


@torch.no_grad()
def feature_scales(model, sae: SAE, windows: torch.Tensor, max_windows: int = SCALE_WINDOWS) -> FeatureScales:
    """Every feature's typical size (``FeatureScales``) over the first ``max_windows`` of ``windows`` (W, n_ctx)."""
    windows = windows[:max_windows]
    acts = collect(model, windows, sae.site)                 # (N, d_in), row w * n_ctx + t
    f = sae.encode(acts)                                     # (N, d_sae), mostly 0
    fired = (f > 0).sum(dim=0)                               # (d_sae,)
    mean_active = f.sum(dim=0) / fired.clamp_min(1)          # (d_sae,): 0 where it never fired
    top = f.topk(min(TOP, len(f)), dim=0)                    # values, rows: (TOP, d_sae)
    tokens = windows.reshape(-1)[: len(f)][top.indices]      # (W, n_ctx) -> (N,), the token of each row: (TOP, d_sae)
    top_ids = torch.where(top.values > 0, tokens, -1).t()    # (d_sae, TOP), -1 where it did not fire
    return FeatureScales(mean_active, fired, len(acts), top_ids)


def default_feature(scales: FeatureScales, pieces) -> int:
    """A feature whose effect shows at a glance: the one whose top activations sit most on one token, a line break
    first (a "new line starts here" feature: steered with it, a character model writes the capitals of a speaker's
    name, as after every blank line of a play), then a letter or digit, then the one that fires most often."""
    def score(i: int):
        top = scales.top_tokens(i, 1)
        if not top:
            return (0, False, False, int(scales.fired[i]))
        piece = pieces[top[0][0]]
        return (top[0][1], piece == "\n", piece.strip().isalnum(), int(scales.fired[i]))
    return max(range(len(scales.fired)), key=score)


def check_feature(sae: SAE, feature) -> int:
    """``feature`` as an index into the SAE's latents; ValueError in words otherwise."""
    n = sae.config.d_sae
    if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < n:
        raise ValueError(f"this SAE has features 0 to {n - 1}, not {feature!r}")
    return feature


def feature_hooks(sae: SAE, feature: int, alpha: float, scale: float = 1.0) -> list[tuple[str, object]]:
    """Hooks adding ``alpha * scale * W_dec[feature]`` at the SAE's site, every position (``steer_hooks``): alpha in
    units of ``scale`` (the feature's typical size, ``FeatureScales.scale``); [] for alpha = 0."""
    direction = sae.W_dec[check_feature(sae, feature)].detach() * float(scale)  # (d_in,)
    return steer_hooks(sae.site, direction, alpha)
