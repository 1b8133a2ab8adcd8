"""A model's held-out text: the last 10% of its own corpus, the part it never trained on (Python's reference
documentation when that corpus is not on this machine, or the model has none we know), cut into full,
non-overlapping windows of n_ctx tokens, as the held-out loss is measured. SAEs, transcoders and the feature index
read their activations on these windows (core.features.activations)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.data.corpus import PYDOC_NAME, SHAKESPEARE_FILE, TRAIN_FRACTION, pydoc_text, read_text_file, shakespeare_path

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
