"""AppTest smoke tests: app.py renders without exception and shows what the lecture promises."""
import json
import shutil

import pytest

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"



@pytest.fixture
def run_app(open_page):
    """One run of app.py on its home page, with the picker preset to ``model`` before that first run (the
    only run that goes through app.py in AppTest while a pages/ folder exists)."""
    return lambda model=None: open_page("pages/home.py", state={"te_model_name": model} if model else None)


def all_text(at) -> str:
    parts = []
    for kind in ("markdown", "latex", "caption", "title", "header", "subheader", "metric", "warning", "error", "info"):
        for el in at.get(kind):
            parts.append(str(getattr(el, "value", "")) + " " + str(getattr(el, "body", "")) + " " + str(getattr(el, "label", "")))
    return "\n".join(parts)


def test_home_shows_block_count_and_card(run_app):
    at = run_app()
    assert not at.exception
    text = all_text(at)
    assert "49{,}408" in text or "49,408" in text
    assert "12d^2 + 4d" in text
    assert "Model card" in text and "validation loss" in text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Parameters per block"] == "49,408"
    charts = at.get("plotly_chart")
    assert charts, "the pretrained loss curve is missing"
    spec = json.loads(charts[0].proto.spec)
    names = [trace["name"] for trace in spec["data"]]
    assert names == ["training", "validation"]
    table = at.dataframe[0].value
    assert set(table["agree"]) == {"✓"}


def test_broken_user_model_is_listed_and_others_still_work(tmp_path, monkeypatch, run_app):
    good = tmp_path / "copy"
    shutil.copytree(SHIPPED, good)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{ nope")
    trunc = tmp_path / "truncated"
    shutil.copytree(SHIPPED, trunc)
    raw = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(raw[:1000])
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    at = run_app()
    assert not at.exception
    expander, = [e for e in at.sidebar.expander if "2 models could not be loaded" in e.label]
    warnings = " ".join(m.value for m in expander.markdown).replace("\\", "")  # Markdown-escaped names
    assert "broken" in warnings and "bad JSON" in warnings
    assert "truncated" in warnings and "safetensors" in warnings
    # saved by nobody in this session (a copy has no recorded owner): shown as a classmate's
    assert at.selectbox(key="te_model_name").options == ["shakespeare-bpe", "shakespeare-char", "copy (a classmate’s)"]
    at = run_app(model="copy")
    assert not at.exception
    assert at.session_state["te_current"][0].name == "copy"
    assert at.metric[0].value == "49,408"


def test_no_models_at_all_gives_a_message(tmp_path, monkeypatch, open_page):
    import ui.models as common  # the module whose functions read SHIPPED_DIR

    monkeypatch.setattr(common, "SHIPPED_DIR", tmp_path / "none")
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path / "none2"))
    at = open_page("pages/home.py")
    # AppTest re-imports app.py but ui stays imported in this process, so the patch applies
    assert not at.exception
    assert any("No model could be loaded" in e.value for e in at.error)


def test_a_model_whose_weights_fail_only_when_loaded_shows_its_error(tmp_path, monkeypatch, run_app):
    import math

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "nan-model"
    shutil.copytree(SHIPPED, bad)
    state = load_file(bad / "model.safetensors")
    state["head.weight"][0, 0] = math.nan  # the header is fine; only reading the weights finds this
    save_file(state, bad / "model.safetensors")
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    at = run_app()
    assert at.selectbox(key="te_model_name").options == ["shakespeare-bpe", "shakespeare-char", "nan-model (a classmate’s)"]
    at = run_app(model="nan-model")
    assert not at.exception
    assert any("non-finite" in e.value for e in at.error)
    assert any("No model is loaded" in i.value for i in at.info)
    assert not at.metric  # no numbers from a model that is not there
