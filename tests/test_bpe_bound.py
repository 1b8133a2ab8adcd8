"""Learning a BPE from text without spaces is bounded (every pre-token capped), and ordinary text learns the same
BPE, and encodes to the same ids, as before the cap."""
import random
import string

import pytest
from tokenizers import pre_tokenizers

from core.data.corpus import pydoc_text, read_text_file, shakespeare_path, split_train_val
from core.nn.bpe import BPETokenizer
from core.training.train_data import MAX_PRETOKEN, bpe_pieces, encode_corpus, make_tokenizer

PRE = pre_tokenizers.ByteLevel(add_prefix_space=False)  # the trainer's own pre-tokenizer (core.nn.tokenizer)


def pretokens(text: str) -> list[str]:
    return [piece for piece, _ in PRE.pre_tokenize_str(text)]


def hostile(chars: int) -> str:
    """No spaces at all: random letters, then runs of digits, punctuation, spaces and \\x1c (a separator Python
    counts as white space and the pre-tokenizer does not)."""
    rng = random.Random(0)
    letters = "".join(rng.choices(string.ascii_lowercase, k=chars))
    return letters + "7" * 1000 + "!?" * 700 + " " * 900 + "\n" * 300 + "a\x1c" * 800 + "=" * 129 + "b"


def test_no_pretoken_of_text_without_spaces_is_longer_than_the_cap():
    text = hostile(300_000)
    assert max(len(p) for p in pretokens(text)) == 300_000  # the letters: one pre-token, what made learning quadratic
    pieces = bpe_pieces(text)
    assert "".join(pieces) == text
    assert all(len(p) <= MAX_PRETOKEN for p in pieces[:2300])  # the letters: pieces of at most the cap
    longest = max(len(t) for piece in pieces for t in pretokens(piece))
    assert longest <= MAX_PRETOKEN + 1  # at most the cap and a space before it
    assert len(pieces) >= 300_000 // MAX_PRETOKEN


def test_make_tokenizer_hands_the_trainer_capped_pieces(monkeypatch):
    seen = []
    real = BPETokenizer.train.__func__

    def train(cls, text, vocab_size, **kw):
        seen.append(text)
        return real(cls, text, vocab_size, **kw)

    monkeypatch.setattr(BPETokenizer, "train", classmethod(train))
    text = hostile(300_000)
    tok = make_tokenizer("bpe", text, 512)
    assert tok.vocab_size == 512
    (given,) = seen
    assert isinstance(given, list) and "".join(given) == text  # pieces, not the text whole
    assert max(len(t) for piece in given for t in pretokens(piece)) <= MAX_PRETOKEN + 1


def test_cutting_after_a_line_break_never_changes_a_pretoken():
    text = ("x\ny  \nz\n\nw \n v'\n's\n!\n7\n\u3000\nq\r\nr\n" * 40) + "end"
    pieces = bpe_pieces(text, chunk=5)
    assert len(pieces) > 100 and "".join(pieces) == text
    assert [t for p in pieces for t in pretokens(p)] == pretokens(text)


def corpus(name: str) -> str:
    if name == "pydoc":
        return pydoc_text()
    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare is not on this machine (TE_CORPUS)")
    return read_text_file(path)


@pytest.mark.parametrize("name", ["pydoc", "shakespeare"])
@pytest.mark.parametrize("vocab", [512, 2048])
def test_ordinary_text_learns_the_same_bpe_and_ids_as_before(name, vocab):
    train_text, val_text = split_train_val(corpus(name))
    assert len(bpe_pieces(train_text)) > 1  # cut into chunks, at line breaks only
    before = BPETokenizer.train(train_text, vocab)  # the whole text in one piece, as before the cap
    after = make_tokenizer("bpe", train_text, vocab)
    assert after.to_str() == before.to_str()  # the same vocabulary and merges, byte for byte
    assert encode_corpus(after, val_text).tolist() == after.encode(val_text)  # in pieces, the same ids
