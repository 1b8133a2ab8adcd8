"""A Class round on an answer key (issue 59 §3): the room votes on which head of the induction answer key's model is
its induction head, and the key answers. The choices are every head of the model (from its config.json) and the
revealed answer is the head the key's head -> head edge runs into, both read here from the key's files."""
import json

from core.serve import classroom as C
from core.serve.paths import REPO_ROOT
from pages.classroom.key_round import KEY_KIND
from pages.classroom.views import choice_label
from tests.test_page_classroom import _button, _radio, store_path, words  # noqa: F401  (a fixture)

PAGE = "pages/classroom.py"
KEY_DIR = REPO_ROOT / "assets" / "answer_keys" / "induction"


def _key_answer() -> tuple[list[str], str]:
    """(every head of the key's model, the later-layer head of its one head -> head edge), from the files."""
    shape = json.loads((KEY_DIR / "config.json").read_text())["model"]
    heads = [f"L{l + 1} H{h + 1}" for l in range(shape["n_layers"]) for h in range(shape["n_heads"])]
    pairs = [(s, t) for s, t in json.loads((KEY_DIR / "key.json").read_text())["edges"] if s in heads and t in heads]
    assert len(pairs) == 1
    s, t = pairs[0]
    return heads, max(s, t, key=lambda h: int(h[1:].split()[0]))  # "L2 H1": the layer's number after the L


def test_the_room_votes_on_the_induction_head_and_the_key_answers(open_page, store_path):
    heads, right = _key_answer()
    teacher = open_page(PAGE, timeout=120)
    teacher.button(key="class_start").click().run()
    code, _ = teacher.session_state["class_teacher"]
    teacher.radio(key="class_kind").set_value(KEY_KIND).run()
    assert not teacher.exception and "induction head" in words(teacher)
    teacher.button(key="class_open").click().run()
    store = C.SqliteStore(store_path)
    info = store.round_info(code)
    assert info["meta"] == {"kind": "answer_key", "key": "induction"} and list(info["choices"]) == heads

    student = open_page(PAGE, query={"class": code})
    pick = next(h for h in heads if h != right)
    _radio(student, "class_choice_1_1").set_value(pick).run()
    _button(student, "class_vote_1_1").click().run()
    assert f"Recorded: **{choice_label(pick)}** (vote 1)" in words(student)

    teacher.button(key="class_reveal").click().run()
    assert not teacher.exception
    info = store.round_info(code)
    assert info["revealed"] and info["answer"] == right
    student.run()
    assert f"The answer: {right}" in words(student) and f"The key says {right}" in words(student)
