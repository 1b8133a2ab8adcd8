"""The home page shows how a model's heads formed, from its heads.csv, or says plainly it was not recorded."""
import json
import shutil
from pathlib import Path

from core.nn.heads_csv import write_heads_csv

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"


def _copy(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(SHIPPED, folder)
    (folder / "heads.csv").unlink(missing_ok=True)
    return folder


def test_formation_view_marks_the_step_a_head_crossed_the_threshold(tmp_path, open_page):
    folder = _copy(tmp_path, "formed")
    rows = []
    for step, score in ((0, 0.01), (100, 0.05), (200, 0.29), (300, 0.31), (400, 0.6)):
        for layer in range(2):
            for head in range(4):
                hit = (layer, head) == (1, 2)
                rows.append({"step": step, "layer": layer, "head": head, "previous_token": 0.1,
                             "induction": score if hit else 0.01, "first_copy_loss": 4.2, "second_copy_loss": 1.0,
                             "in_context_gain": 3.2})
    write_heads_csv(folder / "heads.csv", rows)
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "formed"})
    captions = [c.value for c in at.caption]
    assert any("formed at step 300" in c and "L2 H3 with 0.60" in c for c in captions), captions
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    heads = next(c for c in charts if "Heads of formed" in c["layout"]["title"]["text"])
    assert len([t for t in heads["data"] if t.get("showlegend", True)]) == 8  # one legend entry per head
    loss = next(c for c in charts if "How formed was trained" in c["layout"]["title"]["text"])
    assert [s["x0"] for s in loss["layout"]["shapes"]] == [300]  # the loss curve is marked at that step


def test_a_model_without_heads_csv_says_it_was_not_recorded(tmp_path, open_page):
    _copy(tmp_path, "plain")
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "plain"})
    assert any("not recorded for this model" in i.value for i in at.info)
    assert not at.exception


def test_a_broken_heads_csv_is_reported_and_the_page_lives(tmp_path, open_page):
    folder = _copy(tmp_path, "broken")
    (folder / "heads.csv").write_text("step,layer,head,previous_token,induction\n1,0,0,abc,0.1\n")
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "broken"})
    assert any("head scores of **broken** could not be read" in e.value for e in at.error)
    assert {m.label: m.value for m in at.metric}["Parameters per block"] == "49,408"
