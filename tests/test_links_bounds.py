"""Links at their bounds (issue 40): a temperature too small for the softmax, a link of more fields than the server
reads, a seed as large as the Seed box allows, and the snapshot step kept in the address bar and in Copy link on the
six pages that show the sidebar's snapshot. AppTest, with the answers worked out here (a greedy loop over the model,
the fields the link was built with)."""
import html
import re

import pytest
import torch

from streamlit.testing.v1 import AppTest

from conftest import APP, SHIPPED
from ui.long_links import read_long_links
from core.nn.checkpoint import load_checkpoint
from core.serve.links import LINK_CUT_KEY, MAX_KEYS, cut_query, parse_fields, read_cut


def _url(at, key):
    v = at.query_params.get(key)
    return v[0] if isinstance(v, list) else v


def _ignored_warnings(at):
    return [w.value for w in at.warning if "link was ignored" in w.value]


def _generated_text(at) -> tuple[str, list[str]]:
    """The Generation page's new text and the hover title of each of its tokens (from the shaded HTML)."""
    page = next(h.proto.body for h in at.get("html") if "<span title=" in h.proto.body)
    spans = re.findall(r'<span title="([^"]*)"[^>]*>(.*?)</span>', page, flags=re.S)
    text = "".join(html.unescape(body.replace("⏎<br>", "\n")) for _, body in spans)
    return text, [html.unescape(t) for t, _ in spans]


def _greedy_by_hand(prompt: str, n: int) -> str:
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode(prompt, errors="drop")
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids[-model.config.n_ctx:]])).logits[0, -1].argmax()))
    return tok.decode(ids[-n:])


# ------------------------------------------------------------------ a temperature below float32's smallest
@pytest.mark.parametrize("t", ["1e-300", "1e-46"])
def test_a_tiny_temperature_in_a_link_is_greedy_and_said_in_words(open_page, t):
    at = open_page("pages/generation.py", query={"prompt": "Once more", "decoding": "sample", "T": t, "seed": "3",
                                                 "new": "20"})
    assert not _ignored_warnings(at) and _url(at, "T") == t  # the link is read, and kept as it was
    (note,) = [i.value for i in at.info if "smallest temperature" in i.value]
    assert f"T = {float(t):.3g} is below" in note and "T = 0 is used" in note
    text, titles = _generated_text(at)
    assert len(titles) == 20 and not [x for x in titles if "nan" in x]  # every probability a number
    assert text == _greedy_by_hand("Once more", 20)


def test_a_tiny_temperature_in_the_list_is_the_greedy_column(open_page):
    at = open_page("pages/generation.py", query={"prompt": "Once more"})
    at.text_input(key="gen_temps").set_value("0, 1e-300, 1").run()
    assert not at.exception
    assert [i.value for i in at.info if "T = 1e-300 is below" in i.value]
    heads = [m.value for m in at.markdown if m.value.startswith("**T = ")]
    assert heads[:2] == ["**T = 0** (greedy)", "**T = 1e-300** (greedy)"]


# ------------------------------------------------------------------ a seed as large as the box allows
@pytest.mark.parametrize("seed", [10**9, 2**31 - 1])
def test_a_seed_as_large_as_the_seed_box_allows_opens_from_a_link(open_page, seed):
    at = open_page("pages/generation.py", query={"prompt": "Once more", "decoding": "sample", "seed": str(seed),
                                                 "new": "10"})
    assert not _ignored_warnings(at) and at.number_input(key="gen_seed").value == seed and _url(at, "seed") == str(seed)


# ------------------------------------------------------------------ a link of more fields than the server reads
def test_a_pages_own_keys_are_read_wherever_they_stand_and_the_others_counted():
    query = {**{f"k{i}": "1" for i in range(600)}, "layer": "2", "head": "1"}
    values, ignored = parse_fields(query, {"layer": ("int", 1, 2), "head": ("int", 1, 4)})
    assert values == {"layer": 2, "head": 1}
    assert len(ignored) == MAX_KEYS + 1 and ignored[-1] == ("…", f"{600 - MAX_KEYS} more fields that are not "
                                                                 "settings of this page")


def test_a_query_over_the_limits_is_cut_to_its_first_whole_fields_with_its_length_said():
    fields = [f"k{i}=v{i}" for i in range(1500)]
    query = "&".join(fields)
    cut = cut_query(query, 1000, 10**6)
    assert cut.split("&") == fields[:999] + [f"{LINK_CUT_KEY}=1500-{len(query)}"]
    assert read_cut(cut.split("=")[-1]) == (1500, len(query))
    long = "a=1&b=" + "x" * 500 + "&c=3"  # over 300 characters: only the fields that fit whole, and the mark
    assert cut_query(long, 1000, 300) == f"a=1&{LINK_CUT_KEY}=3-{len(long)}"
    assert len(cut_query(long, 1000, 300)) <= 300 and read_cut("12-x") is None


def _opened_directly(page: str, query: dict) -> AppTest:
    """A link to ``page`` opened in a new tab: one run of the frame (app.py) and the page together, as a browser's
    first request is (conftest's open_page runs Home first, then the page alone)."""
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(page)
    at.run()
    assert not at.exception
    return at


@pytest.mark.parametrize("extra", [1000, 1500])
def test_a_link_of_a_thousand_fields_opens_what_fits_and_says_so_once(extra):
    # the server's cut, as app.py's import of ui.links installs it in a server that has answered its warm-up
    # (deploy.warm): a process's very first request comes before any of our code
    assert read_long_links()
    query = {"prompt": "Once more", "decoding": "top-k", "k": "7", **{f"k{i}": "1" for i in range(extra)}}
    at = _opened_directly("pages/generation.py", query)
    assert at.text_area(key="gen_prompt").value == "Once more" and at.radio(key="gen_mode").value == "top-k"
    assert at.number_input(key="gen_top_k").value == 7
    (cut,) = [w.value for w in at.warning if "too long to read whole" in w.value]
    assert f"{len(query):,} fields, more than the 1,000 this server reads" in cut
    (ignored,) = _ignored_warnings(at)  # the fields that are not this page's: named, then counted
    assert "**k0**" in ignored and f"and {999 - 3 - 8:,} more." in ignored and LINK_CUT_KEY not in ignored
    assert _url(at, "prompt") == "Once more" and _url(at, LINK_CUT_KEY) is None  # the address bar: the page's link
    at.run()  # the next run (the learner moves anything) says nothing again
    assert not [w for w in at.warning if "too long" in w.value or "link was ignored" in w.value]


# ------------------------------------------------------------------ the snapshot step in the link
SNAPSHOT_PAGES = ["pages/attention.py", "pages/heads.py", "pages/inside.py", "pages/generation.py",
                  "pages/cause_effect.py", "pages/lesson.py"]


@pytest.mark.parametrize("page", SNAPSHOT_PAGES)
def test_a_snapshot_view_keeps_its_step_in_the_address_bar_and_in_copy_link(open_page, page):
    at = open_page(page, query={"model": "shakespeare-char", "step": "1013"}, timeout=120)
    assert not at.exception and not _ignored_warnings(at)
    assert at.session_state["te_current"][0].step == 1013  # the page shows that snapshot ...
    assert [i.value for i in at.info if "training step 1,013" in i.value]
    assert _url(at, "step") == "1013" and _url(at, "model") == "shakespeare-char"  # ... and its link says so
    (box,) = [c.value for c in at.code if c.value.startswith("?")]  # Copy link's box (relative: no browser here)
    assert "step=1013" in box.split("?", 1)[1].split("&")


def test_a_link_longer_than_the_server_reads_opens_its_first_fields_and_says_how_long_it_was():
    assert read_long_links()
    query = {"prompt": "Once more", "decoding": "greedy", "junk": "x" * 600_000}
    at = _opened_directly("pages/generation.py", query)
    assert at.text_area(key="gen_prompt").value == "Once more" and at.radio(key="gen_mode").value == "greedy"
    (cut,) = [w.value for w in at.warning if "too long to read whole" in w.value]
    assert "more than the 524,288 this server reads" in cut and "600,0" in cut
