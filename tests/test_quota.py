"""core.training.quota: the saved-model limits and the removal of retired runs' folders nobody can save any more."""
import json
import os
import subprocess
import sys
import time

import pytest

from core.training.quota import (DEFAULT_MODELS, DEFAULT_MODELS_PER_USER, RETIRED_GRACE_S, RETIRED_PREFIX, RETIRED_STALE_S,
                        QuotaError, check_model_quota, model_limits, models_of, remove_unused_retired)


def fake_model(base, name, owner):
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"owner": owner}))
    return folder


def test_limits_come_from_the_environment_with_sensible_defaults(monkeypatch):
    monkeypatch.delenv("TE_MAX_MODELS_PER_USER", raising=False)
    monkeypatch.delenv("TE_MAX_MODELS", raising=False)
    assert model_limits() == (DEFAULT_MODELS_PER_USER, DEFAULT_MODELS) == (5, 100)
    monkeypatch.setenv("TE_MAX_MODELS_PER_USER", "0")
    monkeypatch.setenv("TE_MAX_MODELS", "lots")
    assert model_limits() == (0, 100)
    monkeypatch.setenv("TE_MAX_MODELS", "-3")
    assert model_limits() == (0, 100)


def test_the_quota_counts_each_owners_folders_and_all_of_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TE_MAX_MODELS_PER_USER", "2")
    monkeypatch.setenv("TE_MAX_MODELS", "4")
    for name, owner in (("a", "me"), ("b", "me"), ("c", None), ("d", "you")):
        fake_model(tmp_path, name, owner)
    (tmp_path / ".e.x1.tmp").mkdir()  # a save under way is not a model
    (tmp_path / "notes.txt").write_text("x")
    assert models_of(tmp_path, "me") == ["a", "b"] and models_of(tmp_path, None) == []
    with pytest.raises(QuotaError, match=r"you have 2 saved models, the most one person may keep here \(2\)"):
        check_model_quota(tmp_path, tmp_path / "new", "me")
    check_model_quota(tmp_path, tmp_path / "a", "me")  # a replacement adds none
    with pytest.raises(QuotaError, match=r"the server holds 4 saved models, as many as it keeps \(4\)"):
        check_model_quota(tmp_path, tmp_path / "new", "you")
    with pytest.raises(QuotaError, match="the server holds 4"):
        check_model_quota(tmp_path, tmp_path / "new", None)  # the command line: the total only
    assert issubclass(QuotaError, ValueError)  # the page's refusals
    check_model_quota(tmp_path / "missing", tmp_path / "missing" / "new", "me")  # nothing saved yet


def retired(tmp, label, age_s, now):
    folder = tmp / f"{RETIRED_PREFIX}{label}"
    (folder / "run").mkdir(parents=True)
    os.utime(folder, (now - age_s, now - age_s))
    return folder


def test_retired_folders_nobody_refers_to_are_removed_oldest_first(tmp_path):
    now = time.time()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a server process that has ended: its pid is free
    old = RETIRED_GRACE_S + 60
    mine_used = retired(tmp_path, f"{os.getpid()}-aaa", old, now)
    mine_unused = retired(tmp_path, f"{os.getpid()}-bbb", old, now)
    mine_young = retired(tmp_path, f"{os.getpid()}-ccc", 5, now)  # a hand-over whose message may be on its way
    dead_server = retired(tmp_path, f"{ended.pid}-ddd", old + 10, now)
    replica = retired(tmp_path, f"{os.getppid()}-eee", old, now)  # another live process's: maybe still wanted
    replica_stale = retired(tmp_path, f"{os.getppid()}-fff", RETIRED_STALE_S + 60, now)
    unnamed = retired(tmp_path, "x1y2z3", old, now)  # the older kind, without a pid
    other = tmp_path / "something-else"
    other.mkdir()
    os.utime(other, (now - old, now - old))
    removed = remove_unused_retired({str(mine_used)}, tmp_dir=tmp_path, now=now)
    assert removed == [str(p) for p in (replica_stale, dead_server, mine_unused, unnamed)]  # oldest first
    assert all(p.exists() for p in (mine_used, mine_young, replica, other))
    assert not any(p.exists() for p in (mine_unused, dead_server, replica_stale, unnamed))
