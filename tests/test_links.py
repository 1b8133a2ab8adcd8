"""A link's fields (core.serve.links): parsed when valid, named when not, never raised; links kept short."""
from urllib.parse import urlencode

import pytest

from core.nn.checkpoint import load_checkpoint
from core.serve.links import MAX_LINK_CHARS, fit_link, format_heads, parse_fields, parse_heads
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
    assert fit_link(short) == (short, 0)
    long = {"prompt": "ab&c " * 2000, "layer": "2"}
    fitted, kept = fit_link(long)
    assert len(urlencode(fitted)) <= MAX_LINK_CHARS < len(urlencode({**fitted, "prompt": long["prompt"][:kept + 1]}))
    assert fitted["prompt"] == long["prompt"][:kept] and fitted["layer"] == "2"
