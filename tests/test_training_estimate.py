"""The Training page's time: the estimate before Start is a range, and once the run has started its time left comes
from its own pace, from its first steps on (core.training.speed, core.training.training_child). Synthetic paces and
a synthetic clock: nothing here is timed."""
import re
import types

import pytest

from core.training import speed
from core.training import training_child as child
from core.training.job_settings import JobSettings
from tests.snapshot_models import made_up_text

ESTIMATED = speed.Pace(step_s=0.03, forward_s=0.01, token_s=0.002, probe_s=0.05)


def slower(pace: speed.Pace, by: float) -> speed.Pace:
    return speed.Pace(*(by * v for v in (pace.step_s, pace.forward_s, pace.token_s, pace.probe_s)))


class StopAfterFirstReport(Exception):
    pass


class Conn:
    def poll(self):
        raise StopAfterFirstReport  # serve() looks for commands right after its first report

    def recv(self):
        raise AssertionError("no command was sent")


def test_the_runs_clock_counts_its_first_evaluation_and_sample(monkeypatch):
    # a clock of our own: only the work of step 0 moves it, by 7 s, inside the sample the run draws at step 0
    now = [100.0]
    monkeypatch.setattr(child, "time", types.SimpleNamespace(perf_counter=lambda: now[0], time=lambda: 0.0))

    def sample(*args, **kwargs):
        now[0] += 7.0
        return [0]

    monkeypatch.setattr(child, "sample_text", sample)
    s = JobSettings(d_model=16, n_heads=2, n_layers=1, n_ctx=16, batch_size=4, steps=5, snapshots=False)
    sent = []
    run = child._Run(made_up_text(3000), "made-up", s, "the", 1, Conn(), sent.append)
    with pytest.raises(StopAfterFirstReport):
        run.serve()
    # the estimate of the work up to any step counts step 0's evaluation and sample (speed.run_plan): so must the
    # clock it is compared with, or the first steps read as several times too fast (time left far too short)
    assert sent[0]["step"] == 0 and sent[0]["elapsed"] == 7.0


@pytest.mark.parametrize("by", [0.7, 1.5, 2.2])
def test_the_time_left_follows_the_runs_own_pace_from_its_first_steps(by):
    s = JobSettings(steps=2000)
    chars = 1_000_000
    real = speed.run_estimate(s, slower(ESTIMATED, by), chars)
    for step in (1, 2, 5, 20, 200, 1999):
        # the run's clock at ``step``: all of its work so far at its real pace (step 0's evaluation included)
        elapsed = speed.run_estimate(s, slower(ESTIMATED, by), chars, upto=step).training
        really_left = real.training - elapsed + real.parts["end"]
        left = speed.time_left(s, ESTIMATED, chars, None, step, elapsed)
        assert left == pytest.approx(really_left, rel=1e-9), (by, step)


def test_the_issues_run_is_inside_the_range_said_for_a_busy_machine():
    low, high = speed.estimate_range(68.0, load=2.0, cores=2)  # two busy cores
    assert low < 68.0 < 105.0 <= high  # 1 min 45 s really
    quiet = speed.estimate_range(68.0, load=0.0, cores=2)
    assert quiet[0] == low and quiet[1] < high  # a quiet machine: a narrower range, the same lower end
    assert quiet[1] > 68.0 * 1.24  # the slowest run measured on a quiet machine (bench/results/estimates.md)
    assert speed.estimate_range(68.0, load=50.0, cores=2) == (low, high)  # no wider than every core busy


def test_the_metric_says_the_range_and_the_middle():
    est = speed.run_estimate(JobSettings(steps=2000), ESTIMATED, 1_000_000)
    value, help_ = speed.estimate_words(est, load=1.0, cores=2)
    low, high = speed.estimate_range(est.seconds, 1.0, 2)
    m = re.fullmatch(r"([\d.]+)–([\d.]+) (s|min)", value)
    assert m, value
    scale = 60 if m[3] == "min" else 1
    assert float(m[1]) * scale == pytest.approx(low, abs=0.05 * scale + 0.5)
    assert float(m[2]) * scale == pytest.approx(high, abs=0.05 * scale + 0.5)
    assert help_.startswith(f"About {est.seconds:,.0f} s") or help_.startswith(f"About {est.seconds / 60:,.1f} min")
    assert "range" in help_ and "its own pace" in help_
