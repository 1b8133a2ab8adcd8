"""The frame's model picker against the pages' own URL writes (ui.links): the frame reads a link's model= once,
and a page writing model= into the URL must not read as a new link on the next rerun (it undid the learner's
first pick in the sidebar on every page with a Copy link). Run on a small script that uses the real functions."""
from streamlit.testing.v1 import AppTest


def _script():
    import streamlit as st

    from ui.links import frame_link, publish

    names = ["shakespeare-char", "shakespeare-bpe"]
    frame_link(names)
    st.session_state.setdefault("te_model_name", names[0])
    name = st.selectbox("Model", names, key="te_model_name")
    publish({"model": name, "prompt": "To be"}, page="pages/attention.py")  # what a page with a Copy link does


def _picked(at) -> str:
    return at.selectbox(key="te_model_name").value


def test_the_first_pick_holds_on_a_page_that_writes_model_into_its_url():
    at = AppTest.from_function(_script).run()
    assert _picked(at) == "shakespeare-char" and at.query_params["model"] in ("shakespeare-char", ["shakespeare-char"])
    at.selectbox(key="te_model_name").set_value("shakespeare-bpe").run()
    assert _picked(at) == "shakespeare-bpe" and at.query_params["model"] in ("shakespeare-bpe", ["shakespeare-bpe"])
    at.selectbox(key="te_model_name").set_value("shakespeare-char").run()  # and back, once
    assert _picked(at) == "shakespeare-char"


def test_a_link_still_sets_the_model_once():
    at = AppTest.from_function(_script)
    at.query_params["model"] = "shakespeare-bpe"
    at.run()
    assert _picked(at) == "shakespeare-bpe"
    at.selectbox(key="te_model_name").set_value("shakespeare-char").run()
    assert _picked(at) == "shakespeare-char"  # the link set it once; the learner's pick wins from then on
