"""The tokenizer interface, on its own so that both kinds can subclass it: ``core.nn.tokenizer`` (characters, the
front door) and ``core.nn.bpe`` (byte-level BPE) import it, and neither has to import the other to do so."""
from __future__ import annotations

import codecs
import re
from typing import Iterable

from core.serve.fmt import visible

# ⟨e2 80⟩: bytes that are only part of a character, the one way the app writes them (a token's label, a text cut in
# the middle of a character)
FRAGMENT = re.compile(r"⟨[0-9a-f]{2}(?: [0-9a-f]{2})*⟩")


def byte_fragment(raw: bytes) -> str:
    """b'\\xe2\\x80' -> '⟨e2 80⟩': part of a character's UTF-8 code, in hexadecimal."""
    return "⟨" + " ".join(f"{b:02x}" for b in raw) + "⟩"


# bytes.decode("utf-8", "te_fragment"): what is not whole UTF-8 is written as byte_fragment, not as '�'
codecs.register_error("te_fragment", lambda e: (byte_fragment(e.object[e.start:e.end]), e.end))


def fragment_note(text: str) -> str | None:
    """One sentence on the first piece of a character written in ``text`` (``FRAGMENT``); None when there is none.
    A page shows it where such a piece first appears."""
    m = FRAGMENT.search(text)
    if m is None:
        return None
    return (f"{m.group()} is part of a character, written as its bytes in hexadecimal: a byte-level tokenizer that has "
            "no token for a whole character (an emoji, an accented or non-Latin letter) reads the 2 to 4 bytes of its "
            "UTF-8 code as tokens of their own, and a text that stops inside such a character ends in its bytes, "
            "written the same way.")


class Tokenizer:
    """The interface every page and core function uses. Subclasses set ``kind``, ``unit`` and ``units``."""

    kind = ""  # "char" or "bpe": the 'type' of the tokenizer entry in a checkpoint's config.json
    unit, units = "token", "tokens"  # what one id stands for, in the words a page uses

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def pieces(self) -> tuple[str, ...]:
        """The text of every token id, in id order (a token that is part of a character shows its bytes)."""
        raise NotImplementedError

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def shown_text(self, ids: Iterable[int]) -> str:
        """``decode`` for a reader: a character left unfinished is written as its bytes (``byte_fragment``), as a
        token's label writes it, never as '�'. The same as ``decode`` for whole characters."""
        return self.decode(ids)

    def unknown_chars(self, text: str) -> list[str]:
        """Distinct characters of ``text`` that ``encode`` cannot represent, in order of first appearance."""
        return []  # the default suits a tokenizer that can write any text, as a byte-level BPE can

    def to_dict(self) -> dict:
        raise NotImplementedError

    def files(self) -> dict[str, str]:
        """Files a checkpoint holds beside config.json for this tokenizer: {file name: text}."""
        return {}  # a character vocabulary fits in config.json itself

    def token_strings(self, ids: Iterable[int]) -> list[str]:
        """The text of each token of ``ids``: what a chart labels each position with."""
        pieces = self.pieces  # read once: for a BPE it is built on first use
        return [pieces[int(i)] for i in ids]

    def visible_tokens(self, ids: Iterable[int]) -> list[str]:
        """``token_strings`` with whitespace and control characters made visible (␣, ⏎, ...), for chart axes."""
        return [visible(s) for s in self.token_strings(ids)]

    def describe(self) -> str:
        raise NotImplementedError

    def partial_ids(self) -> frozenset[int]:
        """Ids whose token is only part of a character (some of its UTF-8 bytes), shown as ``byte_fragment`` writes
        them (⟨e2 80⟩); none for characters."""
        return frozenset()

    def readable_ids(self) -> list[int] | None:
        """Ids whose token is whole, printable text on its own (for random text shown in a box); None: every id."""
        return None  # a character tokenizer's pieces are whole characters already

    def __len__(self) -> int:
        return self.vocab_size  # len(tok), as for a Hugging Face tokenizer: every id the model scores


def check_errors(errors: str):
    # the one check of ``encode``'s errors argument, for both kinds: a typo ("ignore") must not pass for "drop"
    if errors not in ("strict", "drop"):
        raise ValueError(f"errors must be 'strict' or 'drop', got {errors!r}")
