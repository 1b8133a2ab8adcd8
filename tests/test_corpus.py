"""Corpora for the training page: the built-in reference text and the checks on uploaded or pasted text."""
import pytest

from core.data.corpus import MAX_VOCAB, check_corpus_bytes, describe_corpus, pydoc_text


def test_pydoc_corpus_is_always_there():
    text = pydoc_text()
    assert len(text) > 100_000  # plenty for the lecture's n_ctx = 128
    assert 50 < len(set(text)) < MAX_VOCAB
    assert pydoc_text() == text  # a fixed order, so a seed reproduces a run


def test_good_text_passes():
    assert check_corpus_bytes("héllo\nworld\t!\r\n".encode("utf-8"), "f.txt", 100) == "héllo\nworld\t!\r\n"


@pytest.mark.parametrize("raw, reason", [
    (b"", "is empty"),
    (b"  \n\t ", "is empty"),
    (b"abc\x00def", "looks binary"),
    ("caf\u00e9".encode("latin-1"), "not UTF-8"),
    (bytes(range(1, 32)) * 10 + b"text", "looks binary"),
    (b"x" * 101, "limit is"),
    ("".join(chr(0x4E00 + i) for i in range(MAX_VOCAB + 1)).encode("utf-8"), "distinct characters"),
])
def test_bad_uploads_are_refused_with_a_reason(raw, reason):
    max_bytes = 100 if reason == "limit is" else 10 * 2**20
    with pytest.raises(ValueError, match=reason) as e:
        check_corpus_bytes(raw, "up.txt", max_bytes=max_bytes)
    assert "up.txt" in str(e.value)


def test_describe_corpus():
    text = "".join(f"line {i}\n" for i in range(200))
    info = describe_corpus(text, "lines", sample_chars=50)
    assert info.chars == len(text) and info.bytes == len(text.encode()) and info.vocab == sorted(set(text))
    assert info.sample.startswith("line ") and len(info.sample) == 50  # starts on a fresh line
