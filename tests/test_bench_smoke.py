"""Smoke test of ``python -m bench.run`` (issue 55: ``--only lesson`` called an AppTest method that does not exist, and
no test imported bench/run.py). Every row runs through bench.run's own command line with ``--quick`` and one thread,
and with bench.run's timing helpers cut to one call each (median_time and interleaved time a single call, the matmul
peak is measured on 64 x 64) and the slowest rows' sizes cut (see ``smallest``): the numbers mean nothing here, what
is checked is that each row runs to its end and records its rows. Slow lane."""
import argparse
import math
import time

import pytest
import torch

import bench.over_training
import bench.run as R
import bench.steering
import core.analysis.forecast
import core.analysis.scaling
import core.training.variants

# Rows the smoke test leaves out, and why (each is run by ``python -m bench.run --only <row> --quick`` by hand):
SKIPPED = {
    # checks out the commit before core/nn/hooks.py as a git worktree and times fresh processes in both trees: it
    # writes to the repository's .git and needs its history, which a test must not assume
    "hooks": "adds a git worktree of an older commit to the repository",
    # runs the field's libraries from bench/peers/.venv, which no test installs; tests/test_bench_peers.py checks the
    # row skips, saying why, without it
    "peers": "needs the peers' environment (python -m bench.peers.setup)",
}
# The pages row reruns every page of app.py (each one's first run and three reruns: over two minutes); here only the
# pages its own branches name (a new pair, new prompts, the Inside page's position, the scaling slider), so that every
# line of the row runs. Every page's own rerun is tested by its tests/test_page_*.py.
PAGES = ("pages/cause_effect.py", "pages/attention.py", "pages/generation.py", "pages/inside.py", "pages/scaling.py")
ROWS = ["train", "forward", "generate", "pages", "discovery", "snapshots", "over_training", "variants", "patching",
        "lesson", "feature_views", "features", "steering", "classroom", "forecast", "attribution", "explain",
        "answer_keys", "null_controls", "sae_train", "precision"]


def once(fn, reps=1) -> float:
    t = time.perf_counter()
    fn()
    return max(time.perf_counter() - t, 1e-9)  # a ratio's denominator: never 0


@pytest.fixture
def smallest(monkeypatch):
    """bench.run with every repetition cut to one call, its results list fresh, the environment and torch's thread
    count put back after (bench_classroom sets TE_CLASS_STORE; main sets the threads)."""
    peak = R.matmul_flops
    monkeypatch.setattr(R, "median_time", once)
    monkeypatch.setattr(R, "interleaved", lambda fns, rounds, reps: {k: once(f) for k, f in fns.items()})
    monkeypatch.setattr(R, "cpu_times", lambda fns, rounds: {k: once(f) for k, f in fns.items()})
    monkeypatch.setattr(R, "matmul_flops", lambda n=1024, reps=20: peak(64, 1))
    monkeypatch.setattr(R, "RESULTS", [])
    # the rows' sizes cut where they set only how long a row takes, not which of its lines run: the variants' steps
    # on 16-token windows (each variant's own switches kept), 20 new characters a steered text, the over training
    # page's big model 2 layers of 64 wide, the scaling fits and bootstraps from every 15th start of the grid, the
    # forecast row's one-by-one bootstrap on 1 resample
    shape, grid = core.training.variants.model_shape, core.analysis.scaling.start_grid
    boot = core.analysis.scaling.bootstrap_fit
    monkeypatch.setattr(core.training.variants, "model_shape", lambda v: dict(shape(v), n_ctx=16))
    monkeypatch.setattr(bench.steering, "N_NEW", 20)
    monkeypatch.setattr(bench.over_training, "BIG_SHAPE", dict(bench.over_training.BIG_SHAPE, d_model=64, n_layers=2))
    for module in (core.analysis.scaling, core.analysis.forecast):  # forecast's batched bootstrap: its own import
        monkeypatch.setattr(module, "start_grid", lambda: grid()[::15])
    monkeypatch.setattr(core.analysis.scaling, "bootstrap_fit", lambda *a, resamples=200, **k: boot(*a, resamples=1, **k))
    monkeypatch.delenv("TE_CLASS_STORE", raising=False)  # recorded: the row's own setting is undone after
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def parser_rows(monkeypatch) -> list[str]:
    """The rows ``--only`` accepts, read from bench.run's own parser."""
    seen = {}

    def grab(self, args=None, namespace=None):
        seen["rows"] = next(a.choices for a in self._actions if a.dest == "only")
        raise SystemExit(0)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    with pytest.raises(SystemExit):
        R.main([])
    return list(seen["rows"])


def test_every_row_is_smoke_tested_or_skipped_with_a_reason(monkeypatch):
    rows = parser_rows(monkeypatch)
    assert sorted(ROWS + list(SKIPPED)) == sorted(rows)
    # every bench_<row> function is a row (bench_patching_gpt2 is part of the patching row)
    assert {n[6:] for n in dir(R) if n.startswith("bench_")} - {"patching_gpt2"} == set(rows)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_the_row_runs_at_its_smallest_setting(row, smallest, monkeypatch):
    every_page = R.page_files()
    assert set(PAGES) <= set(every_page), "a page the pages row names is gone from app.py: update PAGES"
    monkeypatch.setattr(R, "page_files", lambda: [p for p in every_page if p in PAGES])
    results = R.main(["--only", row, "--quick", "--threads", "1"])
    assert results, f"bench.run --only {row} recorded no rows"
    for r in results:
        assert r["benchmark"] and isinstance(r["ours"], (int, float)) and not math.isnan(r["ours"]), r
