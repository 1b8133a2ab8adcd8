"""The Attribution page's supernode box (pages.attribution.parts.graph_groups) with hostile names: a proposal's
name and labels carry token text ("*", "$", "[") and are written escaped; an unnamed group never takes a name the
learner gave another (AppTest of the box alone, no model)."""
from streamlit.testing.v1 import AppTest


def _box():
    import streamlit as st

    from pages.attribution.parts import graph_groups
    groups = graph_groups("g", [1, 2, 3], lambda i: f"L1 #{i} at '$' ({i})", [("L1 →$ ×2", [1, 2]),
                                                                               ("L1 →*[x](y) ×2", [2, 3])])
    st.text(repr(groups))


def test_a_proposals_token_text_is_escaped_in_its_caption():
    at = AppTest.from_function(_box).run()
    said = " ".join(c.value for c in at.caption if c.value.startswith("Proposed"))
    assert "L1 →\\$ ×2" in said and "\\*\\[x\\]\\(y\\)" in said and "'\\$'" in said
    assert "'$'" not in said  # two bare dollars would open LaTeX in the caption


def test_an_unnamed_group_takes_a_free_name():
    at = AppTest.from_function(_box).run()
    at.multiselect(key="attr_group_members").set_value([1]).run()
    at.text_input(key="attr_group_name").set_value("group 2").run()
    at.button(key="attr_group").click().run()
    at.multiselect(key="attr_group_members").set_value([3]).run()
    at.text_input(key="attr_group_name").set_value("").run()
    at.button(key="attr_group").click().run()
    assert at.text[0].value == "[('group 2', [1]), ('group 3', [3])]"
