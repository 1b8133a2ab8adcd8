"""A link's fields (core.serve.links): parsed when valid, named when not, never raised; links kept short."""
from urllib.parse import urlencode

import pytest

from core.nn.checkpoint import load_checkpoint
from core.serve.links import MAX_LINK_CHARS, Cut, Field, LinkSpec, fit_link, format_heads, parse_fields, parse_heads
from conftest import SHIPPED

SPEC = {"layer": ("int", 1, 2), "head": ("int", 1, 4), "T": ("float", 0.01, 10.0), "off": ("heads", 2, 4),
        "mode": ("choice", ("zero", "mean"))}


def test_valid_fields_are_parsed():
    values, ignored = parse_fields({"layer": "2", "head": "1", "T": "0.7", "off": "L2H1, l1h3,L2H1", "mode": "mean"},
                                   SPEC)
    assert values == {"layer": 2, "head": 1, "T": 0.7, "off": [(0, 2), (1, 0)], "mode": "mean"} and not ignored
    assert format_heads(values["off"]) == "L1H3,L2H1" and parse_heads("", 2, 4) == []


@pytest.mark.parametrize("field, value", [
    ("layer", "3"), ("layer", "0"), ("layer", "1.5"), ("layer", "two"), ("layer", "1e3"), ("head", "-1"),
    ("T", "nan"), ("T", "inf"), ("T", "0"), ("T", "__import__('os')"), ("off", "L3H1"), ("off", "L1H1;rm -rf"),
    ("mode", "<script>"), ("layer", "9" * 5000),
])
def test_each_bad_field_is_named_and_the_rest_still_used(field, value):
    other = "layer" if field == "head" else "head"
    values, ignored = parse_fields({field: value, other: "2"}, SPEC)
    assert [k for k, _ in ignored] == [field] and field not in values and values[other] == 2


def test_unknown_and_frame_keys():
    values, ignored = parse_fields({"zzz": "1", "model": "x", "step": "3"}, SPEC, extra_known={"model", "step"})
    assert values == {} and ignored == [("zzz", "not a setting of this page")]
    many = {f"k{i}": "1" for i in range(80)}
    _, ignored = parse_fields(many, SPEC)
    assert len(ignored) == 51 and ignored[-1][0] == "…"


def test_a_prompt_must_fit_the_models_context():
    _, tok = load_checkpoint(SHIPPED)
    spec = {"prompt": ("prompt", tok, 16)}
    assert parse_fields({"prompt": "short"}, spec)[0] == {"prompt": "short"}
    assert "context of 16" in parse_fields({"prompt": "x" * 17}, spec)[1][0][1]


def test_long_links_cut_the_prompt_and_say_how_much_was_kept():
    short = {"prompt": "To be", "layer": "2"}
    assert fit_link(short) == (short, Cut()) and not Cut()
    long = {"prompt": "ab&c " * 2000, "layer": "2"}
    fitted, cut = fit_link(long)
    kept = cut.kept
    assert len(urlencode(fitted)) <= MAX_LINK_CHARS < len(urlencode({**fitted, "prompt": long["prompt"][:kept + 1]}))
    assert fitted["prompt"] == long["prompt"][:kept] and fitted["layer"] == "2" and cut and f"{kept:,}" in cut.words()


def test_a_pair_of_prompts_is_cut_together_to_one_length():
    clean, corrupt = "abcdefgh" * 300, "abcdefgX" + "abcdefgh" * 299  # one changed character, near the start
    fitted, cut = fit_link({"prompt": clean, "corrupt": corrupt, "layer": "2"}, ("prompt", "corrupt"))
    assert len(fitted["prompt"]) == len(fitted["corrupt"]) == cut.kept > 0
    assert fitted["prompt"] == clean[:cut.kept] and fitted["corrupt"] == corrupt[:cut.kept]
    assert len(urlencode(fitted)) <= MAX_LINK_CHARS and "**prompt** and **corrupt**" in cut.words()


def test_a_pair_cut_goes_shorter_until_the_pair_check_holds():
    # a made-up check (lengths that are multiples of 7 "tokenise alike"): the cut is the longest such start that fits
    clean, corrupt = "a" * 3000, "b" * 3000
    plain, first = fit_link({"prompt": clean, "corrupt": corrupt}, ("prompt", "corrupt"))
    fitted, cut = fit_link({"prompt": clean, "corrupt": corrupt}, ("prompt", "corrupt"),
                           same_length=lambda a, b: len(a) % 7 == 0)
    assert cut.kept == first.kept - first.kept % 7 and len(fitted["corrupt"]) == cut.kept


def test_a_full_cut_is_reported_as_one():
    params = {"prompt": "To be or not to be", "other": "x" * (MAX_LINK_CHARS + 10)}
    fitted, cut = fit_link(params)
    assert fitted["prompt"] == "" and cut and cut.kept == 0 and "left out" in cut.words()


def test_heads_parse_as_the_screen_writes_them_and_none_means_every_head_on():
    assert parse_heads("L1 H3, L2 H1", 2, 4) == [(0, 2), (1, 0)] == parse_heads("l1h3,L2  H1", 2, 4)
    assert parse_heads("none", 2, 4) == [] and format_heads([]) == "none"
    values, ignored = parse_fields({"off": "none"}, {"off": ("heads", 2, 4)})
    assert values == {"off": []} and not ignored


def test_an_index_counts_from_one_in_the_link_and_from_zero_in_state():
    spec = LinkSpec({"layer": Field(("index", 2), "s_layer"), "pos": Field(("index", 64)),
                     "T": Field(("float", 0.0, 10.0), "s_T")})
    values, ignored = spec.parse({"layer": "2", "pos": "1", "T": "0.5"})
    assert values == {"layer": 1, "pos": 0, "T": 0.5} and not ignored
    assert spec.updates(values) == {"s_layer": 1, "s_T": 0.5}  # pos has no state of its own: the page applies it
    assert spec.parse({"layer": "0"})[1] and spec.parse({"layer": "3"})[1]  # 1 to n only
    # back into the URL: from state, and from the page's own values (an index from 0 again), frame keys as they are
    assert spec.params({"s_layer": 1, "s_T": 0.5}, {"pos": 9, "model": "m"}) == {"layer": "2", "pos": "10",
                                                                                 "T": "0.5", "model": "m"}
    assert spec.params({"s_layer": 0}, {"T": None}) == {"layer": "1"}  # None: left out


def test_a_seed_as_large_as_the_box_allows_parses():
    assert parse_fields({"seed": str(2**31 - 1)}, {"seed": ("int", 0, 2**31 - 1)})[0] == {"seed": 2**31 - 1}
