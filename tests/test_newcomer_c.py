"""Issue 32, "What a newcomer trips over" (items 6, 7, 9, 12, 13): the head ranking's labels from scores and
ablation, training estimates from this machine's measured speed and truthful phase names, the Training page's
corpus error under its form, lazy imports of the frame, and the server's address options."""
import tomllib
from pathlib import Path

import numpy as np
import pytest

from core.analysis import head_ranking as HR
from core.analysis.induction import THRESHOLD
from core.analysis.interventions import HeadEffect

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- item 6: head roles

# a 2-layer, 4-head model as the shipped character model measures: L1 H3 a previous-token head, L2 H4 induction
PREV = np.array([[0.10, 0.05, 0.91, 0.04],
                 [0.24, 0.12, 0.08, 0.01]])
IND = np.array([[0.00, 0.01, 0.01, 0.01],
                [0.01, 0.00, 0.00, 0.88]])


def test_a_previous_token_head_before_an_induction_head_that_the_copy_needs_feeds_it():
    role = HR.head_role(0, 2, PREV, IND, second_rise=4.5)
    assert role.kind == "feeds induction" and role.feeds == (1, 3)
    assert "previous-token head (previous-token score 0.91" in role.text
    assert "feeding the induction head L2 H4 (induction score 0.88)" in role.text


def test_feeding_needs_each_of_score_order_and_ablation():
    # its ablation barely touches the second copy: a previous-token head, not seen feeding
    role = HR.head_role(0, 2, PREV, IND, second_rise=HR.COPY_GAIN)
    assert role.kind == "previous-token" and role.feeds is None and "not seen feeding" in role.text
    # the same head with no induction head in a later layer (the induction head in its own layer cannot read it)
    same_layer = np.array([[0.0, 0.0, 0.0, 0.88], [0.0, 0.0, 0.0, 0.0]])
    role = HR.head_role(0, 2, PREV, same_layer, second_rise=4.5)
    assert role.kind == "previous-token" and "no later layer has an induction head" in role.text
    # a previous-token head in the last layer feeds nothing
    prev = PREV.copy()
    prev[1, 0] = 0.9
    assert HR.head_role(1, 0, prev, IND, second_rise=4.5).kind == "previous-token"
    # previous-token score under PREVIOUS_TOKEN: neither, however much the copy needs it
    low = PREV.copy()
    low[0, 2] = HR.PREVIOUS_TOKEN - 0.01
    role = HR.head_role(0, 2, low, IND, second_rise=4.5)
    assert role.kind == "other" and "neither an induction head" in role.text
    low[0, 2] = HR.PREVIOUS_TOKEN  # at the threshold it counts
    assert HR.head_role(0, 2, low, IND, second_rise=4.5).kind == "feeds induction"


def test_an_induction_score_at_the_threshold_is_an_induction_head_whatever_its_previous_token_score():
    ind = IND.copy()
    ind[1, 0] = THRESHOLD
    assert HR.head_role(1, 0, np.ones_like(PREV), ind, second_rise=0.0).kind == "induction"
    assert HR.head_role(1, 3, PREV, IND, second_rise=4.4).text.startswith("an induction head (score 0.88)")


def test_the_fed_head_is_the_strongest_later_induction_head():
    ind = np.array([[0.0, 0.0], [0.4, 0.0], [0.0, 0.7]])
    prev = np.array([[0.9, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert HR.head_role(0, 0, prev, ind, 1.0).feeds == (2, 1)


def test_feeders_are_the_feeding_heads_largest_rise_first():
    prev = np.array([[0.8, 0.9, 0.1], [0.0, 0.0, 0.0]])
    ind = np.array([[0.0, 0.0, 0.0], [0.0, 0.9, 0.0]])
    second = [HeadEffect(1, 1, 6.0, 3.0), HeadEffect(0, 0, 5.0, 2.0), HeadEffect(0, 1, 4.0, 1.0),
              HeadEffect(0, 2, 3.9, 0.9), HeadEffect(1, 0, 3.0, 0.0), HeadEffect(1, 2, 3.0, 0.0)]
    got = HR.feeders(second, prev, ind, (1, 1))
    assert [(e.layer, e.head) for e in got] == [(0, 0), (0, 1)]


def _ranking(second):
    return HR.Ranking(effects=sorted(second, key=lambda e: -e.increase), second=second, base=2.0)


# the numbers: L1 H3 off raises the second copy's loss by 4.5 nats, the induction head L2 H4 off by 4.4
SECOND = [HeadEffect(0, 2, 6.5, 4.5), HeadEffect(1, 3, 6.4, 4.4), HeadEffect(0, 0, 4.0, 2.0),
          HeadEffect(0, 1, 2.0, 0.0), HeadEffect(0, 3, 2.0, 0.0), HeadEffect(1, 0, 2.0, 0.0),
          HeadEffect(1, 1, 2.0, 0.0), HeadEffect(1, 2, 2.0, 0.0)]


def test_the_ranking_text_calls_the_previous_token_head_what_it_is():
    text = HR.ranking_text(_ranking(SECOND), IND, "zero", PREV)
    assert "On the second copy alone it is **L1 H3** (+4.500 nats), a previous-token head" in text
    assert "feeding the induction head L2 H4" in text
    assert "Switching off L2 H4 itself adds +4.400 nats to the second copy: the previous-token head costs" in text
    assert "no induction head" not in text and "not for copying" not in text
    assert "needs a previous-token head in an earlier layer" in text  # the circuit, said


def test_the_ranking_text_names_the_heads_feeding_the_top_induction_head():
    second = [HeadEffect(1, 3, 6.5, 4.5), HeadEffect(0, 2, 6.4, 4.4)] + SECOND[2:]
    text = HR.ranking_text(_ranking(second), IND, "zero", PREV)
    assert "**L2 H4** (+4.500 nats), an induction head (score 0.88)" in text
    assert ("Its keys are built by **L1 H3** (previous-token score 0.91, +4.400 nats on the second copy when off), "
            "a previous-token head in an earlier layer.") in text
    assert "needs a previous-token head in an earlier layer" in text


def test_a_model_without_induction_heads_is_not_told_about_the_circuit():
    ind = np.zeros_like(IND)
    text = HR.ranking_text(_ranking(SECOND), ind, "zero", PREV)
    assert "a previous-token head (previous-token score 0.91" in text and "no later layer" in text
    assert "K-composition" not in text
    nan = np.full_like(IND, np.nan)  # scores not measured: no claim either way, and no warning
    assert "K-composition" not in HR.ranking_text(_ranking(SECOND), nan, "zero", PREV)


# ----------------------------------------------------------------------------- item 9: the form's errors, full width

def _paths(node, path=()):
    """(path of blocks from the root, element) for every element under ``node``."""
    children = getattr(node, "children", None)
    if children is None:
        yield path, node
        return
    for child in children.values():
        yield from _paths(child, path + (node,))


def _path_to(at, predicate):
    return [path for path, el in _paths(at.main) if predicate(el)]


def test_a_too_small_pasted_corpus_says_so_full_width_under_the_form(open_page, tmp_path):
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    at.radio(key="train_corpus").set_value("paste").run()
    at.text_area(key="train_paste").input("a short text " * 20).run()
    assert not at.exception
    errors = _path_to(at, lambda el: getattr(el, "type", None) == "exception" or (
        type(el).__name__ == "Error" and "needs at least 1,291" in str(el.value)))
    assert len(errors) == 1, "the n_ctx error is shown once"
    path = errors[0]
    assert not any(getattr(block, "type", None) == "column" for block in path), \
        "the error sits inside a column of the form"
    assert "n_ctx" in str(next(el for p, el in _paths(at.main) if p == path and type(el).__name__ == "Error").value)
    # under the form: after the number boxes, in the page's own flow
    order = [el for _, el in _paths(at.main)]
    box = next(i for i, el in enumerate(order) if getattr(el, "key", None) == "train_n_ctx")
    err = next(i for i, el in enumerate(order) if type(el).__name__ == "Error" and "1,291" in str(el.value))
    assert err > box
    at.number_input(key="train_n_ctx").set_value(16).run()
    assert not at.error


# ----------------------------------------------------------------------------- item 13: the terminal's one URL

def test_the_config_names_the_browser_address_and_leaves_the_listening_address_alone():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["browser"]["serverAddress"] == "localhost"
    assert "address" not in config["server"]  # every interface, as before: the container and a class server rely on it


def _free_port() -> int:
    import socket

    for port in range(8633, 8640):  # the ports this checks may use
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 8633-8639")


@pytest.mark.slow
def test_a_local_run_prints_only_the_local_url():
    import subprocess
    import sys
    import time

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "URL:" in line:
                break
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    text = "".join(lines) + (out or "")
    urls = [line.strip() for line in text.splitlines() if "URL:" in line]
    assert urls == [f"URL: http://localhost:{port}"], text
    assert "external IP" not in text and "docs.streamlit.io" not in text, text


# ----------------------------------------------------------------------------- item 7: estimates and phases

def _pace():
    from core.training.speed import Pace
    return Pace(step_s=0.1, forward_s=0.02, token_s=0.001, probe_s=0.01)


def test_the_run_plan_counts_the_work_on_the_training_processs_schedule():
    from core.nn.snapshots import snapshot_steps
    from core.training.job_settings import JobSettings
    from core.training.speed import run_plan

    s = JobSettings(steps=200, snapshots=False)  # eval every 10 steps, heads every 10 (at least every 10)
    tc = s.train_config()
    assert (tc.eval_interval, tc.heads_interval, tc.snapshots) == (10, 10, 0)
    plan = run_plan(s, val_tokens=12_800)
    assert plan.steps == 200
    assert plan.evaluations == 21                 # steps 0, 10, ..., 200
    assert plan.samples == 11                     # every other evaluation: 0, 20, ..., 200
    assert plan.probes == 21                      # 0, 10, ..., 200
    assert plan.final_windows == 2 * 12_800 // 128  # the held-out part and as many training tokens, n_ctx = 128
    snaps = run_plan(JobSettings(steps=200), val_tokens=12_800)
    assert snaps.evaluations == 21 + len(snapshot_steps(200, JobSettings(steps=200).train_config().snapshots))
    half = run_plan(s, val_tokens=12_800, upto=100)
    assert (half.steps, half.evaluations, half.samples, half.probes, half.final_windows) == (100, 11, 6, 11, 0)


def test_a_run_estimate_adds_every_part_at_the_measured_pace():
    from core.training.job_settings import JobSettings
    from core.training import speed

    s = JobSettings(steps=200, snapshots=False)
    est = speed.run_estimate(s, _pace(), corpus_chars=128_000, val_tokens=12_800)
    p = est.parts
    assert p["steps"] == pytest.approx(200 * 0.1)
    assert p["evaluations"] == pytest.approx(21 * 2 * 8 * 0.02)   # 2 splits x eval_batches = 8 forwards each
    assert p["samples"] == pytest.approx(11 * 200 * 0.001)
    assert p["probes"] == pytest.approx(21 * 0.01)
    assert p["end"] == pytest.approx(200 * 0.02 / 32)             # 200 windows, a forward of 32 rows each
    assert p["start"] == speed.PROCESS_START_S
    assert est.seconds == pytest.approx(sum(p.values()))
    bpe = speed.run_estimate(JobSettings(steps=200, snapshots=False, tokenizer="bpe"), _pace(), 1_000_000, 5_000)
    assert bpe.parts["start"] == pytest.approx(speed.PROCESS_START_S + speed.BPE_S_PER_CHAR * 1_000_000)
    # the number of steps, not 6ND, decides: twice the steps at the same pace is about twice the time
    longer = speed.run_estimate(JobSettings(steps=400, snapshots=False), _pace(), 128_000, 12_800)
    assert longer.parts["steps"] == pytest.approx(2 * p["steps"])


def test_the_time_left_is_recalibrated_by_the_runs_own_pace():
    from core.training.job_settings import JobSettings
    from core.training import speed

    s = JobSettings(steps=200, snapshots=False)
    whole = speed.run_estimate(s, _pace(), 128_000, 12_800)
    done = speed.run_estimate(s, _pace(), 128_000, 12_800, upto=100).training
    on_time = speed.time_left(s, _pace(), 128_000, 12_800, 100, elapsed=done)
    assert on_time == pytest.approx(whole.training - done + whole.parts["end"])
    # twice as slow as estimated so far: twice the time left
    assert speed.time_left(s, _pace(), 128_000, 12_800, 100, elapsed=2 * done) == pytest.approx(2 * on_time)
    assert speed.time_left(s, _pace(), 128_000, 12_800, 0, elapsed=0.0) is None
    assert speed.time_left(s, _pace(), 128_000, 12_800, 200, elapsed=5.0) == pytest.approx(
        whole.parts["end"] * 5.0 / whole.training)


def test_the_estimated_time_metric_names_its_parts():
    from core.training.job_settings import JobSettings
    from core.training import speed

    est = speed.run_estimate(JobSettings(steps=200, snapshots=False), _pace(), 128_000, 12_800)
    metrics = [("Parameters N", "1", None), ("Estimated time", "9 s", "6ND divided by ...")]
    (n, (label, value, help_)) = speed.with_estimate(metrics, est)
    low, high = (float(v) for v in value.removesuffix(" s").split("–"))  # a range (tests/test_training_estimate.py)
    assert n == metrics[0] and label == "Estimated time" and low < est.seconds < high
    assert "timed on a few steps of this very model" in help_ and "6ND" not in help_


def test_a_pace_is_measured_on_the_runs_own_shape():
    from core.training import speed

    shape = dict(vocab_size=20, n_ctx=16, d_model=16, n_heads=2, n_layers=1, d_ff=None)
    pace = speed.measure_pace(shape, 4, "adamw", 1)
    assert 0 < pace.forward_s and 0 < pace.step_s and 0 < pace.token_s and 0 < pace.probe_s
    assert speed.measure_pace(shape, 4, "adamw", 1) is pace  # measured once


def test_the_study_estimate_packs_measured_runs_and_adds_the_fit(monkeypatch):
    from core.training import speed
    from core.training.study_grid import Grid, STARTUP_S
    from core.analysis.scaling_runs import MIN_RUNS

    monkeypatch.setattr(speed, "measure_pace", lambda shape, b, r, t: speed.Pace(
        step_s=shape["d_model"] / 1000, forward_s=0.0, token_s=0.0, probe_s=0.0))
    monkeypatch.setattr(speed, "refit_seconds", lambda *grid: 0.5)
    grid = Grid("t", widths=(10, 20), tokens=(1024 * 100, 1024 * 300))  # 100 and 300 steps of 16 x 64 tokens
    one = speed.study_estimate(grid, 100_000, 65, 1, 100, load=0.0)
    # runs of 0.01 and 0.02 s a step: 1 + 3 + 2 + 6 s on one worker; 4 runs < MIN_RUNS: no fit
    assert one.runs == pytest.approx(12.0) and one.start == STARTUP_S and one.fit == 0.0
    two = speed.study_estimate(grid, 100_000, 65, 2, 100, load=0.0)
    assert two.runs == pytest.approx(6.0)  # 6 | 3 + 2 + 1: longest first onto the least loaded worker
    # one other process busy on the 2 cores: the runs were timed with a core to themselves, the 2 workers get 2/3
    busy = speed.study_estimate(grid, 100_000, 65, 2, 100, load=1.0)
    assert busy.runs == pytest.approx(6.0 * 1.5)
    assert speed.fit_seconds(100, MIN_RUNS) == pytest.approx(102 * 0.5)
    assert speed.fit_seconds(100, MIN_RUNS - 1) == 0.0


def test_contention_is_the_share_of_a_core_alone_over_the_share_beside_the_others():
    from core.training.speed import contention

    assert contention(2, 2, 0.0) == 1.0                      # idle cores, a worker each
    assert contention(4, 2, 0.0) == pytest.approx(2.0)       # twice the workers: half a core each
    assert contention(2, 2, 1.0) == pytest.approx(1.5)       # timed on a whole core; then 2 cores for 3 processes
    assert contention(1, 4, 2.0) == 1.0


def test_refits_are_timed_on_the_shipped_runs_most_like_the_grid():
    from core.training import speed

    t = speed.refit_seconds((16, 32, 48, 64), 3)
    assert t > 0 and speed.refit_seconds((16, 32, 48, 64), 3) == t  # timed once


def test_a_study_that_fits_says_so_and_counts_the_fit_in_its_time_left(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys
    import time

    from core.views import scaling_study as ss
    from core.training import speed
    from core.training.study_job import STATES, StudyJob

    assert "fitting" in STATES and ss.STATE_LABELS["fitting"] == "Fitting the law and its intervals"
    monkeypatch.setattr(speed, "refit_seconds", lambda *grid: 0.5)
    job = StudyJob(tmp_path / "unused.txt", "small", folder=tmp_path / "study")
    (tmp_path / "study").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        job.proc = proc
        progress = tmp_path / "study" / "progress.json"
        progress.write_text(json.dumps({"state": "running", "eta_s": 30.0}))
        s = job.status()
        assert s.state == "running" and s.eta_s == pytest.approx(30.0 + speed.fit_seconds(100, 12))
        for written in ("trained", "fitting"):  # every run in, then the fit under way: never "starting" again
            progress.write_text(json.dumps({"state": written, "eta_s": None}))
            s = job.status()
            assert s.state == "fitting" and s.active and s.moving and s.eta_s is None
            assert ss.progress(s, "small", "x.txt")[1].startswith("Fitting the law and its intervals: 0 of 12")
        progress.write_text(json.dumps({"state": "fitting", "eta_s": 50.0, "time": time.time() - 20}))
        assert job.status().eta_s == pytest.approx(30.0, abs=1.0)
    finally:
        proc.kill()
        proc.wait(30)


def test_the_study_writes_its_fitting_phase_with_the_refits_time(tmp_path, monkeypatch):
    import json

    from core.training import study
    from core.training.study_files import PROGRESS_JSON, STUDY_JSON

    seen = []
    monkeypatch.setattr(study, "fit_study", lambda rows, resamples, on_fit=None: (
        seen.append(json.loads((tmp_path / PROGRESS_JSON).read_text())), on_fit(12.0),
        seen.append(json.loads((tmp_path / PROGRESS_JSON).read_text())), None)[-1])
    monkeypatch.setattr(study, "write_card", lambda *a: "")
    monkeypatch.setattr(study, "read_rows", lambda path: [{"run_id": str(i)} for i in range(20)])
    monkeypatch.setattr(study, "usable_rows", lambda rows: (rows, []))
    (tmp_path / STUDY_JSON).write_text("{}")
    (tmp_path / PROGRESS_JSON).write_text(json.dumps({"state": "trained", "done": 20}))
    study.finish_study(tmp_path, resamples=10)
    assert [p["state"] for p in seen] == ["fitting", "fitting"] and seen[0]["done"] == 20
    assert seen[0]["eta_s"] is None and seen[1]["eta_s"] == 12.0


def test_the_grid_note_names_the_phases_of_an_estimate():
    from types import SimpleNamespace

    from core.views import scaling_study as ss
    from core.training.speed import StudyEstimate

    grid = SimpleNamespace(widths=(16, 32, 48, 64), n_layers=2, tokens=(100_000, 300_000, 900_000),
                           tokens_per_step=1024, steps=lambda t: t // 1024)
    note = ss.grid_note(grid, StudyEstimate(start=8.0, runs=70.0, fit=60.0), 2)
    assert "It takes about 2 minutes here (2 cores, as busy as they are now): about 10 seconds starting the workers, " \
           "about 70 seconds training" in note
    assert "about 60 seconds fitting the law and its intervals" in note
