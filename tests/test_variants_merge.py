"""Issue 40: ``python -m core.variants --out DIR --only X`` into a study already there replaced the whole study with
one row (``--out assets/variants --only no-mlp`` wiped the shipped one). Now the named variants replace their rows
and the others stay; a study of other steps or another corpus, or one that cannot be read, is refused before any
run unless --overwrite. Runs here are a stand-in that returns a row at once, so the merge alone is tested."""
import csv
import json

import pytest

from core.training import variants as V
from core.views.variants_view import read_study
from tests.snapshot_models import made_up_text
from tests.test_command_lines import InlineEngine  # the study's runs in this process, one after another


def fake_row(spec) -> dict:
    # what train_variant returns, with numbers that say which session made it
    return {**{k: "" for k in V.VARIANT_FIELDS}, "variant": spec.run, "title": V.BY_ID[spec.run].title,
            "d_model": 64, "n_heads": 4, "n_layers": 2, "params": 999, "steps": spec.steps, "seconds": 0.5,
            "train_loss": 9.0, "val_loss": 9.0, "causal_val_loss": 9.0, "sample": "new",
            "curve": [{"variant": spec.run, "step": s, "train_loss": 9.0, "val_loss": 9.0} for s in (0, spec.steps)]}


@pytest.fixture
def runs(monkeypatch):
    from core.training import study_engines

    done = []

    def task(spec):
        done.append(spec.run)
        return fake_row(spec)

    monkeypatch.setattr(V, "train_variant", task)
    monkeypatch.setattr(study_engines, "make_engine", lambda name, workers=None, task=None: InlineEngine(task))
    return done


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(made_up_text(3000))
    return path


def old_row(vid, loss, steps=5):
    return {**{k: "" for k in V.VARIANT_FIELDS}, "variant": vid, "title": vid, "d_model": 64, "n_heads": 4,
            "n_layers": 2, "params": 1000, "steps": steps, "seconds": 1.0, "train_loss": loss, "val_loss": loss,
            "causal_val_loss": loss, "sample": "old, with a comma\nand a line",
            "curve": [{"variant": vid, "step": s, "train_loss": loss, "val_loss": loss} for s in (0, steps)]}


@pytest.fixture
def study(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    V.write_results(out, [old_row("lecture", 1.5), old_row("no-mlp", 1.8), old_row("h8", 1.6)])
    return out


def table(out) -> dict:
    with open(out / "variants.csv", newline="") as f:
        return {r["variant"]: r for r in csv.DictReader(f)}


def test_only_one_variant_replaces_its_row_and_keeps_the_others(study, corpus, runs):
    before = table(study)
    assert V.main(["--steps", "5", "--out", str(study), "--only", "no-mlp", "--corpus", str(corpus)]) == 0
    assert runs == ["no-mlp"]
    after = table(study)
    assert list(after) == ["lecture", "h8", "no-mlp"]  # every row still there, in the study's order
    assert after["lecture"] == before["lecture"] and after["h8"] == before["h8"]  # kept as they were, comma and all
    assert after["no-mlp"]["val_loss"] == "9.0" and after["no-mlp"]["sample"] == "new"
    s = read_study(study)
    assert not s.problems and s.curves["lecture"] == [{"step": 0, "train_loss": 1.5, "val_loss": 1.5},
                                                      {"step": 5, "train_loss": 1.5, "val_loss": 1.5}]
    assert s.curves["no-mlp"][-1]["val_loss"] == 9.0


@pytest.mark.parametrize("case", ["other steps", "unreadable", "not a study", "another corpus"])
def test_a_study_it_cannot_join_is_refused_before_any_run(case, study, corpus, runs, capsys):
    steps = "7" if case == "other steps" else "5"
    if case == "unreadable":
        (study / "variants.csv").write_bytes(b"\xff\xfe not text")
    if case == "not a study":
        (study / "variants.csv").write_text("name,age\nbob,3\n")
    if case == "another corpus":
        (study / "models" / "lecture").mkdir(parents=True)
        (study / "models" / "lecture" / "config.json").write_text(json.dumps(
            {"training": {"corpus": "tinyshakespeare.txt", "corpus_chars": 1115394}}))
    files = {p.name: p.read_bytes() for p in study.glob("*.csv")}
    code = V.main(["--steps", steps, "--out", str(study), "--only", "no-mlp", "--corpus", str(corpus)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--overwrite" in err, err
    assert runs == [] and {p.name: p.read_bytes() for p in study.glob("*.csv")} == files  # nothing run, nothing lost


def test_overwrite_replaces_the_whole_study(study, corpus, runs):
    kept = study / "models" / "no-positions"
    kept.mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    assert V.main(["--steps", "7", "--out", str(study), "--only", "no-mlp", "--corpus", str(corpus),
                   "--overwrite"]) == 0
    assert list(table(study)) == ["no-mlp"]
    assert not kept.exists()  # a kept model whose row is gone would still feed the page's live numbers


def test_a_new_folder_gets_the_rows_run(tmp_path, corpus, runs):
    out = tmp_path / "fresh"
    assert V.main(["--steps", "5", "--out", str(out), "--only", "h8,lecture", "--corpus", str(corpus)]) == 0
    assert list(table(out)) == ["lecture", "h8"]
