"""The sidebar's "Model at training step" and the Over training page, on a model trained here with snapshots."""
import json

import numpy as np
import pytest

from tests.snapshot_models import step_zero_pattern, train_with_snapshots
from tests.test_page_attention_zoom import array

PROMPT = "the old man sat by a river."


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    train_with_snapshots(root / "snap")
    return root


def charts(at):
    return {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def attention_pattern(at) -> np.ndarray:
    at.text_area(key="attn_prompt").input(PROMPT).run()
    at.selectbox(key="attn_layer").select(0).run()
    at.selectbox(key="attn_head").select(0).run()
    assert not at.exception
    panels = next(s for s in charts(at).values() if [t["type"] for t in s["data"]][:3] == ["heatmap"] * 3)
    return np.nan_to_num(array(panels["data"][2]["z"]))  # scores, the mask, then the weights (future cells blank)


def test_the_step_in_the_sidebar_changes_what_the_attention_page_computes(open_page, models_dir):
    at = open_page("pages/attention.py", models_dir=models_dir, state={"te_model_name": "snap", "te_step::snap": 0})
    assert any("training step 0 of 40" in i.value for i in at.info)  # the page says it is not the final model
    early = attention_pattern(at)
    tok_ids = [int(i) for i in at.session_state["te_current"][2].encode(PROMPT)]
    by_hand = step_zero_pattern(models_dir / "snap", tok_ids).numpy()
    assert np.allclose(early, by_hand, atol=1e-3)  # float32 in the figure; float16 weights: both about 1e-3
    final = open_page("pages/attention.py", models_dir=models_dir, state={"te_model_name": "snap"})
    assert not any("training step" in i.value for i in final.info)
    assert np.abs(attention_pattern(final) - early).max() > 0.01  # training moved them


def test_over_training_draws_every_view_of_every_snapshot(open_page, models_dir):
    at = open_page("pages/over_training.py", models_dir=models_dir, state={"te_model_name": "snap"})
    at.text_area(key="over_prompt").input(PROMPT + " " + PROMPT).run()
    assert not at.exception and not at.error
    specs = charts(at)
    assert len(specs) == 7  # loss, per-token heatmap, live heads, probe heads, the strip, the lens, attribution
    heat = next(s for s in specs.values() if s["layout"]["title"]["text"].startswith("Which tokens"))
    assert heat["data"][0]["y"] == ["0", "1", "2", "4", "9", "19", "40"]
    assert any("7 snapshots of **snap**" in c.value for c in at.caption)
    text = " ".join(m.value for m in at.markdown)
    assert "written twice" in text  # the two copies' losses are stated


def test_a_model_without_snapshots_says_so(open_page, tmp_path):
    train_with_snapshots(tmp_path / "plain", steps=5, snapshots=0)
    at = open_page("app.py", models_dir=tmp_path, state={"te_model_name": "plain"})
    assert not at.sidebar.select_slider  # no step to choose
    at.switch_page("pages/over_training.py")
    at.run()
    assert not at.exception and not at.get("plotly_chart")
    assert any("kept no snapshots" in i.value for i in at.info)


def test_a_corrupt_snapshot_is_named_and_skipped(open_page, tmp_path):
    train_with_snapshots(tmp_path / "snap", steps=10, snapshots=3)
    (tmp_path / "snap" / "checkpoints" / "step-000000.safetensors").write_bytes(b"not a safetensors file")
    at = open_page("pages/over_training.py", models_dir=tmp_path, state={"te_model_name": "snap"})
    assert any("step 0" in w.value and "step-000000.safetensors" in w.value for w in at.warning)
    assert at.get("plotly_chart")  # the other snapshots draw
    # the frame's first run draws the sidebar (AppTest runs app.py only then): the bad step is named there
    at = open_page("app.py", models_dir=tmp_path, state={"te_model_name": "snap", "te_step::snap": 0})
    assert any("snapshot of step 0" in w.value and "final model instead" in w.value for w in at.sidebar.warning)
    assert at.session_state["te_current"][0].step is None and at.session_state["te_current"][1] is not None
    at.switch_page("pages/attention.py")
    at.run()
    assert not at.exception and not any("training step" in i.value for i in at.info)  # it shows the final model
    assert at.get("plotly_chart")


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/inside.py", "pages/generation.py", "pages/home.py"])
def test_every_analysis_page_runs_on_the_step_it_was_given_and_says_so(open_page, models_dir, page):
    at = open_page(page, models_dir=models_dir, state={"te_model_name": "snap", "te_step::snap": 2})
    assert not at.exception and not at.error
    assert any("training step 2 of 40" in i.value for i in at.info)
    assert at.session_state["te_current"][0].step == 2
