"""A run's data: the tokenizer learned from the training part, the corpus encoded as token ids, the random
batches a step trains on (with the repeat mixture where a recipe asks for it), and the full windows the
held-out part is scored on. The 90/10 split itself is ``core.data.corpus.split_train_val``."""
from __future__ import annotations

import math
import re

import numpy as np
import torch

from core.data.corpus import split_train_val
from core.analysis.induction import add_repeats
from core.nn.model import Transformer
from core.nn.bpe import BPETokenizer
from core.nn.tokenizer import CharTokenizer
from core.nn.tokenizer_base import Tokenizer

TOKENIZERS = ("char", "bpe")  # one token per character, or a byte-level BPE learned from the training part
DEFAULT_BPE_VOCAB = 512


def min_corpus_chars(n_ctx: int) -> int:
    """Shortest corpus whose 90/10 split leaves each part one window of n_ctx inputs plus targets, with
    at least two start positions (``get_batch`` draws starts below len - n_ctx)."""
    # searched, not solved: the split rounds, and this asks split_train_val itself rather than restating it
    need, n = n_ctx + 2, n_ctx + 2
    while True:
        train, val = split_train_val(range(n))
        if len(train) >= need and len(val) >= need:
            return n
        n += 1


def encode_corpus(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """``tokenizer.encode(text, errors="drop")`` as a tensor. For characters it is vectorised: a megabyte corpus
    in milliseconds rather than a second, so starting a run from the training page feels immediate (a BPE's
    Rust encoder takes about a second and a half for Tiny Shakespeare). A byte-level BPE encodes the text in
    ``bpe_pieces``, as it learned it: the same ids for ordinary text, in a bounded amount of memory."""
    if isinstance(tokenizer, BPETokenizer) and tokenizer.byte_level:
        pieces = [np.array(tokenizer.encode(p, errors="drop"), dtype=np.int64) for p in bpe_pieces(text)]
        return torch.from_numpy(np.concatenate(pieces))
    if not isinstance(tokenizer, CharTokenizer):
        return torch.tensor(tokenizer.encode(text, errors="drop"), dtype=torch.long)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)     # one code point per character
    vocab = np.array([ord(c) for c in tokenizer.chars], dtype=np.uint32)
    # a binary search in the sorted vocabulary: the tokenizer's order need not be the code points' order
    order = np.argsort(vocab)
    pos = np.minimum(np.searchsorted(vocab[order], codes), len(vocab) - 1)  # a code above all would index past the end
    known = vocab[order][pos] == codes                                     # unknown characters are dropped
    return torch.from_numpy(order[pos[known]].astype(np.int64))


def make_tokenizer(kind: str, train_text: str, vocab_size: int | None = None) -> Tokenizer:
    """The tokenizer of a new run, learned from ``train_text`` alone (the held-out part must stay unseen):
    "char", one token per distinct character; "bpe", a byte-level BPE of ``vocab_size`` tokens (fewer when
    the text runs out of pairs seen twice)."""
    if kind == "char":
        if vocab_size is not None:
            raise ValueError("a character tokenizer's vocabulary is the corpus's characters; vocab_size is for 'bpe'")
        return CharTokenizer.from_text(train_text)
    if kind == "bpe":
        if vocab_size is None:
            raise ValueError("a byte-level BPE needs a vocabulary size (at least 256, the bytes)")
        # learned from the pieces it will encode: a megabyte without a space would otherwise take minutes
        return BPETokenizer.train(bpe_pieces(train_text), vocab_size)
    raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)} (got {kind!r})")


MAX_PRETOKEN = 128  # characters: the longest run a BPE learns from as one piece (bpe_pieces)
BPE_CHUNK = 1 << 16  # characters: text reaches the tokenizers library in pieces of about this many
# Unicode's White_Space characters: what the byte-level pre-tokenizer's \s matches (Python's \s adds \x1c-\x1f)
_WHITE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# a line break between two non-space characters: the pre-tokenizer always ends a pre-token before the break and
# after it (it is a pre-token of its own), so the text may be cut after it without changing a single pre-token
_LINE_BREAK = re.compile(f"(?<=[^{_WHITE}]\n)(?=[^{_WHITE}])")


def bpe_pieces(text: str, longest: int = MAX_PRETOKEN, chunk: int = BPE_CHUNK) -> list[str]:
    """``text`` cut into the pieces a byte-level BPE learns from and encodes one by one; joined, they are
    ``text``. Two kinds of cut:

    - inside every run of non-space characters (or of spaces) longer than ``longest``, every ``longest``
      characters. The pre-tokenizer splits each piece on its own, and each of its pre-tokens lies inside one such
      run (with at most the space before it), so none is longer than ``longest`` + 1 characters. Why: the
      trainer's time grows with the square of its longest pre-token, and a megabyte of letters without a space
      is one pre-token (11 minutes to learn, bench/results/bpe-learning.md);
    - after a line break between two non-space characters, once a piece has ``chunk`` characters: no pre-token
      changes, and the library holds one piece's pre-tokens and token objects at a time instead of the whole
      text's (about 200 bytes per character at once; bench/results/run-memory.md).

    Text with no run longer than ``longest`` (prose, code, our corpora) keeps every pre-token, so the BPE learned
    from its pieces and the ids they encode to are exactly those of the whole text (tests/test_bpe_bound.py)."""
    # a cut every ``longest`` characters inside each over-long run, counted from the run's start
    cuts = {c for m in re.finditer(f"[^{_WHITE}]{{{longest + 1},}}|[{_WHITE}]{{{longest + 1},}}", text)
            for c in range(m.start() + longest, m.end(), longest)}
    last = 0
    for m in _LINE_BREAK.finditer(text):
        if m.start() - last >= chunk:  # the first safe place once a piece is long enough
            cuts.add(m.start())
            last = m.start()
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def get_windows(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Random windows of n_ctx + 1 tokens: (B, n_ctx + 1), inputs and next-token targets in one."""
    # starts below len - n_ctx: the window's last token, the last target, must exist
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    return torch.stack([data[s:s + n_ctx + 1] for s in starts.tolist()])  # B x (n_ctx + 1,) -> (B, n_ctx + 1)


def get_batch(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator):
    """Random windows of n_ctx tokens and their next-token targets: (B, n_ctx) each."""
    w = get_windows(data, n_ctx, batch_size, generator)  # (B, n_ctx + 1)
    return w[:, :-1], w[:, 1:]  # (B, n_ctx) inputs, and the same shifted by one: each position's next token


def repeat_share(step: int, tc) -> float:
    """The share of rows holding a repeated span at 0-based ``step`` under ``tc`` (a TrainConfig)."""
    # the curriculum first: with every row holding a span for 1,000 steps the head formed at step 700; with 30%
    # of the rows from the start, none had formed by step 8,300 (bench/results/induction-search.md)
    return 1.0 if step < tc.repeat_first_steps else tc.repeat_fraction


def frequent_tokens(data: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` ids that occur most often in ``data`` (ties: the lower id first), most frequent first."""
    counts = torch.bincount(data)
    return torch.sort(counts, descending=True, stable=True).indices[:n]  # stable: equal counts keep id order


def mixed_batch(data: torch.Tensor, n_ctx: int, batch_size: int, generator: torch.Generator, share: float,
                vocab_size: int, min_span: int, max_span: int,
                random_share: float = 1.0, pool: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_batch`` with ``share`` of its rows holding a span written twice (the repeat mixture,
    core.analysis.induction.add_repeats): of random tokens with probability ``random_share``, else of the row's own
    text. (B, n_ctx) inputs and targets."""
    if share <= 0:
        return get_batch(data, n_ctx, batch_size, generator)  # plain text: the same draws as with no mixture
    w = get_windows(data, n_ctx, batch_size, generator)  # (B, n_ctx + 1)
    # random tokens: only a head that looks back and copies can predict their second copy, so they teach the head;
    # the row's own text: a copy of what a language model half-predicts anyway, so the head learns to trust the
    # earlier copy over its own guess on ordinary text too (bench/induction_text.py measures that)
    w = add_repeats(w, share, generator, vocab_size, min_span, max_span, random_share, pool)  # (B, n_ctx + 1)
    return w[:, :-1], w[:, 1:]  # (B, n_ctx) inputs and the (B, n_ctx) next tokens


def _windows(data: torch.Tensor, n_ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every full, non-overlapping window of n_ctx tokens and its next-token targets: (W, n_ctx) each."""
    # full windows only: a short last one would weigh its few, early (context-poor) positions as much as the rest
    n_windows = (len(data) - 1) // n_ctx  # - 1: the last window's last target must exist
    if n_windows < 1:
        raise ValueError(f"need at least {n_ctx + 1} tokens to score one window, got {len(data)}")
    x = data[: n_windows * n_ctx].view(n_windows, n_ctx)             # (W * n_ctx,) -> (W, n_ctx)
    y = data[1: n_windows * n_ctx + 1].view(n_windows, n_ctx)        # (W * n_ctx,) -> (W, n_ctx), shifted by one
    return x, y


@torch.no_grad()
def windowed_total(model: Transformer, data: torch.Tensor, n_ctx: int | None = None,
                   batch_size: int = 64) -> tuple[float, torch.Tensor]:
    """(summed next-token cross-entropy in nats, the target ids it scored) over every full, non-overlapping
    window of n_ctx tokens of ``data``."""
    x, y = _windows(data, n_ctx or model.config.n_ctx)
    was_training = model.training  # put back after: a Trainer scores its own model mid-run
    model.eval()
    total = 0.0
    for i in range(0, len(x), batch_size):  # in batches: (W, n_ctx, vocab) logits at once is a lot for a BPE
        out = model(x[i:i + batch_size], targets=y[i:i + batch_size])
        total += out.loss.item() * y[i:i + batch_size].numel()  # the mean back to a sum: the last batch is short
    model.train(was_training)
    return total, y.reshape(-1)  # (W, n_ctx) -> (W * n_ctx,)


def windowed_loss(model: Transformer, data: torch.Tensor, n_ctx: int | None = None, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy over every full, non-overlapping window of n_ctx tokens."""
    total, targets = windowed_total(model, data, n_ctx, batch_size)
    return total / len(targets)


def held_out_score(model: Transformer, tokenizer: Tokenizer, data: torch.Tensor, n_ctx: int | None = None) -> dict:
    """The validation numbers of a checkpoint: loss in nats per token over every full window of ``data``, and
    in bits per character, the summed loss over the predicted tokens divided by the characters those tokens
    decode to (and by ln 2). Only bits per character compares a character model with a sub-word one: a token
    that holds three characters is harder to predict than one character, and covers three."""
    total, targets = windowed_total(model, data, n_ctx)
    chars = len(tokenizer.decode(targets.tolist()))  # the predicted tokens only: the first window's first is given
    return {"loss": total / len(targets), "bits_per_char": total / chars / math.log(2),
            "tokens": len(targets), "chars": chars, "chars_per_token": chars / len(targets)}
