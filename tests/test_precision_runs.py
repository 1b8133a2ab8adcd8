"""The app's runs and the precision probe (core.nn.precision): the one setting they read (TE_PRECISION, fp32 in this
suite), the rule that a run too short to pay for a probe does not probe, a CPU without bf16 units that never probes
a run, a precision.json cache that is written atomically and ignored when it is broken, and the pages' and cards'
words for the precision that trained a run."""
import json
import os

import pytest

from core.nn import precision as P
from core.training.recipes import TrainConfig

TEXT = "".join(chr(97 + i % 7) for i in range(3_000))
SHAPE = {"n_ctx": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}


def test_the_suite_runs_fp32_and_the_setting_is_read_in_one_place(monkeypatch):
    assert os.environ["TE_PRECISION"] == "float32" and P.run_precision() == P.FP32  # tests/conftest.py
    monkeypatch.delenv("TE_PRECISION")
    assert P.run_precision() == "auto"  # the app's default: the probe decides
    monkeypatch.setenv("TE_PRECISION", " Float32 ")
    assert P.run_precision() == P.FP32
    for bad in ("bfloat16", "fp16", "yes"):  # never bf16 by the setting alone; a typo is said, not guessed
        monkeypatch.setenv("TE_PRECISION", bad)
        with pytest.raises(ValueError, match="TE_PRECISION"):
            P.run_precision()


def test_the_probe_costs_at_most_five_percent_of_the_run():
    # a trainer's probe: 4 timed + 1 untimed steps of each precision = 10 steps, 5 % of 200
    assert P.worth_probing(200, 4) and not P.worth_probing(199, 4)
    # an SAE's: 6 + 1 of each = 14 steps, 5 % of 280
    assert P.worth_probing(280, 6) and not P.worth_probing(279, 6)


def _counting(calls, faster=True):
    def probe(precision):
        calls.append(precision)
        return (1.0, 0.5) if precision == P.FP32 else ((0.5 if faster else 2.0), 0.5)
    return probe


def test_a_run_too_short_for_a_probe_reads_the_cache_or_keeps_fp32(tmp_path):
    calls = []
    short = P.choose("s", _counting(calls), cache_dir=tmp_path, bf16_units=True, may_probe=False)
    assert short["precision"] == P.FP32 and not short["probed"] and calls == []
    P.choose("s", _counting(calls), cache_dir=tmp_path, bf16_units=True)  # a long run of the shape: probed, bf16
    assert calls == [P.FP32, P.BF16]
    again = P.choose("s", _counting(calls), cache_dir=tmp_path, bf16_units=True, may_probe=False)
    assert again["precision"] == P.BF16 and not again["probed"] and len(calls) == 2  # the cached choice, free


def _wrap_choose(monkeypatch, module, calls):
    """module.choose with its probe counted (the probe runs steps; choose's flag check comes before it)."""
    real = module.choose

    def counted(shape, probe, **kw):
        return real(shape, lambda p: (calls.append(p), probe(p))[1], **kw)
    monkeypatch.setattr(module, "choose", counted)


def test_a_short_training_run_does_not_probe_a_long_one_does(tmp_path, monkeypatch):
    from core.training import trainer as T
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx512_bf16"})  # the flag on, whatever this CPU has
    calls = []
    _wrap_choose(monkeypatch, T, calls)
    tc = dict(batch_size=4, seed=0, heads_interval=0, snapshots=0, eval_batches=1)
    short = T.Trainer(TEXT, SHAPE, TrainConfig(steps=199, **tc), precision="auto")
    assert short.precision == P.FP32 and calls == [] and "too short" in short.precision_probe["reason"]
    T.Trainer(TEXT, SHAPE, TrainConfig(steps=200, **tc), precision="auto")
    assert calls == [P.FP32, P.BF16]


def test_a_cpu_without_bf16_units_never_probes_a_run(tmp_path, monkeypatch):
    import torch
    from core.analysis.sae import SAE
    from core.features import train as F
    from core.training import trainer as T
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx2", "avx512f", "fma"})  # the flag check forced off
    calls = []
    _wrap_choose(monkeypatch, T, calls)
    _wrap_choose(monkeypatch, F, calls)
    tr = T.Trainer(TEXT, SHAPE, TrainConfig(steps=10_000, batch_size=4, heads_interval=0, snapshots=0),
                   precision="auto")
    assert tr.precision == P.FP32 and "no bf16 units" in tr.precision_probe["reason"]
    s = F.SAESettings(d_sae=32, k=4, steps=2, batch_size=64, precision="auto")
    monkeypatch.setattr(P, "PROBE_SHARE", 100.0)  # long enough to probe, were there units
    sae = SAE(s.config("blocks.0.hook_resid_post", 8), generator=torch.Generator().manual_seed(0))
    F.train_on(sae, torch.randn(256, 8, generator=torch.Generator().manual_seed(1)), s)
    assert sae.trained_precision == P.FP32 and calls == [] and not (tmp_path / P.CACHE_NAME).exists()


@pytest.mark.parametrize("content", [
    b"", b'{"a": ', b"[1, 2]", b'"bfloat16"', b"\xff\xfe\x00 not text", b"[" * 100_000,
    b'{"KEY": "bfloat16"}', b'{"KEY": {"precision": "float16"}}',
], ids=["empty", "truncated", "a list", "a string", "binary", "deep", "not an entry", "unknown precision"])
def test_a_broken_cache_is_ignored_probed_anew_and_rewritten(tmp_path, content):
    path = tmp_path / P.CACHE_NAME
    path.write_bytes(content.replace(b"KEY", f"{P.cpu_key()}|s".encode()))
    calls = []
    out = P.choose("s", _counting(calls, faster=False), cache_dir=tmp_path, bf16_units=True)  # no traceback
    assert out["precision"] == P.FP32 and out["probed"] and calls == [P.FP32, P.BF16]
    saved = json.loads(path.read_text())  # rewritten whole, as JSON
    assert saved[f"{P.cpu_key()}|s"]["precision"] == P.FP32


def test_the_cache_is_written_atomically_and_a_failed_write_loses_the_cache_not_the_run(tmp_path, monkeypatch):
    path = tmp_path / P.CACHE_NAME
    P.choose("a", _counting([]), cache_dir=tmp_path, bf16_units=True)
    before = path.read_text()

    def half_then_full_disk(data, fh, **kw):
        fh.write(json.dumps(data)[:10])  # half of the new file written...
        raise OSError(28, "No space left on device")  # ... then the disk is full
    monkeypatch.setattr(P.json, "dump", half_then_full_disk)
    out = P.choose("b", _counting([]), cache_dir=tmp_path, bf16_units=True)
    assert out["precision"] == P.BF16 and out["probed"]  # the run goes on with its measured choice
    assert path.read_text() == before  # the old cache whole: never half of the new one
    assert sorted(p.name for p in tmp_path.iterdir()) == [P.CACHE_NAME]  # no temporary file left beside it


def test_the_training_pages_summary_says_the_precision():
    from core.training.job_settings import JobSettings
    from core.views import training_view as view
    assert view.run_summary("x", JobSettings(), 0, 2).endswith("2 CPU threads")  # not chosen yet: nothing said
    assert view.run_summary("x", JobSettings(), 0, 2, "float32").endswith("· float32 matrix products")
    bf16 = view.run_summary("x", JobSettings(), 0, 2, "bfloat16")
    assert "bfloat16 matrix products (attention float32), measured faster on this CPU" in bf16


def test_the_model_card_says_the_precision_of_a_record():
    from core.nn.config import ModelConfig
    from core.nn.model_card import model_card
    rows = lambda t: [r for r in model_card("m", ModelConfig(), t).splitlines() if r.startswith("| precision |")]  # noqa: E731
    assert rows({"precision": "float32"}) == ["| precision | float32 matrix products |"]
    (bf16,) = rows({"precision": "bfloat16"})
    assert "bfloat16 matrix products (attention fp32), chosen by a measured probe" in bf16
    assert rows({"val_loss": 1.5}) == []  # a model saved before records said it: no claim


def test_the_features_page_says_which_precision_trained_the_sae():
    from core.views.features_view import precision_words
    assert precision_words({"precision": "float32"}) == " Trained in float32."
    assert "bfloat16 matrix products, which a short probe measured faster" in precision_words({"precision": "bfloat16"})
    for hostile in ({}, {"precision": ["bfloat16"]}, {"precision": "<b>x</b>"}, None):  # an old or edited metrics.json
        assert precision_words(hostile) == ""


def _card(sessions, folder):
    from core.training.study import write_card
    grid = {"name": "tiny", "widths": [16, 32], "n_layers": 2, "head_width": 16, "batch_size": 16, "n_ctx": 64,
            "recipe": "muon", "seed": 1}
    meta = {"grid": grid, "corpus": "c", "corpus_chars": 10_000, "split": "90/10", "N_convention": "N", "loss": "l",
            "sessions": sessions}
    return write_card(folder, meta, [{"cpu_s": 1.0, "D": 1000}], None)


def _session(**kw):
    return {"command": "python -m core.study", "engine": "pool", "runs_before": 0, "runs_after": 2, "wall_s": 60,
            "started": "today", "machine": "m", **kw}


def test_the_study_card_says_which_runs_trained_in_bf16(tmp_path):
    assert "matrix products" not in _card([_session()], tmp_path)  # a session from before runs chose one: no claim
    assert "; float32 matrix products\n" in _card([_session(precision="float32", bfloat16_runs=[])], tmp_path)
    assert "float32 matrix products (auto: no probe measured bfloat16 faster)" in _card(
        [_session(precision="auto", bfloat16_runs=[])], tmp_path)
    card = _card([_session(precision="auto", bfloat16_runs=["d32-D300000"])], tmp_path)
    assert "bfloat16 matrix products (attention float32, measured faster by a probe at their shape) in d32-D300000" \
        in card


def test_a_studys_run_reports_its_precision_beside_its_row():
    from core.training import study_grid as G
    spec = G.RunSpec("d16-D2048", d_model=16, n_heads=1, n_layers=1, n_ctx=16, batch_size=8, steps=2,
                     recipe="adamw", seed=0, text=TEXT)
    row = G.train_one(spec)
    assert row["precision"] == P.FP32  # this suite's setting
    assert set(G.ROW_FIELDS) < set(row)  # the runs.csv columns untouched: precision is beside them


def test_the_study_session_records_which_runs_trained_in_bf16(tmp_path):
    from core.data.corpus import pydoc_text
    from core.training.study_files import read_rows
    from core.training.study_grid import Grid, train_one
    from core.training.study_run import run_study

    class SaysBf16ForD16:  # an engine whose d = 16 runs report bf16, as a probe that measured it faster would
        name = "inline"

        def check(self):
            pass

        def run(self, specs, should_stop):
            for s in specs:
                yield {**train_one(s), **({"precision": P.BF16} if s.d_model == 16 else {})}

    grid = Grid("one", widths=(8, 16), tokens=(1024,), n_ctx=32, batch_size=8)
    rows = run_study(grid, pydoc_text(), "pydoc", tmp_path, SaysBf16ForD16())
    assert all("precision" not in r for r in rows)  # moved into the session's record
    (session,) = json.loads((tmp_path / "study.json").read_text())["sessions"]
    assert session["precision"] == P.FP32  # the suite's setting
    assert session["bfloat16_runs"] == [r["run_id"] for r in rows if r["d_model"] == 16] != []
    assert len(read_rows(tmp_path / "runs.csv")) == 2  # runs.csv's columns as before: its strict reader reads it
