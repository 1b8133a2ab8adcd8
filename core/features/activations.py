"""The activations an autoencoder learns from: one site's vectors over held-out text, collected window by window.

The text is the last 10% of the model's own corpus, the part it never trained on (Python's reference documentation
when that corpus is not on this machine, or the model has none we know). It is cut into full, non-overlapping windows
of n_ctx tokens, as the held-out loss is measured, so every vector has the context a real run gives it. Collection
streams: each batch of windows runs only up to the site's block, and it stops at a number of vectors and of bytes."""
from __future__ import annotations


import torch

from core.analysis.sites import Site, as_site
from core.nn.hooks import HookRun

MAX_VECTORS = 2_000_000        # the most activation vectors one collection keeps
MAX_BYTES = 256 * 2**20        # and the most bytes (a GPT-2's 768-wide vectors reach it at 87,381)


@torch.no_grad()
def site_batches(model, windows: torch.Tensor, site: Site | str, batch: int = 64):
    """Yield (B, n_ctx, width) activations of ``site`` for ``windows`` in batches; each batch runs the model only up
    to the site's block."""
    site = as_site(model.config, site)  # the model must have the site (a Site: checked when it was made)
    for i in range(0, len(windows), batch):
        run = HookRun(names=[site.name], record=True)
        x = model.embed(windows[i:i + batch], hooks=run)
        model.blocks_from(x, 0, site.layer + 1, hooks=run)  # nothing after the site's block is computed
        yield run.store[site.name]


def memory_needed(n_vectors: int, width: int) -> int:
    """Bytes a collection of ``n_vectors`` vectors of ``width`` floats holds."""
    return n_vectors * width * 4


def collect(model, windows: torch.Tensor, site: Site | str, max_vectors: int = MAX_VECTORS,
            max_bytes: int = MAX_BYTES, batch: int = 64) -> torch.Tensor:
    """(N, width) float32 activations of ``site`` over ``windows`` (W, n_ctx), row w * n_ctx + t for window w's
    token t, streamed into one buffer and cut at ``max_vectors`` vectors or ``max_bytes`` bytes."""
    site = as_site(model.config, site)  # once here: site_batches takes the Site as it is
    width = site.width
    cap = min(max_vectors, max_bytes // (4 * width), windows.numel())
    out = torch.empty(cap, width)
    filled = 0
    for acts in site_batches(model, windows, site, batch):
        flat = acts.reshape(-1, width)  # (B, n_ctx, width) -> (B * n_ctx, width)
        take = min(len(flat), cap - filled)
        out[filled:filled + take] = flat[:take]
        filled += take
        if filled >= cap:
            break
    return out[:filled]
