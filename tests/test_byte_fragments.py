"""A piece of a character (some of its UTF-8 bytes) is written one way everywhere, ⟨f0 9f⟩, and said in words where it
first shows on a page (issue 55): a token's label, a text cut inside a character (Lesson step 7, the Generation
page's texts), never '�'. The bytes are worked out here from Python's own UTF-8."""
import pytest

from conftest import SHIPPED
from core import lesson as LS
from core.analysis.induction import head_scores
from core.lesson import measures as M
from core.nn.checkpoint import load_checkpoint

BPE = SHIPPED.parent / "shakespeare-bpe"
SMILE = "🙂"


def hexes(raw: bytes) -> str:
    return "⟨" + raw.hex(" ") + "⟩"


@pytest.fixture(scope="module")
def bpe():
    return load_checkpoint(BPE)


def cut_smile(tok) -> tuple[list[int], list[int]]:
    """(the ids of 'a 🙂', those ids without the smile's last byte): the shipped BPE writes the smile's four bytes
    as four tokens of one byte each."""
    ids = tok.encode("a " + SMILE)
    assert tok.decode(ids[-4:]) == SMILE and all(i in tok.partial_ids() for i in ids[-4:])
    return ids, ids[:-1]


def test_a_text_cut_inside_a_character_shows_the_bytes_it_has(bpe):
    model, tok = bpe
    ids, cut = cut_smile(tok)
    assert tok.shown_text(ids) == tok.decode(ids) == "a " + SMILE  # whole characters: as decode
    written = tok.shown_text(cut)
    left = SMILE.encode("utf-8")[:len(SMILE.encode("utf-8")) - 1]
    assert written == "a " + hexes(left) and "\ufffd" not in written
    # each token's own label is written the same way: one byte each, ⟨f0⟩ ⟨9f⟩ ⟨99⟩
    assert tok.visible_tokens(cut[-3:]) == [hexes(bytes([b])) for b in left]


def test_lesson_step_7_shows_a_cut_character_as_its_bytes(bpe, monkeypatch):
    model, tok = bpe
    ids, cut = cut_smile(tok)
    monkeypatch.setattr(M, "temperature_pair", lambda *a, **k: {"texts_ids": [cut, ids], "cold": 0,
                                                                 "logprob": [-1.0, -2.0]})
    ctx = LS.Context(model, tok, tuple(tok.encode("ROMEO: but soft")), head_scores(model, tokenizer=tok))
    q = LS.question(LS.STEP["temp"], ctx)
    texts = [t for _, t in q.shows]
    assert texts[0].endswith(hexes(SMILE.encode("utf-8")[:-1])) and all("\ufffd" not in t for t in texts)


def test_the_lesson_says_what_a_byte_piece_is_where_one_first_shows(open_page):
    at = open_page("pages/lesson.py", state={"te_model_name": "shakespeare-bpe",
                                            "lesson_prompt": f"Good morrow {SMILE} to thee, fair cousin"})
    captions = " ".join(c.value for c in at.caption)
    assert hexes(SMILE.encode("utf-8")[:1]) in captions and "hexadecimal" in captions, captions


def test_the_generation_page_says_it_and_writes_a_cut_character_as_bytes(open_page, monkeypatch, bpe):
    import core.analysis.generation as G

    model, tok = bpe
    ids, _ = cut_smile(tok)
    real = G.draw

    def draw(model_, prompt, n, *a, hooks=None, **k):  # the main text ends inside the smile
        steps, s = real(model_, prompt, 2, *a, hooks=hooks, **k)
        if hooks:
            return steps, s
        return [dict(steps[0], id=i, ch=tok.pieces[i]) for i in ids[-4:-2]], s
    monkeypatch.setattr(G, "draw", draw)
    at = open_page("pages/generation.py", state={"te_model_name": "shakespeare-bpe",
                                                 "gen_prompt": "Issue 55: a piece of a character", "gen_new_tokens": 2})
    plain = next(c.value for c in at.code)
    assert plain.endswith(hexes(SMILE.encode("utf-8")[:2])) and "\ufffd" not in plain
    captions = " ".join(c.value for c in at.caption)
    assert hexes(SMILE.encode("utf-8")[:1]) in captions and "hexadecimal" in captions


def test_the_attribution_page_says_it_where_a_byte_piece_shows(open_page):
    at = open_page("pages/attribution.py", timeout=180, state={"te_model_name": "shakespeare-bpe",
                                                               "attr_prompt": f"Good morrow {SMILE} to thee"})
    captions = " ".join(c.value for c in at.caption)
    assert "hexadecimal" in captions and "\ufffd" not in captions, captions
