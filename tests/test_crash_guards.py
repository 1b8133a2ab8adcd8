"""Bad files on disk give a clear message on the page instead of a crash (issue 12)."""
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"


def test_a_log_that_is_not_utf8_is_reported_on_the_home_page(tmp_path, open_page):
    model = tmp_path / "latin-log"
    shutil.copytree(SHIPPED, model)
    (model / "log.csv").write_bytes("step,train_loss\n0,4.2 é\n".encode("latin-1"))
    at = open_page("pages/home.py", models_dir=tmp_path, state={"te_model_name": "latin-log"})
    assert any("training log of **latin-log** could not be read" in e.value and "log.csv" in e.value for e in at.error)
    assert {m.label: m.value for m in at.metric}["Parameters per block"] == "49,408"  # the rest of the page is there


def test_a_broken_shipped_config_does_not_crash_the_scaling_or_parameters_page(tmp_path, monkeypatch, open_page):
    import ui.models as common  # the module whose functions read SHIPPED_DIR

    broken = tmp_path / "shipped" / "shakespeare-char"
    shutil.copytree(SHIPPED, broken)
    (broken / "config.json").write_text("{ not json")
    monkeypatch.setattr(common, "SHIPPED_DIR", tmp_path / "shipped")
    for page in ("pages/scaling.py", "pages/parameters.py"):
        at = open_page(page, models_dir=tmp_path / "none")
        assert any("shipped model's configuration could not be read" in w.value and "bad JSON" in w.value
                   for w in at.warning), page
        assert at.get("plotly_chart"), page  # the page's charts still render


def test_a_corpus_that_vanishes_while_the_training_page_reads_it_is_said_in_words(tmp_path, open_page, monkeypatch):
    """The file Tiny Shakespeare was found at is gone by the time the page stamps it (a replica's cleanup, a moved
    file): the page says the corpus could not be read and the rest of it works."""
    import core.data.corpus

    monkeypatch.setattr(core.data.corpus, "shakespeare_path", lambda: tmp_path / "gone" / "tinyshakespeare.txt")
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    assert any("corpus could not be read" in e.value for e in at.error)
    assert at.button(key="train_start") is not None
