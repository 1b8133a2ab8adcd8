"""Every page's link: opening it sets the controls it names, the page writes its state back into the URL, and a
link with bad fields opens the defaults there with one message naming them (AppTest with query_params)."""
import pytest

CASES = {  # page -> (query, {widget kind: {key: expected value}})
    "pages/cause_effect.py": ({"prompt": "abcdefabcde", "layer": "2", "head": "3", "pos": "5"},
                              {"text_area": {"cause_clean": "abcdefabcde"}, "selectbox": {"cause_src_head": (1, 2)},
                               "number_input": {"cause_src_i": 5}}),
    "pages/over_training.py": ({"prompt": "To be or not to be", "layer": "1", "head": "2"},
                               {"text_area": {"over_prompt": "To be or not to be"},
                                "selectbox": {"over_head_2x4": (0, 1)}}),
}


def _value(at, kind, key):
    return next(w for w in at.get(kind) if w.key == key).value


@pytest.mark.parametrize("page", list(CASES))
def test_a_link_sets_the_controls_and_the_url_follows_them(open_page, page):
    query, expected = CASES[page]
    at = open_page(page, query=query)
    assert not at.exception and not [w for w in at.warning if "link was ignored" in w.value]
    for kind, values in expected.items():
        for key, value in values.items():
            assert _value(at, kind, key) == value, (kind, key)
    written = at.query_params
    for k, v in query.items():
        assert written.get(k) == [v] or written.get(k) == v, (k, written)


@pytest.mark.parametrize("page", list(CASES))
def test_a_bad_link_names_each_ignored_field(open_page, page):
    at = open_page(page, query={"layer": "7", "head": "<script>x</script>", "pos": "-3", "zz": "1"})
    assert not at.exception
    (warning,) = [w for w in at.warning if "link was ignored" in w.value]
    for name in ("layer", "head", "zz"):
        assert f"**{name}**" in warning.value
    assert "<script>" not in warning.value
