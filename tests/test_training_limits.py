"""Hostile use of the training slots and of Save (issue 26): closed tabs, one person's runs, a stopped process,
a full disk, a save racing its process's retirement, the saved-model quota."""
import os
import signal
import threading
import types

import pytest
from safetensors import SafetensorError

import core.nn.checkpoint as checkpoint
from core.nn.checkpoint import load_checkpoint
from core.training.quota import QuotaError
from core.jobs import JobBusy
from core.training.training_child import save_failure
from core.training.training_job import TrainingJob
from tests.polling import wait_until
from tests.test_training_job import TEXT, start_process, tiny


@pytest.mark.slow  # two training processes
def test_a_run_whose_session_ended_gives_its_cores_back_and_its_weights_are_discarded():
    from core.serve import cores
    previous = cores.set_server_budget(cores.CoreBudget(cores=2, job_cores=1))
    live = {"paused-tab", "new-tab"}
    paused = TrainingJob(TEXT, "paused", tiny(steps=100_000), session="paused-tab", alive=lambda s: s in live)
    proc = start_process(paused)
    new = TrainingJob(TEXT, "new", tiny(steps=100_000, seed=4), session="new-tab", alive=lambda s: s in live)
    try:
        wait_until(lambda: paused.status().step >= 1)
        new.start()
        assert new.status().state == "queued"  # the running run's tab is open: it keeps its core
        live.discard("paused-tab")  # its tab closed, and Streamlit has forgotten its session
        wait_until(lambda: not proc.is_alive(), timeout=60)  # the runner's watchdog abandoned it
        s = paused.status()
        assert s.state == "failed" and "browser session ended" in s.message and not s.can_save and not s.active
        wait_until(lambda: new.status().state in ("preparing", "running"), timeout=60)  # its core went to new
    finally:
        new.stop()
        cores.set_server_budget(previous)


def test_one_person_trains_one_run_at_a_time():
    mine = TrainingJob(TEXT, "a", tiny(steps=100_000), owner="me")
    mine.start()
    try:
        with pytest.raises(JobBusy, match="you are training a model on a already"):
            TrainingJob(TEXT, "b", tiny(), owner="me").start()
    finally:
        assert mine.stop(wait=120)  # a guard against a hang: on 2 busy cores a niced child can take a while
    other = TrainingJob(TEXT, "b", tiny(), owner="me")
    other.start()  # the first has stopped: its owner may start another
    assert other.stop(wait=120)


def test_session_alive_asks_streamlits_session_manager(monkeypatch):
    import streamlit.runtime as runtime
    import ui

    known = {"open-tab"}
    manager = types.SimpleNamespace(get_session_info=lambda sid: object() if sid in known else None)
    monkeypatch.setattr(runtime, "exists", lambda: True)
    monkeypatch.setattr(runtime, "get_instance", lambda: types.SimpleNamespace(_session_mgr=manager))
    assert ui.session_alive("open-tab") and not ui.session_alive("closed-tab")
    monkeypatch.setattr(runtime, "get_instance", lambda: types.SimpleNamespace())  # a Streamlit without it
    assert ui.session_alive("closed-tab")
    monkeypatch.setattr(runtime, "exists", lambda: False)
    assert ui.session_alive("closed-tab")


def _in_thread(fn):
    """Run fn() in a thread: (the thread, a dict that gets its "value" or "error"). The caller joins it with a
    limit, so a hang fails the test instead of holding the suite."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.mark.slow  # a training process, and a save left to time out
def test_a_stopped_training_process_makes_save_fail_in_words_and_the_run_stays_savable(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)
    wait_until(lambda: job.status().step >= 2)
    job.stop()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t, out = _in_thread(lambda: job.save(tmp_path, "x", timeout=1))
        t.join(90)
        assert not t.is_alive(), "the save hung on a stopped process"
        assert isinstance(out.get("error"), TimeoutError) and "not answering" in str(out["error"])
        assert not (tmp_path / "x").exists()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # the command it never answered in time writes nothing now: the name is still free
    load_checkpoint(job.save(tmp_path, "x"))
    assert job.status().can_resume


@pytest.mark.slow  # the heaviest of its file: seconds
def test_a_full_disk_while_saving_a_finished_run_says_so_and_writes_nothing(tmp_path, monkeypatch):
    job = TrainingJob(TEXT, "test", tiny(steps=3))
    job.start()
    assert job.join(120)
    wait_until(lambda: job._p["retired"] is not None)  # finished: the parent writes, from the handed-over folder

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, message: \"No space left on device\" })")

    monkeypatch.setattr("core.nn.model_store.save_file", full)
    with pytest.raises(OSError, match="No space left on device: the disk is full, so nothing was saved"):
        job.save(tmp_path, "full")
    assert list(tmp_path.iterdir()) == []  # no half-written model, no temporary folder
    # the child's path words it the same way
    assert str(save_failure(SafetensorError("... No space left on device ..."))) == \
        str(save_failure(OSError(28, "No space left on device")))
    monkeypatch.undo()
    load_checkpoint(job.save(tmp_path, "full"))  # room again: the run was kept


@pytest.mark.slow  # a real training process for several seconds: the fast lane leaves it to CI
def test_a_save_racing_its_process_retirement_saves_from_the_handed_over_weights(tmp_path):
    job = TrainingJob(TEXT, "test", tiny(steps=100_000))
    proc = start_process(job)
    wait_until(lambda: job.status().step >= 3)
    job.stop()
    steps = job.status().step
    os.kill(proc.pid, signal.SIGSTOP)  # hold it, so that the save is asked for before the retirement is done
    try:
        job._send("retire")  # what another session's start does when too many processes are alive
        sent, send = threading.Event(), job._send

        def spy(*command):
            send(*command)
            if command[0] == "save":
                sent.set()

        job._send = spy
        t, out = _in_thread(lambda: job.save(tmp_path, "raced"))
        wait_until(sent.is_set)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    t.join(90)
    assert not t.is_alive(), "the save hung"
    assert "error" not in out, out.get("error")
    assert checkpoint.read_config(out["value"])[2]["steps"] == steps
    assert not job.status().can_resume and job.status().can_save


def test_saved_models_are_capped_per_person_and_in_all(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_MAX_MODELS_PER_USER", "2")
    monkeypatch.setenv("TE_MAX_MODELS", "3")
    job = TrainingJob(TEXT, "test", tiny(steps=3))
    job.start()
    assert job.join(120)
    job.save(tmp_path, "a", owner="me")
    job.save(tmp_path, "b", owner="me")
    with pytest.raises(QuotaError, match="you have 2 saved models, the most one person may keep here"):
        job.save(tmp_path, "c", owner="me")
    job.save(tmp_path, "a", owner="me", overwrite=True)  # replacing one of yours adds none
    job.save(tmp_path, "d", owner="you")
    with pytest.raises(QuotaError, match="the server holds 3 saved models"):
        job.save(tmp_path, "e", owner="you")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "d"]
