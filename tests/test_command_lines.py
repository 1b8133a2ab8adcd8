"""The exit status of the three command lines (python -m core.train, core.study, core.variants): 0 once the work is
done, 2 on bad arguments (argparse's own status) and on bad input, which gets a sentence and never a traceback.
Tiny models, a few steps, a corpus written here (never the shared corpus)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.nn.checkpoint import read_config
from core.training import trainer as T
from core.training.train_cli import main as train_main
from core.training import variants as V
from tests.snapshot_models import made_up_text

ROOT = Path(__file__).resolve().parent.parent
TEXT = made_up_text(6000)
TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--n-ctx", "16", "--batch-size", "4",
        "--eval-interval", "5", "--eval-batches", "1", "--warmup", "2", "--heads-interval", "0", "--snapshots", "0"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "other.txt"
    path.write_text(TEXT)
    return path


def cli(module, *args, timeout=300):
    # a process of its own, as a shell or CI job runs it: the exit status is what they see
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


# ---------------------------------------------------------------- core.train

def test_train_returns_0_once_saved(tmp_path, corpus):
    code = train_main(["--corpus", str(corpus), "--out", str(tmp_path / "m"), "--steps", "6", *TINY])
    assert code == 0  # was the Trainer itself, which SystemExit prints and reports as status 1
    assert read_config(tmp_path / "m")[2]["steps"] == 6


@pytest.mark.parametrize("case", ["missing", "binary", "short", "heads"])
def test_train_bad_input_is_status_2_in_words(case, tmp_path, corpus, capsys):
    path = {"missing": tmp_path / "nowhere.txt", "binary": tmp_path / "b.bin", "short": tmp_path / "s.txt",
            "heads": corpus}[case]
    if case == "binary":
        path.write_bytes(b"\x00\x01\x02" * 100)
    if case == "short":
        path.write_text("too short")
    extra = ["--n-heads", "3"] if case == "heads" else []  # 16 dimensions do not split into 3 heads
    code = train_main(["--corpus", str(path), "--out", str(tmp_path / "m"), "--steps", "3", *TINY, *extra])
    err = capsys.readouterr().err
    assert code == 2
    words = {"missing": "cannot read", "binary": "looks binary", "short": "too short", "heads": "n_heads"}[case]
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "m").exists()


def test_train_bad_arguments_are_status_2_before_any_training(tmp_path, corpus, capsys, monkeypatch):
    (tmp_path / "m").mkdir()
    monkeypatch.setattr(T, "Trainer", None)  # no run may start: the folder is refused first
    with pytest.raises(SystemExit) as e:
        train_main(["--corpus", str(corpus), "--out", str(tmp_path / "m"), "--steps", "3"])
    assert e.value.code == 2 and "already exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        train_main(["--corpus", str(corpus), "--out", str(tmp_path / "n"), "--steps", "ten"])
    assert e.value.code == 2 and "invalid int value" in capsys.readouterr().err


@pytest.mark.slow  # starts Python and torch
def test_python_m_core_train_exits_0_and_prints_no_object(tmp_path, corpus):
    done = cli("core.train", "--corpus", corpus, "--out", tmp_path / "m", "--steps", "10", *TINY)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Trainer object" not in done.stdout + done.stderr and "saved" in done.stdout
    bad = cli("core.train", "--corpus", tmp_path / "nowhere.txt", "--out", tmp_path / "n", "--steps", "3")
    assert bad.returncode == 2 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr[-2000:]


# ---------------------------------------------------------------- core.variants

class InlineEngine:
    """The runs in this process, one after another (the pool's spawned workers would re-import torch)."""
    name = "inline"

    def __init__(self, task):
        self.task = task

    def check(self):
        pass

    def run(self, specs, should_stop):
        for s in specs:
            yield self.task(s)


@pytest.fixture
def inline(monkeypatch):
    from core.training import study_engines

    monkeypatch.setattr(study_engines, "make_engine", lambda name, workers=None, task=None: InlineEngine(task))


def test_variants_records_the_real_corpus_and_returns_0(tmp_path, inline):
    corpus = tmp_path / "other.txt"
    corpus.write_text(made_up_text(3000))
    code = V.main(["--steps", "2", "--out", str(tmp_path / "s"), "--only", "lecture", "--corpus", str(corpus)])
    assert code == 0
    training = read_config(tmp_path / "s" / "models" / "lecture")[2]
    assert training["corpus"] == "other.txt"  # was "tinyshakespeare.txt" whatever the corpus
    assert "| data | other\\.txt (" in (tmp_path / "s" / "models" / "lecture" / "README.md").read_text()  # the card


@pytest.fixture
def no_runs(monkeypatch):
    from core.training import study_engines

    def refuse(*args, **kwargs):
        raise AssertionError("no run may start")

    monkeypatch.setattr(study_engines, "make_engine", refuse)


@pytest.mark.parametrize("steps", ["0", "-5", "1000000000"])
def test_variants_refuses_steps_out_of_range(steps, tmp_path, corpus, capsys, no_runs):
    with pytest.raises(SystemExit) as e:
        V.main(["--steps", steps, "--out", str(tmp_path / "s"), "--corpus", str(corpus)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--steps must be a whole number from 1 to" in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("case", ["missing", "short"])
def test_variants_bad_corpus_is_status_2_in_words(case, tmp_path, capsys, no_runs):
    path = tmp_path / "c.txt"
    if case == "short":
        path.write_text("a few words only\n" * 5)
    code = V.main(["--steps", "2", "--out", str(tmp_path / "s"), "--only", "lecture", "--corpus", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and {"missing": "cannot read", "short": "too short"}[case] in err, err
    assert not (tmp_path / "s" / "variants.csv").exists()


def test_a_failed_rewrite_leaves_the_study_files_whole(tmp_path):
    good = [{**{k: "1" for k in V.VARIANT_FIELDS}, "variant": "lecture",
             "curve": [{"variant": "lecture", "step": 0, "train_loss": 4.0, "val_loss": 4.1}]}]
    V.write_results(tmp_path, good)
    before = {n: (tmp_path / n).read_bytes() for n in ("variants.csv", "curves.csv")}
    # a curve point with a field curves.csv has not: csv raises half-way through the rewrite
    bad = good + [{**good[0], "variant": "no-mlp", "curve": [{"variant": "no-mlp", "step": 0, "oops": 1}]}]
    with pytest.raises(ValueError):
        V.write_results(tmp_path, bad)
    assert {n: (tmp_path / n).read_bytes() for n in before} == before  # both files as they were, not half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.csv", "variants.csv"]  # no temporary left


@pytest.mark.slow  # starts Python and torch
def test_python_m_core_variants_exit_status(tmp_path, corpus):
    bad = cli("core.variants", "--steps", "0", "--out", tmp_path / "s", "--corpus", corpus)
    assert bad.returncode == 2 and "--steps must be" in bad.stderr, bad.stderr[-2000:]
    missing = cli("core.variants", "--steps", "2", "--out", tmp_path / "s", "--corpus", tmp_path / "nowhere.txt")
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr


# ---------------------------------------------------------------- core.study

@pytest.mark.slow  # starts Python, torch and one spawned worker
def test_python_m_core_study_exit_status(tmp_path, corpus):
    grid = tmp_path / "one.json"
    grid.write_text(json.dumps({"widths": [8], "tokens": [256], "n_ctx": 16, "batch_size": 4}))
    done = cli("core.study", "--corpus", corpus, "--grid", grid, "--out", tmp_path / "s", "--workers", "1",
               "--bootstrap", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "s" / "runs.csv").read_text().count("\n") == 2  # the header and the one run
    bad = cli("core.study", "--corpus", corpus, "--out", tmp_path / "t", "--bootstrap", "many")
    assert bad.returncode == 2 and "invalid int value" in bad.stderr
    missing = cli("core.study", "--corpus", tmp_path / "nowhere.txt", "--out", tmp_path / "t")
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
