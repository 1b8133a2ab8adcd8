"""Every page's link: opening it sets the controls it names, the page writes its state back into the URL, and a
link with bad fields opens the defaults there with one message naming them (AppTest with query_params)."""
import pytest

CASES = {  # page -> (query, {widget kind: {key: expected value}})
    "pages/attention.py": ({"prompt": "To be, or not", "layer": "2", "head": "1", "pos": "4"},
                           {"text_area": {"attn_prompt": "To be, or not"}, "selectbox": {"attn_layer": 1, "attn_head": 0}}),
    "pages/cause_effect.py": ({"prompt": "abcdefabcde", "corrupt": "abcdefXbcde", "layer": "2", "head": "3", "pos": "5"},
                              {"text_area": {"cause_clean": "abcdefabcde", "cause_corrupt": "abcdefXbcde"},
                               "selectbox": {"cause_src_head": (1, 2)}, "number_input": {"cause_src_i": 5}}),
    "pages/inside.py": ({"prompt": "To be, or not", "pos": "4", "layer": "2", "head": "3"},
                        {"text_area": {"inside_prompt": "To be, or not"}, "slider": {"inside_pos_13": 4},
                         "selectbox": {"inside_layer": 1, "inside_head": 2}}),
    "pages/generation.py": ({"prompt": "Once more", "decoding": "top-k", "T": "0.5", "k": "7", "seed": "3", "new": "20"},
                            {"text_area": {"gen_prompt": "Once more"}, "radio": {"gen_mode": "top-k"},
                             "number_input": {"gen_temperature": 0.5, "gen_top_k": 7, "gen_seed": 3,
                                              "gen_new_tokens": 20}}),
    "pages/scaling.py": ({"logA": "2.5", "logB": "3.0", "alpha": "0.3", "beta": "0.25", "E": "1.5"},
                         {"slider": {"scal_logA": 2.5, "scal_logB": 3.0, "scal_alpha": 0.3, "scal_beta": 0.25,
                                     "scal_E": 1.5}, "number_input": {"scal_alpha_box": 0.3}}),
    "pages/generation.py#top-p": ({"prompt": "Once more", "decoding": "top-p", "T": "1.5", "p": "0.5", "seed": "9"},
                                  {"radio": {"gen_mode": "top-p"}, "slider": {"gen_top_p": 0.5},
                                   "number_input": {"gen_temperature": 1.5, "gen_seed": 9}}),
    "pages/parameters.py": ({"d_model": "128", "n_heads": "8", "n_layers": "3", "d_ff": "512", "vocab_size": "100",
                             "n_ctx": "256", "bias": "1", "tied": "1"},
                            {"number_input": {"par_d": 128, "par_h": 8, "par_L": 3, "par_dff": 512, "par_m": 100,
                                              "par_nctx": 256}, "toggle": {"par_bias": True, "par_tied": True}}),
    "pages/heads.py": ({"prompt": "To be or not to be", "off": "L1H3,L2H4", "mode": "mean"},
                       {"text_area": {"heads_prompt": "To be or not to be"}, "multiselect": {"heads_off_2x4": [(0, 2), (1, 3)]},
                        "radio": {"heads_mode": "mean"}}),
    "pages/lesson.py": ({"lesson": "5", "prompt": "To be or not to be"},
                        {"text_area": {"lesson_prompt": "To be or not to be"}}),
    "pages/over_training.py": ({"prompt": "To be or not to be", "layer": "1", "head": "2"},
                               {"text_area": {"over_prompt": "To be or not to be"},
                                "selectbox": {"over_head_2x4": (0, 1)}}),
}


def _value(at, kind, key):
    return next(w for w in at.get(kind) if w.key == key).value


@pytest.mark.parametrize("page", list(CASES))
def test_a_link_sets_the_controls_and_the_url_follows_them(open_page, page):
    query, expected = CASES[page]
    at = open_page(page.split("#")[0], query=query)
    assert not at.exception and not [w for w in at.warning if "link was ignored" in w.value]
    for kind, values in expected.items():
        for key, value in values.items():
            assert _value(at, kind, key) == value, (kind, key)
    written = at.query_params
    for k, v in query.items():
        assert written.get(k) == [v] or written.get(k) == v, (k, written)


@pytest.mark.parametrize("page", list(CASES))
def test_a_bad_link_names_each_ignored_field(open_page, page):
    at = open_page(page.split("#")[0], query={"layer": "7", "head": "<script>x</script>", "pos": "-3", "zz": "1"})
    assert not at.exception
    (warning,) = [w for w in at.warning if "link was ignored" in w.value]
    for name in ("layer", "head", "zz"):
        assert f"**{name}**" in warning.value
    assert "<script>" not in warning.value


def test_the_attention_links_pos_opens_that_querys_score_sources_and_stays(open_page):
    at = open_page("pages/attention.py", query={"prompt": "abcabc", "layer": "2", "head": "4", "pos": "4"})
    text = " ".join(m.value for m in at.markdown)
    assert "Now: query 4 'a'" in text  # pos counts from 1, as the screen does (the fourth token is the second 'a')
    at.toggle(key="attn_unmasked").set_value(True).run()  # any other change: the query stays, and so does the link
    assert "Now: query 4 'a'" in " ".join(m.value for m in at.markdown) and at.query_params["pos"] in ("4", ["4"])


def _url(at, key):
    v = at.query_params.get(key)
    return v[0] if isinstance(v, list) else v


def test_heads_off_as_the_screen_writes_them_and_every_head_on(open_page):
    at = open_page("pages/heads.py", query={"prompt": "To be or not to be", "off": "L1 H3, L2 H4"})
    assert _value(at, "multiselect", "heads_off_2x4") == [(0, 2), (1, 3)] and _url(at, "off") == "L1H3,L2H4"
    at.button(key="heads_none").click().run()  # Switch all on: the link says so, and opens that way
    assert _url(at, "off") == "none"
    again = open_page("pages/heads.py", query={"prompt": "To be or not to be", "off": "none"})
    assert _value(again, "multiselect", "heads_off_2x4") == []


def test_generations_link_keeps_the_count_asked_for(open_page):
    # 2,000 new characters outgrow the context and the page writes fewer (fit); the link keeps what was asked
    at = open_page("pages/generation.py", query={"prompt": "Once more", "new": "2000", "decoding": "greedy"})
    assert _url(at, "new") == "2000"


@pytest.mark.slow  # about 50 s: the page patches two prompts of 360 characters
def test_a_long_cause_and_effect_link_cuts_both_prompts_alike(open_page, tmp_path):
    # a model with a context of 512 characters, so that two prompts that fit it outgrow a link of 2,000 characters
    # (each of these characters is three in a URL: %26, %3B, ...)
    import torch

    from core.nn.checkpoint import load_checkpoint
    from core.nn.model_store import save_checkpoint
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    from tests.conftest import SHIPPED

    _, tok = load_checkpoint(SHIPPED)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=512, d_model=16, n_heads=2, n_layers=2,
                                    d_ff=32)).eval()
    save_checkpoint(tmp_path / "long-context", model, tok)
    clean = "&;:,!?'&;:\n" * 36  # 360 characters, one changed: a pair of one length
    corrupt = "&;:,!?'&;a\n" + clean[11:]
    at = open_page("pages/cause_effect.py", query={"prompt": clean, "corrupt": corrupt}, models_dir=tmp_path,
                   state={"te_model_name": "long-context"}, timeout=180)
    p, q = _url(at, "prompt"), _url(at, "corrupt")
    assert p and len(p) == len(q) < len(clean) and p == clean[:len(p)] and q == corrupt[:len(q)]
    assert any("**prompt** and **corrupt** were cut" in c.value for c in at.caption)


def test_the_link_keeps_the_snapshot_step(open_page):
    at = open_page("pages/attention.py", query={"prompt": "To be", "step": "0"})
    assert _url(at, "step") == "0" and _url(at, "model") == "shakespeare-char"
