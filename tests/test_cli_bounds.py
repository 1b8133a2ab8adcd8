"""Issue 40, section 3: ``python -m core.train`` answers every bad argument in one line on stderr with exit status 2,
before any work (no corpus read for a bad option, no model built, nothing trained), and reads a corpus only
when it is a regular file no larger than a run's memory holds. Most cases call main(argv) in this process; a few
run as real processes under a memory cap, the way the issue found them (/dev/zero read until the kernel killed
it; --vocab-size 1e9 aborting the process)."""
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from core.data import corpus as corpus_module
from core.training import trainer as T
from core.training.train_cli import main as train_main
from core.data.corpus import read_text_file
from tests.snapshot_models import made_up_text

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--n-ctx", "16", "--batch-size", "4",
        "--eval-interval", "5", "--eval-batches", "1", "--warmup", "2", "--heads-interval", "0", "--snapshots", "0"]
BIG = 10**9

# (extra arguments after TINY, words the one line must hold). Each is refused by its option alone: no corpus read
BAD_OPTIONS = [
    (["--d-model", "0"], "d_model"), (["--d-model", "-4"], "d_model"), (["--d-model", str(BIG)], "parameters"),
    (["--d-model", "x"], "invalid int"), (["--d-model", "1.5"], "invalid int"),
    (["--n-heads", "0"], "n_heads"), (["--n-heads", "3"], "divisible"), (["--n-heads", str(BIG)], "n_heads"),
    (["--n-layers", "0"], "n_layers"), (["--n-layers", "100000"], "parameters"),
    (["--n-ctx", "0"], "n_ctx"), (["--n-ctx", str(BIG)], "tokens per step"), (["--n-ctx", "1e9"], "invalid int"),
    (["--d-ff", "0"], "d_ff"), (["--d-ff", "100000000"], "parameters"),
    (["--vocab-size", "300"], "--tokenizer bpe"), (["--tokenizer", "bpe", "--vocab-size", "100"], "256"),
    (["--tokenizer", "bpe", "--vocab-size", str(BIG)], "16,384"), (["--tokenizer", "words"], "invalid choice"),
    (["--optimizer", "sgd"], "invalid choice"), (["--schedule", "linear"], "invalid choice"),
    (["--batch-size", "0"], "batch_size"), (["--batch-size", "1000000"], "tokens per step"),
    (["--steps", "0"], "steps"), (["--steps", "-1"], "steps"), (["--steps", "100001"], "100,000"),
    (["--steps", "nan"], "invalid int"),
    (["--warmup", "-1"], "warmup"), (["--eval-interval", "0"], "eval_interval"),
    (["--eval-batches", "0"], "eval_batches"), (["--eval-batches", str(BIG)], "--eval-batches"),
    (["--seed", "-1"], "seed"), (["--seed", str(2**63)], "seed"),
    (["--repeat-first-steps", "-1"], "repeat_first_steps"), (["--repeat-min-span", "0"], "repeat_min_span"),
    (["--repeat-max-span", "0"], "repeat_max_span"),
    (["--repeat-min-span", "50", "--repeat-max-span", "20"], "repeat_max_span"),
    (["--heads-interval", "-1"], "heads_interval"), (["--snapshots", "-1"], "snapshots"),
    (["--snapshots", "100000"], "snapshots"),
    *[([flag, v], name) for flag, name in (("--lr", "lr"), ("--muon-lr", "muon_lr")) for v in ("nan", "inf", "-1", "0", "2")],
    (["--lr", "abc"], "invalid float"),
    *[([flag, v], flag[2:].replace("-", "_")) for flag in ("--muon-momentum", "--warmup-frac", "--cooldown-frac",
                                                          "--min-lr-ratio", "--repeat-fraction", "--repeat-random-share")
      for v in ("nan", "-0.5", "2")],
    *[(["--weight-decay", v], "weight_decay") for v in ("nan", "-1", "1e30", "inf")],
    *[(["--grad-clip", v], "grad_clip") for v in ("nan", "-1", "inf")],
    *[(["--beta2", v], "beta2") for v in ("nan", "-1", "1", "2")],
    *[(["--threads", v], "--threads") for v in ("0", "-1", "100000")],
    (["--compare-to", "/nonexistent/model"], "not a checkpoint folder"),
    # a run the memory estimate puts over the budget: 199 snapshots of a 5 M-parameter model, as float16
    (["--d-model", "256", "--n-heads", "4", "--n-layers", "6", "--snapshots", "199"], "snapshots"),
]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(made_up_text(6000))
    return path


@pytest.fixture
def no_work(monkeypatch):
    """No model may be built; ``corpus_read`` counts the corpus reads (the option cases allow none)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built for a run that must be refused")

    monkeypatch.setattr(T, "Trainer", refuse)
    reads = []

    def counting(*args, **kwargs):
        reads.append(args)
        return read_text_file(*args, **kwargs)

    # the name the command line reads the corpus through, wherever it lives
    from core.training import train_cli

    monkeypatch.setattr(train_cli, "read_text_file", counting)
    return reads


def refused(argv, capsys) -> str:
    """Run core.train's main in this process; the one line it wrote on stderr, after checking status 2."""
    try:
        code = train_main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors leave this way, with the status a shell sees
        code = e.code
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert code == 2, (code, out.err[-1500:])
    assert len(lines) == 1 and "Traceback" not in out.err, out.err[-1500:]
    return lines[0]


@pytest.mark.parametrize("extra,words", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_and_status_2_before_the_corpus_is_read(extra, words, tmp_path, text_file, capsys,
                                                                          no_work):
    line = refused(["--corpus", text_file, "--out", tmp_path / "m", "--steps", "3", *TINY, *extra], capsys)
    assert words in line, line
    assert not no_work, "the corpus was read before the options were judged"
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("case", ["exists", "a file, --overwrite", "not a model, --overwrite", "under a file",
                                  "the same name in other letters"])
def test_an_out_folder_that_cannot_be_saved_to_is_refused_before_training(case, tmp_path, text_file, capsys, no_work):
    out, extra = tmp_path / "models" / "m", []
    out.parent.mkdir()
    if case == "exists":
        out.mkdir()
    if case == "a file, --overwrite":
        out.write_text("my notes")
        extra = ["--overwrite"]
    if case == "not a model, --overwrite":
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
        extra = ["--overwrite"]
    if case == "under a file":
        (tmp_path / "models" / "f").write_text("a file")
        out = tmp_path / "models" / "f" / "m"
    if case == "the same name in other letters":
        (tmp_path / "models" / "M").mkdir()
    line = refused(["--corpus", text_file, "--out", out, "--steps", "3", *TINY, *extra], capsys)
    assert "--out" in line, line
    assert not no_work  # checked before the corpus, let alone the run
    if case == "a file, --overwrite":
        assert out.read_text() == "my notes"
    if case == "not a model, --overwrite":
        assert (out / "thesis.tex").read_text() == "years of work"


def test_overwrite_still_replaces_a_saved_model(tmp_path, text_file):
    out = tmp_path / "m"
    assert train_main(["--corpus", str(text_file), "--out", str(out), "--steps", "2", *TINY]) == 0
    assert train_main(["--corpus", str(text_file), "--out", str(out), "--steps", "3", *TINY, "--overwrite"]) == 0
    from core.nn.checkpoint import read_config

    assert read_config(out)[2]["steps"] == 3


@pytest.mark.parametrize("case", ["device", "folder", "fifo", "too large", "missing"])
def test_a_corpus_that_is_not_a_regular_file_or_too_large_is_one_line(case, tmp_path, capsys, no_work, monkeypatch):
    path = {"device": Path("/dev/zero"), "folder": tmp_path, "fifo": tmp_path / "fifo",
            "too large": tmp_path / "big.txt", "missing": tmp_path / "nowhere.txt"}[case]
    if case == "fifo":
        os.mkfifo(path)  # no writer: opening it to read would wait forever
    if case == "too large":
        # 400 MiB a run: 60 MiB beside the process, 3 MiB of text at 20 bytes a character; the file is 4 MiB
        monkeypatch.setenv("TE_RUN_MEMORY", "400M")
        path.write_bytes(b"abc\n" * 2**20)
    line = refused(["--corpus", path, "--out", tmp_path / "m", "--steps", "3", *TINY], capsys)
    words = {"device": "not a text file", "folder": "is a folder", "fifo": "not a text file",
             "too large": "larger than 3 MiB", "missing": "cannot read"}[case]
    assert words in line, line


def test_read_text_file_reads_up_to_its_cap_and_no_further(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("ab\n" * 100)  # 300 bytes
    assert read_text_file(path, max_bytes=300) == "ab\n" * 100
    with pytest.raises(ValueError, match="larger than 299 bytes"):
        read_text_file(path, max_bytes=299)
    with pytest.raises(ValueError, match="not a text file"):
        read_text_file("/dev/zero", max_bytes=10)
    # the default cap: the memory budget's, here 400 MiB - 340 MiB of process, at 20 bytes a character
    from core.data.budget import DATA_BYTES_PER_CHAR, PROCESS_BYTES, corpus_cap

    os.environ["TE_RUN_MEMORY"] = "400M"
    try:
        assert corpus_cap()[0] == (400 * 2**20 - PROCESS_BYTES) // DATA_BYTES_PER_CHAR == 3_145_728
    finally:
        del os.environ["TE_RUN_MEMORY"]
    assert corpus_module.read_text_file(path) == "ab\n" * 100


def _capped():
    # 2 GiB of address space: torch imports within it; a corpus read whole, or a BPE of 10^9 tokens, does not fit
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


@pytest.mark.slow  # starts Python and torch three times
@pytest.mark.parametrize("extra,words", [(["--corpus", "/dev/zero"], "not a text file"),
                                         (["--tokenizer", "bpe", "--vocab-size", str(BIG)], "16,384"),
                                         (["--n-ctx", str(BIG)], "tokens per step")])
def test_real_processes_under_a_memory_cap_answer_in_one_line(extra, words, tmp_path, text_file):
    argv = ["--corpus", text_file, "--out", tmp_path / "m", *extra]
    done = subprocess.run([sys.executable, "-m", "core.train", *map(str, argv)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, preexec_fn=_capped, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------- core.study's grid files and options

BAD_GRIDS = {
    "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,          # over the size a grid file may have
    "nested 30,000 deep": '{"widths": ' + "[" * 30_000 + "]" * 30_000 + "}",  # small enough, too deep to decode
    "not JSON": "{widths: [16]}", "a list": "[16, 32]", "a string": '"tiny"', "a number": "3",
    "widths of text": '{"widths": ["a"], "tokens": [1000]}', "widths of fractions": '{"widths": [16.5], "tokens": [1000]}',
    "widths of booleans": '{"widths": [true], "tokens": [1000]}', "widths an object": '{"widths": {"a": 1}, "tokens": [1]}',
    "no tokens": '{"widths": [16]}', "empty widths": '{"widths": [], "tokens": [1000]}',
    "a NaN budget": '{"widths": [16], "tokens": [NaN]}', "a negative width": '{"widths": [-16], "tokens": [1000]}',
    "n_layers as text": '{"widths": [16], "tokens": [1000], "n_layers": "two"}',
    "an unknown field": '{"widths": [16], "tokens": [1000], "depth": 2}',
    "an unknown recipe": '{"widths": [16], "tokens": [1000], "recipe": "sgd"}',
    "a name that is a list": '{"widths": [16], "tokens": [1000], "name": ["x"]}',
    "a huge width": '{"widths": [1000000], "tokens": [1000]}',
    "a huge budget": '{"widths": [16], "tokens": [1' + "0" * 30 + "]}",
    "a huge window": '{"widths": [16], "tokens": [1000], "n_ctx": 1000000000}',
    "too many runs": '{"widths": ' + str(list(range(16, 16 + 11))) + ', "tokens": ' + str(list(range(1000, 1010))) + "}",
}


@pytest.fixture
def no_study(monkeypatch):
    from core.training import study

    def refuse(*args, **kwargs):
        raise AssertionError("a study started for a grid that must be refused")

    monkeypatch.setattr(study, "run_study", refuse)
    monkeypatch.setattr(study, "make_engine", refuse)


def study_refused(argv, capsys) -> str:
    from core.training.study import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err[-1500:])
    return lines[0]


@pytest.mark.parametrize("case", list(BAD_GRIDS))
def test_a_bad_grid_file_is_one_line_and_status_2(case, tmp_path, text_file, capsys, no_study):
    grid = tmp_path / "mine.json"
    grid.write_text(BAD_GRIDS[case])
    line = study_refused(["--corpus", text_file, "--grid", grid, "--out", tmp_path / "s"], capsys)
    assert "--grid" in line, line
    assert not (tmp_path / "s").exists()


def test_a_grid_file_that_is_not_a_regular_file_is_refused(tmp_path, text_file, capsys, no_study):
    fifo = tmp_path / "grid.json"
    os.mkfifo(fifo)
    assert "not a text file" in study_refused(["--corpus", text_file, "--grid", fifo, "--out", tmp_path / "s"], capsys)


def test_a_good_grid_file_is_still_read(tmp_path):
    from core.training.study_grid import grid_from_file

    path = tmp_path / "one.json"
    path.write_text('{"widths": [8, 16], "tokens": [256], "n_ctx": 16, "batch_size": 4, "recipe": "adamw"}')
    grid = grid_from_file(path)
    assert (grid.name, grid.widths, grid.tokens, grid.n_ctx, grid.recipe) == ("one", (8, 16), (256,), 16, "adamw")


@pytest.mark.parametrize("extra", [["--workers", "0"], ["--workers", "1000000"], ["--bootstrap", "-1"],
                                   ["--bootstrap", str(BIG)], ["--nice", "-5"], ["--nice", "100"],
                                   ["--workers", "many"]])
def test_a_bad_study_option_is_one_line_and_status_2(extra, tmp_path, text_file, capsys, no_study):
    study_refused(["--corpus", text_file, "--out", tmp_path / "s", *extra], capsys)
    assert not (tmp_path / "s").exists()


def test_a_built_in_corpus_that_cannot_be_read_is_named_by_its_file_alone(tmp_path, monkeypatch):
    # the Training and Why each piece pages show this message: the file's name, not the server's folders
    from core.training import training_setup

    bad = tmp_path / "server-only" / "tinyshakespeare.txt"
    bad.parent.mkdir()
    bad.write_bytes(b"\xff\xfe\xfa not UTF-8")
    monkeypatch.setattr(corpus_module, "shakespeare_path", lambda: bad)
    with pytest.raises(ValueError, match="^tinyshakespeare.txt is not UTF-8") as e:
        training_setup.builtin_corpus("shakespeare")
    assert "server-only" not in str(e.value)
