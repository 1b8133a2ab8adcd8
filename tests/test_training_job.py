"""Background training jobs: start, pause, resume, stop, save; two at once; settings and names."""
import gc
import io
import math
import multiprocessing
import os
import resource
import signal
import sys
import threading
import types
import zipfile

import pytest
import torch

import core.nn.checkpoint as checkpoint
import core.training.speed as speed
import core.training.training_job as tj
from core.nn.model_store import checkpoint_zip, sanitise_model_name, user_model_folder
from core.nn.checkpoint import load_checkpoint
from core.nn.model_card import read_card, read_log
from core.jobs import BACKGROUND_NICE
from core.training.training_child import SAMPLE_TOKENS
from core.nn.snapshots import DEFAULT_SNAPSHOTS, snapshot_steps
from core.training.job_settings import JobSettings, validate_settings
from core.serve.threads import torch_threads
from core.training.trainer import Trainer
from core.training.training_child import SAMPLE_TOKENS
from core.training.training_job import TrainingJob
from tests.polling import stays, wait_until

pytestmark = pytest.mark.slow  # each test starts a training process: seconds each, the fast lane's largest share

TEXT = ("To be or not to be, that is the question we ask of every small model. " * 40)
OTHER = ("Sing a song of sixpence, a pocket full of rye; four and twenty birds baked in a pie. " * 40)


def tiny(steps=50, seed=3, **kw):
    return JobSettings(d_model=16, n_heads=2, n_layers=1, n_ctx=16, batch_size=8, steps=steps, seed=seed, **kw)


def run_to_end(job: TrainingJob, timeout=120.0):
    job.start()
    assert job.join(timeout)
    return job.status()


def start_process(job: TrainingJob) -> multiprocessing.Process:
    """Start the job and return the process it trains in."""
    before = set(multiprocessing.active_children())
    job.start()
    (proc,) = set(multiprocessing.active_children()) - before
    return proc


def weights(path):
    return load_checkpoint(path)[0].state_dict()


def trained_here(settings: JobSettings, steps: int, threads: int, text=TEXT) -> tuple[torch.nn.Module, list[float]]:
    """The model and the step losses of a run with these settings after ``steps`` steps, trained in this
    process: what a job's process computes, without starting one."""
    tr = Trainer(text, settings.shape(0), settings.train_config())
    with torch_threads(threads):
        losses = [tr.step()["loss"] for _ in range(steps)]
    return tr.model.eval(), losses


def test_job_trains_in_the_background_and_loss_falls():
    job = TrainingJob(TEXT, "test", tiny(steps=50), sample_prompt="To ")
    s = run_to_end(job)
    assert s.state == "finished" and s.step == 50 and not s.active
    assert len(s.step_losses) == 50 and s.tokens_seen == 50 * 8 * 16
    assert s.evals[0]["step"] == 0 and s.evals[-1]["step"] == 50
    assert s.evals[-1]["train_loss"] < s.evals[0]["train_loss"] - 0.5
    assert s.evals[0]["train_loss"] == pytest.approx(math.log(s.vocab_size), abs=0.2)  # untrained: near uniform
    # samples at step 0 and at the end, each SAMPLE_TOKENS characters after the fixed prompt
    assert s.samples[0][0] == 0 and s.samples[-1][0] == 50
    assert all(len(text) == SAMPLE_TOKENS for _, text in s.samples)
    assert s.sample_prompt == "To "
    assert s.tokens_per_s > 0 and s.elapsed_s > 0 and s.can_save and not s.can_resume
    assert s.precision == "float32"  # reported by the process: the suite's TE_PRECISION (tests/conftest.py)


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_pause_resume_stop():
    """The run trains in a process of its own, at a lower priority; this process gains no thread."""
    threads = threading.active_count()
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)
    wait_until(lambda: job.status().step >= 3)
    assert proc.pid != os.getpid()
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(19, nice + BACKGROUND_NICE)
    assert threading.active_count() == threads  # no thread of this process trains, or waits for the run
    job.pause()
    wait_until(lambda: job.status().state == "paused")
    paused_at = job.status().step
    stays(lambda: job.status().step == paused_at, 0.3)  # nothing moves while paused
    assert job.status().can_save
    job.resume()
    wait_until(lambda: job.status().step > paused_at + 2)
    job.stop(wait=None)
    assert job.status().state in ("stopping", "stopped")  # the request shows at once
    job.resume()  # ignored while stopping
    assert job.join(120)
    s = job.status()
    assert s.state == "stopped" and s.step < 100_000 and s.can_resume and s.can_save
    assert s.evals[-1]["step"] == s.step  # the curve ends where the run stopped
    assert threading.active_count() == threads


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_stop_then_resume_continues_from_the_same_step(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=40))
    job.start()
    wait_until(lambda: job.status().step >= 5)
    job.stop()
    stopped_at = job.status().step
    at_stop = weights(job.save(tmp_path, "at-stop"))
    assert 5 <= stopped_at < 40
    job.resume()
    assert job.join(120)
    s = job.status()
    assert s.state == "finished" and s.step == 40
    # the same batches, the same optimiser state: stopping and resuming changed nothing
    whole, losses = trained_here(job.settings, 40, job.threads)
    assert s.step_losses == losses
    uninterrupted = whole.state_dict()
    for k, v in weights(job.save(tmp_path, "resumed")).items():
        assert torch.equal(v, uninterrupted[k])
        if k.endswith("weight") and v.dim() == 2:
            assert not torch.equal(v, at_stop[k])  # and it did keep training after the resume


def test_stopped_run_keeps_its_weights_and_saves_a_loadable_checkpoint(tmp_path):
    job = TrainingJob(TEXT, "test corpus", tiny(steps=100_000))
    job.start()
    wait_until(lambda: job.status().step >= 5)
    job.stop()
    # the same settings trained here for as many steps: the weights the run had when it stopped
    trained, _ = trained_here(job.settings, job.status().step, job.threads)
    path = job.save(tmp_path, "my model", protected=["shakespeare-char"])
    assert path == tmp_path.resolve() / "my-model"
    model, tok = load_checkpoint(path)
    idx = torch.tensor([tok.encode("To be or not")])
    assert torch.allclose(model(idx).logits, trained(idx).logits, atol=1e-5)
    cfg = checkpoint.read_config(path)[2]
    assert cfg["steps"] == job.status().step and cfg["stopped_early"] is True and cfg["corpus"] == "test corpus"
    assert math.isfinite(cfg["val_loss"])
    assert read_log(path)[-1]["step"] == job.status().step
    card = read_card(path)
    assert "Training page" in card and f"after {job.status().step:,} of 100,000 planned steps" in card
    # the zip unpacks to one folder holding the whole checkpoint
    names = zipfile.ZipFile(io.BytesIO(checkpoint_zip(path))).namelist()
    # its snapshots too: every planned one up to the step it stopped at (core.nn.snapshots)
    kept = [s for s in snapshot_steps(100_000, DEFAULT_SNAPSHOTS) if s <= job.status().step]
    assert sorted(names) == sorted([f"my-model/{f}" for f in ("config.json", "model.safetensors", "README.md", "log.csv",
                                                              "heads.csv")]
                                   + [f"my-model/checkpoints/step-{s:06d}.safetensors" for s in kept])


def test_save_is_refused_while_running_and_for_taken_names(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    job.start()
    wait_until(lambda: job.status().step >= 1)
    with pytest.raises(ValueError, match="pause or stop"):
        job.save(tmp_path, "x")
    job.stop()
    job.save(tmp_path, "x")
    with pytest.raises(ValueError, match="already have a model"):
        job.save(tmp_path, "x")
    job.save(tmp_path, "x", overwrite=True)
    with pytest.raises(ValueError, match="shipped model"):
        job.save(tmp_path, "Shakespeare-Char", protected=["shakespeare-char"])


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux's prlimit")
def test_a_crash_mid_save_leaves_no_broken_checkpoint(tmp_path):
    """The training process writes the checkpoint; a write that fails half-way (the process may write no file
    beyond 1 kB, smaller than the weights) reaches the caller as an OSError and leaves nothing behind."""
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)  # a stopped run keeps its process (a finished one hands over its weights and ends)
    wait_until(lambda: job.status().step >= 3)
    job.stop()
    first = job.save(tmp_path, "keep")
    before = (first / "model.safetensors").read_bytes()
    soft, hard = resource.prlimit(proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1000, hard))
    with pytest.raises(OSError, match="too large"):
        job.save(tmp_path, "new")
    with pytest.raises(OSError, match="too large"):
        job.save(tmp_path, "keep", overwrite=True)
    assert not (tmp_path / "new").exists()
    assert (first / "model.safetensors").read_bytes() == before  # the old model is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # no temporary folders left behind
    load_checkpoint(first)
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
    load_checkpoint(job.save(tmp_path, "new"))  # the run survived its failed saves


def test_a_finished_run_hands_over_its_weights_and_its_process_ends(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=12))
    proc = start_process(job)
    assert job.join(120)
    wait_until(lambda: not proc.is_alive())  # no idle process per finished run (each holds a few hundred MB)
    s = job.status()
    assert s.state == "finished" and not s.can_resume and s.can_save
    trained, _ = trained_here(job.settings, 12, job.threads)
    path = job.save(tmp_path, "done", owner=None)
    model, tok = load_checkpoint(path)
    idx = torch.tensor([tok.encode("To be or not")])
    assert torch.allclose(model(idx).logits, trained(idx).logits, atol=1e-5)
    assert checkpoint.read_config(path)[2]["steps"] == 12 and read_log(path)[-1]["step"] == 12
    assert job.save(tmp_path, "again") != path  # saved as often as wanted


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_beyond_max_processes_the_oldest_stopped_run_is_retired_and_can_still_be_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(tj, "MAX_PROCESSES", 1)
    a = TrainingJob(TEXT, "a", tiny(steps=100_000, seed=1))
    proc_a = start_process(a)
    wait_until(lambda: a.status().step >= 4)
    a.stop()
    steps = a.status().step
    assert a.status().can_resume
    b = TrainingJob(OTHER, "b", tiny(steps=10, seed=2))
    b.start()  # one process at most: a, stopped, is retired
    wait_until(lambda: not proc_a.is_alive())
    s = a.status()
    assert s.state == "stopped" and s.step == steps and not s.can_resume and s.can_save
    a.resume()  # nothing to resume any more: no error, no new process
    assert a.status().state == "stopped"
    trained, _ = trained_here(a.settings, steps, a.threads)
    model, tok = load_checkpoint(a.save(tmp_path, "a"))
    idx = torch.tensor([tok.encode("To be or not")])
    assert torch.allclose(model(idx).logits, trained(idx).logits, atol=1e-5)
    assert b.join(120) and b.status().state == "finished"


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_two_jobs_at_once_do_not_interfere():
    a, b = TrainingJob(TEXT, "a", tiny(steps=30, seed=1)), TrainingJob(OTHER, "b", tiny(steps=30, seed=2))
    a.start()
    b.start()
    assert a.join(120) and b.join(120)
    # each computes what the same run computes alone
    assert a.status().step_losses == trained_here(a.settings, 30, a.threads)[1]
    assert b.status().step_losses == trained_here(b.settings, 30, b.threads, text=OTHER)[1]
    assert a.status().vocab_size != b.status().vocab_size


def test_a_run_past_the_cores_waits_in_line_then_starts_by_itself():
    from core.serve import cores
    previous = cores.set_server_budget(cores.CoreBudget(cores=2, job_cores=1))
    a, b = TrainingJob(TEXT, "a", tiny(steps=100_000)), TrainingJob(TEXT, "b", tiny(steps=100_000))
    try:
        a.start()
        b.start()
        s = b.status()
        assert (s.state, s.ahead, s.active, s.moving, s.can_stop) == ("queued", 0, True, True, True)
        assert b._proc is None  # no process before it has its cores
        a.stop(wait=60)
        wait_until(lambda: b.status().step >= 1, timeout=120)  # a's core went to b, which started by itself
        assert b.cores == 1
    finally:
        a.stop(wait=None)
        b.stop(wait=30)
        cores.set_server_budget(previous)


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_an_abandoned_job_stops_by_itself():
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)
    wait_until(lambda: job.status().step >= 1)  # noqa: F821 - called before the `del` below
    del job
    gc.collect()
    proc.join(30)
    assert proc.exitcode == 0  # it ended by itself, not killed


def test_a_failing_run_reports_its_error():
    job = TrainingJob("abc" * 10, "short", tiny())  # far shorter than the split needs
    s = run_to_end(job)
    assert s.state == "failed" and "corpus too short" in s.message and not s.can_save


def test_a_killed_run_reports_failed(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)
    wait_until(lambda: job.status().step >= 1)
    os.kill(proc.pid, signal.SIGKILL)
    assert job.join(30)
    s = job.status()
    assert s.state == "failed" and "killed by SIGKILL" in s.message
    assert not s.active and not s.can_save and not s.can_resume and s.can_start and s.step >= 1
    job.resume()  # nothing to resume
    with pytest.raises(ValueError, match="pause or stop"):
        job.save(tmp_path, "x")


def test_sample_prompt_of_unknown_characters_falls_back_to_the_corpus():
    job = TrainingJob(TEXT, "test", tiny(steps=2), sample_prompt="ЖЖЖ")
    s = run_to_end(job)
    assert s.sample_prompt == TEXT[0]


def test_validate_settings_names_the_field():
    ok = validate_settings(JobSettings(), 1_000_000, 65)
    assert ok == {}
    errs = validate_settings(JobSettings(n_heads=3), 1_000_000, 65)
    assert list(errs) == ["n_heads"] and "not divisible by n_heads=3" in errs["n_heads"]
    errs = validate_settings(JobSettings(), 500, 65)
    assert list(errs) == ["n_ctx"] and "1,291" in errs["n_ctx"]
    assert "steps" in validate_settings(JobSettings(steps=0), 1_000_000, 65)
    assert "lr" in validate_settings(JobSettings(lr=0.0), 1_000_000, 65)
    assert "batch_size" in validate_settings(JobSettings(batch_size=1024, n_ctx=1024), 10_000_000, 65)
    assert "d_model" in validate_settings(JobSettings(d_model=1024, n_layers=12), 1_000_000, 65)
    assert "d_ff" in validate_settings(JobSettings(d_ff=0), 1_000_000, 65)


def test_validate_settings_for_a_bpe_counts_the_context_in_tokens():
    from core.training.job_settings import job_cost
    bpe = JobSettings(tokenizer="bpe", bpe_vocab=512)
    assert bpe.bpe_vocab_size == 512 and JobSettings(bpe_vocab=512).bpe_vocab_size is None
    assert validate_settings(bpe, 1_000_000, 512, split_tokens=(400_000, 45_000)) == {}
    errs = validate_settings(bpe, 1_000_000, 512, split_tokens=(1_000, 129))  # n_ctx 128 needs 130 held out
    assert list(errs) == ["n_ctx"] and "1,000 training and 129 held-out tokens" in errs["n_ctx"]
    assert validate_settings(bpe, 1_000_000, 512, split_tokens=(1_000, 130)) == {}
    for bad in (255, 16_385, 300.0, True):
        assert list(validate_settings(JobSettings(tokenizer="bpe", bpe_vocab=bad), 1_000_000, 512)) == ["bpe_vocab"]
    assert list(validate_settings(JobSettings(tokenizer="words"), 1_000_000, 65)) == ["tokenizer"]
    # D over the training part's tokens, not its characters: 2000 x 32 x 128 tokens over 400,000 of them
    assert job_cost(bpe, 512, 1_000_000, train_tokens=400_000).epochs == pytest.approx(2000 * 32 * 128 / 400_000)


def test_settings_map_onto_the_training_core():
    s = JobSettings(steps=2000)
    tc = s.train_config()
    assert s.recipe == "muon" and (tc.optimizer, tc.schedule) == ("muon", "wsd")
    assert (tc.steps, tc.batch_size, tc.lr, tc.seed, tc.eval_interval) == (2000, 32, 6e-3, 1337, 100)
    assert tc.warmup == round(tc.warmup_frac * 2000)  # the warmup scales with the run
    old = JobSettings(steps=2000, recipe="adamw").train_config()
    assert (old.optimizer, old.schedule, old.warmup) == ("adamw", "cosine", 200)  # a tenth of a short run
    assert s.tokens == 2000 * 32 * 128
    cfg = s.model_config(65)
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.n_ctx) == (64, 4, 2, 256, 128)


def test_flop_rate_is_positive():
    rate, source = speed.measured_flop_rate()
    assert rate > 0 and source


@pytest.mark.parametrize("raw, clean", [
    ("my model", "my-model"), ("../../etc/passwd", "etc-passwd"), ("a/b\\c", "a-b-c"), ("  .hidden ", "hidden"),
    ("Café v2", "Cafe-v2"), ("x" * 100, "x" * 64), ("ok_name.v1", "ok_name.v1"),
])
def test_names_are_sanitised(raw, clean):
    assert sanitise_model_name(raw) == clean


@pytest.mark.parametrize("raw", ["", "   ", "..", "/", "名前"])
def test_unusable_names_are_refused(raw):
    with pytest.raises(ValueError, match="give the model a name"):
        sanitise_model_name(raw)


def test_model_folder_stays_inside_the_models_folder(tmp_path):
    base = tmp_path / "models"
    base.mkdir()
    assert user_model_folder(base, "../../evil") == base.resolve() / "evil"
    outside = tmp_path / "outside"
    outside.mkdir()
    (base / "link").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        user_model_folder(base, "link", overwrite=True)
    (base / "file").write_text("x")
    with pytest.raises(ValueError, match="not a model folder"):
        user_model_folder(base, "file", overwrite=True)
    with pytest.raises(ValueError, match="shipped"):
        user_model_folder(base, "SHAKESPEARE-char", protected=["shakespeare-char"])


def test_a_job_leaves_the_callers_threads_random_state_and_app_script_alone(tmp_path, monkeypatch):
    # spawn re-runs the parent's __main__ file in the new process, and during a script run Streamlit installs
    # the app script there: a run started meanwhile must not execute it (this one would fail the run)
    script = tmp_path / "app.py"
    script.write_text("raise RuntimeError('the app script ran in the training process')\n")
    app_main = types.ModuleType("__main__")
    app_main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", app_main)
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    s = run_to_end(TrainingJob(TEXT, "test", tiny(steps=3, threads=1)))
    assert s.state == "finished", s.message
    assert sys.modules["__main__"] is app_main
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected)
