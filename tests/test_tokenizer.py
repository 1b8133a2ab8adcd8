import pytest

from core.nn.tokenizer import CharTokenizer, UnknownCharactersError


def test_round_trip():
    text = "Hello, world!\nA second line: with colon."
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == len(set(text))
    assert CharTokenizer.from_dict(tok.to_dict()).chars == tok.chars


def test_unknown_characters_are_reported_by_name():
    tok = CharTokenizer.from_text("abc ")
    with pytest.raises(UnknownCharactersError) as info:
        tok.encode("a cab 🙂 zz")
    assert info.value.chars == ["🙂", "z"]
    assert "'z'" in str(info.value)
    assert tok.unknown_chars("a😀b\u202e") == ["😀", "\u202e"]
    assert tok.decode(tok.encode("a cab 🙂 zz", errors="drop")) == "a cab  "


def test_bad_ids_and_vocabularies():
    tok = CharTokenizer.from_text("ab")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([5])
    with pytest.raises(ValueError):
        CharTokenizer(["a", "a"])
    with pytest.raises(ValueError):
        CharTokenizer(["ab"])
    with pytest.raises(ValueError):
        CharTokenizer.from_dict({"type": "bpe"})


def test_prompt_drops_unknown_and_keeps_the_last_n_ctx():
    from core.serve.fmt import visible
    from core.nn.tokenizer import Prompt

    tok = CharTokenizer.from_text("abc \n")
    p = Prompt(tok, "ab😀c\n" * 3, n_ctx=8)
    assert p.unknown == ["😀"] and p.truncated and p.ids == tok.encode("\nabc\nabc\n"[-8:])
    msgs = p.messages(8)
    assert "'😀'" in msgs[0] and "last 8" in msgs[1]
    assert Prompt(tok, "", 8).empty and Prompt(tok, "😀", 8).empty
    assert visible(" ") == "␣" and visible("\n") == "⏎" and visible("\x01") == "␁" and visible("a") == "a"
