"""AppTest of the Why each piece page on the shipped variant study: the table, the curves, the claims with their
numbers, and a run of the learner's own started and stopped."""
import json
from pathlib import Path

import pytest

from core.views.variants_view import read_study
from tests.polling import wait_until

STUDY = Path(__file__).resolve().parent.parent / "assets" / "variants"
PAGE = "pages/variants.py"


@pytest.fixture(scope="module")
def study():
    s = read_study(STUDY)
    if not s.rows:
        pytest.skip("no shipped variant study in assets/variants")
    return s


def test_the_table_the_curves_and_every_claim_with_its_numbers(open_page, study):
    at = open_page(PAGE)
    assert not at.exception and not at.error and not at.warning
    table = at.dataframe[0].value
    assert list(table["variant"]) == list(study.rows)
    lecture = study.rows["lecture"]
    assert table.loc[table["variant"] == "lecture", "loss under the causal mask"].item() == lecture["causal_val_loss"]
    heads = [h.value for h in at.subheader]
    for claim in ("Without the mask, the model cheats", "A mask after the softmax leaks the future",
                  "Attention alone is linear in the values it moves", "Deep stacks need the residual stream and LayerNorm",
                  "Heads divide the width", "W_O mixes the heads", "Without positions, order is invisible to attention"):
        assert claim in heads, claim
    text = " ".join(m.value for m in at.markdown)
    assert f"{study.rows['no-mask']['train_loss']:.3f}" in text  # the numbers are the study's own
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) >= 4
    at.multiselect(key="var_curves").set_value(["lecture", "no-mlp"]).run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    curves = next(s for s in specs if s["layout"]["title"]["text"].startswith("Validation loss") and len(s["data"]) == 2)
    assert [t["name"] for t in curves["data"]] == ["lecture", "no-mlp"]


def test_the_table_fits_the_page_with_its_verdict_beside_the_names(open_page):
    import json as _json

    at = open_page(PAGE)
    proto = at.dataframe[0].proto
    order = list(proto.column_order)
    assert order.index("verdict") <= 2  # seen without scrolling sideways
    config = _json.loads(proto.columns)
    widths = [config[c]["width"] for c in order]  # every column has a width, and together they fit the main column
    assert set(order) >= {"variant", "verdict", "loss under the causal mask"} and sum(widths) <= 960


@pytest.mark.slow  # trains in real processes: the fast lane leaves it to CI
def test_a_learner_starts_and_stops_a_variant_of_their_own(open_page, study, tmp_path):
    at = open_page(PAGE, models_dir=tmp_path)
    at.selectbox(key="var_train_variant").select("no-mlp").run()
    at.number_input(key="var_train_steps").set_value(3000).run()
    at.button(key="var_start").click().run()
    assert not at.exception and not at.error
    job = at.session_state["var_job"]
    assert job.settings.switches == {"mlp": False}
    wait_until(lambda: job.status().step >= 1, timeout=120)
    job.stop()
    at.run()
    assert not at.exception
    assert any("Save it to open it" in c.value for c in at.caption)


def test_a_bad_study_file_is_named_inside_the_study_folder_never_by_its_server_path(open_page, tmp_path, monkeypatch):
    """Issue 40: Why each piece's warnings showed absolute server paths (an OSError's own message names the whole
    path). A study folder with a file that cannot be read, one that is not text and a kept model that is broken:
    each warning names the file inside the study folder and nothing of where the server keeps it."""
    import shutil

    from core.views import variants_view as VV

    folder = tmp_path / "hidden-server-place" / "variants"
    folder.mkdir(parents=True)
    if (STUDY / "variants.csv").is_file():
        shutil.copy(STUDY / "variants.csv", folder / "variants.csv")
    (folder / "curves.csv").mkdir()  # a folder where a file should be: open() raises IsADirectoryError with the path
    (folder / "models" / "lecture").mkdir(parents=True)
    (folder / "models" / "lecture" / "config.json").write_text("{not json")
    monkeypatch.setattr(VV, "STUDY_DIR", folder)
    at = open_page(PAGE)
    shown = [w.value for w in at.warning] + [i.value for i in at.info]
    assert any("curves.csv" in w for w in shown), shown
    assert all(str(tmp_path) not in w and "hidden-server-place" not in w for w in shown), shown
    # a study that is not there at all: the same, for the file that is missing
    monkeypatch.setattr(VV, "STUDY_DIR", tmp_path / "hidden-server-place" / "nothing")
    at = open_page(PAGE)
    shown = [w.value for w in at.warning] + [i.value for i in at.info]
    assert any("variants.csv" in w for w in shown) and all("hidden-server-place" not in w for w in shown), shown
