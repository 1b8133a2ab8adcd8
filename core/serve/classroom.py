"""A class in the room (issue 44): the votes of a peer-instruction round, kept where every replica sees them.

One interface, ``ClassStore``, two backends that pass the same contract tests (tests/test_classroom_store.py):
``SqliteStore(path)`` (embedded, WAL mode, one file beside the models folder: correct across the replicas of one
machine) and ``RedisStore(url)`` (replicas on several machines; ``TE_CLASS_STORE=redis://host:6379/0``).
``store_from_env()`` picks one. The rules both share are in class_rules.py, the backends in class_sqlite.py and
class_redis.py; this module names the whole, and the names the issue fixed are imported from here.

A class: ``create_class() -> (code, secret)``. The code is what students type (8 symbols of 32: 40 random bits, never
sequential); the secret alone runs the class, and only its SHA-256 is stored. A round: ``open_round`` (phase 1, vote
1), ``set_phase(..., 2)`` (discuss, vote again), ``reveal`` (the model's answer; voting ends). ``vote`` takes one of the
round's choices in the round's open phase; a second vote of the same voter in one phase replaces the first. A vote is
committed before ``vote`` returns, so a page that says "recorded" after it never loses one. A class expires
``ttl_s`` (12 h) after its last round opened, or ``idle_s`` (1 h) after it was started while it has none.

Every refusal is a ``ClassError`` (a ValueError) whose message can be shown as it is; a wrong secret is a
``PermissionError``. Nothing identifies a student but the ``voter`` string the caller passes (the Class page: a random
id per browser, issue 54).
"""
from __future__ import annotations

import os
from pathlib import Path

from core.serve.class_redis import RedisStore
from core.serve.class_rules import (CODE_ALPHABET, CODE_LEN, CSV_FIELDS, MAX_CHOICE, MAX_CHOICES, MAX_META, MAX_TEXT,
                                    MAX_VOTER, MIN_CHOICES, NEW_VOTERS_ENV, SHIFT_ROW, STORE_ENV, ClassError, ClassLimits,
                                    ClassStore, StoreUnavailable, check_meta, check_round, choice_key, client_key,
                                    limits_from_env, new_code, normalize_code, round_summary, rounds_csv, shift_rows)
from core.serve.class_sqlite import SqliteStore
from core.serve.paths import user_models_dir

__all__ = ["CODE_ALPHABET", "CODE_LEN", "CSV_FIELDS", "MAX_CHOICE", "MAX_CHOICES", "MAX_META", "MAX_TEXT", "MAX_VOTER",
           "MIN_CHOICES", "NEW_VOTERS_ENV", "SHIFT_ROW", "STORE_ENV", "ClassError", "ClassLimits", "ClassStore",
           "RedisStore", "SqliteStore", "StoreUnavailable", "check_meta", "check_round", "choice_key", "client_key",
           "default_sqlite_path", "limits_from_env", "new_code", "normalize_code", "round_summary", "rounds_csv",
           "shift_rows", "store_from_env"]


def default_sqlite_path() -> Path:
    """classroom.sqlite beside the models folder (core.serve.paths): what a deployment keeps as a volume."""
    return user_models_dir().parent / "classroom.sqlite"


def store_from_env(environ=None) -> ClassStore:
    """TE_CLASS_STORE: unset or a file path -> SqliteStore; redis://host:port/db -> RedisStore."""
    env = os.environ if environ is None else environ
    value, limits = env.get(STORE_ENV, "").strip(), limits_from_env(env)
    if value.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(value, limits)
    return SqliteStore(Path(value).expanduser() if value else default_sqlite_path(), limits)
