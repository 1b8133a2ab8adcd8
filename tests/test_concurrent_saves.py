"""Replicas share one models folder: two processes saving at once never leave a half-written model.

Two writer processes (two app replicas, or a replica and the command line) save into the same folder at the same
moments, released together by a barrier each round: both replace one shared name, and both try to create one new
name. A third process does what every page run of a replica does (``discover_models``, which recovers
interrupted saves) and, all the while, reads every model it can see: each folder it reads must be complete, its
config and its weights from the same save (read through one descriptor of the folder, so one version is read).
"""
import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as load_safetensors

from core.nn.checkpoint import CONFIG_FILE, LOG_FILE, TIED_NAME, WEIGHTS_FILE, load_checkpoint
from core.nn.model_discovery import discover_models
from core.nn.model_store import save_checkpoint
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.tokenizer import CharTokenizer

pytestmark = pytest.mark.slow  # processes racing on one folder: seconds each

TEXT = "the quick brown fox jumps over the lazy dog\n"
ROUNDS = 25


def _model(seed: int):
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1)), tok


def _seed(writer: int, k: int) -> int:
    return 1000 * (writer + 1) + k


def _writer(base: str, writer: int, barrier, results) -> None:
    """One replica: each round, replace "shared" and try to create "race-<k>", at the same moment as the other."""
    torch.set_num_threads(1)
    out = []
    for k in range(ROUNDS):
        model, tok = _model(_seed(writer, k))
        tag = {"writer": writer, "round": k, "seed": _seed(writer, k)}
        barrier.wait(timeout=120)
        for name, overwrite in (("shared", True), (f"race-{k}", False)):
            try:
                save_checkpoint(Path(base) / name, model, tok, {"tag": tag}, overwrite=overwrite)
                out.append((name, "saved", tag))
            except FileExistsError:
                out.append((name, "exists", tag))
            except Exception as e:  # anything else is a failure of concurrent saving
                out.append((name, f"error {type(e).__name__}: {e}", tag))
    results.put((writer, out))


def _read_version(base: str, name: str):
    """(config, weights) of one version of ``base/name``, read through one descriptor of the folder; None when that
    version was replaced and removed while being read (a reader of a path always finds a complete model or none)."""
    try:
        fd = os.open(os.path.join(base, name), os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        def read(f):
            fh = os.open(f, os.O_RDONLY, dir_fd=fd)
            with os.fdopen(fh, "rb") as fp:
                return fp.read()
        files = set(os.listdir(fd))
        config, weights = read(CONFIG_FILE), read(WEIGHTS_FILE)
        read(LOG_FILE)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)
    assert {CONFIG_FILE, WEIGHTS_FILE, LOG_FILE, "README.md"} <= files, f"{name}: files missing: {sorted(files)}"
    return json.loads(config), load_safetensors(weights)


def _observer(base: str, stop, results) -> None:
    """Another replica's page runs meanwhile: recovery, discovery, and reading every visible model."""
    torch.set_num_threads(1)
    complete, problems, passes = 0, [], 0
    while not stop.is_set() or passes < 3:
        passes += 1
        try:
            discover_models(None, base)  # recovers interrupted saves first, as every page run does
            for name in sorted(n for n in os.listdir(base) if not n.startswith(".")):
                version = _read_version(base, name)
                if version is None:
                    continue
                config, weights = version
                model, _ = _model(config["training"]["tag"]["seed"])
                expected = {k: v for k, v in model.state_dict().items()
                            if not (model.config.tie_weights and k == TIED_NAME)}
                if weights.keys() != expected.keys() or not all(torch.equal(weights[k], expected[k]) for k in expected):
                    problems.append(f"{name}: weights are not those of the save its config names")
                complete += 1
        except Exception as e:
            problems.append(f"{type(e).__name__}: {e}")
    results.put(("observer", complete, problems[:10]))


def test_two_processes_saving_at_once_never_leave_a_half_written_model(tmp_path):
    ctx = mp.get_context("spawn")
    barrier, stop, results = ctx.Barrier(2), ctx.Event(), ctx.Queue()
    observer = ctx.Process(target=_observer, args=(str(tmp_path), stop, results))
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), w, barrier, results)) for w in (0, 1)]
    observer.start()
    for p in writers:
        p.start()
    got = {}
    try:
        for _ in writers:
            writer, out = results.get(timeout=300)
            got[writer] = out
        stop.set()
        _, complete, problems = results.get(timeout=300)
    finally:
        stop.set()
        for p in (*writers, observer):
            p.join(timeout=30)
            if p.is_alive():
                p.kill()

    assert not problems, problems
    assert complete > 0, "the observer never read a model"
    # every replacement of the shared name succeeded, whatever the other process did at the same moment
    shared = [r for w in got for (name, r, _) in got[w] if name == "shared"]
    assert shared == ["saved"] * (2 * ROUNDS), [r for r in shared if r != "saved"][:5]
    # each new name was created by exactly one of the two; the other was told it exists
    for k in range(ROUNDS):
        outcomes = sorted(r for w in got for (name, r, _) in got[w] if name == f"race-{k}")
        assert outcomes == ["exists", "saved"], (k, outcomes)
        winner = next(t for w in got for (name, r, t) in got[w] if name == f"race-{k}" and r == "saved")
        config, _ = _read_version(str(tmp_path), f"race-{k}")
        assert config["training"]["tag"] == winner
    # the shared name holds, complete, the last save of one of the two; nothing half-done is left beside it
    config, _ = _read_version(str(tmp_path), "shared")
    assert config["training"]["tag"]["round"] == ROUNDS - 1
    loaded, _ = load_checkpoint(tmp_path / "shared")
    model, _ = _model(config["training"]["tag"]["seed"])
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["shared", *(f"race-{k}" for k in range(ROUNDS))])


def _hold_folder_lock(base: str, held, release) -> None:
    """Another process in the middle of a swap: it holds the models folder's lock until told to let go."""
    import fcntl
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()
    release.wait(120)
    os.close(fd)


def test_a_save_waits_while_another_process_holds_the_folder(tmp_path):
    """What keeps a replica's recovery from undoing another replica's swap in progress: the swap and the recovery
    both take an exclusive lock on the models folder itself (flock, no lock file), across processes."""
    pytest.importorskip("fcntl", reason="flock is POSIX; elsewhere saves are serialised within one process only")
    import threading
    ctx = mp.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_folder_lock, args=(str(tmp_path), held, release))
    holder.start()
    try:
        assert held.wait(120)
        model, tok = _model(1)
        done = threading.Event()
        saver = threading.Thread(target=lambda: (save_checkpoint(tmp_path / "m", model, tok), done.set()), daemon=True)
        saver.start()
        assert not done.wait(1.0), "the save went ahead while another process held the models folder"
        assert not (tmp_path / "m").exists()
        release.set()
        saver.join(60)
        assert done.is_set() and (tmp_path / "m" / WEIGHTS_FILE).is_file()
    finally:
        release.set()
        holder.join(30)


# ---------------------------------------------------------------- the saved-model quota, checked and reserved at once

def _fake_model(base: Path, name: str, owner):
    (base / name).mkdir(parents=True)
    (base / name / CONFIG_FILE).write_text(json.dumps({"owner": owner}))


def test_two_saves_at_once_cannot_both_take_the_last_place(tmp_path, monkeypatch):
    import threading

    from core.training.quota import QuotaError, reservations, reserve_model_slot

    monkeypatch.setenv("TE_MAX_MODELS", "2")
    monkeypatch.setenv("TE_MAX_MODELS_PER_USER", "5")
    _fake_model(tmp_path, "old", "you")  # one place left
    entered, other_tried, problems = threading.Event(), threading.Event(), []

    def first_save():
        try:
            with reserve_model_slot(tmp_path, tmp_path / "a", "me"):
                entered.set()
                other_tried.wait(30)  # still writing while the other save asks
                _fake_model(tmp_path, "a", "me")
        except Exception as e:  # noqa: BLE001 - reported below
            problems.append(e)
            entered.set()

    saver = threading.Thread(target=first_save)
    saver.start()
    assert entered.wait(30)
    try:
        with pytest.raises(QuotaError, match=r"the server holds 2 saved models, as many as it keeps \(2\)"):
            with reserve_model_slot(tmp_path, tmp_path / "b", "you"):
                pass
    finally:
        other_tried.set()
        saver.join(30)
    assert not problems, problems
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "old"]  # the reservation is gone with its save
    with pytest.raises(QuotaError):  # and the folder counts from then on
        with reserve_model_slot(tmp_path, tmp_path / "c", None):
            pass
    with reserve_model_slot(tmp_path, tmp_path / "a", "me"):  # a replacement adds no model
        assert reservations(tmp_path) == []


def test_a_reservation_counts_for_its_owner_and_a_forgotten_one_is_dropped(tmp_path, monkeypatch):
    from core.training.quota import RESERVATION_PREFIX, QuotaError, reservations, reserve_model_slot

    monkeypatch.setenv("TE_MAX_MODELS_PER_USER", "1")
    with reserve_model_slot(tmp_path, tmp_path / "a", "me"):
        with pytest.raises(QuotaError, match="you have 1 saved model,"):
            with reserve_model_slot(tmp_path, tmp_path / "b", "me"):
                pass
        with reserve_model_slot(tmp_path, tmp_path / "c", "you"):  # another person's place is not mine
            assert len(reservations(tmp_path)) == 2
    ended = mp.get_context("spawn").Process(target=int)
    ended.start()
    ended.join()
    forgotten = tmp_path / f"{RESERVATION_PREFIX}{ended.pid}-x.json"  # its process has ended without removing it
    forgotten.write_text(json.dumps({"name": "z", "owner": "me", "pid": ended.pid, "time": 1e12}))
    (tmp_path / f"{RESERVATION_PREFIX}half.json").write_text("{")
    assert reservations(tmp_path) == [] and not forgotten.exists()
    with reserve_model_slot(tmp_path, tmp_path / "d", "me"):
        pass


def _quota_saver(base: str, writer: int, barrier, results) -> None:
    from core.training.quota import QuotaError, reserve_model_slot

    torch.set_num_threads(1)
    out = []
    for k in range(ROUNDS):
        model, tok = _model(_seed(writer, k))
        folder = Path(base) / f"round-{k}"
        folder.mkdir(exist_ok=True)
        barrier.wait(timeout=120)
        try:
            with reserve_model_slot(folder, folder / f"m{writer}", None):
                save_checkpoint(folder / f"m{writer}", model, tok)
            out.append("saved")
        except QuotaError:
            out.append("quota")
        except Exception as e:  # noqa: BLE001 - a failure of concurrent saving
            out.append(f"error {type(e).__name__}: {e}")
    results.put((writer, out))


@pytest.mark.slow  # two processes importing torch
def test_two_processes_saving_at_once_keep_the_quota(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_MAX_MODELS", "1")  # inherited by the spawned savers: one model per round's folder
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    savers = [ctx.Process(target=_quota_saver, args=(str(tmp_path), w, barrier, results)) for w in (0, 1)]
    for p in savers:
        p.start()
    try:
        got = dict(results.get(timeout=300) for _ in savers)
    finally:
        for p in savers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for k in range(ROUNDS):
        assert sorted(got[w][k] for w in (0, 1)) == ["quota", "saved"], (k, got[0][k], got[1][k])
        assert len([p for p in (tmp_path / f"round-{k}").iterdir()]) == 1  # one model, no reservation left
