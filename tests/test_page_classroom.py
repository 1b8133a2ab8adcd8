"""AppTest of the Class page (issue 44): a teacher session and two student sessions sharing one store (a SQLite file
in tmp_path, TE_CLASS_STORE), through a full round on a Lesson step: vote 1, the counts hidden until shown, vote 2,
the live model's answer (checked against the Lesson's own grading of the same step), the shift between the votes and
the CSV; and the links a student could craft."""
import csv
import io

import pytest

from core import lesson as LS
from core.nn.checkpoint import load_checkpoint
from core.serve import classroom as C
from conftest import SHIPPED

PAGE = "pages/classroom.py"
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    path = tmp_path / "class.sqlite"
    monkeypatch.setenv("TE_CLASS_STORE", str(path))
    return path


def words(at) -> str:
    """Every text on the page: Markdown elements, and the plain-text blocks (st.html) with their tags taken off."""
    import html
    import re

    md = [str(x.value) for kind in ("markdown", "caption", "info", "success", "error", "warning", "header",
                                    "subheader") for x in at.get(kind)]
    return " ".join(md + [html.unescape(re.sub(r"<[^>]+>", "", x.proto.body)) for x in at.get("html")])


def _radio(at, prefix):
    return next(r for r in at.radio if r.key and r.key.startswith(prefix))


def _button(at, prefix):
    return next(b for b in at.button if b.key and b.key.startswith(prefix))


def test_a_full_round_with_a_teacher_and_two_students(open_page, store_path):
    teacher = open_page(PAGE)
    teacher.button(key="class_start").click().run()
    code, secret = teacher.session_state["class_teacher"]
    assert f"Class code: `{code[:4]} {code[4:]}`" in words(teacher)
    teacher.selectbox(key="class_step").select_index(2).run()  # 3. Switching a head off: up, down or the same
    teacher.text_area(key="class_prompt").input(PROMPT).run()
    teacher.button(key="class_open").click().run()
    assert not teacher.exception
    rid = 1

    a = open_page(PAGE, query={"class": code})
    b = open_page(PAGE, query={"class": code})
    for at, pick in ((a, "up"), (b, "down")):
        assert "has this model's highest induction score" in words(at)  # the Lesson step's own text, live
        _radio(at, "class_choice_1_1").set_value(pick).run()
        _button(at, "class_vote_1_1").click().run()
        assert not at.exception and f"Recorded: **{pick}** (vote 1)" in words(at)
    store = C.SqliteStore(store_path)
    assert store.tally(code, secret, rid, 1) == {"up": 1, "down": 1, "same": 0}  # written before "recorded"

    teacher.run()
    assert "**2** voted the first time" in words(teacher) and not teacher.get("plotly_chart")  # counts hidden
    projector = open_page(PAGE, query={"class": code, "view": "projector"})
    assert "2 voted" in words(projector) and not projector.get("plotly_chart")
    teacher.button(key="class_show").click().run()
    projector.run()
    assert projector.get("plotly_chart")  # shown on the projector once the teacher allows

    teacher.button(key="class_phase2").click().run()
    for at, pick in ((a, "up"), (b, "up")):
        at.run()
        assert "Vote 2 is open" in words(at)
        _radio(at, "class_choice_1_2").set_value(pick).run()
        _button(at, "class_vote_1_2").click().run()
        assert f"Recorded: **{pick}** (vote 2)" in words(at)

    teacher.button(key="class_reveal").click().run()
    assert not teacher.exception
    info = store.round_info(code, rid)
    # the model's answer is the Lesson's own grading of step 3 on the same model and prompt
    model, tok = load_checkpoint(SHIPPED)
    from core.analysis.induction import head_scores
    ctx = LS.Context(model, tok, tuple(tok.encode(PROMPT)), head_scores(model, tokenizer=tok))
    q = LS.question(LS.STEP["off"], ctx)
    m = LS.STEP["off"].measure(ctx, q)
    right = [c for c in q.choices if LS.STEP["off"].grade(q, m, c).correct is True]  # what the Lesson marks right
    assert info["revealed"] and [info["answer"]] == right == ["up"]
    text = words(teacher)
    assert "The model's answer: up" in text and "Right the first time: 50% of 2" in text
    assert "the second time: 100% of 2" in text
    shift = teacher.dataframe[0].value
    row = C.SHIFT_ROW
    assert shift.loc[shift[row] == "down", "up"].item() == 1 and shift.loc[shift[row] == "up", "up"].item() == 1
    for at in (a, b):
        at.run()
        assert "The model's answer: up" in words(at)
    rows = list(csv.DictReader(io.StringIO(C.rounds_csv(store.rounds(code, secret)))))
    assert [(r["choice"], r["vote 1"], r["vote 2"], r["model's answer"]) for r in rows] == [
        ("up", "1", "2", "up"), ("down", "1", "0", "up"), ("same", "0", "0", "up")]
    assert rows[0]["prompt"] == PROMPT and rows[0]["kind"] == "lesson"


def test_a_question_of_the_teachers_own(open_page, store_path):
    teacher = open_page(PAGE)
    teacher.button(key="class_start").click().run()
    code, secret = teacher.session_state["class_teacher"]
    teacher.radio(key="class_kind").set_value("Your own question").run()
    teacher.text_input(key="class_own_q").input("Which layer copies?").run()
    teacher.text_area(key="class_own_choices").input("layer 1\nlayer 2\nlayer 2").run()
    assert teacher.button(key="class_open").disabled  # two distinct choices written three times: not a question
    teacher.text_area(key="class_own_choices").input("layer 1\nlayer 2").run()
    teacher.button(key="class_open").click().run()
    s = open_page(PAGE, query={"class": code})
    assert "Which layer copies?" in words(s)
    teacher.button(key="class_reveal").click().run()
    assert C.SqliteStore(store_path).round_info(code)["revealed"]
    s.run()
    assert "No single answer: none was marked" in words(s)


@pytest.mark.parametrize("query, says", [({"class": "not a code!"}, "cannot be read"),
                                         ({"class": "ABCDEFGH"}, "no class ABCDEFGH is running")])
def test_a_bad_or_unknown_code_in_a_link_is_said_in_words(open_page, store_path, query, says):
    at = open_page(PAGE, query=query)
    assert says in words(at) and not at.exception


def test_a_student_link_cannot_run_the_class(open_page, store_path):
    teacher = open_page(PAGE)
    teacher.button(key="class_start").click().run()
    code, _ = teacher.session_state["class_teacher"]
    teacher.text_area(key="class_prompt").input(PROMPT).run()
    teacher.selectbox(key="class_step").select_index(2).run()
    teacher.button(key="class_open").click().run()
    # a crafted link asking for the teacher's view gets the student's: no control of the round is on the page
    s = open_page(PAGE, query={"class": code, "view": "teacher", "secret": "guess"})
    keys = {w.key for w in s.button}
    assert not keys & {"class_open", "class_show", "class_phase2", "class_reveal", "class_end"}
    info = C.SqliteStore(store_path).round_info(code)
    assert info["phase"] == 1 and not info["shown"] and not info["revealed"]


def test_a_heads_question_names_the_head_the_lesson_grades_right():
    """Step 11 ("which head restores the most?"): eight heads as choices, and the model's answer is the label of the
    head the Lesson's own grading picks (pages.classroom.parts maps the step's answer to its label)."""
    from core.analysis.induction import head_scores
    from pages.classroom.parts import lesson_answer, lesson_round

    model, tok = load_checkpoint(SHIPPED)
    ctx = LS.Context(model, tok, tuple(tok.encode(PROMPT)), head_scores(model, tokenizer=tok))
    step = LS.STEP["patch"]
    question, labels, meta = lesson_round(step, ctx, "shakespeare-char", PROMPT)
    assert len(labels) == model.config.n_layers * model.config.n_heads and meta["step"] == "patch"
    answer, words = lesson_answer(step, ctx, labels)
    q = LS.question(step, ctx)
    table = LS.head_patching(model, list(q.data["clean"]), list(q.data["corrupt"]))
    best = max(q.choices, key=lambda p: float(table["table"][p]))
    assert answer == labels[list(q.choices).index(best)] and answer in words


def test_a_close_call_or_a_yes_no_step_reveals_what_the_lesson_marks():
    """The mask step's answer is a yes/no the Lesson grades (not a label to look up); a step the Lesson calls too close
    reveals no single answer rather than a tick on one choice."""
    from core.analysis.induction import head_scores
    from pages.classroom.parts import lesson_answer, lesson_round

    model, tok = load_checkpoint(SHIPPED)
    ctx = LS.Context(model, tok, tuple(tok.encode(PROMPT)), head_scores(model, tokenizer=tok))
    step = LS.STEP["mask"]
    _, labels, _ = lesson_round(step, ctx, "shakespeare-char", PROMPT)
    q = LS.question(step, ctx)
    m = step.measure(ctx, q)
    right = [labels[i] for i, c in enumerate(q.choices) if step.grade(q, m, c).correct is True]
    answer, _ = lesson_answer(step, ctx, labels)
    assert [answer] == right  # one choice marked right, and it is the one revealed

    class CloseCall:  # the same step whose grading calls every guess too close
        def __getattr__(self, name):
            return getattr(step, name)

        def grade(self, q, m, guess):
            return LS.Grade(None, q.choices[0], "too close to call", call="too close")

    answer, words = lesson_answer(CloseCall(), ctx, labels)
    assert answer is None and "too close" in words


def test_a_forged_teacher_session_is_refused_in_words_and_changes_nothing(open_page, store_path):
    """A session that holds a class's code with a guessed secret (what a crafted message could at most put there) gets
    a refusal in words for every control, and the round does not move."""
    store = C.SqliteStore(store_path)
    code, secret = store.create_class()
    rid = store.open_round(code, secret, "q", ("yes", "no"))
    at = open_page(PAGE, state={"class_teacher": (code, "guessed-secret")})
    for key in ("class_show", "class_phase2", "class_reveal"):
        at.button(key=key).click().run()
        assert not at.exception and any("only the teacher" in e.value for e in at.error), key
    info = store.round_info(code, rid)
    assert info["phase"] == 1 and not info["shown"] and not info["revealed"]
