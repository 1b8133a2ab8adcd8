"""``python -m bench.run`` itself (issue 60): its JSON is written whatever row fails (the failure recorded as a row), the
rows of modules that import bench.run (bench.features, bench.steering) reach it, and a row's header says the threads
it runs with. Rows are replaced by cheap stand-ins: nothing here times anything. Fast lane."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import bench.run as R

ROOT = Path(__file__).resolve().parent.parent


def fake_rows(monkeypatch):
    """bench_train fails after recording one row; bench_forward records one row; RESULTS fresh; threads put back."""
    def train(quick):
        R.section("Training stand-in")
        R.record("stand-in before the failure", 2.0, 1.0, "s")
        raise ValueError("the row broke")

    def forward(quick):
        R.section("Forward stand-in")
        R.record("stand-in after the failure", 1.0, 3.0, "s", higher_is_better=False)
    monkeypatch.setattr(R, "RESULTS", [])
    monkeypatch.setattr(R, "bench_train", train)
    monkeypatch.setattr(R, "bench_forward", forward)


def test_a_failing_row_still_leaves_the_json_with_its_failure_and_the_rows_after_it(monkeypatch, tmp_path):
    fake_rows(monkeypatch)
    threads = torch.get_num_threads()
    out = tmp_path / "bench.json"
    try:
        R.main(["--only", "train", "forward", "--threads", "1", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(out.read_text())
    names = [r["benchmark"] for r in rows]
    assert names == ["stand-in before the failure", "row train", "stand-in after the failure"]
    failed = rows[1]
    assert failed["error"] == "ValueError: the row broke" and failed["met"] is False and failed["row"] == "train"
    assert "the row broke" in failed["traceback"]
    assert rows[2]["ratio"] == 3.0 and rows[2]["row"] == "forward"
    assert all(r["threads"] == 1 and isinstance(r["load"], float) for r in rows)


def test_headers_say_the_threads_given(monkeypatch, capsys):
    fake_rows(monkeypatch)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            R.main(["--only", "forward", "--threads", str(n)])
            said = capsys.readouterr().out
            assert f"Forward stand-in, {n} thread{'s' if n > 1 else ''}, load " in said
            assert R.RESULTS[-1]["threads"] == n
    finally:
        torch.set_num_threads(threads)


def test_no_header_claims_a_thread_count_of_its_own():
    """Headers go through section() (the threads in use), never a fixed 'one thread'."""
    for f in ("run.py", "features.py", "steering.py", "feature_views.py"):
        assert "one thread" not in (ROOT / "bench" / f).read_text(), f


def test_rows_recorded_by_modules_importing_bench_run_reach_the_json(tmp_path):
    """Run as ``python -m bench.run`` (the module is __main__), a row module's ``from bench.run import record`` must
    reach the same RESULTS: bench.features' row is replaced by one that records, then fails."""
    out = tmp_path / "bench.json"
    script = f"""
import runpy, sys
import bench.features as F
def fake(argv=None, steps=0):
    from bench.run import record
    record("features stand-in", 1.0, 2.0, "s")
    raise RuntimeError("after its row")
F.main = fake
sys.argv = ["bench.run", "--only", "features", "--threads", "1", "--json", {str(out)!r}]
runpy.run_module("bench.run", run_name="__main__", alter_sys=True)
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]  # a failed row: the run's exit status says so
    rows = json.loads(out.read_text())
    assert [r["benchmark"] for r in rows] == ["features stand-in", "row features"]
    assert rows[1]["error"] == "RuntimeError: after its row"
