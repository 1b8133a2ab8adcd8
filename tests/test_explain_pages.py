"""Where a learner meets the explanations (issue 58, section 3): the search over hand-made explanations, a unit's
short words, where a rule holds in a card's contexts (against a hand count), the contexts' HTML with the rule's
matches underlined, the tokens a unit promotes (computed here by hand), and the Features page itself: words and
scores on the buttons and the card for the shipped SAE, an unexplained unit said so, the search box, the neurons
explained on demand, a broken explanations.json said by name while the rest of the page stays."""
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import SHIPPED
from core.features.browse import Context
from core.features.explanations import context_marks, promoted_tokens, search, short_words
from core.nn.tokenizer import CharTokenizer
from core.views.features_view import MARK, contexts_html

PAGE = "pages/features.py"
SITE = "blocks.0.hook_resid_post"


def ex(unit, rule, said, detection=0.9, control=0.5):
    return {"unit": unit, "rule": rule, "words": said, "detection": detection, "fuzz_precision": 0.5,
            "fuzz_recall": 0.5, "control": control}


U_AFTER_O = {"kind": "and", "rules": [{"kind": "token_in", "tokens": ["u"]}, {"kind": "prev", "offset": 1,
                                                                            "tokens": ["o"]}]}
HAND = [ex(0, U_AFTER_O, "'u' after 'o'", 0.93),
        ex(1, {"kind": "class", "class": "newline", "offset": 0}, "a line break", 0.90),
        ex(2, {"kind": "prev", "offset": 1, "tokens": ["\n", " "]}, "any character after a line break or a space", 0.95),
        ex(3, {"kind": "token_in", "tokens": ["u"]}, "unexplained", 0.55),  # its rule is no explanation
        ex(4, None, "unexplained", 0.5),
        ex(5, {"kind": "class", "class": "capital", "offset": 0}, "a capital letter", 0.88),
        ex(6, {"kind": "token_in", "tokens": [" the"]}, "' the'", 0.7)]


def units(hits):
    return [h["unit"] for h in hits]


def test_search_finds_a_token_in_the_rules_of_explained_units_only():
    assert units(search(HAND, "u")) == [0]  # unit 3 names 'u' too, but it is unexplained
    assert search(HAND, "u")[0]["matched"] == "its rule"
    assert search(HAND, "U") == []  # a token is a token: 'U' is another one
    assert units(search(HAND, "o")) == [0]


def test_search_by_words_and_by_a_token_named_in_words():
    # "line break" names the token "\n" (unit 2's rule) and is in units 1 and 2's words; unit 1 says only that
    assert units(search(HAND, "line break")) == [1, 2]
    assert search(HAND, "line break")[1]["matched"] == "its rule and its words"
    assert units(search(HAND, "capital")) == [5]
    assert units(search(HAND, "space")) == [2]
    assert units(search(HAND, " ")) == [2]  # a lone space is the space token
    assert units(search(HAND, "the")) == [6]  # a sub-word token's leading space is not needed


def test_search_reads_the_promoted_tokens_and_ranks_explained_units_first():
    top = {3: ["u", "a"], 4: ["x", "u"], 5: ["q", "u"]}
    hits = search({e["unit"]: e for e in HAND}, "u", top)  # a dict of explanations works as a list does
    assert units(hits) == [0, 5, 3, 4]  # explained (rule, then a promoted token) before the unexplained ones
    assert hits[1]["matched"] == "the tokens it promotes"
    assert [h["detection"] for h in hits] == [0.93, 0.88, 0.55, 0.5]
    assert units(search(HAND, "u", top, limit=2)) == [0, 5]
    assert search(HAND, "") == [] and search(HAND, "zebra") == []


def test_short_words_cut_long_words_and_say_unexplained():
    assert short_words(HAND[0]) == "'u' after 'o' · 0.93"
    assert short_words(HAND[3]) == "unexplained · 0.55"
    assert short_words(None) == ""
    cut = short_words(HAND[2], width=20)
    assert cut == "any character after… · 0.95" and len(cut.split(" · ")[0]) == 20


TEXT = "You go out now.\nOur house, our youth; out!"


def test_context_marks_apply_the_rule_to_the_whole_window_then_cut():
    tok = CharTokenizer.from_text(TEXT)
    ids = tok.encode(TEXT)
    windows = torch.tensor([ids, ids[::-1]])  # two windows; the contexts come from the first
    # hand count: the positions of a 'u' right after an 'o'
    want = [i > 0 and TEXT[i] == "u" and TEXT[i - 1] == "o" for i in range(len(TEXT))]
    contexts = []
    for p in (5, 19, 28):  # contexts of +-3 characters around these positions, cut as browse cuts them
        a, b = max(0, p - 3), min(len(TEXT), p + 4)
        contexts.append(Context(list(TEXT[a:b]), [0.0] * (b - a), p - a, 0.0, 0, p))
    marks = context_marks(U_AFTER_O, contexts, windows, tok)
    for c, m in zip(contexts, marks):
        a = c.pos - c.at
        assert m == want[a:a + len(c.tokens)]
    assert sum(map(sum, marks)) >= 3  # the example holds matches: the test can fail
    # an "after" rule at a context's first token reads the text before the context (here the "o" at position 1)
    first = Context(list(TEXT[2:6]), [0.0] * 4, 0, 0.0, 0, 2)
    assert context_marks({"kind": "after", "ngram": "o"}, [first], windows, tok) == [[True, False, False, False]]
    assert context_marks(None, contexts, windows, tok) == [[False] * len(c.tokens) for c in contexts]


def test_the_contexts_html_underlines_exactly_the_marked_tokens_and_escapes():
    c = Context(["<", "b", ">", "u"], [0.0, 1.0, 0.5, 2.0], 3, 2.0, 0, 3)
    out = contexts_html([c], marks=[[True, False, True, False]])
    assert out.count(f"inset 0 -4px 0 {MARK}") == 2 and out.count("the rule holds here") == 2
    assert "<b>" not in out and "&lt;" in out
    assert MARK not in contexts_html([c])  # no marks: as before


def test_promoted_tokens_are_the_direct_path_read_by_hand():
    from core.nn.checkpoint import load_checkpoint

    model, tok = load_checkpoint(SHIPPED)
    torch.manual_seed(0)
    writes = torch.randn(300, model.config.d_model)  # more than one chunk of 256
    got = promoted_tokens(model, writes, tok, n=3)
    # by hand: pre-norm, so the final LayerNorm centres and scales by gamma (sigma frozen: no ranking changes)
    assert model.config.norm == "pre"
    x = model.ln_f.weight.double() * (writes.double() - writes.double().mean(-1, keepdim=True))
    logits = (x @ model.head.weight.double().T).numpy()
    for u in (0, 255, 256, 299):
        assert got[u] == [tok.pieces[i] for i in np.argsort(-logits[u])[:3]]


# ------------------------------------------------------------------ the page
def _ok(at):
    assert not at.exception, at.exception[0].message


def _shipped():
    return {e["unit"]: e for e in json.loads((SHIPPED / "sae" / SITE / "explanations.json").read_text())}


@pytest.fixture(scope="module")
def page(open_page_once):
    if not (SHIPPED / "sae" / SITE / "explanations.json").exists():
        pytest.skip("the shipped SAE's explanations are not in this checkout")
    return open_page_once(PAGE, timeout=300)


def _plain(label):
    return label.replace("\\", "")  # markdown escapes taken out


def test_the_prompt_buttons_and_the_card_show_words_and_scores(page):
    at, said = page, _shipped()
    buttons = [b for b in at.button if b.key and b.key.startswith("feat_fire_")]
    assert buttons
    for b in buttons:  # "feature 159: fires 1.07 — '.', '?' ... · 0.95"
        unit = int(b.label.split()[1].rstrip(":"))
        assert _plain(b.label).endswith(short_words(said[unit])), b.label
        assert f"detection {said[unit]['detection']:.2f}" in b.help
    buttons[1].click().run()
    _ok(at)
    unit = at.number_input(key="feat_unit").value
    md = [_plain(m.value) for m in at.markdown]
    i = md.index(f"**What it stands for**: {said[unit]['words']}")
    e = said[unit]
    assert md[i + 1] == (f"Detection **{e['detection']:.2f}** (chance 0.50; another unit's rule, the control: "
                         f"{e['control']:.2f}) · fuzzing precision **{e['fuzz_precision']:.2f}**, recall "
                         f"**{e['fuzz_recall']:.2f}**")
    assert any(MARK in h.proto.body for h in at.get("html"))  # the rule's matches underlined in its contexts


def test_an_unexplained_unit_is_shown_as_unexplained(page):
    at, said = page, _shipped()
    unit = next(u for u, e in said.items() if e["words"] == "unexplained" and e["rule"] is not None)
    at.number_input(key="feat_unit").set_value(unit).run()
    _ok(at)
    md = [_plain(m.value) for m in at.markdown]
    assert any(m.startswith("**Unexplained**: no rule of the grammar") for m in md), md[:12]
    assert not any(m.startswith("**What it stands for**") for m in md)


def test_the_search_box_lists_the_matching_units_with_scores(page):
    from core.features.explanations import promoted_tokens as promoted
    from core.features.units import feature_units
    from core.analysis.sae import load_sae
    from core.nn.checkpoint import load_checkpoint

    at, said = page, _shipped()
    at.text_input(key="feat_search").set_value("line break").run()
    _ok(at)
    model, tok = load_checkpoint(SHIPPED)
    top = promoted(model, feature_units(model, load_sae(SHIPPED / "sae" / SITE)).writes, tok)
    want = search(said, "line break", top)[:12]
    shown = [b for b in at.button if b.key and b.key.startswith("feat_search_SAE")]
    assert [int(b.label.split()[1]) for b in shown] == [h["unit"] for h in want]
    assert all(short_words(h) in _plain(b.label) for b, h in zip(shown, want))
    shown[0].click().run()  # a result opens its card
    _ok(at)
    assert at.number_input(key="feat_unit").value == want[0]["unit"]


@pytest.mark.slow
def test_neurons_are_explained_on_demand(page):
    at = page
    assert all("—" not in b.label for b in at.button if b.key and b.key.startswith("neur_fire_"))
    at.button(key="feat_explain_prompt").click().run(timeout=300)
    _ok(at)
    labels = [_plain(b.label) for b in at.button if b.key and b.key.startswith("neur_fire_")]
    assert labels and all(" — " in b and " · " in b for b in labels), labels


@pytest.mark.slow
def test_a_broken_explanations_file_is_named_and_the_page_goes_on(open_page, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("checkpoints"))
    broken = folder / "sae" / SITE / "explanations.json"
    broken.write_text(broken.read_text()[:5000])  # cut off mid-file
    at = open_page(PAGE, timeout=300, models_dir=tmp_path, state={"te_model_name": "copy"})
    shown = [_plain(w.value) for w in at.warning]
    assert any(f"copy/sae/{SITE}/explanations.json: not a readable" in w for w in shown), shown
    # the rest of the page loses nothing: the SAE, its numbers, its buttons (without words), its card
    assert at.selectbox(key="feat_sae").value == f"saved: {SITE}"
    assert {m.label for m in at.metric} >= {"L0", "explained variance"}
    buttons = [b.label for b in at.button if b.key and b.key.startswith("feat_fire_")]
    assert buttons and all("—" not in b for b in buttons)
    assert any("explanations.json was refused" in _plain(m.value) for m in at.markdown)
    assert any("Switched off" in m.value for m in at.markdown)


@pytest.mark.slow
def test_steerings_feature_picker_says_the_features_words(open_page):
    at = open_page("pages/generation.py", timeout=300)
    said = _shipped()
    feature = at.number_input(key="gen_steer_feature").value
    e = said[feature]
    line = f"**Feature {feature}** " + ("is unexplained" if e["words"] == "unexplained" else
                                         f"stands for: {e['words']} (detection {e['detection']:.2f}")
    assert any(_plain(m.value).startswith(line) for m in at.markdown), line
