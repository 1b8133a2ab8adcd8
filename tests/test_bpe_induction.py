"""Issue 43's study (core.training.bpe_induction): each run changes one thing from the shipped BPE recipe and only
that; a run's row holds the numbers bench.induction_text would measure on the same weights; the command line
refuses bad input in one line and merges a study already there."""
import csv
import json
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from core.nn.config import ModelConfig
from core.training import bpe_induction as B
from core.training.study_table import TableSpec
from tests.snapshot_models import made_up_text
from tests.test_command_lines import InlineEngine

SHIPPED_BPE = "assets/models/shakespeare-bpe"


def settings(f: B.Factor):
    shape, tc = B.run_settings(f, 3000)
    return asdict(ModelConfig(**shape, vocab_size=f.vocab)), asdict(tc)


def test_the_shipped_model_is_the_base_run_with_the_studys_changes():
    # read from the shipped model's own config, not restated: what was shipped is the study's base recipe (the BPE
    # model shipped before it, 7,000 steps) with SHIPPED_CHANGES and nothing else
    data = json.loads(open(f"{SHIPPED_BPE}/config.json").read())
    shape, tc = settings(B.BY_ID["base"])
    tc.update(B.SHIPPED_CHANGES)
    for k in ("n_ctx", "d_model", "n_heads", "n_layers", "d_ff", "vocab_size"):
        assert shape[k] == data["model"][k], k
    for k in ("optimizer", "lr", "muon_lr", "schedule", "cooldown_frac", "repeat_fraction", "repeat_first_steps",
              "repeat_min_span", "repeat_max_span", "repeat_random_share", "batch_size", "weight_decay", "steps",
              "repeat_pool", "repeat_pool_steps", "warmup_frac", "seed"):
        assert tc[k] == data["training"]["train_config"][k], k


@pytest.mark.parametrize("run", [f.id for f in B.RUNS if f.id != "base"])
def test_each_run_changes_only_what_it_names(run):
    f = B.BY_ID[run]
    base_shape, base_tc = settings(B.BY_ID["base"])
    shape, tc = settings(f)
    changed = {k for k in shape if shape[k] != base_shape[k]} | {k for k in tc if tc[k] != base_tc[k]}
    named = set(f.shape) | ({"vocab_size"} if f.vocab != B.BASE_VOCAB else set())
    if f.train.get("recipe") == "adamw":  # the named recipe: its optimiser, schedule, rate and warmup together
        named |= {"optimizer", "schedule", "lr", "warmup", "cooldown_frac"}
    else:
        named |= set(f.train)
    assert changed == named, (run, changed ^ named)


def test_head_width_runs_are_the_widths_the_issue_asks_for():
    widths = {f.id: (lambda s: s["d_model"] // s["n_heads"])(settings(f)[0]) for f in B.RUNS}
    assert widths["base"] == 16 and widths["h2"] == 32 and widths["h1"] == 64 and widths["d128"] == 32
    assert {settings(B.BY_ID[r])[0]["vocab_size"] for r in ("v256", "v512", "base")} == {256, 512, 1024}


@pytest.fixture(scope="module")
def small_run():
    # a real run, tiny: 40 steps on made-up text, so the row can be checked against the weights it came from
    spec = TableSpec("h2", 40, text=made_up_text(30_000))
    captured = {}
    from core.training import trainer as T

    real = T.Trainer

    class Keep(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            captured["trainer"] = self

    T.Trainer = Keep
    try:
        row = B.train_factor(spec)
    finally:
        T.Trainer = real
    return row, captured["trainer"]


def test_a_run_reports_what_its_weights_do(small_run):
    row, tr = small_run
    model, tok = tr.model.eval(), tr.tokenizer
    assert row["n_heads"] == 2 and row["d_head"] == row["d_model"] // 2
    # natural text written twice, scored here with a plain forward and cross-entropy, no ablation machinery
    probe = B.natural_probe(tok, tr.val_data, model.config.n_ctx)
    with torch.no_grad():
        logits = model(probe.windows).logits[:, :-1]
    loss = F.cross_entropy(logits.transpose(1, 2), probe.windows[:, 1:], reduction="none").numpy()
    first, second = loss[probe.first].mean(), loss[probe.second].mean()
    assert row["text_first"] == pytest.approx(first, abs=1e-3) and row["text_second"] == pytest.approx(second, abs=1e-3)
    assert row["text_ratio"] == pytest.approx(second / first, abs=1e-3)
    # the stripe columns are the recorded heads.csv rows' own maximum and first crossing
    best = max(r["induction"] for r in row["heads"])
    assert row["best_stripe"] == pytest.approx(best)
    crossed = sorted(r["step"] for r in row["heads"] if r["induction"] >= 0.30)
    assert row["formed_at"] == (crossed[0] if crossed else None)
    assert sorted({r["step"] for r in row["heads"]}) == [0, 40]  # every 100 steps and the last: 0 and 40


def test_the_command_line_writes_and_merges(tmp_path, monkeypatch, capsys):
    from core.training import study_engines

    corpus = tmp_path / "c.txt"
    corpus.write_text(made_up_text(20_000))
    done = []

    def task(spec):
        done.append(spec.run)
        return {"run": spec.run, "factor": B.BY_ID[spec.run].factor, "title": "t", "vocab": 9, "d_model": 64,
                "n_heads": 4, "d_head": 16, "mlp": True, "params": 1, "steps": spec.steps, "seconds": 1.0,
                "best_stripe": 0.5, "best_stripe_step": 100, "formed_at": 100, "final_stripe": 0.5, "best_head": "L2 H1",
                "text_first": 2.0, "text_second": 1.0, "text_ratio": 0.5, "text_second_off": 2.0, "random_ratio": 0.1,
                "val_loss": 3.0, "bits_per_char": 2.0, "chars_per_token": 2.0,
                "heads": [{"step": 0, "layer": 0, "head": 0, "previous_token": 0.1, "induction": 0.5,
                           "first_copy_loss": 1.0, "second_copy_loss": 0.5, "in_context_gain": 0.5}]}

    monkeypatch.setattr(B, "train_factor", task)
    monkeypatch.setattr(study_engines, "make_engine", lambda name, workers=None, task=None: InlineEngine(task))
    out = tmp_path / "study"
    assert B.main(["--steps", "7", "--out", str(out), "--only", "h2,base", "--corpus", str(corpus)]) == 0
    assert B.main(["--steps", "7", "--out", str(out), "--only", "v512", "--corpus", str(corpus)]) == 0
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert [r["run"] for r in rows] == ["base", "h2", "v512"]  # RUNS order, the first two kept
    assert (out / "heads" / "v512.csv").is_file() and done == ["h2", "base", "v512"]
    table = B.render(rows, 7)
    assert "| h2 | head width |" in table and "7 steps" in table
    # a study of other steps is not merged into: refused (issue 55: its rows are work), or started afresh when asked
    before = (out / "runs.csv").read_bytes()
    assert B.main(["--steps", "8", "--out", str(out), "--only", "v256", "--corpus", str(corpus)]) == 2
    assert (out / "runs.csv").read_bytes() == before
    assert B.main(["--steps", "8", "--out", str(out), "--only", "v256", "--corpus", str(corpus), "--overwrite"]) == 0
    assert [r["run"] for r in csv.DictReader((out / "runs.csv").open())] == ["v256"]


@pytest.mark.parametrize("args, says", [(["--only", "h3"], "unknown run h3"), (["--steps", "0"], "--steps"),
                                         (["--corpus", "/nonexistent/x.txt"], "cannot read the corpus")])
def test_bad_arguments_exit_2_in_one_line(args, says, capsys, tmp_path):
    assert B.main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_render_says_never_for_a_run_without_a_head():
    row = {"run": "base", "factor": "none", "title": "x", "d_head": 16, "params": 238208, "best_stripe": 0.02,
           "best_stripe_step": 500, "formed_at": "", "text_ratio": 1.03, "random_ratio": 0.98, "bits_per_char": 2.3,
           "seconds": 400}
    line = [l for l in B.render([row], 3000).splitlines() if l.startswith("| base")][0]
    assert "| never |" in line and "238,208" in line and "0.020 (500)" in line
    json.dumps(row)
