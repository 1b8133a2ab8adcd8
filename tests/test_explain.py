"""Explanations without a language model (core.features.explain, .rules, .explanations; issue 58): rules applied to a hand-made text, the
scores against hand counts, planted rules recovered from synthetic activations, the file checked on load."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from core.features import explain as E
from core.features import explanations as X
from core.nn.tokenizer import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
CHAR = ROOT / "assets" / "models" / "shakespeare-char"


def at(mask) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)]


# ------------------------------------------------------------------ matches on a hand-made text
TEXT = 'Go on (now).\n\nSay "hi 9" too'
#       0123456789012 3 4567 89012345 6789
#                 1          2


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer.from_text(TEXT)


def rule_at(rule, tok, text=TEXT):
    return at(E.matches(rule, tok.encode(text), tok))


def test_matches_tokens_and_previous_tokens(tok):
    assert rule_at({"kind": "token_in", "tokens": ["o"]}, tok) == [1, 3, 8, 26, 27]
    assert rule_at({"kind": "token_in", "tokens": ["o", "G"]}, tok) == [0, 1, 3, 8, 26, 27]
    assert rule_at({"kind": "prev", "offset": 1, "tokens": ["o"]}, tok) == [2, 4, 9, 27]
    assert rule_at({"kind": "prev", "offset": 2, "tokens": ["G"]}, tok) == [2]
    # 'o' after 'o': the one place the two meet
    both = {"kind": "and", "rules": [{"kind": "token_in", "tokens": ["o"]},
                                     {"kind": "prev", "offset": 1, "tokens": ["o"]}]}
    assert rule_at(both, tok) == [27]
    assert E.matches(both, tok.encode(TEXT), tok).dtype == bool
    assert len(E.matches(both, tok.encode(TEXT), tok)) == len(TEXT)


def test_matches_classes_lines_words(tok):
    assert rule_at({"kind": "class", "class": "capital", "offset": 0}, tok) == [0, 14]
    assert rule_at({"kind": "class", "class": "capital", "offset": 1}, tok) == [1, 15]
    assert rule_at({"kind": "class", "class": "digit", "offset": 0}, tok) == [22]
    assert rule_at({"kind": "class", "class": "space", "offset": 0}, tok) == [2, 5, 17, 21, 24]
    assert rule_at({"kind": "class", "class": "newline", "offset": 0}, tok) == [12, 13]
    assert rule_at({"kind": "class", "class": "punctuation", "offset": 0}, tok) == [6, 10, 11, 18, 23]
    assert rule_at({"kind": "class", "class": "vowel", "offset": 0}, tok) == [1, 3, 8, 15, 20, 26, 27]
    assert rule_at({"kind": "line_start"}, tok) == [13, 14]
    # a letter after a non-letter (position 0 has nothing before it: a word starts there)
    assert rule_at({"kind": "word_start"}, tok) == [0, 3, 7, 14, 19, 25]
    assert rule_at({"kind": "after", "ngram": "\n\n"}, tok) == [14]
    assert rule_at({"kind": "after", "ngram": "on"}, tok) == [5]
    assert rule_at({"kind": "after", "ngram": "Say "}, tok) == [18]  # longer than the 3 kept characters


def test_matches_inside_and_position(tok):
    assert rule_at({"kind": "inside", "pair": "brackets"}, tok) == [7, 8, 9, 10]
    assert rule_at({"kind": "inside", "pair": "quotes"}, tok) == [19, 20, 21, 22, 23]
    assert rule_at({"kind": "position", "lo": 0, "hi": 1}, tok) == [0]
    assert rule_at({"kind": "position", "lo": 26, "hi": 100}, tok) == [26, 27]


def test_matches_reads_a_subword_tokens_decoded_text():
    class Pieces:  # a tokenizer whose tokens are several characters, as a BPE's are
        pieces = (" The", "cat", "\n", "sat", ",", " on", "(x", ")")
        unit = "token"
    ids = [0, 1, 4, 2, 3, 5, 6, 3, 7]  # " The" "cat" "," "\n" "sat" " on" "(x" "sat" ")"
    m = lambda r: at(E.matches(r, ids, Pieces()))  # noqa: E731
    assert m({"kind": "class", "class": "capital", "offset": 0}) == [0]      # its first letter, after the space
    assert m({"kind": "class", "class": "space", "offset": 0}) == [0, 5]
    assert m({"kind": "word_start"}) == [0, 4, 5]  # "cat" follows a letter: inside the word " Thecat"
    assert m({"kind": "line_start"}) == [4]
    assert m({"kind": "after", "ngram": "at,"}) == [3]  # across two tokens' text
    assert m({"kind": "inside", "pair": "brackets"}) == [7, 8]
    assert m({"kind": "token_in", "tokens": ["sat"]}) == [4, 7]


def test_a_rule_outside_the_grammar_is_refused(tok):
    for bad in ({"kind": "regex", "pattern": "."}, {"kind": "class", "class": "vowels", "offset": 0},
                {"kind": "prev", "offset": 0, "tokens": ["a"]}, {"kind": "token_in", "tokens": []},
                {"kind": "position", "lo": 4, "hi": 4}, {"kind": "and", "rules": [{"kind": "line_start"}]}, "x"):
        with pytest.raises(ValueError):
            E.matches(bad, tok.encode(TEXT), tok)


def test_words_a_learner_reads():
    u_after_o = {"kind": "and", "rules": [{"kind": "prev", "offset": 1, "tokens": ["o"]},
                                          {"kind": "token_in", "tokens": ["u"]}]}
    assert E.words(u_after_o) == "'u' after 'o'"
    nl = {"kind": "and", "rules": [{"kind": "token_in", "tokens": ["\n"]}, {"kind": "after", "ngram": "\n\n"}]}
    assert E.words(nl) == "a line break after a blank line"
    assert E.words({"kind": "class", "class": "capital", "offset": 1}, "character") == \
        "any character after a capital letter"
    assert E.words({"kind": "token_in", "tokens": ["a", "e", " "]}) == "'a', 'e' or a space"
    assert E.words(None) == "unexplained"


# ------------------------------------------------------------------ scores against hand counts
def hand_detection(rule_mask, acts) -> float:
    """Balanced accuracy written out again: firing positions sorted by activation, cut in 10 parts (np.array_split),
    TPR the mean of each non-empty part's matched share; TNR the unmatched share of the rest."""
    firing = [i for i in np.argsort(acts, kind="stable") if acts[i] > 0]
    parts = [p for p in np.array_split(firing, 10) if len(p)]
    tpr = sum(np.mean([rule_mask[i] for i in p]) for p in parts) / len(parts)
    rest = [i for i in range(len(acts)) if acts[i] <= 0]
    tnr = sum(not rule_mask[i] for i in rest) / len(rest)
    return (tpr + tnr) / 2


def test_detection_and_fuzzing_against_a_hand_count():
    tok = CharTokenizer.from_text("abcd")
    ids = np.array([[0, 1, 2, 3, 0, 1, 2, 3]])
    acts = np.array([0, 3, 0, 1, 0, 0, 2, 0], dtype=np.float32)  # fires at 1, 3, 6
    split = E.Split(ids, acts.reshape(1, 8, 1), tok)
    rule = {"kind": "token_in", "tokens": ["b", "c"]}  # matches 1, 2, 5, 6
    m = split.flat(rule)
    assert at(m) == [1, 2, 5, 6]
    # three firing positions: three parts of one each; matched 2 of 3. Five not firing; the rule matches 2 of them
    assert split.detection(m, 0) == pytest.approx((2 / 3 + 3 / 5) / 2)
    assert split.detection(m, 0) == pytest.approx(hand_detection(m, acts))
    # one 8-token context, and it fires: the rule marks 4 positions, 2 of them firing; it marks 2 of the 3 firings
    assert split.fuzz(m, 0) == pytest.approx((2 / 4, 2 / 3))


def test_fuzzing_reads_only_the_contexts_that_fire():
    tok = CharTokenizer.from_text("ab")
    T = 2 * E.CONTEXT  # two contexts in the window; the unit fires only in the second
    ids = np.zeros((1, T), dtype=int)
    acts = np.zeros(T, dtype=np.float32)
    acts[E.CONTEXT + 3] = 1.0
    split = E.Split(ids, acts.reshape(1, T, 1), tok)
    m = split.flat({"kind": "token_in", "tokens": ["a"]})  # every position
    assert split.fuzz(m, 0) == pytest.approx((1 / E.CONTEXT, 1.0))


# ------------------------------------------------------------------ planted rules
def pydoc_windows(T=64, W=600):
    from core.data.corpus import pydoc_text

    text = pydoc_text()[: T * W]
    tok = CharTokenizer.from_text(text)
    return np.array(tok.encode(text)).reshape(W, T), tok


PLANTED = [
    {"kind": "token_in", "tokens": ["e"]},
    {"kind": "token_in", "tokens": ["(", "["]},
    {"kind": "token_in", "tokens": ["\n"]},
    {"kind": "prev", "offset": 1, "tokens": ["."]},
    {"kind": "prev", "offset": 2, "tokens": ["t"]},
    {"kind": "class", "class": "capital", "offset": 0},
    {"kind": "class", "class": "digit", "offset": 0},
    {"kind": "class", "class": "punctuation", "offset": 1},
    {"kind": "class", "class": "vowel", "offset": 0},
    {"kind": "line_start"},
    {"kind": "word_start"},
    {"kind": "after", "ngram": "th"},
    {"kind": "after", "ngram": "ion"},
    {"kind": "inside", "pair": "brackets"},
    {"kind": "inside", "pair": "quotes"},
    {"kind": "position", "lo": 0, "hi": 1},
    {"kind": "and", "rules": [{"kind": "token_in", "tokens": ["n"]}, {"kind": "prev", "offset": 1, "tokens": ["o"]}]},
    {"kind": "and", "rules": [{"kind": "token_in", "tokens": [" "]}, {"kind": "after", "ngram": "he"}]},
    {"kind": "and", "rules": [{"kind": "class", "class": "capital", "offset": 0}, {"kind": "word_start"}]},
    {"kind": "and", "rules": [{"kind": "word_start"}, {"kind": "inside", "pair": "brackets"}]},
    {"kind": "and", "rules": [{"kind": "token_in", "tokens": ["s"]}, {"kind": "class", "class": "vowel",
                                                                       "offset": 1}]},
]


def planted_acts(ids, tok, noise: bool):
    rng = np.random.default_rng(0)
    # one text of W * T tokens read as W windows: positions restart at each window, so the masks come per window
    ctx = E.Context(ids, tok)
    masks = np.stack([ctx.mask(r).reshape(-1) for r in PLANTED], 1)  # (N, U)
    acts = masks * rng.uniform(0.2, 3.0, masks.shape)  # graded, so that the quantiles differ
    if noise:
        drop = rng.random(masks.shape) < 0.05     # 5% of the firings missed
        # and as many weak firings as 5% of its true ones, at random other positions
        extra = rng.random(masks.shape) < 0.05 * masks.mean(0) / (1 - masks.mean(0))
        acts = np.where(drop, 0.0, acts) + (~masks & extra) * rng.uniform(0.05, 0.3, masks.shape)
    return acts.reshape(*ids.shape, len(PLANTED)).astype(np.float32), masks


@pytest.mark.parametrize("noise", [False, True])
def test_planted_rules_are_recovered(noise):
    ids, tok = pydoc_windows()
    acts, masks = planted_acts(ids, tok, noise)
    out = E.explain(ids, acts, tok)
    ctx = E.Context(ids, tok)
    # recovered: the rule found matches exactly where the planted one does, over the whole text
    found = [e["rule"] is not None and np.array_equal(ctx.mask(e["rule"]).reshape(-1), masks[:, u])
             for u, e in enumerate(out)]
    missed = [(PLANTED[u], out[u]["rule"]) for u, ok in enumerate(found) if not ok]
    assert sum(found) >= 0.9 * len(PLANTED), missed
    for e in out:
        if np.array_equal(ctx.mask(e["rule"]).reshape(-1), masks[:, e["unit"]]) and not noise:
            assert e["detection"] == pytest.approx(1.0) and e["fuzz_precision"] == 1.0 and e["fuzz_recall"] == 1.0
        assert e["words"] != E.UNEXPLAINED


def test_control_is_another_units_rule_scored_for_this_one():
    ids, tok = pydoc_windows(W=120)
    acts, _ = planted_acts(ids, tok, noise=False)
    out = E.explain(ids, acts, tok, seed=7)
    score_ids, score_acts = ids[1::2], acts[1::2]
    ctx = E.Context(score_ids, tok)
    for u in range(len(PLANTED)):
        others = [v for v in range(len(PLANTED)) if v != u]
        v = others[int(np.random.default_rng(7 + u).integers(len(others)))]
        want = hand_detection(ctx.mask(out[v]["rule"]).reshape(-1), score_acts[..., u].reshape(-1))
        assert out[u]["control"] == pytest.approx(want, abs=1e-4)
        # its own rule, scored the same way on the scoring split
        own = hand_detection(ctx.mask(out[u]["rule"]).reshape(-1), score_acts[..., u].reshape(-1))
        assert out[u]["detection"] == pytest.approx(own, abs=1e-4)


def test_units_searched_in_chunks_find_the_same_rules(monkeypatch):
    ids, tok = pydoc_windows(W=60)
    acts, _ = planted_acts(ids, tok, noise=False)
    whole = E.explain(ids, acts, tok)
    monkeypatch.setattr(E, "MAX_CELLS", 1)  # one unit a chunk
    assert E.explain(ids, acts, tok) == whole


def test_a_unit_no_rule_beats_its_control_is_unexplained():
    ids, tok = pydoc_windows(W=60)
    rng = np.random.default_rng(3)
    acts = (rng.random((*ids.shape, 2)) < 0.05).astype(np.float32)  # firing at random: no rule can say where
    acts[..., 1] = E.Context(ids, tok).mask({"kind": "token_in", "tokens": ["e"]})
    out = E.explain(ids, acts, tok)
    assert out[0]["words"] == E.UNEXPLAINED and out[0]["detection"] < 0.6
    assert out[1]["words"] == "'e'"
    dead = E.explain(ids, np.zeros((*ids.shape, 1), dtype=np.float32), tok)[0]
    assert dead["rule"] is None and dead["words"] == E.UNEXPLAINED


# ------------------------------------------------------------------ the file
def good(n=3):
    return [{"unit": u, "rule": {"kind": "token_in", "tokens": ["a"]}, "words": "'a'", "detection": 0.9,
             "fuzz_precision": 0.5, "fuzz_recall": 0.8, "control": 0.5} for u in range(n)]


def test_explanations_round_trip(tmp_path):
    X.write_explanations(tmp_path, good())
    assert X.load_explanations(tmp_path, 3) == good()
    assert X.load_explanations(tmp_path / "none") is None


@pytest.mark.parametrize("breakage, says", [
    (lambda d: {"units": d}, "not a JSON list"),
    (lambda d: d[:2], "explains 2 units, but there are 3"),
    (lambda d: [{k: v for k, v in e.items() if k != "control"} for e in d], "exactly the fields"),
    (lambda d: [{**e, "detection": math.nan} for e in d], "finite number"),
    (lambda d: [{**e, "fuzz_recall": 1.5} for e in d], "finite number"),
    (lambda d: [{**e, "unit": 7} for e in d], "not a unit number"),
    (lambda d: [{**e, "unit": 0} for e in d], "explained twice"),
    (lambda d: [{**e, "rule": {"kind": "regex"}} for e in d], "unknown rule kind"),
    (lambda d: [{**e, "words": ""} for e in d], "words"),
])
def test_a_broken_explanations_file_is_refused_by_name(tmp_path, breakage, says):
    (tmp_path / X.FILE).write_text(json.dumps(breakage(good()), allow_nan=True))
    with pytest.raises(ValueError, match=says) as e:
        X.load_explanations(tmp_path, 3)
    assert str(tmp_path / X.FILE) in str(e.value)


def test_unreadable_json_is_refused_by_name(tmp_path):
    (tmp_path / X.FILE).write_text("[{")
    with pytest.raises(ValueError, match="explanations.json: not a readable"):
        X.load_explanations(tmp_path)


def test_a_file_it_did_not_write_is_never_overwritten(tmp_path):
    (tmp_path / X.FILE).write_text("my notes")
    with pytest.raises(FileExistsError):
        X.write_explanations(tmp_path, good())
    assert (tmp_path / X.FILE).read_text() == "my notes"
    ok = tmp_path / "ok"
    ok.mkdir()
    X.write_explanations(ok, good())
    with pytest.raises(FileExistsError):
        X.write_explanations(ok, good(2), replace=False)
    X.write_explanations(ok, good(2))  # its own file: replaced
    assert len(X.load_explanations(ok)) == 2


def test_the_cli_refuses_an_existing_file_without_overwrite(tmp_path, capsys):
    (tmp_path / X.FILE).write_text("my notes")
    assert E.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / X.FILE).read_text() == "my notes"


def shipped_folders():
    folders = [CHAR / "sae" / "blocks.0.hook_resid_post"]
    for model in ("shakespeare-char", "shakespeare-bpe"):
        folders += sorted((ROOT / "assets" / "models" / model / "transcoders").glob("layer-*"))
    return folders


@pytest.mark.parametrize("folder", shipped_folders(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_the_shipped_explanations_load(folder):
    from core.analysis.sae import read_sae_config

    out = X.load_explanations(folder, read_sae_config(folder).d_sae)
    assert out is not None, f"{folder} has no {X.FILE}"
    alive = [e for e in out if e["rule"] is not None]
    assert sum(e["words"] != E.UNEXPLAINED for e in alive) > len(alive) / 2
