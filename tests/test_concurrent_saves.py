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

from core.nn.checkpoint import (CONFIG_FILE, LOG_FILE, TIED_NAME, WEIGHTS_FILE, discover_models, load_checkpoint,
                             save_checkpoint)
from core.nn.model import ModelConfig, Transformer
from core.nn.tokenizer import CharTokenizer

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
