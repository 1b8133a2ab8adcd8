"""The variant study (core.training.variants) and what the Why each piece page reads from it
(core.views.variants_view), on runs of a few steps and on studies written by hand."""
import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.views import variants_view as VV
from core.nn.checkpoint import load_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.training.train_data import encode_corpus, windowed_loss
from core.training.study_table import TableSpec
from core.training.variants import BY_ID, VARIANT_FIELDS, main, train_variant, write_results
from core.data.corpus import split_train_val
from tests.snapshot_models import made_up_text
from attention_hooks import attention

TEXT = made_up_text(20_000)
ROOT = Path(__file__).resolve().parent.parent


def test_every_variant_builds_and_the_list_covers_the_issue():
    for v in BY_ID.values():
        ModelConfig(vocab_size=20, **{**dict(n_ctx=128, d_model=64, n_heads=4, n_layers=2), **v.switches})
    need = {"lecture", "h1", "h2", "h8", "h16", "no-w_o", "no-mlp", "no-residual", "no-layernorm", "post-norm",
            "no-positions", "mask-after-softmax", "no-mask", "deep-L2", "deep-L6", "deep-L12", "deep-L2-bare",
            "deep-L6-bare", "deep-L12-bare"}
    assert need <= set(BY_ID)


@pytest.mark.slow  # trains a model for 30 steps: the fast lane leaves it to CI
def test_a_no_mask_run_is_scored_as_trained_and_under_the_causal_mask(tmp_path):
    row = train_variant(TableSpec("no-mask", steps=30, keep_weights=str(tmp_path / "m"), text=TEXT))
    assert row["variant"] == "no-mask" and row["steps"] == 30 and row["curve"][-1]["step"] == 30
    # the kept weights, scored again by hand both ways
    model, tok = load_checkpoint(tmp_path / "m")
    assert model.config.mask == "none"
    val = encode_corpus(tok, split_train_val(TEXT)[1])
    assert row["val_loss"] == pytest.approx(windowed_loss(model, val), abs=1e-4)
    honest = Transformer(ModelConfig(**{**model.config.to_dict(), "mask": "scores"}))
    honest.load_state_dict(model.state_dict())
    assert row["causal_val_loss"] == pytest.approx(windowed_loss(honest.eval(), val), abs=1e-4)
    assert row["causal_val_loss"] != row["val_loss"]


@pytest.mark.slow  # trains in real processes: the fast lane leaves it to CI
def test_the_command_line_writes_one_row_per_variant_in_order(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text(TEXT)
    # a process of its own, as a user runs it: the pool's spawned workers re-import the parent's __main__, which in
    # a pytest-xdist worker is not a module they can import
    done = subprocess.run([sys.executable, "-m", "core.variants", "--steps", "5", "--out", str(tmp_path / "s"),
                           "--only", "no-mlp,lecture", "--corpus", str(corpus), "--workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    study = VV.read_study(tmp_path / "s")
    assert list(study.rows) == ["lecture", "no-mlp"] and not study.problems  # the study's order, not finishing order
    assert study.rows["no-mlp"]["params"] < study.rows["lecture"]["params"]
    assert (tmp_path / "s" / "models" / "lecture" / "model.safetensors").is_file()
    assert [p["step"] for p in study.curves["lecture"]] == sorted(p["step"] for p in study.curves["lecture"])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "x"), "--only", "no-such-variant", "--corpus", str(corpus)])


def _study(tmp_path, rows):
    write_results(tmp_path, [{**{k: "" for k in VARIANT_FIELDS}, "curve": [], **r} for r in rows])
    return VV.read_study(tmp_path)


def row(vid, val, causal=None, train=None, params=1000, **extra):
    return dict(variant=vid, title=vid, d_model=64, n_heads=4, n_layers=2, params=params, steps=100, seconds=1.0,
                train_loss=val if train is None else train, val_loss=val,
                causal_val_loss=val if causal is None else causal, **extra)


def test_verdicts_come_from_the_numbers(tmp_path):
    study = _study(tmp_path, [row("lecture", 1.60), row("no-mask", 0.40, causal=2.9, train=0.3),
                              row("no-mlp", 1.80), row("h8", 1.61), row("deep-L2", 1.9), row("deep-L12-bare", 3.0)])
    assert VV.verdict(study, "lecture") == "the reference"
    assert VV.verdict(study, "no-mask").startswith("cheats")
    assert VV.verdict(study, "no-mlp") == "worse by 0.200 nats per character"
    assert VV.verdict(study, "h8").startswith("about the same")
    assert VV.verdict(study, "deep-L12-bare") == "worse by 1.100 nats per character"  # against deep-L2, not lecture
    assert VV.best_heads(study) == (4, 1.60)  # h = 4 is the lecture's model


def test_a_bad_row_or_file_disables_only_itself(tmp_path):
    study = _study(tmp_path, [row("lecture", 1.6), row("no-mlp", float("nan")), row("h8", 1.7)])
    assert list(study.rows) == ["lecture", "h8"] and "no-mlp" in study.problems[0]
    with open(tmp_path / "curves.csv", "a") as f:
        f.write("lecture,ten,1.0,1.0\n")
    assert VV.read_study(tmp_path).rows  # a bad point is skipped
    (tmp_path / "variants.csv").write_bytes(b"\xff\xfe not text")
    broken = VV.read_study(tmp_path)
    assert not broken.rows and "could not be read" in broken.problems[0]
    empty = VV.read_study(tmp_path / "missing")
    assert not empty.rows and empty.problems


def _scaled(**switches):
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=12, n_heads=3, n_layers=2, **switches)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(8)
    return m


def test_the_live_claims_on_models_built_here():
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    assert VV.earlier_rows_change(_scaled(), ids, 9) == 0.0  # causal: earlier rows never see the last token
    assert VV.earlier_rows_change(_scaled(mask="after_softmax"), ids, 9) > 1e-3
    free = _scaled(mask="none")
    (layer, head), w, pat = VV.future_stare(free, ids)
    with torch.no_grad():
        out = attention(free, torch.tensor([ids]))
    # the weight on the next position, a[i, i+1], of every head: the largest one is the head it names
    by_hand = max((float(torch.diagonal(r.pattern[0, h], 1).mean()), (l, h)) for l, r in enumerate(out)
                  for h in range(3))
    assert (layer, head) == by_hand[1] and math.isclose(w, by_hand[0], rel_tol=1e-6)
    assert (pat == out[layer].pattern[0, head].numpy()).all()
    one_layer_bag = Transformer(ModelConfig(vocab_size=11, n_ctx=16, d_model=12, n_heads=3, n_layers=1,
                                            positions=False)).eval()
    assert VV.shuffle_change(one_layer_bag, ids) < 1e-5
    assert VV.shuffle_change(_scaled(), ids) > 1e-3


def test_claim_numbers_leave_out_what_is_missing(tmp_path):
    study = _study(tmp_path, [row("lecture", 1.6, params=5000), row("no-w_o", 1.7, params=4000)])
    nums = VV.claim_numbers(study, {}, [1, 2, 3], 4)
    assert nums == {"w_o": {"loss": (1.7, 1.6), "saved": 1000}}


def test_rows_written_are_read_back(tmp_path):
    study = _study(tmp_path, [row("lecture", 1.6, sample="a, b\nc")])
    with open(tmp_path / "variants.csv", newline="") as f:
        assert next(csv.DictReader(f))["sample"] == "a, b\nc"  # quoted: commas and newlines survive
    assert study.rows["lecture"]["val_loss"] == 1.6
