"""AppTest of the Lesson's bugs of issue 39, each on the model or the prompt that showed it: the score one answer
behind, the BPE model's steps that need an induction head, a long prompt on step 7, the head table computed before
the reveal, step 4's formula on a variant, step 1's bar labels, a corrupt or NaN first snapshot on step 9."""
import json
import re
import shutil

import pytest
import streamlit as st
import torch
from safetensors.torch import load_file, save_file

from conftest import SHIPPED
from core.analysis import patching as P
from core.analysis.induction import THRESHOLD
from core.nn.checkpoint import load_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.model_store import save_checkpoint

PAGE = "pages/lesson.py"
STEP0 = "step-000000.safetensors"


def _widget(at, kind, prefix):
    return next(w for w in at.get(kind) if w.key and w.key.startswith(prefix))


def _marks(at):
    return [x.value for x in [*at.success, *at.error, *at.info] if x.value.startswith(("**Right", "**Not", "**Too"))]


def _goto(at, step):
    at.button(key=f"lesson_goto_{step}").click().run()
    assert not at.exception, at.exception[0].message if at.exception else ""


def _score(at) -> str:
    return next(c.value for c in at.sidebar.caption if c.value.startswith("Score:"))


def test_the_score_counts_the_answer_just_revealed(open_page):
    at = open_page(PAGE)
    _goto(at, 4)
    c = load_checkpoint(SHIPPED)[0].config
    d, d_ff = c.d_model, c.d_ff
    _widget(at, "number_input", "lesson_block_guess").set_value(4 * d * d + 2 * d * d_ff + 4 * d).run()
    at.button(key="lesson_check").click().run()
    assert at.success and at.success[0].value.startswith("**Right")
    assert _score(at).startswith("Score: 1 of 1 graded")
    _goto(at, 8)  # the next answer, a wrong one, counts at once too
    _widget(at, "radio", "lesson_scaling_guess").set_value("N").run()  # doubling D lowers it more (test_lesson_steps)
    at.button(key="lesson_check").click().run()
    assert at.error and _score(at).startswith("Score: 1 of 2 graded")


@pytest.fixture(scope="module")
def headless_bpe_dir(tmp_path_factory):
    """A sub-word model with no induction head: the shipped BPE's tokenizer on untrained weights of its shape (the
    shipped BPE model has had one since issue 43)."""
    folder = tmp_path_factory.mktemp("headless")
    model, tok = load_checkpoint(SHIPPED.parent / "shakespeare-bpe")
    torch.manual_seed(0)
    save_checkpoint(folder / "bpe-untrained", Transformer(model.config).eval(), tok)
    return folder


@pytest.mark.parametrize("step", [3, 9, 11, 12])
def test_the_bpe_models_steps_that_need_an_induction_head_say_it_has_none_and_do_not_grade(open_page, step,
                                                                                          headless_bpe_dir):
    at = open_page(PAGE, models_dir=headless_bpe_dir, state={"te_model_name": "bpe-untrained"})
    _goto(at, step)
    guess = [w for kind in ("radio", "selectbox") for w in at.get(kind) if w.key and w.key.startswith("lesson_")
             and "_guess" in w.key]
    assert not guess  # nothing to answer
    (why,) = [i.value for i in at.info if "induction head" in i.value]
    assert "no induction head" in why and f"{THRESHOLD:.2f}" in why
    assert not any("(the induction head)" in m.value for m in at.markdown)
    assert step_key(at, step) not in at.session_state["lesson_progress"]


def step_key(at, step):
    from core.lesson.steps import STEPS
    return STEPS[step - 1].key


def test_step_7_on_a_long_prompt_draws_within_the_context(open_page):
    at = open_page(PAGE)
    _goto(at, 7)
    long = "KING HENRY:\nOnce more unto the breach, dear friends, once more; or close the wall up with our dead! " * 2
    assert len(long) > 128 - 40
    at.text_area(key="lesson_prompt").input(long).run()
    assert not at.exception, at.exception[0].message
    assert len([c for c in at.code if c.value and c.value != "(nothing)"]) >= 2
    _widget(at, "radio", "lesson_temp_guess").set_value(0).run()
    at.button(key="lesson_check").click().run()
    assert not at.exception and len(_marks(at)) == 1


def test_steps_11_and_12_patch_the_heads_only_on_step_11s_reveal(open_page, monkeypatch):
    calls = []
    real = P.patch_heads
    monkeypatch.setattr(P, "patch_heads", lambda *a, **k: calls.append(1) or real(*a, **k))
    st.cache_data.clear()
    at = open_page(PAGE)
    _goto(at, 12)
    _widget(at, "selectbox", "lesson_circuit_guess").select_index(0).run()
    at.button(key="lesson_check").click().run()
    assert not at.exception and len(_marks(at)) == 1 and calls == []
    _goto(at, 11)
    _widget(at, "selectbox", "lesson_patch_guess").select_index(0).run()
    assert calls == []
    at.button(key="lesson_check").click().run()
    assert not at.exception and len(_marks(at)) == 1 and len(calls) == 1


@pytest.fixture
def no_mlp_dir(tmp_path):
    """A model of the lecture's shape without its MLP (ModelConfig(mlp=False)), with the shipped characters."""
    _, tok = load_checkpoint(SHIPPED)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=64, d_model=32, n_heads=4, n_layers=2,
                                    mlp=False)).eval()
    save_checkpoint(tmp_path / "attn-only", model, tok)
    return tmp_path


def test_step_4_writes_the_formula_of_the_block_that_is_there(open_page, no_mlp_dir):
    at = open_page(PAGE, models_dir=no_mlp_dir, state={"te_model_name": "attn-only"})
    _goto(at, 4)
    d = 32
    count = 4 * d * d + 2 * d  # W_Q, W_K, W_V, W_O, and one LayerNorm (no second: no MLP to feed)
    text = " ".join(m.value for m in at.markdown)
    assert "MLP" not in text or "no MLP" in text
    _widget(at, "number_input", "lesson_block_guess").set_value(count).run()
    at.button(key="lesson_check").click().run()
    assert at.success and at.success[0].value.startswith("**Right") and f"{count:,}" in at.success[0].value
    (formula,) = [x.value.strip("$\n") for x in at.latex if "=" in x.value and "{,}" in x.value]
    assert "d_{ff}" not in formula and "4d^2" in formula and formula.endswith(f"{count:,}".replace(",", "{,}"))


def test_step_1s_bars_carry_one_label_each(open_page):
    at = open_page(PAGE)
    _goto(at, 1)
    w = _widget(at, "button_group", "lesson_key_guess")
    w.set_value(w.options and len(at.text_area(key="lesson_prompt").value) - 2)
    at.run()
    at.button(key="lesson_check").click().run()
    (spec,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    ticks = spec["layout"]["xaxis"]["ticktext"]
    assert ticks and all(len(re.findall(r"\d+", t)) <= 1 for t in ticks), ticks
    assert all(len(re.findall(r"\d+", h)) == 1 for h in spec["data"][0]["customdata"])


@pytest.fixture(params=["corrupt", "nan"])
def bad_first_snapshot(request, tmp_path):
    """A copy of the shipped character model whose first snapshot is not a safetensors file, or holds a NaN."""
    folder = tmp_path / "broken"
    shutil.copytree(SHIPPED, folder)
    path = folder / "checkpoints" / STEP0
    if request.param == "corrupt":
        path.write_bytes(b"not a safetensors file")
    else:
        state = load_file(str(path))
        state["tok_emb.weight"][0, 0] = float("nan")
        save_file(state, str(path))
    return tmp_path


def test_a_bad_first_snapshot_is_said_in_words_on_step_9(open_page, bad_first_snapshot):
    at = open_page(PAGE, models_dir=bad_first_snapshot, state={"te_model_name": "broken"})
    _goto(at, 9)
    _widget(at, "radio", "lesson_forming_guess").set_value("second").run()
    at.button(key="lesson_check").click().run()
    assert not at.exception, at.exception[0].message
    (mark,) = _marks(at)
    assert mark.startswith("**Too") or "could not be read" in mark
    assert any("step 0" in x.value and "could not be read" in x.value for x in [*at.info, *at.warning])
    assert "forming" not in at.session_state["lesson_progress"] or at.session_state["lesson_progress"]["forming"] is None
