"""Classroom load, as a test: 30 real websocket sessions on the attention and generation pages while one
more session trains. No session may see an error, and the shared model must come out unchanged: the weights
on disk hash the same, and after the load a new session's attention pattern on a never-seen prompt equals the
one computed from those weights. The timings are printed (p50/p95 of a rerun's server time), never asserted:
see bench/load.py."""
import pytest

from bench.load import run_load

pytestmark = pytest.mark.slow  # runs by default; `pytest -m "not slow"` skips it locally


def test_thirty_sessions_and_a_training_run(capsys):
    r = run_load(sessions=30, reruns=1, train=True)
    with capsys.disabled():
        print(f"\n[load] 30 sessions: rerun p50 {r['p50_s']:.2f} s, p95 {r['p95_s']:.2f} s; "
              f"first visit p50 {r['first_p50_s']:.2f} s, p95 {r['first_p95_s']:.2f} s")
    assert not r["errors"], r["errors"][:5]
    assert r["reruns"] == 30
    assert r["weights_unchanged"], "the shipped weights on disk changed during the load"
    assert r["server_matches_disk"], f"the server's model no longer computes what its weights on disk do: {r['pattern_check']}"
    assert r["model_unchanged"]
    from bench.load import summary_json
    line = summary_json(r)
    assert line["sessions"] == 30 and line["replicas_used"] == 1 and line["errors"] == 0
    assert line["rerun_p50_s"] <= line["rerun_p95_s"] and line["first_visit_p50_s"] <= line["first_visit_p95_s"]
    assert {"attention_p50_s", "attention_p95_s", "generation_p50_s", "generation_p95_s"} <= set(line)
