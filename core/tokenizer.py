"""Tokenizers: text to token ids and back, in two kinds behind one interface.

Every tokenizer has ``encode(text, errors)``, ``decode(ids)``, ``vocab_size``, ``pieces`` (the text of every
token id, for axis labels and tables), ``token_strings(ids)``, ``unknown_chars(text)`` (what ``encode`` would
have to drop), ``unit``/``units`` ("character"/"token", for the words a page uses) and ``to_dict``/``files``
(what a checkpoint stores: an entry of config.json and the files written beside it).

- ``CharTokenizer``: one token per distinct character of the training corpus. Characters outside it are
  unknown: ``encode`` refuses them or drops them.
- ``BPETokenizer``: a tokenizer of Hugging Face's ``tokenizers`` library (a Rust library), saved as
  ``tokenizer.json``. ``BPETokenizer.train`` makes a byte-level BPE: text is split into UTF-8 bytes first, so
  it never meets an unknown character, and pairs of frequent pieces are merged into tokens up to a vocabulary
  size. GPT-2's tokenizer is one of these (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``).

``tokenizer_from_dict(entry, folder)`` rebuilds either kind from a checkpoint's config.json entry, and
``load_tokenizer(folder)`` from a checkpoint folder of ours or a Hugging Face folder.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from core.fmt import visible
from core.folder_files import read_text_inside

TOKENIZER_FILE = "tokenizer.json"  # the Hugging Face format; fixed name, never read from a config
VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"  # GPT-2's original pair of files
# Bounds on a tokenizer read from a folder, checked before the Rust library parses it: a tokenizer.json of 2M
# tokens took 74 s and 4.5 GB of server memory on the Generation page. GPT-2's file is 1.4 MB with 50,257
# tokens; the largest vocabularies in use (Gemma's) have 256k.
MAX_TOKENIZER_BYTES = 16 * 1024 * 1024
MAX_TOKENIZER_VOCAB = 262_144
# Encoded once when a tokenizer is read from a folder: a pre-tokenizer regex with catastrophic backtracking, such
# as (a|aa)+$, makes the Rust library panic on a long run of one letter, so such a tokenizer is refused at load.
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
        raise
    except BaseException as e:  # noqa: BLE001 - see above
        raise TokenizerFailed(f"the tokenizer failed on this text ({_short(e)})") from None


class UnknownCharactersError(ValueError):
    """Raised by ``encode`` when the text holds characters the vocabulary lacks; lists them."""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = ", ".join(repr(c) for c in chars[:20]) + (" ..." if len(chars) > 20 else "")
        super().__init__(f"{len(chars)} character(s) not in the model's vocabulary: {shown}")


class Tokenizer:
    """The interface every page and core function uses. Subclasses set ``kind``, ``unit`` and ``units``."""

    kind = ""
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

    def unknown_chars(self, text: str) -> list[str]:
        """Distinct characters of ``text`` that ``encode`` cannot represent, in order of first appearance."""
        return []

    def to_dict(self) -> dict:
        raise NotImplementedError

    def files(self) -> dict[str, str]:
        """Files a checkpoint holds beside config.json for this tokenizer: {file name: text}."""
        return {}

    def token_strings(self, ids: Iterable[int]) -> list[str]:
        """The text of each token of ``ids``: what a chart labels each position with."""
        pieces = self.pieces
        return [pieces[int(i)] for i in ids]

    def visible_tokens(self, ids: Iterable[int]) -> list[str]:
        """``token_strings`` with whitespace and control characters made visible (␣, ⏎, ...), for chart axes."""
        return [visible(s) for s in self.token_strings(ids)]

    def describe(self) -> str:
        raise NotImplementedError

    def partial_ids(self) -> frozenset[int]:
        """Ids whose token is only part of a character (some of its UTF-8 bytes), shown as ⟨e2 80⟩; none for characters."""
        return frozenset()

    def readable_ids(self) -> list[int] | None:
        """Ids whose token is whole, printable text on its own (for random text shown in a box); None: every id."""
        return None

    def __len__(self) -> int:
        return self.vocab_size


class CharTokenizer(Tokenizer):
    kind = "char"
    unit, units = "character", "characters"

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

    @property
    def pieces(self) -> tuple[str, ...]:
        return tuple(self.chars)

    def unknown_chars(self, text: str) -> list[str]:
        """Distinct characters of ``text`` outside the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """Token ids of ``text``. errors="strict" raises UnknownCharactersError naming the unknown
        characters; errors="drop" leaves them out (call ``unknown_chars`` to tell the user which)."""
        _check_errors(errors)
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

    def describe(self) -> str:
        return f"characters ({self.vocab_size:,} distinct)"

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def _check_errors(errors: str):
    if errors not in ("strict", "drop"):
        raise ValueError(f"errors must be 'strict' or 'drop', got {errors!r}")


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: each of the 256 printable stand-ins -> the byte it stands for.
    (Byte-level BPE writes byte b as chr(b) when printable, else as chr(256 + k): 'Ġ' is the space.)"""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _show_bytes(raw: bytes) -> str:
    """A token's bytes as text; a piece of a character (one byte of an emoji's four) as ⟨f0 9f⟩."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "⟨" + " ".join(f"{b:02x}" for b in raw) + "⟩"


def _has_type(component, kind: str) -> bool:
    """Whether a tokenizer.json component (pre-tokenizer, decoder) is ``kind`` or a Sequence holding it."""
    if not isinstance(component, dict):
        return False
    if component.get("type") == kind:
        return True
    parts = component.get("pretokenizers") or component.get("decoders") or []
    return any(_has_type(p, kind) for p in parts)


class BPETokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` tokenizer (``tokenizer.json``); byte-level BPE when made by ``train`` or
    read from GPT-2's files. ``vocab_size`` may be given larger than the tokenizer's own, for a model whose
    output has rows that no token uses (those ids decode to nothing and show as ⟨id N⟩)."""

    kind = "bpe"

    def __init__(self, tokenizer, vocab_size: int | None = None):
        self._tok = tokenizer
        spec = json.loads(tokenizer.to_str())
        self._spec_model = spec.get("model") or {}
        self.byte_level = _has_type(spec.get("decoder"), "ByteLevel") or _has_type(spec.get("pre_tokenizer"), "ByteLevel")
        self._special = {t["id"]: t["content"] for t in spec.get("added_tokens") or [] if isinstance(t, dict)}
        own = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab_size is not None and vocab_size < own:
            raise ValueError(f"the tokenizer has {own:,} tokens, more than the {vocab_size:,} given")
        self._vocab_size = own if vocab_size is None else vocab_size
        self._pieces = None
        self._partial = None

    # ------------------------------------------------------------------ making one

    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int, min_frequency: int = 2,
              special_tokens: Iterable[str] = ()) -> "BPETokenizer":
        """A byte-level BPE learned from ``text`` (a string or an iterator of strings): the 256 bytes, the
        ``special_tokens``, then merges of frequent pairs until ``vocab_size`` tokens (fewer if the text runs out
        of pairs seen ``min_frequency`` times). No prefix space is added, so ids follow the text exactly."""
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

        special_tokens = list(special_tokens)
        floor = 256 + len(special_tokens)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < floor:
            raise ValueError(f"a byte-level BPE needs a vocabulary of at least {floor} (the 256 bytes"
                             f"{' and the special tokens' if special_tokens else ''}), got {vocab_size!r}")
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=special_tokens)
        tok.train_from_iterator([text] if isinstance(text, str) else text, trainer=trainer)
        return cls(tok)

    @classmethod
    def from_str(cls, data: str, vocab_size: int | None = None) -> "BPETokenizer":
        """A tokenizer from the text of a tokenizer.json, checked first against MAX_TOKENIZER_BYTES and
        MAX_TOKENIZER_VOCAB, then probed once (PROBE_TEXT); ValueError saying what is wrong."""
        from tokenizers import Tokenizer as HFTokenizer

        if len(data) > MAX_TOKENIZER_BYTES:
            raise ValueError(f"{TOKENIZER_FILE} is larger than {MAX_TOKENIZER_BYTES // 2**20} MiB")
        try:
            spec = json.loads(data)
        except RecursionError:
            raise ValueError("not a tokenizer the tokenizers library can read (JSON nested too deeply)") from None
        except ValueError as e:
            raise ValueError(f"not a tokenizer the tokenizers library can read (not JSON: {str(e)[:120]})") from None
        model = spec.get("model") if isinstance(spec, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) else None
        merges = model.get("merges") if isinstance(model, dict) else None
        added = spec.get("added_tokens") if isinstance(spec, dict) else None
        for what, items in (("tokens", vocab), ("merges", merges), ("added tokens", added)):
            if isinstance(items, (list, dict)) and len(items) > MAX_TOKENIZER_VOCAB:
                raise ValueError(f"{TOKENIZER_FILE} holds {len(items):,} {what}; this app reads at most "
                                 f"{MAX_TOKENIZER_VOCAB:,}")
        try:
            tok = cls(_rust(HFTokenizer.from_str, data), vocab_size)
        except Exception as e:  # the Rust parser raises its own exception type
            if isinstance(e, ValueError) and "more than the" in str(e):
                raise
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
        return cls.from_str(_read_text(Path(path)), vocab_size)

    @classmethod
    def from_vocab_merges(cls, vocab_path, merges_path, vocab_size: int | None = None) -> "BPETokenizer":
        """GPT-2's original files: vocab.json (token -> id) and merges.txt (one merge per line), with GPT-2's
        byte-level pre-tokenizer and decoder; '<|endoftext|>', when in the vocabulary, is a special token (as
        in Hugging Face's GPT2Tokenizer)."""
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, processors

        try:
            vocab = json.loads(_read_text(Path(vocab_path)))
        except json.JSONDecodeError as e:
            raise ValueError(f"{VOCAB_FILE} is not JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                   for k, v in vocab.items()):
            raise ValueError(f"{VOCAB_FILE} must map token strings to integer ids")
        if len(vocab) > MAX_TOKENIZER_VOCAB:
            raise ValueError(f"{VOCAB_FILE} holds {len(vocab):,} tokens; this app reads at most {MAX_TOKENIZER_VOCAB:,}")
        merges = []
        for n, line in enumerate(_read_text(Path(merges_path)).splitlines(), 1):
            if line.startswith("#version") or not line.strip():
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{MERGES_FILE} line {n}: expected two tokens separated by one space")
            merges.append((parts[0], parts[1]))
        try:
            tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
        except Exception as e:
            raise ValueError(f"{VOCAB_FILE} and {MERGES_FILE} do not make a BPE ({_short(e)})") from None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        if "<|endoftext|>" in vocab:
            tok.add_special_tokens(["<|endoftext|>"])
        out = cls(tok, vocab_size)
        out._probe()
        return out

    # ------------------------------------------------------------------ the interface

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """Token ids of ``text`` (special tokens as the tokenizer defines them). A byte-level BPE never meets an
        unknown character; another tokenizer maps one to its unknown token, or drops it when it has none, for
        either value of ``errors``."""
        _check_errors(errors)
        return list(_rust(self._tok.encode, text).ids)

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < self._vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary of {self._vocab_size}")
        return _rust(self._tok.decode, ids, skip_special_tokens=False)

    def unknown_chars(self, text: str) -> list[str]:
        if self.byte_level:
            return []
        return [c for c in dict.fromkeys(text) if not _rust(self._tok.encode, c).ids]

    @property
    def pieces(self) -> tuple[str, ...]:
        if self._pieces is None:
            self._pieces = tuple(self._piece(i) for i in range(self._vocab_size))
        return self._pieces

    def _piece(self, i: int) -> str:
        if i in self._special:
            return self._special[i]
        token = self._tok.id_to_token(i)
        if token is None:
            return f"⟨id {i}⟩"
        if self.byte_level:
            table = _unicode_to_byte()
            if all(c in table for c in token):
                return _show_bytes(bytes(table[c] for c in token))
        return _rust(self._tok.decode, [i], skip_special_tokens=False)

    def partial_ids(self) -> frozenset[int]:
        if self._partial is None:
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
        merges = [m if isinstance(m, str) else " ".join(m) for m in self._spec_model.get("merges") or []]
        return dict(self._tok.get_vocab(with_added_tokens=True)), merges

    def describe(self) -> str:
        what = "byte-level BPE" if self.byte_level else f"{self._spec_model.get('type', 'Hugging Face')} tokenizer"
        return f"{what} ({self.vocab_size:,} tokens)"

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, byte_level={self.byte_level})"


def _short(e: Exception) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _read_text(path: Path) -> str:
    """A tokenizer file's text, read only from inside its folder (core.folder_files) and at most
    MAX_TOKENIZER_BYTES; ValueError saying what is wrong."""
    try:
        return read_text_inside(path.parent, path.name, MAX_TOKENIZER_BYTES)
    except FileNotFoundError:
        raise ValueError(f"missing file {path.name}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text") from None
    except OSError as e:  # a link out of the folder, too large, unreadable
        raise ValueError(str(e) if e.strerror is None else f"{path.name}: {e.strerror}") from None


def tokenizer_from_dict(data, folder=None, vocab_size: int | None = None) -> Tokenizer:
    """A tokenizer from a checkpoint's config.json entry: {'type': 'char', 'vocab': [...]} holds the characters;
    {'type': 'bpe'} means the file tokenizer.json in ``folder``. ValueError when it cannot be built."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "char":
        return CharTokenizer.from_dict(data)
    if kind == "bpe":
        if folder is None:
            raise ValueError(f"a 'bpe' tokenizer lives in {TOKENIZER_FILE} beside config.json; no folder was given")
        return BPETokenizer.from_file(Path(folder) / TOKENIZER_FILE, vocab_size)
    raise ValueError(f"unknown tokenizer type {kind!r} (expected 'char' or 'bpe')")


def hf_tokenizer_files(folder) -> list[Path]:
    """The tokenizer files of a Hugging Face folder that ``hf_tokenizer`` would read; [] when there are none."""
    folder = Path(folder)
    if (folder / TOKENIZER_FILE).is_file():
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


def load_tokenizer(folder) -> Tokenizer:
    """The tokenizer of a checkpoint folder: ours (config.json's 'tokenizer' entry) or a Hugging Face folder's
    files. ValueError when there is none or it cannot be read."""
    folder = Path(folder)
    try:
        data = json.loads(_read_text(folder / "config.json"))
    except (ValueError, json.JSONDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("tokenizer"), dict):
        return tokenizer_from_dict(data["tokenizer"], folder)
    return hf_tokenizer(folder)


class Prompt:
    """A user's text made ready for the model: unknown characters dropped, the window capped at n_ctx tokens."""

    def __init__(self, tokenizer: Tokenizer, text: str, n_ctx: int):
        text = text or ""
        self.units = tokenizer.units
        self.original_length = len(text)
        self.failure = None  # what the tokenizer library said when it failed on this text (then no ids)
        try:
            self.unknown = tokenizer.unknown_chars(text)
            ids = tokenizer.encode(text, errors="drop")
        except TokenizerFailed as e:
            self.unknown, ids, self.failure = [], [], str(e)
        self.n_known = len(ids)
        self.truncated = len(ids) > n_ctx
        self.ids = ids[-n_ctx:] if self.truncated else ids  # keep the most recent n_ctx tokens
        self.text = tokenizer.decode(self.ids)

    @classmethod
    def of_ids(cls, tokenizer: Tokenizer, ids: Iterable[int], n_ctx: int) -> "Prompt":
        """A prompt given as token ids (a page that wrote the ids itself, e.g. a prompt repeated token for token):
        the model reads exactly these ids, never their text encoded again. For a BPE that re-encoding can differ
        (two copies merge across their seam; a token that is part of a character decodes to '�')."""
        self = cls.__new__(cls)
        self.failure = None
        ids = [int(i) for i in ids]
        self.units, self.unknown, self.n_known = tokenizer.units, [], len(ids)
        self.truncated = len(ids) > n_ctx
        self.ids = ids[-n_ctx:] if self.truncated else ids
        self.text = tokenizer.decode(self.ids)
        self.original_length = len(self.text)
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
            shown = " ".join(f"'{visible(c)}'" for c in self.unknown[:20]) + (" ..." if len(self.unknown) > 20 else "")
            out.append(f"The model has never seen {len(self.unknown)} of these characters, so they were left out: {shown}")
        if self.truncated:
            out.append(f"The prompt has {self.n_known} {self.units}; the model reads at most n_ctx = {n_ctx}, "
                       f"so only the last {n_ctx} are used.")
        return out
