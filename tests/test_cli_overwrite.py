"""Issue 55, section 1: no command line writes over work it did not make. On temporary copies of shipped folders (the
character model with its SAE and transcoders, the variant study, the scaling study, the BPE induction study), an
--out that holds anything the command did not write is refused in one line with status 2 before any work, every
file left byte for byte as it was; with --overwrite only the command's own files change; a rerun with --only
merges into a study of its own kind. The work is a few steps, or a stand-in, so that each case takes seconds."""
import csv
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from core.features import __main__ as features_cli
from core.nn.checkpoint import read_config
from core.training import bpe_induction as B
from core.training import forecast_study as FS
from core.training import study as S
from core.training.study_files import read_rows
from core.training.study_grid import train_one
from core.training import trainer as T
from core.training.train_cli import main as train_main
from core.training import variants as V
from tests.snapshot_models import made_up_text
from tests.test_command_lines import InlineEngine  # a study's runs in this process, one after another

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "shakespeare-char"
SAE = "sae/blocks.0.hook_resid_post"
VARIANTS = ROOT / "assets" / "variants"
STUDY = ROOT / "assets" / "studies" / "shakespeare-char"
BPE = ROOT / "bench" / "results" / "bpe-induction"
TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--n-ctx", "16", "--batch-size", "4",
        "--eval-interval", "5", "--eval-batches", "1", "--warmup", "2", "--heads-interval", "0", "--snapshots", "0"]
MODEL_FILES = {"config.json", "model.safetensors", "README.md", "log.csv", "heads.csv", "tokenizer.json"}


def hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256 of its bytes); a link by where it points."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[rel] = "link to " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def refused(main, argv, capsys) -> str:
    """``main(argv)`` refused: status 2, one line on stderr and no traceback; that line."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (code, err[-1500:])
    return err


def unchanged_but(before: dict, after: dict, own) -> None:
    """Every file of ``before`` that ``own(path)`` does not claim is still there with the same bytes."""
    kept = {p: h for p, h in before.items() if not own(p)}
    assert kept and {p: after.get(p) for p in kept} == kept


def _refuse(*args, **kwargs):
    raise AssertionError("work started for an --out that must be refused")


@pytest.fixture
def no_work(monkeypatch):
    from core.features import train as sae_train
    from core.features import transcoder
    from core.training import study_engines

    for module, name in ((T, "Trainer"), (study_engines, "make_engine"), (S, "make_engine"), (S, "run_study"),
                         (sae_train, "train_sae"), (transcoder, "train_transcoder"), (FS, "analyse")):
        monkeypatch.setattr(module, name, _refuse)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(made_up_text(6000))
    return path


@pytest.fixture
def model(tmp_path):
    return copy(MODEL, tmp_path / "models" / "shakespeare-char")


# ---------------------------------------------------------------- core.train

def test_train_refuses_a_model_folder_without_overwrite(model, corpus, capsys, no_work):
    before = hashes(model)
    assert "already exists" in refused(train_main, ["--corpus", corpus, "--out", model, "--steps", "2", *TINY], capsys)
    assert hashes(model) == before


def test_train_refuses_an_sae_folder_even_with_overwrite(model, corpus, capsys, no_work):
    before = hashes(model)
    line = refused(train_main, ["--corpus", corpus, "--out", model / SAE, "--steps", "2", *TINY, "--overwrite"], capsys)
    assert "not a saved model" in line
    assert hashes(model) == before


def test_train_overwrite_replaces_the_models_files_and_keeps_its_sae_and_transcoders(model, corpus):
    (model / "notes.txt").write_text("mine")
    before = hashes(model)
    assert train_main(["--corpus", str(corpus), "--out", str(model), "--steps", "2", *TINY, "--overwrite"]) == 0
    after = hashes(model)
    unchanged_but(before, after, lambda p: p in MODEL_FILES or p.startswith("checkpoints/"))
    assert {p for p in before if p.startswith(("sae/", "transcoders/"))} <= set(after)
    assert read_config(model)[2]["steps"] == 2 and after["config.json"] != before["config.json"]
    assert not (model / "checkpoints").exists()  # the old model's snapshots went with it: this run kept none
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind


# ---------------------------------------------------------------- core.features

@pytest.mark.parametrize("overwrite", [False, True])
def test_features_never_writes_its_config_over_a_models(model, capsys, no_work, overwrite):
    """The issue's case: --out a model folder wrote the SAE's config.json over the model's, which then failed to load."""
    before = hashes(model)
    line = refused(features_cli.main, ["--model", model, "--site", "blocks.0.hook_resid_post", "--out", model,
                                       *(["--overwrite"] if overwrite else [])], capsys)
    assert "config.json" in line
    assert hashes(model) == before


def test_features_refuses_the_shipped_sae_without_overwrite(model, capsys, no_work):
    before = hashes(model)
    line = refused(features_cli.main, ["--model", model, "--site", "blocks.0.hook_resid_post"], capsys)
    assert "--overwrite" in line
    line = refused(features_cli.main, ["--model", model, "--transcoder", "--layer", "0"], capsys)
    assert "transcoders/layer-0" in line and "--overwrite" in line
    assert hashes(model) == before


def test_features_overwrite_replaces_the_saes_three_files_only(model):
    before = hashes(model)
    assert features_cli.main(["--model", str(model), "--site", "blocks.0.hook_resid_post", "--features", "64",
                              "--k", "4", "--steps", "5", "--batch", "64", "--threads", "1", "--overwrite"]) == 0
    after = hashes(model)
    own = {f"{SAE}/{n}" for n in ("config.json", "cfg.json", "sae_weights.safetensors", "metrics.json",
                                  "explanations.json")}
    unchanged_but(before, after, lambda p: p in own)
    assert f"{SAE}/README.md" in after  # the card written beside it by hand stays
    assert all(after[p] != before[p] for p in own)
    assert json.loads((model / SAE / "config.json").read_text())["d_sae"] == 64


# ---------------------------------------------------------------- core.variants

def test_variants_refuses_a_model_folder(model, corpus, capsys, no_work):
    before = hashes(model)
    line = refused(V.main, ["--steps", "2", "--out", model, "--only", "lecture", "--corpus", corpus], capsys)
    assert "did not write" in line and "--overwrite" in line
    assert hashes(model) == before


@pytest.fixture
def variants(tmp_path):
    out = copy(VARIANTS, tmp_path / "variants")
    (out / "notes.txt").write_text("what I saw")
    for vid in ("lecture", "no-mask"):
        (out / "models" / vid / "notes.md").write_text(f"about {vid}")
    return out


def test_variants_refuses_a_study_holding_other_files_without_overwrite(variants, corpus, capsys, no_work):
    before = hashes(variants)
    line = refused(V.main, ["--steps", "2000", "--out", variants, "--only", "no-mlp", "--corpus", corpus], capsys)
    assert "notes" in line and "--overwrite" in line
    assert hashes(variants) == before


def test_variants_overwrite_replaces_its_own_files_only(variants, corpus, monkeypatch):
    from core.training import study_engines

    monkeypatch.setattr(study_engines, "make_engine", lambda name, workers=None, task=None: InlineEngine(task))
    before = hashes(variants)
    assert V.main(["--steps", "2", "--out", str(variants), "--only", "lecture", "--corpus", str(corpus),
                   "--overwrite"]) == 0
    after = hashes(variants)

    def own(p):
        parts = p.split("/")
        return p in ("variants.csv", "curves.csv") or (parts[0] == "models" and parts[-1] in MODEL_FILES)
    unchanged_but(before, after, own)
    assert {"notes.txt", "models/lecture/notes.md", "models/no-mask/notes.md"} <= set(after)
    assert after["models/lecture/model.safetensors"] != before["models/lecture/model.safetensors"]
    assert not (variants / "models" / "no-mask" / "config.json").exists()  # its row is gone, so is its model
    assert not (variants / "models" / "no-positions").exists()  # nothing else was in it


# ---------------------------------------------------------------- core.study

def test_study_refuses_the_shipped_study_that_holds_a_forecast(tmp_path, corpus, capsys, no_work):
    out = copy(STUDY, tmp_path / "study")
    before = hashes(out)
    line = refused(S.main, ["--corpus", corpus, "--grid", "full", "--out", out], capsys)
    assert "forecast.json" in line and "--overwrite" in line
    assert hashes(out) == before


def test_study_refuses_a_model_folder_even_with_overwrite(model, corpus, capsys, no_work):
    before = hashes(model)
    line = refused(S.main, ["--corpus", corpus, "--grid", "tiny", "--out", model, "--overwrite"], capsys)
    assert "README.md" in line and "not a study" in line
    assert hashes(model) == before


def test_study_continues_beside_other_files_only_with_overwrite(tmp_path, corpus, capsys, monkeypatch):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"widths": [8], "tokens": [1024, 2048], "n_ctx": 32, "batch_size": 8}))
    monkeypatch.setattr(S, "make_engine", lambda name, workers=None: InlineEngine(train_one))
    out = tmp_path / "study"
    args = ["--corpus", str(corpus), "--grid", str(grid), "--out", str(out), "--bootstrap", "0"]
    assert S.main(args) == 0
    assert S.main(args) == 0  # its own folder, every run in: continued (nothing to train), not refused
    shutil.copy(STUDY / "forecast.json", out / "forecast.json")
    (out / "notes.txt").write_text("mine")
    before = hashes(out)
    capsys.readouterr()
    assert "notes.txt" in refused(S.main, args, capsys)
    assert hashes(out) == before
    assert S.main([*args, "--overwrite"]) == 0
    after = hashes(out)
    assert (after["forecast.json"], after["notes.txt"]) == (before["forecast.json"], before["notes.txt"])
    assert len(read_rows(out / "runs.csv")) == 2


# ---------------------------------------------------------------- core.bpe_induction

def fake_factor(spec) -> dict:
    """What train_factor returns, at once, with numbers that say which session made it."""
    row = {k: "" for k in B.FIELDS}
    row.update(run=spec.run, factor=B.BY_ID[spec.run].factor, title="new", steps=spec.steps, params=1,
               best_stripe=0.5, best_stripe_step=100, d_head=16)
    row["heads"] = [{"step": 0, "layer": 0, "head": 0, "previous_token": 0.1, "induction": 0.5,
                     "first_copy_loss": 1.0, "second_copy_loss": 0.5, "in_context_gain": 0.5}]
    return row


@pytest.fixture
def fake_runs(monkeypatch):
    from core.training import study_engines

    monkeypatch.setattr(B, "train_factor", fake_factor)
    monkeypatch.setattr(study_engines, "make_engine", lambda name, workers=None, task=None: InlineEngine(task))


def runs(out: Path) -> dict:
    with open(out / "runs.csv", newline="") as f:
        return {r["run"]: r for r in csv.DictReader(f)}


def test_bpe_has_no_default_out_and_leaves_the_shipped_study_alone(corpus, capsys, no_work):
    before = hashes(BPE)
    assert "--out" in refused(B.main, ["--only", "base", "--steps", "5", "--corpus", corpus], capsys)
    assert hashes(BPE) == before


def test_bpe_refuses_a_rerun_of_other_steps_into_the_shipped_study(tmp_path, corpus, capsys, no_work):
    """The issue's case: --only base --steps 5 into the shipped study took runs.csv from 19 runs to 1."""
    out = copy(BPE, tmp_path / "bpe")
    before = hashes(out)
    line = refused(B.main, ["--only", "base", "--steps", "5", "--out", out, "--corpus", corpus], capsys)
    assert "3000 steps" in line and "--overwrite" in line
    assert hashes(out) == before


def test_bpe_merges_a_rerun_with_only_into_its_own_study(tmp_path, corpus, fake_runs):
    out = copy(BPE, tmp_path / "bpe")
    before, rows = hashes(out), runs(out)
    assert B.main(["--only", "base", "--steps", "3000", "--out", str(out), "--corpus", str(corpus)]) == 0
    after = runs(out)
    assert list(after) == list(rows) and after["base"]["title"] == "new"
    assert all(after[r] == rows[r] for r in rows if r != "base")  # the other 18 runs as they were
    unchanged_but(before, hashes(out), lambda p: p in ("runs.csv", "heads/base.csv"))


def test_bpe_overwrite_starts_afresh_and_keeps_other_files(tmp_path, corpus, capsys, fake_runs, no_work):
    out = copy(BPE, tmp_path / "bpe")
    (out / "notes.md").write_text("mine")
    before = hashes(out)
    assert "notes.md" in refused(B.main, ["--only", "base", "--steps", "3000", "--out", out, "--corpus", corpus],
                                 capsys)
    assert hashes(out) == before
    from core.training import study_engines  # the stand-in runs again (no_work refused them above)

    study_engines.make_engine = lambda name, workers=None, task=None: InlineEngine(task)
    assert B.main(["--only", "base", "--steps", "5", "--out", str(out), "--corpus", str(corpus), "--overwrite"]) == 0
    after = hashes(out)
    assert list(runs(out)) == ["base"] and after["notes.md"] == before["notes.md"]
    assert sorted(p for p in after if p.startswith("heads/")) == ["heads/base.csv"]


def test_bpe_refuses_a_scaling_studys_folder_even_with_overwrite(tmp_path, corpus, capsys, no_work):
    out = copy(STUDY, tmp_path / "study")
    before = hashes(out)
    line = refused(B.main, ["--only", "base", "--steps", "5", "--out", out, "--corpus", corpus, "--overwrite"], capsys)
    assert "runs.csv" in line
    assert hashes(out) == before


# ---------------------------------------------------------------- core.forecast_study

@pytest.fixture
def fake_analysis(monkeypatch):
    data = json.loads((STUDY / "forecast.json").read_text())
    data["made_by"] = "this test"
    monkeypatch.setattr(FS, "analyse", lambda resamples=200: data)
    return data


def test_forecast_writes_nothing_without_out(tmp_path, monkeypatch, fake_analysis, capsys):
    """Its only place was the shipped study's forecast.json and bench/results: now it prints, and --out writes."""
    shipped = copy(STUDY, tmp_path / "study")
    monkeypatch.setattr(FS, "SHIPPED_STUDY", shipped)
    monkeypatch.setattr(FS, "RESULTS", tmp_path / "scaling-forecast.md", raising=False)
    before = hashes(tmp_path)
    assert FS.main([]) == 0
    assert hashes(tmp_path) == before
    assert "# Scaling laws that forecast" in capsys.readouterr().out


def test_forecast_refuses_a_study_folder_without_overwrite_and_then_writes_its_file_only(tmp_path, capsys,
                                                                                         fake_analysis):
    out = copy(STUDY, tmp_path / "study")
    before = hashes(out)
    line = refused(FS.main, ["--out", out], capsys)
    assert "did not write" in line and "--overwrite" in line
    assert hashes(out) == before
    assert FS.main(["--out", str(out), "--overwrite"]) == 0
    after = hashes(out)
    unchanged_but(before, after, lambda p: p == "forecast.json")
    assert set(after) == set(before) and FS.read_forecast(out)["made_by"] == "this test"
