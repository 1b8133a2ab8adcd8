"""Over training on hostile snapshot folders (issue 40): a cap on the snapshots one view reads (first and last
kept), a memory budget estimated before anything is read, a folder listing bounded in names and kept per folder
stamp, two names for one step, and a link's step (the final one, one between snapshots, one past the end)."""
import json
import os
import re
import shutil
import weakref

import numpy as np
import pytest
import torch

import core.nn.snapshots as S
import ui.models as UM
from bench.over_training import SHIPPED, add_empty_snapshots, build_model_folder, spread_steps
from core.analysis.over_training import MAX_VIEW_SNAPSHOTS, over_training, view_memory
from core.analysis.trace import trace
from core.nn.checkpoint import load_checkpoint
from attention_hooks import attention

PAGE = "pages/over_training.py"
PROMPT = "the old man sat by the river. the old man sat by the river."


@pytest.fixture
def loads(monkeypatch):
    """The steps the page's process loads from disk (None: final weights), in order."""
    seen = []
    real = UM.load_checkpoint

    def recording(path, step=None):
        seen.append(step)
        return real(path, step=step)

    monkeypatch.setattr(UM, "load_checkpoint", recording)
    return seen


def _heat_steps(at) -> list[str]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    heat = next(s for s in specs if s["layout"]["title"]["text"].startswith("Which tokens"))
    return heat["data"][0]["y"]


def _open(open_page, root, name, loads=None, **kw):
    at = open_page(PAGE, models_dir=root, state={"te_model_name": name, "over_prompt": PROMPT}, **kw)
    assert not at.exception, at.exception
    return at


def test_a_folder_of_more_snapshots_than_the_cap_reads_at_most_the_cap(open_page, tmp_path, loads):
    steps = spread_steps(12000, 30)
    build_model_folder(tmp_path / "many", snapshots=30)
    at = _open(open_page, tmp_path, "many")
    read = [s for s in loads if s is not None]
    assert len(set(read)) == MAX_VIEW_SNAPSHOTS == 24 and set(read) <= set(steps)
    assert 0 in read and 12000 in read                       # the first and the last are always read
    assert sum(s > steps[len(steps) // 2] for s in set(read)) >= 6   # spread over the run, not its first 24
    y = _heat_steps(at)
    assert len(y) == 24 and y[0] == "0" and y[-1] == "12,000"
    (note,) = [i.value for i in at.info if "left out" in i.value]
    assert "24 of the 30 snapshots" in note and "6 are left out" in note


def test_a_budget_that_fits_only_some_snapshots_reads_those_and_says_so(open_page, tmp_path, loads, monkeypatch):
    build_model_folder(tmp_path / "m", snapshots=21)
    config = load_checkpoint(SHIPPED)[0].config
    n = len(load_checkpoint(SHIPPED)[1].encode(PROMPT))
    # a budget between what 6 and 7 snapshots need, every model kept in memory (a small model's step cache)
    monkeypatch.setenv("TE_OVER_TRAINING_MEMORY", str((view_memory(config, 6, n, held=24) +
                                                       view_memory(config, 7, n, held=24)) // 2))
    at = _open(open_page, tmp_path, "m")
    assert len(set(s for s in loads if s is not None)) == 6
    y = _heat_steps(at)
    assert len(y) == 6 and y[0] == "0" and y[-1] == "12,000"
    assert any("Only 6 snapshots fit the memory" in i.value for i in at.info)


def test_a_budget_that_fits_nothing_refuses_in_words_and_reads_nothing(open_page, tmp_path, loads, monkeypatch):
    build_model_folder(tmp_path / "m", snapshots=21)
    monkeypatch.setenv("TE_OVER_TRAINING_MEMORY", "200k")
    at = _open(open_page, tmp_path, "m")
    assert [s for s in loads if s is not None] == [] and not at.get("plotly_chart")
    (w,) = [w.value for w in at.warning if "even the first and the last snapshot" in w.value]
    assert "the server allows 200.0 KiB" in w and "too large for the page" in w
    monkeypatch.setenv("TE_OVER_TRAINING_MEMORY", "1900k")  # the model fits, this prompt does not: a shorter one
    at = _open(open_page, tmp_path, "m")
    (w,) = [w.value for w in at.warning if "even the first and the last snapshot" in w.value]
    most = int(re.search(r"at most ([\d,]+) tokens would fit", w).group(1))
    assert 2 <= most < len(load_checkpoint(SHIPPED)[1].encode(PROMPT))
    monkeypatch.setenv("TE_OVER_TRAINING_MEMORY", "plenty")
    at = _open(open_page, tmp_path, "m")
    assert any("TE_OVER_TRAINING_MEMORY setting is wrong" in e.value for e in at.error)


def test_the_estimate_covers_the_model_and_its_trace(tmp_path):
    model, tok = load_checkpoint(SHIPPED)
    ids = tok.encode(PROMPT)
    tr = trace(model, torch.tensor([ids]))
    traced = sum(t.nbytes for v in vars(tr).values() for t in (v if isinstance(v, list) else [v])
                 if isinstance(t, torch.Tensor))
    weights = sum(p.numel() for p in model.parameters()) * 4
    one = view_memory(model.config, 21, len(ids), held=1)
    assert one >= weights + traced
    # each model a cache keeps costs its float32 weights once more
    assert view_memory(model.config, 21, len(ids), held=21) - one == 20 * weights


def test_the_page_reads_its_snapshots_one_at_a_time_and_keeps_no_trace(tmp_path):
    """over_training given loaders: each model is loaded when its turn comes and let go before the next."""
    model, tok = load_checkpoint(SHIPPED)
    alive, most = [], [0]

    def loader(step):
        def load():
            m = load_checkpoint(SHIPPED)[0]
            alive.append(step)
            most[0] = max(most[0], len(alive))
            weakref.finalize(m, alive.remove, step)
            return m
        return load

    ids = tok.encode(PROMPT)
    ot = over_training([(s, loader(s)) for s in (0, 10, 20, 30)], ids, strip=[0, 30])
    assert most[0] == 1 and ot.steps == [0, 10, 20, 30]
    # what is kept: the charts' numbers and one head's pattern at the strip's steps, no tensor of a trace
    assert all(not isinstance(v, torch.Tensor) for v in vars(ot).values())
    assert ot.strip_steps == [0, 30] and ot.strip_patterns.shape == (2, len(ids), len(ids))
    with torch.no_grad():
        want = attention(model, torch.tensor([ids]))[ot.strip_head[0]].pattern[0, ot.strip_head[1]]
    assert np.allclose(ot.strip_patterns[0], want.numpy(), atol=1e-6)


# ------------------------------------------------------------------ the listing of a snapshot folder
def _counted_scandir(monkeypatch):
    read = [0]
    real = os.scandir

    class Counting:
        def __init__(self, path):
            self.it = real(path)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.it.close()

        def __iter__(self):
            for e in self.it:
                read[0] += 1
                yield e

    monkeypatch.setattr(S.os, "scandir", Counting)
    return read


def test_a_listing_stops_after_a_few_hundred_names_and_is_kept_per_folder_stamp(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    shutil.copytree(SHIPPED, folder)
    add_empty_snapshots(folder, 2000)
    sub = folder / "checkpoints"
    os.utime(sub, ns=(10**18, 10**18))  # a folder that changed long ago (its stamp settled)
    monkeypatch.setattr(S, "_SETTLED_NS", -1)  # its ctime is now: count it settled too
    read = _counted_scandir(monkeypatch)
    listing = S.snapshot_listing(folder)
    assert read[0] <= S.MAX_NAMES + 1 and S.MAX_NAMES <= 500  # a few hundred names, not 2,000
    assert listing.truncated and 0 < len(listing.steps) <= S.MAX_SNAPSHOTS
    assert S.checkpoint_steps(folder) == list(listing.steps) and read[0] <= S.MAX_NAMES + 1  # kept: not read again
    before = read[0]
    (sub / "step-999999.safetensors").touch()  # a name added: the folder's stamp moves, it is read again
    assert S.snapshot_listing(folder).stamp != listing.stamp and read[0] > before


def test_a_folder_under_the_bound_is_listed_whole(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(SHIPPED, folder)
    listing = S.snapshot_listing(folder)
    assert not listing.truncated and list(listing.steps) == sorted(
        int(n[5:-12]) for n in os.listdir(folder / "checkpoints"))


def test_the_page_says_once_that_a_folder_was_listed_in_part_and_still_answers(open_page, tmp_path, monkeypatch):
    folder = tmp_path / "crowded"
    shutil.copytree(SHIPPED, folder)
    add_empty_snapshots(folder, 3000)  # the shipped 21 real ones among 2,979 empty names
    at = _open(open_page, tmp_path, "crowded")
    assert len([w for w in at.warning if f"more than {S.MAX_NAMES:,} files" in w.value]) == 1
    assert len([w for w in at.sidebar.caption if f"more than {S.MAX_NAMES:,} files" in w.value]) <= 1


# ------------------------------------------------------------------ two names for one step
def test_two_names_for_one_step_draw_that_step_once(open_page, tmp_path):
    folder = tmp_path / "twice"
    shutil.copytree(SHIPPED, folder)
    sub = folder / "checkpoints"
    shutil.copy(sub / "step-000012.safetensors", sub / "step-0000012.safetensors")
    shutil.copy(sub / "step-000019.safetensors", sub / "step-00000019.safetensors")
    at = _open(open_page, tmp_path, "twice")
    assert not at.exception and not at.error
    y = _heat_steps(at)
    assert y.count("12") == 1 and y.count("19") == 1 and len(y) == len(set(y)) == 21


# ------------------------------------------------------------------ a link's step (the frame's first run: the sidebar)
def _sidebar_step(at):
    return at.session_state["te_current"][0].step


def test_a_link_to_the_final_step_opens_the_final_model(open_page):
    at = open_page("app.py", query={"step": "12000"})
    assert not [w for w in at.warning if "link was ignored" in w.value]
    assert _sidebar_step(at) is None and at.session_state["te_step::shakespeare-char"] == "final"


def test_a_link_between_snapshots_opens_the_nearest_and_says_which(open_page):
    at = open_page("app.py", query={"step": "5000"})  # kept: 4,465 and 7,320
    assert _sidebar_step(at) == 4465 and not [w for w in at.warning if "link was ignored" in w.value]
    assert any("step 5,000" in i.value and "the nearest snapshot (step 4,465) is open" in i.value for i in at.sidebar.info)
    at = open_page("app.py", query={"step": "11000"})  # nearer the end: the final model
    assert _sidebar_step(at) is None
    assert any("the final model (step 12,000) is open" in i.value for i in at.sidebar.info)


def test_a_link_past_the_end_of_training_is_refused_in_words(open_page):
    at = open_page("app.py", query={"step": "99999"})
    (w,) = [w.value for w in at.warning if "link was ignored" in w.value]
    assert "trained for 12,000 steps" in w and "99,999" in w
    assert _sidebar_step(at) is None
