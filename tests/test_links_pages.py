"""Every page's link: opening it sets the controls it names, the page writes its state back into the URL, and a
link with bad fields opens the defaults there with one message naming them (AppTest with query_params)."""
import pytest

CASES = {  # page -> (query, {widget kind: {key: expected value}})
    "pages/attention.py": ({"prompt": "To be, or not", "layer": "2", "head": "1"},
                           {"text_area": {"attn_prompt": "To be, or not"}, "selectbox": {"attn_layer": 1, "attn_head": 0}}),
    "pages/cause_effect.py": ({"prompt": "abcdefabcde", "layer": "2", "head": "3", "pos": "5"},
                              {"text_area": {"cause_clean": "abcdefabcde"}, "selectbox": {"cause_src_head": (1, 2)},
                               "number_input": {"cause_src_i": 5}}),
    "pages/inside.py": ({"prompt": "To be, or not", "pos": "4", "layer": "2", "head": "3"},
                        {"text_area": {"inside_prompt": "To be, or not"}, "slider": {"inside_pos_13": 3},
                         "selectbox": {"inside_layer": 1, "inside_head": 2}}),
    "pages/generation.py": ({"prompt": "Once more", "decoding": "top-k", "T": "0.5", "k": "7", "seed": "3"},
                            {"text_area": {"gen_prompt": "Once more"}, "radio": {"gen_mode": "top-k"},
                             "number_input": {"gen_temperature": 0.5, "gen_top_k": 7, "gen_seed": 3}}),
    "pages/scaling.py": ({"logA": "2.5", "alpha": "0.3"},
                         {"slider": {"scal_logA": 2.5, "scal_alpha": 0.3}, "number_input": {"scal_alpha_box": 0.3}}),
    "pages/parameters.py": ({"d_model": "128", "n_heads": "8", "bias": "1"},
                            {"number_input": {"par_d": 128, "par_h": 8}, "toggle": {"par_bias": True}}),
    "pages/heads.py": ({"prompt": "To be or not to be", "off": "L1H3,L2H4", "mode": "mean"},
                       {"text_area": {"heads_prompt": "To be or not to be"}, "multiselect": {"heads_off_2x4": [(0, 2), (1, 3)]},
                        "radio": {"heads_mode": "mean"}}),
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


def test_the_attention_links_pos_opens_that_querys_score_sources(open_page):
    at = open_page("pages/attention.py", query={"prompt": "abcabc", "layer": "2", "head": "4", "pos": "4"})
    text = " ".join(m.value for m in at.markdown)
    assert "Now: query 3 'a'" in text  # pos counts from 1; the page's axes count positions from 0
