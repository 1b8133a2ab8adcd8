"""What a training run is made of before it starts, as the training page collects it: which corpus (a built-in
one, or uploaded or pasted bytes, checked), which tokens (characters, or a byte-level BPE learned here exactly
as the run will learn it), and the form's settings with the presets that fill it.

The page caches what these functions return (one corpus or BPE shared by every session that asks for the same
one); the cache keys and sizes are decided here, the page only wraps the calls."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from core.data import corpus
from core.data.corpus import (PYDOC_NAME, TRAIN_FRACTION, CorpusInfo, check_corpus_bytes, describe_corpus,
                         split_train_val, train_length)
from core.serve.fmt import clock, gflops, millions, pretty_sci, seconds_or_minutes, size_kib, visible
from core.serve.folder_files import file_stamp
from core.training.job_settings import (FORM_FIELDS, INDUCTION_FORMS_NEAR, INDUCTION_PRESET, MAX_BPE_VOCAB, MIN_BPE_VOCAB,
                               JobCost, JobSettings, expects_induction, induction_eta_s, job_cost, validate_settings)
from core.nn.tokenizer_base import Tokenizer
from core.training.recipes import RECIPES
from core.training.train_data import encode_corpus, make_tokenizer
from core.training.training_job import TrainingJob

# ---------------------------------------------------------------- corpus

SOURCES = {"pydoc": "Python's reference documentation (ships with Python)", "upload": "Upload a .txt file",
           "paste": "Paste text"}
SHAKESPEARE_TITLE = "Tiny Shakespeare"
BUILTIN = ("shakespeare", "pydoc")  # read from a file or from Python itself; the others come from the user
# a saved model's default name starts with its corpus: these have no short name of their own
NAME_STEMS = {"pydoc": "pydoc", "paste": "pasted"}
# the page's cache sizes: the two built-in texts, with room for an old stamp beside a new one; a few uploads and
# BPEs of a class at once. Every entry holds a whole text (up to the upload cap) and a BPE's ids 8 bytes a token
BUILTIN_CACHE_ENTRIES = 4
CHECKED_CACHE_ENTRIES = 8
BPE_CACHE_ENTRIES = 8


def corpus_sources(shakespeare_found: bool) -> dict[str, str]:
    """Source key -> label for the page's radio; Tiny Shakespeare first, and only where its file was found."""
    return {"shakespeare": SHAKESPEARE_TITLE, **SOURCES} if shakespeare_found else dict(SOURCES)


def builtin_stamp(kind: str) -> str:
    """What the cache of a built-in corpus is keyed on besides its kind: Tiny Shakespeare's file stamp, so a
    rewritten file is read again ('' for a file gone meanwhile: the read then fails in words); Python's own
    documentation never changes under a running server."""
    return file_stamp(corpus.shakespeare_path()) if kind == "shakespeare" else ""


def builtin_corpus(kind: str, stamp: str = "") -> tuple[str, CorpusInfo]:
    """(text, info) of a built-in corpus: "shakespeare" or "pydoc"; ValueError, in words, for a file that cannot
    be read. Strings are immutable, so every session may share the result. ``stamp`` (builtin_stamp) is not read
    here: it is part of the key when the page caches this function, so a rewritten file is read again."""
    if kind == "shakespeare":
        path = corpus.shakespeare_path()
        if path is None:  # found when the page was drawn, gone since
            raise ValueError(f"{SHAKESPEARE_TITLE} is no longer where it was found")
        try:
            text = corpus.read_text_file(path)
        except ValueError as e:  # said on a page: the file's name, not where the server keeps it
            raise ValueError(str(e).replace(str(path), path.name)) from None
        return text, describe_corpus(text, path.name)
    text = corpus.pydoc_text()
    return text, describe_corpus(text, PYDOC_NAME)


def checked_corpus(raw: bytes, name: str, max_bytes: int) -> tuple[str | None, CorpusInfo | None, str | None]:
    """(text, info, None) for uploaded or pasted bytes that can be trained on, or (None, None, the reason)."""
    try:
        text = check_corpus_bytes(raw, name, max_bytes)
    except ValueError as e:
        return None, None, str(e)
    return text, describe_corpus(text, name), None


def name_stem(source: str, corpus_name: str) -> str:
    """The start of a saved model's default name: the corpus it was trained on."""
    return NAME_STEMS.get(source, corpus_name)


# ---------------------------------------------------------------- tokens

TOKENIZER_TITLES = {"char": "Characters", "bpe": "Byte-level BPE"}
UNITS = {"char": ("characters", "character"), "bpe": ("tokens", "token")}  # (plural, singular) of a token
# the box takes sizes far outside the limits, so that a size out of range is explained beside it, not clamped
BPE_BOX_MAX = 10 * MAX_BPE_VOCAB
LONGEST_SHOWN = 60  # merged tokens shown in the page's vocabulary box


@dataclass(frozen=True)
class LearnedBPE:
    """A byte-level BPE learned from a text's training part, and both parts cut into its tokens: what a run on
    that text learns and encodes before its first step. Read-only, so sessions may share it."""
    tokenizer: Tokenizer
    train_ids: torch.Tensor  # (N_train,) the training part's token ids
    val_ids: torch.Tensor    # (N_val,) the held-out part's
    train_chars: int         # the training part's length in characters

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def split_tokens(self) -> tuple[int, int]:
        return len(self.train_ids), len(self.val_ids)

    @property
    def chars_per_token(self) -> float:
        """In the training part; max(1, ...): a text can encode to no token at all."""
        return self.train_chars / max(1, len(self.train_ids))


def bpe_size_ok(vocab: int) -> bool:
    """Whether a BPE of this size may be learned (validate_settings says why not, beside the box)."""
    return MIN_BPE_VOCAB <= vocab <= MAX_BPE_VOCAB


def learn_bpe(text: str, vocab: int) -> LearnedBPE:
    """The BPE a run on ``text`` learns, from the training part only (the held-out part stays unseen), with both
    parts encoded as the run encodes them."""
    train_text, val_text = split_train_val(text)
    tok = make_tokenizer("bpe", train_text, vocab)
    return LearnedBPE(tok, encode_corpus(tok, train_text), encode_corpus(tok, val_text), len(train_text))


def bpe_spinner(vocab: int, chars: int) -> str:
    """What the page says while it learns a BPE of ``vocab`` tokens from a text of ``chars`` characters (measured
    by bench/bpe_learning.py: about a second per million characters)."""
    return (f"Learning a byte-level BPE of {vocab:,} tokens from the training {TRAIN_FRACTION:.0%} "
            f"({millions(train_length(chars))} million characters) and cutting the text into its tokens: about a "
            "second per million characters on a shared server ...")


def bpe_shortfall(bpe: LearnedBPE | None, asked: int) -> str | None:
    """Why a learned BPE is smaller than the size asked for; None when it is not (or not learned)."""
    if bpe is None or bpe.vocab_size >= asked:
        return None
    return (f"The text ran out of pairs seen at least twice after {bpe.vocab_size:,} tokens: the vocabulary stops "
            f"there rather than at {int(asked):,}.")


def longest_pieces(tok: Tokenizer, n: int = LONGEST_SHOWN) -> list[str]:
    """The text of the ``n`` longest tokens a byte-level BPE merged (ids from 256: the bytes themselves are not
    merged), longest first and, among equals, in the order they were merged."""
    merged = sorted(range(MIN_BPE_VOCAB, tok.vocab_size), key=lambda i: (-len(tok.pieces[i]), i))
    return [tok.pieces[i] for i in merged[:n]]


Metric = tuple[str, str, str | None]  # (label, value, help) of one st.metric


def corpus_metrics(info: CorpusInfo, tokenizer: str, bpe: LearnedBPE | None) -> list[Metric]:
    """The corpus's size, and its vocabulary and tokens once they are known (for a BPE: once learned)."""
    rows = [("Characters", f"{info.chars:,}", None), ("Size", size_kib(info.bytes), None)]
    if tokenizer == "char":
        return rows + [("Vocabulary m", f"{len(info.vocab):,}", "Distinct characters; each becomes one token."),
                       ("Tokens", f"{info.chars:,}", "One per character.")]
    if bpe is None:
        return rows
    n_train, n_val = bpe.split_tokens
    return rows + [("Vocabulary m", f"{bpe.vocab_size:,}",
                    f"The {MIN_BPE_VOCAB} bytes and the pieces merged from them."),
                   ("Tokens", f"{n_train + n_val:,}", f"{n_train:,} in the training part and {n_val:,} held out: "
                    f"{bpe.chars_per_token:.2f} characters per token on average in the training part.")]


def vocabulary_preview(info: CorpusInfo, tokenizer: str, bpe: LearnedBPE | None) -> list[tuple[str, str | None]]:
    """(caption, text to show in a code box or None) for the page's look at the vocabulary: every character and
    a passage, or the longest merged tokens and the passage cut into its tokens."""
    if tokenizer == "bpe" and bpe is None:
        return [(f"Choose a vocabulary size from {MIN_BPE_VOCAB} to {MAX_BPE_VOCAB:,} to see the BPE's tokens.", None)]
    if bpe is None:
        return [("Every distinct character, in code-point order (␣ is the space, ⏎ the line break):",
                 " ".join(visible(ch) for ch in info.vocab)),
                ("A passage from the middle of the corpus:", info.sample)]
    tok = bpe.tokenizer
    ids = tok.encode(info.sample)
    return [(f"The {LONGEST_SHOWN} longest tokens the BPE merged (␣ is the space, ⏎ the line break):",
             "  ".join(visible(p) for p in longest_pieces(tok))),
            (f"A passage from the middle of the corpus, cut into its {len(ids):,} tokens ({len(info.sample):,} "
             "characters), a bar │ between one token and the next:", "│".join(tok.visible_tokens(ids)))]


# ---------------------------------------------------------------- settings

def recipe_lr(recipe: str) -> float:
    """Each recipe brings its own AdamW rate; the page's box can still be changed afterwards."""
    return RECIPES[recipe]["lr"]


def induction_preset_form() -> dict:
    """The form's values (widget names without the page's prefix) for watching an induction head form: the
    lecture's model over characters, the default recipe, every window holding a repeated span."""
    base = JobSettings()
    form = {key: getattr(base, key) for key in ("d_model", "n_heads", "n_layers", "n_ctx", "batch_size", "seed")}
    return {**form, "dff_auto": True, "recipe": base.recipe, "lr": base.lr,
            "tokenizer": base.tokenizer,  # characters: INDUCTION_FORMS_NEAR was measured on them
            "steps": INDUCTION_PRESET["steps"], "repeat_on": True,
            "repeat": int(round(100 * INDUCTION_PRESET["repeat_fraction"]))}  # the slider is in percent


def form_defaults() -> dict:
    """The form's number boxes (job_settings.FORM_FIELDS) as a fresh page shows them: the lecture's model, the
    default recipe, and d_ff at 4d for when its box is shown."""
    base = JobSettings()
    return {key: 4 * base.d_model if key == "d_ff" else getattr(base, key) for key in FORM_FIELDS}


def settings_from_form(boxes: dict, recipe: str, repeat_percent: float | None, tokenizer: str,
                       bpe_vocab, snapshots: bool = True) -> JobSettings:
    """JobSettings from the form: ``boxes``, the number boxes' values by field (FORM_FIELDS; number boxes may give
    floats for whole numbers; d_ff None for 4d); ``repeat_percent``, the slider's share of windows with a repeat,
    None while its toggle is off; ``snapshots``, whether the run keeps its weights at log-spaced steps."""
    ints = {key: None if boxes[key] is None else int(boxes[key]) for key in FORM_FIELDS if key != "lr"}
    return JobSettings(**ints, lr=float(boxes["lr"]), recipe=recipe, tokenizer=tokenizer, bpe_vocab=int(bpe_vocab),
                       repeat_fraction=0.0 if repeat_percent is None else repeat_percent / 100,
                       snapshots=bool(snapshots))


@dataclass(frozen=True)
class FormCheck:
    """The settings judged against the chosen corpus and tokens."""
    vocab: int                    # m: the corpus's characters, the learned BPE's size, or the size asked for
    split_tokens: tuple[int, int] | None  # (training, held-out) tokens once a BPE is learned; None: characters
    errors: dict[str, str]        # field -> why it cannot train (validate_settings); empty without a corpus
    cost: JobCost | None          # N, D and 6ND; None for a shape that has no count


def check_form(s: JobSettings, info: CorpusInfo | None, bpe: LearnedBPE | None) -> FormCheck:
    """What the form shows under its boxes. Before a BPE is learned (a size out of range) m is the size asked
    for; without a corpus m is 1, and only the per-block count can be shown."""
    if bpe is not None:
        vocab, split = bpe.vocab_size, bpe.split_tokens
    else:
        vocab, split = (s.bpe_vocab if s.tokenizer == "bpe" else len(info.vocab) if info else 1), None
    chars = info.chars if info else 0
    errors = validate_settings(s, chars, vocab, split) if info else {}
    return FormCheck(vocab, split, errors, job_cost(s, vocab, chars, split[0] if split else None))


def cost_metrics(cost: JobCost, rate: float | None, rate_source: str) -> list[Metric]:
    """N, D, 6ND and the time they take at ``rate`` FLOP/s (core.training.speed.measured_flop_rate), for the form."""
    if rate:
        time = (seconds_or_minutes(cost.seconds(rate)),
                f"6ND divided by {gflops(rate)}, measured by {rate_source}. A rough guide: small models pay overheads "
                "the formula ignores, and other people's runs share the same processor.")
    else:
        time = ("–", f"No speed measurement is available: {rate_source}.")
    return [("Parameters N", f"{cost.n_params:,}", None),
            ("Training tokens D", f"{cost.tokens:,}", "steps × batch size × n_ctx"),
            ("Compute 6ND (FLOP)", pretty_sci(cost.flops), None), ("Estimated time", *time)]


def induction_note(s: JobSettings, cost: JobCost, rate: float | None) -> str | None:
    """For a run with the preset's repeats: when its induction head should form, by our measured runs of the
    lecture's model (INDUCTION_FORMS_NEAR), and in time at ``rate`` FLOP/s; None for a run with fewer repeats."""
    if not expects_induction(s):
        return None
    eta = induction_eta_s(s, cost, rate)
    when = f": expect it after about {clock(eta)} of this run" if eta is not None else ""
    return (f"With every window holding a repeat, our runs of the lecture's model grew an induction head near step "
            f"{INDUCTION_FORMS_NEAR:,}{when}. Fewer repeats, another shape or another recipe move that step, sometimes "
            "past the end of the run.")


def start_run(previous: TrainingJob | None, text: str, corpus_name: str, settings: JobSettings,
              **job_args) -> TrainingJob:
    """A new run started in the background (``job_args``: TrainingJob's sample_prompt, owner, session, alive);
    BusyError when the server has no slot for it. ``previous``, this session's last run, is stopped only once the
    new one has started, so that a refused start leaves it as it was."""
    new = TrainingJob(text, corpus_name, settings, **job_args)
    new.start()  # BusyError (core.training.training_job) propagates
    if previous is not None:
        previous.stop(wait=None)  # the worker ends its step on its own; the page does not wait for it
    return new

