"""Tokenizers: text to token ids and back, in two kinds behind one interface.

Every tokenizer has ``encode(text, errors)``, ``decode(ids)``, ``vocab_size``, ``pieces`` (the text of every
token id, for axis labels and tables), ``token_strings(ids)``, ``unknown_chars(text)`` (what ``encode`` would
have to drop), ``unit``/``units`` ("character"/"token", for the words a page uses) and ``to_dict``/``files``
(what a checkpoint stores: an entry of config.json and the files written beside it).

- ``CharTokenizer`` (here): one token per distinct character of the training corpus. Characters outside it
  are unknown: ``encode`` refuses them or drops them.
- ``BPETokenizer`` (``core.nn.bpe``): a tokenizer of Hugging Face's ``tokenizers`` library, saved as
  ``tokenizer.json``; ``BPETokenizer.train`` makes a byte-level BPE, which never meets an unknown character.
  GPT-2's tokenizer is one of these (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``).

``tokenizer_from_dict(entry, folder)`` rebuilds either kind from a checkpoint's config.json entry, and
``load_tokenizer(folder)`` from a checkpoint folder of ours or a Hugging Face folder. ``Prompt`` is a user's
text encoded for a model, with what was dropped or cut said in words.

This module is the front door: every name that was ever imported from ``core.nn.tokenizer`` still is, the
interface from ``core.nn.tokenizer_base`` and the BPE side from ``core.nn.bpe`` included.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from core.nn.bpe import TOKENIZER_FILE, BPETokenizer, TokenizerFailed, hf_tokenizer, read_tokenizer_file
from core.serve.fmt import visible
from core.nn.tokenizer_base import Tokenizer, check_errors


class UnknownCharactersError(ValueError):
    """Raised by ``encode`` when the text holds characters the vocabulary lacks; lists them."""

    def __init__(self, chars: list[str]):
        self.chars = chars  # all of them, for a caller that wants the full list; the message shows 20
        # repr: a newline or a tab shows as '\n' or '\t', not as a break or a gap in the message
        shown = ", ".join(repr(c) for c in chars[:20]) + (" ..." if len(chars) > 20 else "")
        super().__init__(f"{len(chars)} character(s) not in the model's vocabulary: {shown}")


class CharTokenizer(Tokenizer):
    kind = "char"
    unit, units = "character", "characters"

    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        # the vocabulary may come from a config.json of unknown origin: each rule keeps encode/decode a bijection
        if not chars:
            raise ValueError("a tokenizer needs at least one character")
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("every vocabulary entry must be a single character")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary lists a character twice")
        self.chars = chars  # id -> character: the list's order is the model's row order
        self.stoi = {c: i for i, c in enumerate(chars)}  # character -> id

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))  # sorted: the same corpus gives the same ids on every run

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def pieces(self) -> tuple[str, ...]:
        return tuple(self.chars)

    def unknown_chars(self, text: str) -> list[str]:
        """Distinct characters of ``text`` outside the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))  # dict: ordered and distinct

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """Token ids of ``text``. errors="strict" raises UnknownCharactersError naming the unknown
        characters; errors="drop" leaves them out (call ``unknown_chars`` to tell the user which)."""
        check_errors(errors)
        if errors == "strict":  # all unknown characters first, so the error names every one, not the first
            unknown = self.unknown_chars(text)
            if unknown:
                raise UnknownCharactersError(unknown)
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            # checked: a negative id would index from the end of the list and decode to a wrong character
            if not 0 <= i < len(self.chars):
                raise ValueError(f"token id {i} is outside the vocabulary of {len(self.chars)}")
            out.append(self.chars[i])
        return "".join(out)

    def to_dict(self) -> dict:
        return {"type": "char", "vocab": self.chars}  # the whole vocabulary lives in config.json

    @classmethod
    def from_dict(cls, data: dict) -> "CharTokenizer":
        if not isinstance(data, dict) or data.get("type") != "char" or not isinstance(data.get("vocab"), list):
            raise ValueError("tokenizer entry must be {'type': 'char', 'vocab': [characters]}")
        return cls(data["vocab"])

    def describe(self) -> str:
        return f"characters ({self.vocab_size:,} distinct)"

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def tokenizer_from_dict(data, folder=None, vocab_size: int | None = None) -> Tokenizer:
    """A tokenizer from a checkpoint's config.json entry: {'type': 'char', 'vocab': [...]} holds the characters;
    {'type': 'bpe'} means the file tokenizer.json in ``folder``. ValueError when it cannot be built."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "char":
        return CharTokenizer.from_dict(data)
    if kind == "bpe":
        if folder is None:
            raise ValueError(f"a 'bpe' tokenizer lives in {TOKENIZER_FILE} beside config.json; no folder was given")
        # vocab_size: the model's output size, which may exceed the tokenizer's own (see core.nn.bpe)
        return BPETokenizer.from_file(Path(folder) / TOKENIZER_FILE, vocab_size)
    raise ValueError(f"unknown tokenizer type {kind!r} (expected 'char' or 'bpe')")


def load_tokenizer(folder) -> Tokenizer:
    """The tokenizer of a checkpoint folder: ours (config.json's 'tokenizer' entry) or a Hugging Face folder's
    files. ValueError when there is none or it cannot be read."""
    folder = Path(folder)
    try:
        # read like a tokenizer file: from inside the folder only, and bounded
        data = json.loads(read_tokenizer_file(folder / "config.json"))
    except (ValueError, json.JSONDecodeError):
        data = None  # no config of ours: a Hugging Face folder's tokenizer files are tried instead
    # a Hugging Face config.json has no 'tokenizer' entry: that is what tells our folders from theirs
    if isinstance(data, dict) and isinstance(data.get("tokenizer"), dict):
        return tokenizer_from_dict(data["tokenizer"], folder)
    return hf_tokenizer(folder)


class Prompt:
    """A user's text made ready for the model: unknown characters dropped, the window capped at n_ctx tokens."""

    def __init__(self, tokenizer: Tokenizer, text: str, n_ctx: int):
        text = text or ""  # None (a box with no value) reads as no text
        self.units = tokenizer.units
        self.original_length = len(text)
        self.failure = None  # what the tokenizer library said when it failed on this text (then no ids)
        try:
            self.unknown = tokenizer.unknown_chars(text)
            # "drop": a page runs on what it can read and says what was left out (messages), never refuses
            ids = tokenizer.encode(text, errors="drop")
        except TokenizerFailed as e:
            # an empty prompt that carries the reason: messages() says it and the page goes on, alive
            self.unknown, ids, self.failure = [], [], str(e)
        self.n_known = len(ids)
        self.truncated = len(ids) > n_ctx
        self.ids = ids[-n_ctx:] if self.truncated else ids  # keep the most recent n_ctx tokens
        self.text = tokenizer.decode(self.ids)  # what the model reads, which a page shows back

    @classmethod
    def of_ids(cls, tokenizer: Tokenizer, ids: Iterable[int], n_ctx: int) -> "Prompt":
        """A prompt given as token ids (a page that wrote the ids itself, e.g. a prompt repeated token for token):
        the model reads exactly these ids, never their text encoded again. For a BPE that re-encoding can differ
        (two copies merge across their seam; a token that is part of a character decodes to '�')."""
        self = cls.__new__(cls)  # no text to encode: __init__'s work is skipped, its fields set here
        self.failure = None
        ids = [int(i) for i in ids]
        self.units, self.unknown, self.n_known = tokenizer.units, [], len(ids)
        self.truncated = len(ids) > n_ctx
        self.ids = ids[-n_ctx:] if self.truncated else ids
        self.text = tokenizer.decode(self.ids)
        self.original_length = len(self.text)  # there was no typed text: the decoded window stands for it
        return self

    @property
    def empty(self) -> bool:
        return not self.ids

    def messages(self, n_ctx: int) -> list[str]:
        """Plain-language warnings a page shows next to the prompt box."""
        out = []
        if self.failure:
            out.append(f"This model's tokenizer cannot read this text: {self.failure}. Try other text.")
        if self.unknown:
            # visible(): an unknown tab or control character would otherwise show as nothing between the quotes
            shown = " ".join(f"'{visible(c)}'" for c in self.unknown[:20]) + (" ..." if len(self.unknown) > 20 else "")
            out.append(f"The model has never seen {len(self.unknown)} of these characters, so they were left out: {shown}")
        if self.truncated:
            out.append(f"The prompt has {self.n_known} {self.units}; the model reads at most n_ctx = {n_ctx}, "
                       f"so only the last {n_ctx} are used.")
        return out
