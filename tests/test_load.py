"""Classroom load, as a test: 30 real websocket sessions on the attention and generation pages while one
more session trains. No session may see an error, and the shared model must come out unchanged.
The timings are printed (p50/p95 of a rerun's server time), never asserted: see bench/load.py."""
from bench.load import run_load


def test_thirty_sessions_and_a_training_run(capsys):
    r = run_load(sessions=30, reruns=1, train=True)
    with capsys.disabled():
        print(f"\n[load] 30 sessions: rerun p50 {r['p50_s']:.2f} s, p95 {r['p95_s']:.2f} s; "
              f"first visit p50 {r['first_p50_s']:.2f} s, p95 {r['first_p95_s']:.2f} s")
    assert not r["errors"], r["errors"][:5]
    assert r["reruns"] == 30
    assert r["model_unchanged"]
