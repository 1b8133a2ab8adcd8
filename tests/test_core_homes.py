"""The pieces issue 12 gave a home of their own: the training form's cost, job-state rules, the thread
helper, decoding notes, text measures, the run clock and the fit's refusals. Expected values are worked
out by hand here, not read back from the code under test."""
import math

import numpy as np
import pytest
import torch

from core.serve import threads
from core.serve.fmt import clock
from core.analysis.generation import decoding_notes, text_measures
from core.training.job_settings import JobSettings, job_cost, validate_settings
from core.nn.config import LECTURE, MODEL_PRESETS, ModelConfig, config_problems
from core.analysis.scaling import FitError, fit_scaling_law
from core.training.training_job import TrainingStatus


def test_job_cost_counts_by_hand_even_when_heads_do_not_divide():
    s = JobSettings(d_model=64, n_heads=3, n_layers=2, n_ctx=128, batch_size=32, steps=2000)
    cost = job_cost(s, vocab_size=65, corpus_chars=1_000_000)
    d, L, m, n_ctx = 64, 2, 65, 128
    by_hand = L * (12 * d * d + 4 * d) + m * d + n_ctx * d + 2 * d + d * m
    assert cost.n_params == by_hand
    assert cost.tokens == 2000 * 32 * 128 and cost.flops == 6 * by_hand * cost.tokens
    assert cost.epochs == pytest.approx(cost.tokens / 900_000)
    assert "n_heads" in validate_settings(s, 1_000_000, 65)  # still refused for training
    assert job_cost(JobSettings(d_model=0), 65, 1000) is None


def test_form_defaults_are_the_lecture_preset():
    s = JobSettings()
    assert (s.d_model, s.n_heads, s.n_layers, s.n_ctx) == (LECTURE.d_model, LECTURE.n_heads, LECTURE.n_layers, LECTURE.n_ctx)
    assert s.model_config(LECTURE.vocab_size) == LECTURE
    assert MODEL_PRESETS["lecture"].d_ff == 4 * 64  # the lecture's d_ff = 256


def test_one_validation_for_model_shapes():
    assert config_problems(LECTURE.to_dict()) == {}
    bad = config_problems(dict(vocab_size=65, n_ctx=0, d_model=64, n_heads=5, n_layers=True, d_ff=None))
    assert set(bad) == {"n_ctx", "n_heads", "n_layers"}
    with pytest.raises(ValueError, match="n_ctx must be at least 1"):
        ModelConfig(n_ctx=0)
    with pytest.raises(Exception):
        LECTURE.d_model = 3  # frozen: a shared preset cannot be changed by accident


def status(state, step=5, total=10):
    return TrainingStatus(state=state, message=None, step=step, total_steps=total, tokens_seen=0, tokens_per_s=None,
                     elapsed_s=0, eta_s=None, step_losses=[], evals=[], samples=[])


@pytest.mark.parametrize("state, pause, stop, save, resume, start", [
    ("preparing", True, True, False, False, False),
    ("running", True, True, False, False, False),
    ("pausing", False, True, False, False, False),
    ("paused", False, True, True, True, False),
    ("stopping", False, False, False, False, False),
    ("stopped", False, False, True, True, True),
    ("finished", False, False, True, False, True),
    ("failed", False, False, False, False, True),
])
def test_job_state_rules(state, pause, stop, save, resume, start):
    s = status(state, step=10 if state == "finished" else 5)
    assert (s.can_pause, s.can_stop, s.can_save, s.can_resume, s.can_start) == (pause, stop, save, resume, start)


def test_thread_helper_sets_and_restores(monkeypatch):
    before = torch.get_num_threads()
    with threads.torch_threads(1) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with threads.torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    monkeypatch.setenv("TE_TORCH_THREADS", "3")
    assert threads.page_threads() == 3
    monkeypatch.setenv("TE_TORCH_THREADS", "lots")
    assert threads.page_threads() == 1
    assert threads.training_threads() >= 1


@pytest.mark.parametrize("t, k, p, words", [
    (0.0, None, None, ["greedy decoding and the seed"]),
    (0.001, None, None, ["practically one-hot"]),
    (500.0, None, None, ["practically uniform (1/m = 0.0154"]),
    (1.0, 1, None, ["top-k = 1 keeps only"]),
    (1.0, 65, None, ["keeps all m = 65"]),
    (1.0, None, 0.0, ["top-p = 0 still keeps"]),
    (1.0, None, 1.0, ["top-p = 1 keeps every"]),
    (1.0, None, 0.01, ["top-p = 0.01 is tiny"]),
    (1.0, 10, 0.9, []),
])
def test_decoding_notes(t, k, p, words):
    notes = decoding_notes(t, 65, k, p)
    assert len(notes) == len(words) and all(w in n for w, n in zip(words, notes))


def test_text_measures_by_hand():
    steps = [{"id": tid, "prob": p, "slid": k >= 3}
             for k, (tid, p) in enumerate(zip([1, 2, 1, 2, 1], [0.5, 0.25, 0.5, 0.25, 1.0]))]
    m = text_measures(steps)
    assert m["distinct_3"] == pytest.approx(2 / 3)  # (1,2,1), (2,1,2), (1,2,1)
    assert m["mean_prob"] == pytest.approx(2.5 / 5)
    assert m["perplexity"] == pytest.approx(math.exp(-(2 * math.log(0.5) + 2 * math.log(0.25)) / 5))
    assert m["slid_at"] == 3
    assert text_measures([])["perplexity"] is None


def test_clock():
    assert clock(125) == "2:05" and clock(0.4) == "0:00" and clock(None) == "–" and clock(math.inf) == "–"


def test_fit_refuses_runs_without_a_power_law():
    rng = np.random.default_rng(0)
    N = 10 ** rng.uniform(7, 10, 20)
    D = 10 ** rng.uniform(9, 12, 20)
    with pytest.raises(FitError, match="no loss that falls as a power law"):
        fit_scaling_law(N, D, np.full(20, 3.0) + 0.001 * rng.standard_normal(20))


def test_rms_log_error_and_constants_by_hand():
    from core.analysis.scaling import CHINCHILLA

    N, D = np.array([1e9, 1e10]), np.array([1e10, 1e11])
    pred = 406.4 / N**0.34 + 410.7 / D**0.28 + 1.69
    loss = pred * np.exp([0.1, -0.1])
    assert CHINCHILLA.rms_log_error(N, D, loss) == pytest.approx(0.1)
    assert list(CHINCHILLA.constants().values()) == [406.4, 410.7, 0.34, 0.28, 1.69]
