"""A Class round on explanations (issue 58): the teacher asks which of three descriptions fits a feature of the
shipped model's SAE that fires on the prompt, a student answers, and the reveal marks the option whose rule scores
highest on the feature, with every option's score; checked against the scores computed here with the project's
scorer on the same held-out windows, and the feature's own score against its stored explanation."""
import numpy as np
import torch

from conftest import SHIPPED
from core.analysis.sae import load_sae, model_fingerprint, sae_folder
from core.features.describe import explained, rule_scores
from core.features.explain import held_windows, unit_activations
from core.features.explanations import load_explanations
from core.nn.checkpoint import load_checkpoint, read_config
from core.serve import classroom as C
from pages.classroom.views import choice_label
from tests.test_page_classroom import PROMPT, _button, _radio, store_path, words  # noqa: F401  (a fixture)

PAGE = "pages/classroom.py"
SITE = "blocks.0.hook_resid_post"


def test_a_round_asks_which_description_fits_and_the_scores_answer(open_page, store_path):
    teacher = open_page(PAGE, timeout=120)
    teacher.button(key="class_start").click().run()
    code, secret = teacher.session_state["class_teacher"]
    teacher.radio(key="class_kind").set_value("Which description fits a feature").run()
    teacher.text_area(key="class_prompt").input(PROMPT).run()
    assert not teacher.exception
    unit = teacher.selectbox(key="class_desc_unit").value  # the page's proposal: the strongest on the prompt
    teacher.button(key="class_open").click().run()
    assert not teacher.exception
    store = C.SqliteStore(store_path)
    info = store.round_info(code)
    assert info["meta"]["kind"] == "describe" and info["meta"]["unit"] == unit and len(info["choices"]) == 3

    # the feature fires on the prompt (past position 0) and is explained; the three options are distinct units' words
    model, tok = load_checkpoint(SHIPPED)
    folder = sae_folder(SHIPPED, SITE)
    sae = load_sae(folder, trained_on=model_fingerprint(model), root=SHIPPED)
    said = explained(load_explanations(folder))
    ids = tok.encode(PROMPT)
    on_prompt = unit_activations(model, torch.tensor([ids]), SITE, sae.encode)[0]  # (T, U)
    peak = on_prompt[1:].max(0)
    assert peak[unit] == max(peak[u] for u in said) > 0
    assert said[unit]["words"] in info["choices"]
    owners = {c: [u for u in said if said[u]["words"] == c] for c in info["choices"]}
    assert all(owners.values())

    # every option's score, computed here on the scoring windows the explanations were scored on
    windows = held_windows(model, tok, read_config(SHIPPED)[2], None, sae.config.d_sae)[1::2]
    acts = unit_activations(model, windows, SITE, lambda a: sae.encode(a)[..., unit])
    rules = {c: said[unit]["rule"] if c == said[unit]["words"] else said[owners[c][0]]["rule"]
             for c in info["choices"]}
    scores = rule_scores(windows.numpy(), acts, tok, rules)
    assert scores[said[unit]["words"]] == said[unit]["detection"]  # the same scorer on the same text
    best = max(scores, key=scores.get)

    student = open_page(PAGE, query={"class": code})
    assert f"Feature {unit} of the SAE on {SITE} fires most" in words(student)
    pick = info["choices"][0]
    _radio(student, "class_choice_1_1").set_value(pick).run()
    _button(student, "class_vote_1_1").click().run()
    assert f"Recorded: **{choice_label(pick)}** (vote 1)" in words(student)

    teacher.button(key="class_reveal").click().run()
    assert not teacher.exception
    info = store.round_info(code)
    assert info["revealed"] and info["answer"] == best
    student.run()
    text = words(student)
    assert f"The answer: {best}" in text
    for c in info["choices"]:
        assert f"“{c}” {scores[c]:.2f}" in text
    assert "chance is 0.50" in text and f"the control, scores {said[unit]['control']:.2f}" in text
    assert np.isfinite(list(scores.values())).all()
