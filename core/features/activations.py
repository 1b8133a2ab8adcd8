"""The activations an autoencoder learns from: one site's vectors over held-out text, collected window by window.

The text is the last 10% of the model's own corpus, the part it never trained on (Python's reference documentation
when that corpus is not on this machine, or the model has none we know). It is cut into full, non-overlapping windows
of n_ctx tokens, as the held-out loss is measured, so every vector has the context a real run gives it. Collection
streams: each batch of windows runs only up to the site's block, and it stops at a number of vectors and of bytes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.features.sites import Site, as_site
from core.nn.hooks import HookRun
from core.training.corpus import PYDOC_NAME, SHAKESPEARE_FILE, TRAIN_FRACTION, pydoc_text, read_text_file, shakespeare_path

MAX_VECTORS = 2_000_000        # the most activation vectors one collection keeps
MAX_BYTES = 256 * 2**20        # and the most bytes (a GPT-2's 768-wide vectors reach it at 87,381)
READ_CAP_BYTES = 64 * 2**20  # a corpus file larger than this is not read


@dataclass(frozen=True)
class HeldOut:
    """Held-out token windows of a model: ``windows`` (W, n_ctx) token ids, ``targets`` (W, n_ctx) the next token of
    each, and where they came from in words."""
    windows: torch.Tensor
    targets: torch.Tensor
    corpus: str

    @property
    def n_tokens(self) -> int:
        return self.windows.numel()


def corpus_text(training: dict | None) -> tuple[str, str]:
    """(name, text) of the corpus a model was trained on, when this machine has it: Tiny Shakespeare for the shipped
    models; Python's documentation otherwise (it ships with every interpreter)."""
    name = (training or {}).get("corpus")
    if name == SHAKESPEARE_FILE:
        path = shakespeare_path()
        if path is not None:
            try:
                return SHAKESPEARE_FILE, read_text_file(path, READ_CAP_BYTES)
            except ValueError:
                pass  # unreadable: fall back, and the name says which text was used
    return PYDOC_NAME, pydoc_text()


def held_out_windows(tokenizer, text: str, n_ctx: int, corpus: str = "the text",
                     max_tokens: int | None = None) -> HeldOut:
    """The last 10% of ``text`` as full windows of ``n_ctx`` tokens (characters the tokenizer lacks are dropped)."""
    tail = text[int(len(text) * TRAIN_FRACTION):]  # the split the models were trained with: the last 10% held out
    if max_tokens is not None:
        tail = tail[: max_tokens * 8]  # a BPE token holds a few characters: enough text, never the whole corpus
    ids = torch.tensor(tokenizer.encode(tail, errors="drop"), dtype=torch.long)
    if max_tokens is not None:
        ids = ids[: max_tokens + 1]
    n = (len(ids) - 1) // n_ctx  # full windows only; -1: the last window's last target must exist
    if n < 1:
        raise ValueError(f"{corpus}: its held-out part has {len(ids)} tokens, fewer than one window of {n_ctx + 1}")
    windows = ids[: n * n_ctx].view(n, n_ctx)           # (n * n_ctx,) -> (W, n_ctx)
    targets = ids[1: n * n_ctx + 1].view(n, n_ctx)      # shifted by one: the token each position predicts
    return HeldOut(windows, targets, corpus)


def model_held_out(model, tokenizer, training: dict | None, max_tokens: int | None = None) -> HeldOut:
    """The held-out windows of a loaded model's own corpus (``training``: its config.json's training record)."""
    name, text = corpus_text(training)
    return held_out_windows(tokenizer, text, model.config.n_ctx, name, max_tokens)


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
