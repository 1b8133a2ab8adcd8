"""The pages' shared Streamlit plumbing: ui.model_cache (a page's work on its model, cached by the model's key string),
ui.metric_row (a row of st.metric from core's rows) and ui.save_form (the Save section of a trained run)."""
import gc
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

import ui
from ui import model_cache


@pytest.fixture
def slots(monkeypatch):
    """(what, lane) of every compute slot taken (ui.gated asks ui.compute.compute_slot before new work)."""
    taken = []
    monkeypatch.setattr(ui.compute, "compute_slot", lambda what, key=None, lane="short": taken.append((what, lane)))
    return taken


class Model:
    """Stands for a loaded model: a weak reference to it tells whether anything still holds it."""

    def __init__(self, name: str):
        self.name = name


def page_run(model: Model, x: int, runs: list, what: str | None = "the work"):
    """What a page run does: a new function reading this run's model, cached (two entries) and called with the
    model's key string first."""
    work = model_cache(lambda x: runs.append((model.name, x)) or (model.name, x), 2, what=what)
    return work(f"{model.name}:stamp", x)


def test_two_functions_with_the_same_arguments_keep_caches_of_their_own(slots):
    # Streamlit names a cache by its function's source: one wrapper made for both would share a cache
    first = model_cache(lambda x: ("first", x), 4)
    second = model_cache(lambda x: ("second", x), 4)
    assert first("m:1", 1) == ("first", 1)
    assert second("m:1", 1) == ("second", 1)
    assert first.cached is not second.cached


def test_a_rerun_reads_the_cache_and_each_model_key_is_work_of_its_own(slots):
    runs = []
    a, b, c = Model("a"), Model("b"), Model("c")
    assert page_run(a, 1, runs) == ("a", 1)
    assert page_run(a, 1, runs) == ("a", 1)  # the next run's function is new, its cache the same
    assert page_run(b, 1, runs) == ("b", 1)  # the same input on another model
    assert runs == [("a", 1), ("b", 1)]
    page_run(c, 1, runs)  # a third entry: a's is evicted (max_entries=2) and computed again, by this run's model
    assert page_run(a, 1, runs) == ("a", 1) and runs[-1] == ("a", 1) and len(runs) == 4


def test_new_work_waits_in_the_compute_line_and_cached_work_does_not(slots):
    runs = []
    page_run(Model("line"), 1, runs)
    page_run(Model("line"), 1, runs)  # cached: no slot
    page_run(Model("line"), 2, runs)
    assert slots == [("the work", "short")] * 2 and len(runs) == 2
    long = model_cache(lambda x: -x, 4, what="the continuations", lane="long")
    assert long("m:1", 3) == -3 and slots[-1] == ("the continuations", "long")
    page_run(Model("ungated"), 1, runs, what=None)  # what=None: never in the line
    assert len(slots) == 3


def test_no_model_is_kept_alive_by_its_cache_or_the_compute_line(slots):
    """The cache keeps results and the compute line the keys of recent calls; neither may keep the models whose work
    they hold (a GPT-2 small is 0.5 GB), not even the last one's, nor one whose entry was evicted."""
    runs, refs = [], []
    for name in ("x", "y", "z"):  # x's entry is evicted by z's (max_entries=2)
        model = Model(name)
        refs.append(weakref.ref(model))
        assert page_run(model, 1, runs) == (name, 1)
        del model
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_a_resource_cache_hands_out_its_one_object_a_data_cache_a_copy(slots):
    shared = model_cache(lambda: {"trace": [1, 2]}, 2, resource=True)
    copied = model_cache(lambda: {"trace": [1, 2]}, 2)
    assert shared("m:1") is shared("m:1")
    assert copied("m:1") == copied("m:1") == {"trace": [1, 2]} and copied("m:1") is not copied("m:1")


def test_a_cached_function_may_call_another(slots):
    inner = model_cache(lambda x: x + 1, 4)
    outer = model_cache(lambda x: 10 * inner("m:1", x), 4)  # as the logit lens reads the cached trace
    assert outer("m:1", 1) == 20 and inner("m:1", 5) == 6 and outer("m:1", 2) == 30


def _metric_script():
    import ui
    ui.metric_row([("Step", "8", "optimisation steps so far"), ("Training loss", "3.814", None)], 4)


def test_metric_row_draws_one_metric_per_row_in_equal_columns():
    at = AppTest.from_function(_metric_script).run()
    assert not at.exception
    assert [(m.label, m.value, m.proto.help) for m in at.metric] == [
        ("Step", "8", "optimisation steps so far"), ("Training loss", "3.814", "")]
    assert len(at.columns) == 4


class FakeJob:
    """A stopped run: saves an empty folder under the name it is given, refuses the name "taken"."""

    def save(self, models_dir, name, *, protected, overwrite, owner):
        if name == "taken":
            raise ValueError("a model of that name exists already")
        path = Path(models_dir) / name
        path.mkdir(parents=True)
        return path

    def status(self):
        return SimpleNamespace(step=8)


def _save_script():
    import streamlit as st
    import ui
    if name := st.session_state.pop("new_run", None):  # as the training page does when a run starts
        ui.reset_save_form("demo", "demo_save_name", name)
    ui.save_form("demo", "demo_save_name")


def test_save_form_saves_selects_refuses_and_starts_afresh_under_its_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_MODELS_DIR", str(tmp_path))
    at = AppTest.from_function(_save_script)
    at.session_state["demo_job"] = FakeJob()
    at.session_state["new_run"] = "demo-model"
    at.run()
    assert at.text_input(key="demo_save_name").value == "demo-model" and not at.success and not at.error
    at.button(key="demo_save").click().run()
    assert (tmp_path / "demo-model").is_dir()
    assert at.success[0].value.startswith(f"Saved **demo-model** (step 8) in {tmp_path}.")
    assert at.session_state["te_model_name"] == "demo-model"  # "Select it in the sidebar" is ticked by default
    assert [b.proto.label for b in at.get("download_button")] == [
        "Download the checkpoint folder (.zip)", "Download for transformers (.zip)"]
    at.checkbox(key="demo_select").uncheck()
    at.text_input(key="demo_save_name").input("taken")
    at.button(key="demo_save").click().run()
    assert at.error[0].value == "Not saved: a model of that name exists already"
    assert at.session_state["te_model_name"] == "demo-model"
    at.session_state["new_run"] = "second-run"
    at.run()
    assert at.text_input(key="demo_save_name").value == "second-run" and not at.success and not at.error
