"""python -m core.features on a tiny saved model: it writes the SAE's three files and its explanations, and every
bad argument ends with status 2 and one line naming the problem, before any training."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.features.__main__ import main
from core.analysis.sae import CONFIG, METRICS, SAELENS_CONFIG, WEIGHTS, load_sae
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer
from core.data.corpus import PYDOC_NAME

ROOT = Path(__file__).resolve().parent.parent
TEXT = "the quick brown fox jumps over the lazy dog\n"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=2))
    return save_checkpoint(tmp_path_factory.mktemp("models") / "tiny", model, tok, {"steps": 1})


@pytest.mark.slow  # a real subprocess: torch imported afresh, about 6 s
def test_the_command_line_trains_and_saves(model_folder, tmp_path):
    out = tmp_path / "sae_out"
    r = subprocess.run([sys.executable, "-m", "core.features", "--model", str(model_folder), "--site",
                        "blocks.1.hook_resid_mid", "--steps", "20", "--batch", "256", "--k", "4", "--threads", "1",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([CONFIG, SAELENS_CONFIG, METRICS, WEIGHTS,
                                                            "explanations.json"])
    sae = load_sae(out, site="blocks.1.hook_resid_mid", d_in=16)
    assert (sae.config.d_sae, sae.config.k, sae.config.kind) == (128, 4, "topk")
    metrics = json.loads((out / METRICS).read_text())
    assert metrics["steps"] == 20 and metrics["corpus"] == PYDOC_NAME and metrics["threads"] == 1
    assert metrics["l0"] <= 4
    assert f"saved {out}" in r.stdout


@pytest.mark.parametrize("args, says", [
    (["--site", "blocks.0.hook_embed"], "is not a site"),
    (["--site", "blocks.5.hook_resid_post"], "the model has 2 blocks"),
    (["--site", "blocks.0.hook_resid_post\n"], "is not a site"),
    (["--model", "/nonexistent/model"], "/nonexistent/model"),
    (["--k", "0"], "k must be a whole number from 1"),
    (["--k", "-3"], "k must be a whole number from 1"),
    (["--features", "0"], "d_sae must be a whole number from 1"),
    (["--features", "-8"], "d_sae must be a whole number from 1"),
    (["--steps", "0"], "steps must be a whole number"),
    (["--batch", "0"], "batch_size must be a whole number"),
    (["--lr", "5"], "lr must be between 0 and 1"),
    (["--kind", "jump"], "invalid choice"),
    (["--steps", "many"], "invalid int value"),
    (["--threads", "-2"], "--threads"),
    (["--out", "/dev/null/sae"], "cannot be made"),
])
def test_a_bad_argument_is_one_line_and_status_2(model_folder, capsys, args, says):
    argv = ["--model", str(model_folder), "--site", "blocks.0.hook_resid_post", "--steps", "5", *args]
    try:
        status = main(argv)
    except SystemExit as e:  # argparse's own refusals exit
        status = e.code
    err = capsys.readouterr().err
    assert status == 2
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_a_file_where_out_should_be_is_refused(model_folder, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")
    assert main(["--model", str(model_folder), "--site", "blocks.0.hook_resid_post", "--steps", "5",
                 "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert "taken" in err and "not a folder" in err


def test_a_model_folder_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{ nope")
    assert main(["--model", str(tmp_path), "--site", "blocks.0.hook_resid_post"]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and len(err.strip().splitlines()) == 1
