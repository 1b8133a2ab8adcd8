"""Byte-level BPE: a tokenizer of Hugging Face's ``tokenizers`` library (a Rust library), saved as tokenizer.json.

``BPETokenizer.train`` makes one: text is split into UTF-8 bytes first, so it never meets an unknown character,
and pairs of frequent pieces are merged into tokens up to a vocabulary size. GPT-2's tokenizer is one of these
(``tokenizer.json``, or ``vocab.json`` + ``merges.txt``), read by ``hf_tokenizer``.

A tokenizer read from a folder is untrusted input for a Rust library, so it passes three guards: bounds checked
in Python before the Rust parse (``MAX_TOKENIZER_*``), every call into Rust wrapped so a panic becomes an error
(``_rust``, ``TokenizerFailed``), and one probe encoding at load (``PROBE_TEXT``).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from core.serve.folder_files import read_text_inside
from core.nn.tokenizer_base import Tokenizer, byte_fragment, check_errors

TOKENIZER_FILE = "tokenizer.json"  # the Hugging Face format; fixed name, never read from a config
VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"  # GPT-2's original pair of files
# Bounds on a tokenizer read from a folder, checked before the Rust library parses it: a tokenizer.json of 2M
# tokens took 74 s and 4.5 GB of server memory on the Generation page. GPT-2's file is 1.4 MB with 50,257
# tokens; the largest vocabularies in use (Gemma's) have 256k.
MAX_TOKENIZER_BYTES = 16 * 1024 * 1024
MAX_TOKENIZER_VOCAB = 262_144
# Encoded once when a tokenizer is read from a folder: a pre-tokenizer regex with catastrophic backtracking, such
# as (a|aa)+$, makes the Rust library panic on a long run of one letter, so such a tokenizer is refused at load.
# Refused at load, the folder is not loaded and the reason is shown, rather than a model that fails on most
# prompts; the runs are of letters, a digit, spaces, dots and line breaks, which ordinary text repeats.
PROBE_TEXT = "The quick brown fox, 1234: ok? " + " ".join(c * 200 for c in "ae1 .\n")


class TokenizerFailed(ValueError):
    """The tokenizers library failed on an input (a Rust panic, which Python sees as a BaseException)."""


def _rust(call, *args, **kwargs):
    """``call(*args, **kwargs)`` into the tokenizers library, with a panic turned into TokenizerFailed. pyo3's
    PanicException derives from BaseException, not Exception: uncaught, it ends the page's script thread and the
    page spins forever with no message."""
    try:
        return call(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise  # Python's own ways of stopping (Ctrl-C, exit, a closed generator) must still stop it
    except BaseException as e:  # noqa: BLE001 - see above
        # a ValueError subclass, so every caller's existing `except ValueError` shows it as bad input
        raise TokenizerFailed(f"the tokenizer failed on this text ({_short(e)})") from None


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: each of the 256 printable stand-ins -> the byte it stands for.
    (Byte-level BPE writes byte b as chr(b) when printable, else as chr(256 + k): 'Ġ' is the space.)"""
    # the 188 bytes that are printable Latin-1 characters stand for themselves ('¡'..'¬', '®'..'ÿ': 0xAD, the soft
    # hyphen, is invisible, so it is left out with the control characters and the space)
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            # the other 68, in byte order, take the characters from 256 up: space (0x20) is the 33rd, chr(288) 'Ġ'
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _show_bytes(raw: bytes) -> str:
    """A token's bytes as text; a piece of a character (one byte of an emoji's four) as ⟨f0 9f⟩."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # not whole UTF-8: decoding would print '�', which hides which bytes the token holds
        return byte_fragment(raw)


def _has_type(component, kind: str) -> bool:
    """Whether a tokenizer.json component (pre-tokenizer, decoder) is ``kind`` or a Sequence holding it."""
    if not isinstance(component, dict):
        return False  # null in the file: no such component
    if component.get("type") == kind:
        return True
    # a Sequence lists its parts under "pretokenizers" or "decoders", and may nest another Sequence
    parts = component.get("pretokenizers") or component.get("decoders") or []
    return any(_has_type(p, kind) for p in parts)


class BPETokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` tokenizer (``tokenizer.json``); byte-level BPE when made by ``train`` or
    read from GPT-2's files. ``vocab_size`` may be given larger than the tokenizer's own, for a model whose
    output has rows that no token uses (those ids decode to nothing and show as ⟨id N⟩)."""

    kind = "bpe"

    def __init__(self, tokenizer, vocab_size: int | None = None):
        self._tok = tokenizer
        # its own JSON shows the whole pipeline as plain data, Sequences included, which the binding's objects hide
        spec = json.loads(tokenizer.to_str())
        self._spec_model = spec.get("model") or {}
        # either component marks byte level: a file may put ByteLevel in only one of them
        self.byte_level = _has_type(spec.get("decoder"), "ByteLevel") or _has_type(spec.get("pre_tokenizer"), "ByteLevel")
        self._special = {t["id"]: t["content"] for t in spec.get("added_tokens") or [] if isinstance(t, dict)}
        own = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab_size is not None and vocab_size < own:
            # the model could not score the tokenizer's last ids: its output has a row per id
            raise ValueError(f"the tokenizer has {own:,} tokens, more than the {vocab_size:,} given")
        self._vocab_size = own if vocab_size is None else vocab_size
        self._pieces = None  # built on first use: one library call per id (50,257 for GPT-2)
        self._partial = None

    # ------------------------------------------------------------------ making one

    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int, min_frequency: int = 2,
              special_tokens: Iterable[str] = ()) -> "BPETokenizer":
        """A byte-level BPE learned from ``text`` (a string or an iterator of strings): the 256 bytes, the
        ``special_tokens``, then merges of frequent pairs until ``vocab_size`` tokens (fewer if the text runs out
        of pairs seen ``min_frequency`` times). No prefix space is added, so ids follow the text exactly."""
        # local: tokenizers loads only when a BPE tokenizer is read or trained
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

        special_tokens = list(special_tokens)
        floor = 256 + len(special_tokens)  # every byte gets a token before the first merge
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < floor:
            raise ValueError(f"a byte-level BPE needs a vocabulary of at least {floor} (the 256 bytes"
                             f"{' and the special tokens' if special_tokens else ''}), got {vocab_size!r}")
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        # initial_alphabet: all 256 byte stand-ins, even those the text lacks, so later text never meets a gap
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=special_tokens)
        tok.train_from_iterator([text] if isinstance(text, str) else text, trainer=trainer)
        return cls(tok)

    @classmethod
    def from_str(cls, data: str, vocab_size: int | None = None) -> "BPETokenizer":
        """A tokenizer from the text of a tokenizer.json, checked first against MAX_TOKENIZER_BYTES and
        MAX_TOKENIZER_VOCAB, then probed once (PROBE_TEXT); ValueError saying what is wrong."""
        # local: tokenizers loads only when a BPE tokenizer is read or trained
        from tokenizers import Tokenizer as HFTokenizer

        if len(data) > MAX_TOKENIZER_BYTES:
            raise ValueError(f"{TOKENIZER_FILE} is larger than {MAX_TOKENIZER_BYTES // 2**20} MiB")
        # parsed in Python first, only to count the entries, so that an oversized vocabulary is refused before
        # the Rust library builds it (where the 74 s and 4.5 GB went)
        try:
            spec = json.loads(data)
        except RecursionError:  # [[[[...]]]]: Python's parser gives up by recursion, not ValueError
            raise ValueError("not a tokenizer the tokenizers library can read (JSON nested too deeply)") from None
        except ValueError as e:
            raise ValueError(f"not a tokenizer the tokenizers library can read (not JSON: {str(e)[:120]})") from None
        # each level may be missing or of the wrong type in a hostile file; the Rust parse below says which
        model = spec.get("model") if isinstance(spec, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) else None
        merges = model.get("merges") if isinstance(model, dict) else None
        added = spec.get("added_tokens") if isinstance(spec, dict) else None
        # one bound for the three lists: each one is built into a table by the Rust parse
        for what, items in (("tokens", vocab), ("merges", merges), ("added tokens", added)):
            if isinstance(items, (list, dict)) and len(items) > MAX_TOKENIZER_VOCAB:
                raise ValueError(f"{TOKENIZER_FILE} holds {len(items):,} {what}; this app reads at most "
                                 f"{MAX_TOKENIZER_VOCAB:,}")
        try:
            tok = cls(_rust(HFTokenizer.from_str, data), vocab_size)
        except Exception as e:  # the Rust parser raises its own exception type
            if isinstance(e, ValueError) and "more than the" in str(e):
                raise  # our own message from __init__ (too many tokens for the model): already in words
            raise ValueError(f"not a tokenizer the tokenizers library can read ({_short(e)})") from None
        tok._probe()
        return tok

    def _probe(self) -> None:
        """Encode and decode PROBE_TEXT once; ValueError when the library fails on it."""
        try:
            self.decode(self.encode(PROBE_TEXT))
        except TokenizerFailed as e:
            raise ValueError(f"it fails on ordinary text, so this app does not use it ({e})") from None

    @classmethod
    def from_file(cls, path, vocab_size: int | None = None) -> "BPETokenizer":
        return cls.from_str(read_tokenizer_file(Path(path)), vocab_size)

    @classmethod
    def from_vocab_merges(cls, vocab_path, merges_path, vocab_size: int | None = None) -> "BPETokenizer":
        """GPT-2's original files: vocab.json (token -> id) and merges.txt (one merge per line), with GPT-2's
        byte-level pre-tokenizer and decoder; '<|endoftext|>', when in the vocabulary, is a special token (as
        in Hugging Face's GPT2Tokenizer)."""
        # local: tokenizers loads only when a BPE tokenizer is read or trained
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, processors

        try:
            vocab = json.loads(read_tokenizer_file(Path(vocab_path)))
        except json.JSONDecodeError as e:
            raise ValueError(f"{VOCAB_FILE} is not JSON ({e.msg} at line {e.lineno})") from None
        # checked before models.BPE sees it, so that a wrong file is named and described in words
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                   for k, v in vocab.items()):
            raise ValueError(f"{VOCAB_FILE} must map token strings to integer ids")
        if len(vocab) > MAX_TOKENIZER_VOCAB:  # the same bound as tokenizer.json's, for the same Rust build
            raise ValueError(f"{VOCAB_FILE} holds {len(vocab):,} tokens; this app reads at most {MAX_TOKENIZER_VOCAB:,}")
        merges = []
        for n, line in enumerate(read_tokenizer_file(Path(merges_path)).splitlines(), 1):
            if line.startswith("#version") or not line.strip():  # GPT-2's file opens with "#version: 0.2"
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{MERGES_FILE} line {n}: expected two tokens separated by one space")
            merges.append((parts[0], parts[1]))
        try:
            tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
        except Exception as e:
            raise ValueError(f"{VOCAB_FILE} and {MERGES_FILE} do not make a BPE ({_short(e)})") from None
        # GPT-2's pipeline, as in its own tokenizer.json; the post-processor touches offsets only, never ids
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        if "<|endoftext|>" in vocab:
            tok.add_special_tokens(["<|endoftext|>"])  # so the text "<|endoftext|>" is one token, not split into pieces
        out = cls(tok, vocab_size)
        out._probe()  # these files are read from a folder too: the same probe as tokenizer.json's
        return out

    # ------------------------------------------------------------------ the interface

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """Token ids of ``text`` (special tokens as the tokenizer defines them). A byte-level BPE never meets an
        unknown character; another tokenizer maps one to its unknown token, or drops it when it has none, for
        either value of ``errors``."""
        check_errors(errors)  # still checked, so that a wrong value fails with either kind of tokenizer
        return list(_rust(self._tok.encode, text).ids)

    def _checked(self, ids: Iterable[int]) -> list[int]:
        ids = [int(i) for i in ids]
        # the library skips an id it does not know without a word; we refuse it, as CharTokenizer does
        for i in ids:
            if not 0 <= i < self._vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary of {self._vocab_size}")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return _rust(self._tok.decode, self._checked(ids), skip_special_tokens=False)

    def shown_text(self, ids: Iterable[int]) -> str:
        """``decode``, with a character left unfinished written as its bytes (⟨e2 80⟩, as the tokens' labels write
        them) where the library writes '�'."""
        if not self.byte_level:
            return self.decode(ids)  # a tokenizer that is not byte level never splits a character
        table, raw = _unicode_to_byte(), bytearray()
        for i in self._checked(ids):  # an id outside the vocabulary is refused, as by decode
            token = self._special.get(i)
            if token is not None:
                raw += token.encode("utf-8")  # '<|endoftext|>' as written
            elif (token := self._tok.id_to_token(i)) is not None and all(c in table for c in token):
                raw += bytes(table[c] for c in token)
            elif token is not None:
                raw += _rust(self._tok.decode, [i], skip_special_tokens=False).encode("utf-8")
        return raw.decode("utf-8", "te_fragment")

    def unknown_chars(self, text: str) -> list[str]:
        if self.byte_level:
            return []  # every character is some bytes, and every byte is a token
        # a character the tokenizer encodes to no id at all is one it drops (it has no unknown token)
        return [c for c in dict.fromkeys(text) if not _rust(self._tok.encode, c).ids]

    @property
    def pieces(self) -> tuple[str, ...]:
        if self._pieces is None:
            # every id up to the model's vocab_size, so rows beyond the tokenizer's own get a label too
            self._pieces = tuple(self._piece(i) for i in range(self._vocab_size))
        return self._pieces

    def _piece(self, i: int) -> str:
        if i in self._special:
            return self._special[i]  # '<|endoftext|>' as written, not as its bytes
        token = self._tok.id_to_token(i)
        if token is None:
            return f"⟨id {i}⟩"  # a row of the model's output that no token uses
        if self.byte_level:
            # the token is written in stand-ins ('Ġthe'): back to its bytes, then to text or ⟨hex⟩
            table = _unicode_to_byte()
            if all(c in table for c in token):
                return _show_bytes(bytes(table[c] for c in token))
        # not byte level (or a token outside the alphabet): the library's own decoder knows its conventions
        return _rust(self._tok.decode, [i], skip_special_tokens=False)

    def partial_ids(self) -> frozenset[int]:
        if self._partial is None:
            # a ⟨..⟩ piece is _show_bytes' hex of part of a character; ⟨id N⟩ and a special token that happens
            # to be written in angle brackets are not
            self._partial = frozenset(i for i, p in enumerate(self.pieces) if i not in self._special
                                      and p.startswith("⟨") and p.endswith("⟩") and not p.startswith("⟨id "))
        return self._partial

    def readable_ids(self) -> list[int]:
        """Tokens that decode on their own to printable text: no piece of a character (⟨e2 80⟩), no control
        character or line break, no special token."""
        partial = self.partial_ids()
        return [i for i, p in enumerate(self.pieces) if i not in self._special and i not in partial and p
                and p.isprintable() and not p.startswith("⟨id ")]

    def to_dict(self) -> dict:
        return {"type": "bpe"}  # the tokenizer itself is the file tokenizer.json beside config.json

    def to_str(self) -> str:
        return self._tok.to_str()

    def files(self) -> dict[str, str]:
        return {TOKENIZER_FILE: self.to_str()}

    def vocab_and_merges(self) -> tuple[dict[str, int], list[str]] | None:
        """GPT-2's original pair of files (vocab.json's mapping, merges.txt's lines) for a byte-level BPE;
        None for any other tokenizer."""
        if not self.byte_level or self._spec_model.get("type") != "BPE":
            return None
        # newer tokenizer.json files write a merge as a pair ["a", "b"], older ones as the line "a b"
        merges = [m if isinstance(m, str) else " ".join(m) for m in self._spec_model.get("merges") or []]
        return dict(self._tok.get_vocab(with_added_tokens=True)), merges

    def describe(self) -> str:
        what = "byte-level BPE" if self.byte_level else f"{self._spec_model.get('type', 'Hugging Face')} tokenizer"
        return f"{what} ({self.vocab_size:,} tokens)"

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, byte_level={self.byte_level})"


def _short(e: Exception) -> str:
    # the first line only, cut at 200 characters: a Rust error can run over many lines, and a page shows one
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def read_tokenizer_file(path: Path) -> str:
    """A tokenizer file's text, read only from inside its folder (core.serve.folder_files) and at most
    MAX_TOKENIZER_BYTES; ValueError saying what is wrong."""
    try:
        return read_text_inside(path.parent, path.name, MAX_TOKENIZER_BYTES)
    except FileNotFoundError:
        raise ValueError(f"missing file {path.name}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text") from None
    except OSError as e:  # a link out of the folder, too large, unreadable
        raise ValueError(str(e) if e.strerror is None else f"{path.name}: {e.strerror}") from None


def hf_tokenizer_files(folder) -> list[Path]:
    """The tokenizer files of a Hugging Face folder that ``hf_tokenizer`` would read; [] when there are none."""
    folder = Path(folder)
    if (folder / TOKENIZER_FILE).is_file():  # the newer, complete format wins when a folder has both
        return [folder / TOKENIZER_FILE]
    if (folder / VOCAB_FILE).is_file() and (folder / MERGES_FILE).is_file():
        return [folder / VOCAB_FILE, folder / MERGES_FILE]
    return []


def hf_tokenizer(folder, vocab_size: int | None = None) -> BPETokenizer:
    """The tokenizer of a Hugging Face folder: tokenizer.json, else vocab.json + merges.txt."""
    files = hf_tokenizer_files(folder)
    if not files:
        raise ValueError(f"no tokenizer: the folder needs {TOKENIZER_FILE}, or {VOCAB_FILE} and {MERGES_FILE}")
    if len(files) == 1:
        return BPETokenizer.from_file(files[0], vocab_size)
    return BPETokenizer.from_vocab_merges(*files, vocab_size=vocab_size)
