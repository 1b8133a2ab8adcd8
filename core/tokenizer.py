"""Character-level tokenizer: one token per distinct character of the training corpus."""
from __future__ import annotations

from typing import Iterable

from core.fmt import visible


class UnknownCharactersError(ValueError):
    """Raised by ``encode`` when the text holds characters the vocabulary lacks; lists them."""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = ", ".join(repr(c) for c in chars[:20]) + (" ..." if len(chars) > 20 else "")
        super().__init__(f"{len(chars)} character(s) not in the model's vocabulary: {shown}")


class CharTokenizer:
    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        if not chars:
            raise ValueError("a tokenizer needs at least one character")
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("every vocabulary entry must be a single character")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary lists a character twice")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def unknown_chars(self, text: str) -> list[str]:
        """Distinct characters of ``text`` outside the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """Token ids of ``text``. errors="strict" raises UnknownCharactersError naming the unknown
        characters; errors="drop" leaves them out (call ``unknown_chars`` to tell the user which)."""
        if errors not in ("strict", "drop"):
            raise ValueError(f"errors must be 'strict' or 'drop', got {errors!r}")
        if errors == "strict":
            unknown = self.unknown_chars(text)
            if unknown:
                raise UnknownCharactersError(unknown)
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.chars):
                raise ValueError(f"token id {i} is outside the vocabulary of {len(self.chars)}")
            out.append(self.chars[i])
        return "".join(out)

    def to_dict(self) -> dict:
        return {"type": "char", "vocab": self.chars}

    @classmethod
    def from_dict(cls, data: dict) -> "CharTokenizer":
        if not isinstance(data, dict) or data.get("type") != "char" or not isinstance(data.get("vocab"), list):
            raise ValueError("tokenizer entry must be {'type': 'char', 'vocab': [characters]}")
        return cls(data["vocab"])

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class Prompt:
    """A user's text made ready for the model: unknown characters dropped, the window capped at n_ctx."""

    def __init__(self, tokenizer: CharTokenizer, text: str, n_ctx: int):
        text = text or ""
        self.original_length = len(text)
        self.unknown = tokenizer.unknown_chars(text)
        ids = tokenizer.encode(text, errors="drop")
        self.n_known = len(ids)
        self.truncated = len(ids) > n_ctx
        self.ids = ids[-n_ctx:] if self.truncated else ids  # keep the most recent n_ctx tokens
        self.text = tokenizer.decode(self.ids)

    @property
    def empty(self) -> bool:
        return not self.ids

    def messages(self, n_ctx: int) -> list[str]:
        """Plain-language warnings a page shows next to the prompt box."""
        out = []
        if self.unknown:
            shown = " ".join(f"'{visible(c)}'" for c in self.unknown[:20]) + (" ..." if len(self.unknown) > 20 else "")
            out.append(f"The model has never seen {len(self.unknown)} of these characters, so they were left out: {shown}")
        if self.truncated:
            out.append(f"The prompt has {self.n_known} characters; the model reads at most n_ctx = {n_ctx}, "
                       f"so only the last {n_ctx} are used.")
        return out
