"""The visible queue on a real page: a Generation run with a new prompt waits while every compute slot is taken,
then runs; a page run never keeps its slot."""
import threading
from contextlib import contextmanager

import pytest

import ui
from tests.polling import stays, wait_until


@pytest.fixture
def one_slot(monkeypatch):
    monkeypatch.setenv("TE_COMPUTE_SLOTS", "1")
    ui.compute_gate.clear()
    gate = ui.compute_gate("short")
    assert gate.slots == 1
    yield gate
    ui.compute_gate.clear()


@contextmanager
def slot_taken_elsewhere(gate):
    """Another student's heavy run holds one of ``gate``'s slots (in a thread of its own) until the block ends."""
    busy, free = threading.Event(), threading.Event()

    def someone_else():
        gate.acquire()
        busy.set()
        free.wait(60)
        gate.release()

    other = threading.Thread(target=someone_else)
    other.start()
    busy.wait(10)
    try:
        yield
    finally:
        free.set()
        other.join(10)


def generated_text(at) -> str:
    return next(c.value for c in at.code)  # the "Plain text" expander holds the prompt and what was drawn


@pytest.fixture
def long_lane(monkeypatch):
    monkeypatch.setenv("TE_COMPUTE_SLOTS", "2")
    ui.compute_gate.clear()
    gate = ui.compute_gate("long")
    assert gate.slots == 1 and ui.compute_gate("short").slots == 2  # text generation never takes every core
    yield gate
    ui.compute_gate.clear()


def test_a_new_prompt_waits_for_the_slot_then_draws_its_text(open_page, long_lane):
    one_slot = long_lane
    at = open_page("pages/generation.py")
    at.number_input(key="gen_new_tokens").set_value(30)
    at.number_input(key="gen_cont_tokens").set_value(10)
    at.run()
    assert not at.exception and one_slot.running == 0  # the runs so far gave their slot back
    with slot_taken_elsewhere(one_slot):  # the only slot
        at.text_area(key="gen_prompt").input("ROMEO:\nWhither now?")
        run = threading.Thread(target=at.run)
        run.start()
        wait_until(lambda: one_slot.waiting == 1)  # the page is in line ...
        stays(run.is_alive, 0.3)  # ... and does not draw before its turn
    run.join(120)
    assert not at.exception
    assert generated_text(at).startswith("ROMEO:\nWhither now?") and len(generated_text(at)) > len("ROMEO:\nWhither now?")
    wait_until(lambda: one_slot.waiting == 0 and one_slot.running <= 1)


def test_work_done_already_skips_the_line(open_page, one_slot):
    """A page whose work this server has done (a class on the default prompt) reads its caches without queueing,
    even while every slot is taken."""
    first = open_page("pages/attention.py")  # computes the default prompt once
    assert not first.exception
    with slot_taken_elsewhere(one_slot):
        second = open_page("pages/attention.py")  # would wait for the slot if it queued
        assert not second.exception and one_slot.waiting == 0
        second.text_area(key="attn_prompt").input("A new prompt")
        run = threading.Thread(target=second.run)
        run.start()
        wait_until(lambda: one_slot.waiting == 1)  # new work queues
    run.join(120)
    assert not second.exception


def test_no_work_runs_without_a_slot_and_no_cached_result_takes_one(monkeypatch):
    """ui.gated's invariant, whatever the order of calls: the cached function's body runs exactly when a slot was
    taken. Work evicted from its cache (max_entries=2 here) takes a slot again, and so does work a rerun
    interrupted (a registry that recorded keys when the slot was taken had let both skip the line)."""
    import streamlit as st

    slots, runs = [], []
    monkeypatch.setattr(ui.compute, "compute_slot", lambda what, key=None, lane="short": slots.append(what))

    @st.cache_resource(max_entries=2, show_spinner=False)
    def work(x):
        runs.append(x)
        if x == "interrupted" and runs.count(x) == 1:
            raise RuntimeError("a rerun interrupted it")
        return x

    def call(x):
        try:
            ui.gated(work, "the work")(x)  # a new wrapper each call, as each page run makes one
        except RuntimeError:
            pass

    for x in ["a", "b", "a", "c", "b", "b", "interrupted", "interrupted", "a"]:
        call(x)
        assert len(slots) == len(runs), (x, slots, runs)
    assert runs == ["a", "b", "c", "b", "interrupted", "interrupted", "a"]  # a and b evicted in turn, then run again
    work.clear()
