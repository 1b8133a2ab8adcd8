"""The tokenizer interface's second kind: byte-level BPE through Hugging Face's tokenizers library. Its ids
must equal Hugging Face's own tokenizer on the same files, and odd text must come back exactly."""
import json

import pytest

from core.nn.bpe import BPETokenizer, hf_tokenizer
from core.nn.tokenizer import CharTokenizer, Prompt, load_tokenizer, tokenizer_from_dict
from core.nn.tokenizer_base import Tokenizer

ODD = [
    "KING HENRY:\nOnce more unto the breach, dear friends!",
    "emoji 🙂👍🏽 and a family 👨‍👩‍👧 in one grapheme",
    "right to left: مرحبا بالعالم and עברית, mixed ‮reversed‬",
    "control \x00\x01\x07\x1b[31m\x7f tab\tCR\r\nform\x0c feed",
    "   leading and trailing spaces   ",
    "",
    "accents é è ü, CJK 漢字かな, maths ∑∫√ and a lone combining mark \u0301",
]


@pytest.fixture(scope="module")
def bpe(corpus_text):
    return BPETokenizer.train(corpus_text[:200_000], vocab_size=400, special_tokens=["<|endoftext|>"])


def test_both_kinds_share_the_interface(bpe):
    char = CharTokenizer.from_text("abc ")
    for tok in (char, bpe):
        assert isinstance(tok, Tokenizer)
        assert len(tok.pieces) == tok.vocab_size == len(tok)
        ids = tok.encode("abc a")
        assert tok.decode(ids) == "abc a" and "".join(tok.token_strings(ids)) == "abc a"
    assert (char.unit, char.units, bpe.unit, bpe.units) == ("character", "characters", "token", "tokens")
    assert bpe.vocab_size == 400 and bpe.byte_level


@pytest.mark.parametrize("text", ODD)
def test_byte_level_bpe_round_trips_odd_text(bpe, text):
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert bpe.unknown_chars(text) == []  # bytes: nothing is ever unknown
    assert bpe.encode(text, errors="drop") == ids


def test_token_strings_show_spaces_and_pieces_of_characters(bpe):
    ids = bpe.encode(" the king 🙂")
    shown = bpe.visible_tokens(ids)
    assert shown[0].startswith("␣")  # a leading space belongs to the token, shown as ␣
    assert any(s.startswith("⟨") for s in shown)  # the emoji's four bytes are not all one token here
    assert bpe.pieces[bpe.encode("<|endoftext|>")[0]] == "<|endoftext|>"


def test_words_become_fewer_tokens_than_characters(bpe):
    text = "KING HENRY:\nWhat say you to the king?"
    assert len(bpe.encode(text)) < 0.7 * len(text)


def test_prompt_counts_tokens(bpe):
    p = Prompt(bpe, "the king " * 20, n_ctx=8)
    assert p.truncated and len(p.ids) == 8 and p.unknown == []
    assert "tokens" in p.messages(8)[0] and "characters" not in p.messages(8)[0]


def test_saved_and_rebuilt_through_the_checkpoint_entry(bpe, tmp_path):
    for name, text in bpe.files().items():
        (tmp_path / name).write_text(text)
    (tmp_path / "config.json").write_text(json.dumps({"format_version": 1, "tokenizer": bpe.to_dict()}))
    for again in (tokenizer_from_dict(bpe.to_dict(), tmp_path), load_tokenizer(tmp_path)):
        assert again.pieces == bpe.pieces and again.encode(ODD[1]) == bpe.encode(ODD[1])
    char = CharTokenizer.from_text("xyz")
    assert tokenizer_from_dict(char.to_dict()).chars == char.chars
    with pytest.raises(ValueError, match="unknown tokenizer type"):
        tokenizer_from_dict({"type": "wordpiece"})
    (tmp_path / "tokenizer.json").write_text("{ broken")
    with pytest.raises(ValueError, match="tokenizers library"):
        tokenizer_from_dict({"type": "bpe"}, tmp_path)


# A corpus whose merges can be counted by hand. One word per line: GPT-2's split makes each line a word and
# each "\n" a word of its own, so a pair is only ever counted inside a word. Counts: hug 10, pug 5, pun 12,
# bun 4, hugs 5, and zq once.
#   pairs:  u g 20 (hug, pug, hugs), p u 17, u n 16, h u 15, g s 5, b u 4, z q 1  -> merge 1: u g
#   then:   u n 16, h ug 15, p u 12, p ug 5, ug s 5, b u 4                        -> merge 2: u n
#   then:   h ug 15, p un 12, p ug 5, ug s 5, b un 4                              -> merge 3: h ug, merge 4: p un
#   then:   p ug 5 and hug s 5 (a tie: the library's order), then b un 4; then only z q, seen once, is left
HAND = "hug\n" * 10 + "pug\n" * 5 + "pun\n" * 12 + "bun\n" * 4 + "hugs\n" * 5 + "zq\n"
FIRST_MERGES = ["u g", "u n", "h ug", "p un"]


def test_the_most_frequent_pair_is_merged_first():
    tok = BPETokenizer.train(HAND, vocab_size=256 + len(FIRST_MERGES))
    vocab, merges = tok.vocab_and_merges()
    assert merges == FIRST_MERGES
    assert tok.vocab_size == 256 + 4  # the 256 bytes, then one token per merge
    # each merge is a new id after the bytes, in the order it was learned
    assert [vocab[m.replace(" ", "")] for m in merges] == [256, 257, 258, 259]
    assert tok.visible_tokens(tok.encode("hug")) == ["hug"]  # merged all the way
    assert tok.visible_tokens(tok.encode("pugs")) == ["p", "ug", "s"]  # p ug was not learned yet


def test_learning_stops_when_no_pair_is_seen_twice():
    tok = BPETokenizer.train(HAND, vocab_size=300)  # asks for more than the text can give
    _, merges = tok.vocab_and_merges()
    assert merges[:4] == FIRST_MERGES and set(merges[4:6]) == {"p ug", "hug s"} and merges[6:] == ["b un"]
    assert tok.vocab_size == 256 + 7  # z q, seen once, is below min_frequency = 2
    assert [tok.visible_tokens(tok.encode(w)) for w in ("hugs", "bun", "zq")] == [["hugs"], ["bun"], ["z", "q"]]


# (text, its token count by hand): one token per UTF-8 byte, but "hugs" (4 bytes) and "pun" (3) are one each
@pytest.mark.parametrize("text, n_tokens", [
    ("zebra quux", 10),
    ("hugs 🙂 für 漢字\x00\t‘pun’", 32 - 3 - 2),  # 32 bytes: 🙂 is 4, ü 2, a CJK character 3, ‘ ’ 3 each
    ("", 0),
])
def test_text_with_characters_the_corpus_never_had_comes_back_exactly(text, n_tokens):
    tok = BPETokenizer.train(HAND, vocab_size=300)
    ids = tok.encode(text)
    assert tok.decode(ids) == text and all(0 <= i < tok.vocab_size for i in ids)
    assert len(ids) == n_tokens


def test_vocabulary_size_is_checked():
    with pytest.raises(ValueError, match="at least 256"):
        BPETokenizer.train("abc", vocab_size=100)
    tok = BPETokenizer.train(HAND, vocab_size=300)
    padded = BPETokenizer.from_str(tok.to_str(), vocab_size=tok.vocab_size + 3)
    assert padded.pieces[-1] == f"⟨id {tok.vocab_size + 2}⟩" and padded.decode([tok.vocab_size + 2]) == ""
    with pytest.raises(ValueError, match="outside the vocabulary"):
        padded.decode([tok.vocab_size + 3])


# ------------------------------------------------------------------ the same ids as Hugging Face's tokenizer

def _gpt2_files(bpe, folder, kind):
    folder.mkdir()
    if kind == "tokenizer.json":
        (folder / "tokenizer.json").write_text(bpe.to_str())
    else:
        vocab, merges = bpe.vocab_and_merges()
        (folder / "vocab.json").write_text(json.dumps(vocab))
        (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return folder


@pytest.mark.parametrize("kind", ["tokenizer.json", "vocab.json + merges.txt"])
def test_ids_equal_hugging_face_for_the_same_files(bpe, tmp_path, kind):
    transformers = pytest.importorskip("transformers")
    folder = _gpt2_files(bpe, tmp_path / "tok", kind)
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    ours = hf_tokenizer(folder)
    assert ours.vocab_size == len(theirs)
    for text in ODD + ["the end<|endoftext|>A new text", "1234567 numbers, 's 't 're contractions"]:
        assert ours.encode(text) == theirs.encode(text), text
        assert theirs.decode(ours.encode(text)) == ours.decode(ours.encode(text))


def test_pieces_of_a_character_are_marked_and_left_out_of_random_text():
    # our own text: the emoji and the curly quote are several UTF-8 bytes each
    tok = BPETokenizer.train("a quiet ‘pond’ 🙂 and a pond again " * 30, vocab_size=300)
    partial = tok.partial_ids()
    assert all(tok.pieces[i].startswith("⟨") for i in partial)
    emoji = tok.encode("🙂")
    # the emoji is either one merged token or several pieces of it; pieces are exactly the partial ids
    assert all((i in partial) == (len(emoji) > 1) for i in emoji)
    readable = tok.readable_ids()
    assert readable and not set(readable) & partial
    for i in readable:
        assert tok.decode([i]) == tok.pieces[i] and tok.pieces[i].isprintable()
    assert tok.encode("\n")[0] not in readable  # a line break is not printable text in a box
    assert CharTokenizer.from_text("ab").partial_ids() == frozenset() and CharTokenizer.from_text("ab").readable_ids() is None


def test_a_prompt_given_as_ids_is_read_as_those_ids(bpe):
    ids = bpe.encode("the oars") + bpe.encode("the oars")
    p = Prompt.of_ids(bpe, ids, n_ctx=100)
    assert p.ids == ids and p.text == bpe.decode(ids) and not p.truncated and not p.messages(100)
    p = Prompt.of_ids(bpe, ids, n_ctx=3)
    assert p.ids == ids[-3:] and p.truncated and p.n_known == len(ids)
    assert "only the last 3 are used" in p.messages(3)[0]
