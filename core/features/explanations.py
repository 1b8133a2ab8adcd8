"""``explanations.json``: the explanations of an SAE's or transcoder's units, saved beside it (core.features.explain
makes them): a list of {"unit", "rule", "words", "detection", "fuzz_precision", "fuzz_recall", "control"}, one unit a
line, checked on load (size, fields, rules, finite numbers in [0, 1]) and refused by name when broken."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from core.features.rules import UNEXPLAINED, check_rule

FILE = "explanations.json"
FIELDS = ("unit", "rule", "words", "detection", "fuzz_precision", "fuzz_recall", "control")
MAX_FILE_BYTES = 32 * 2**20


def summary(explanations: list) -> dict:
    """Median and quartiles of detection and control over the units that could be scored (alive), the median
    fuzzing numbers, and the share of them unexplained."""
    alive = [e for e in explanations if e["rule"] is not None]
    if not alive:
        return {"units": len(explanations), "alive": 0}
    det = np.array([e["detection"] for e in alive])
    q = np.quantile(det, [0.25, 0.5, 0.75])
    return {"units": len(explanations), "alive": len(alive), "detection_q1": round(float(q[0]), 3),
            "detection_median": round(float(q[1]), 3), "detection_q3": round(float(q[2]), 3),
            "control_median": round(float(np.median([e["control"] for e in alive])), 3),
            "fuzz_precision_median": round(float(np.median([e["fuzz_precision"] for e in alive])), 3),
            "fuzz_recall_median": round(float(np.median([e["fuzz_recall"] for e in alive])), 3),
            "unexplained_share": round(sum(e["words"] == UNEXPLAINED for e in alive) / len(alive), 3)}


# ------------------------------------------------------------------ the file
def check_explanations(data, n_units: int | None = None, name: str = FILE) -> list:
    """``data`` if it is a valid explanations list (for ``n_units`` units, when given); ValueError naming ``name``
    and the first problem otherwise."""
    def bad(problem):
        return ValueError(f"{name}: {problem}")
    if not isinstance(data, list):
        raise bad("not a JSON list of explanations")
    if n_units is not None and len(data) != n_units:
        raise bad(f"it explains {len(data):,} units, but there are {n_units:,}")
    seen = set()
    for i, e in enumerate(data):
        if not isinstance(e, dict) or set(e) != set(FIELDS):
            raise bad(f"entry {i} must have exactly the fields {', '.join(FIELDS)}")
        u = e["unit"]
        if isinstance(u, bool) or not isinstance(u, int) or u < 0 or (n_units is not None and u >= n_units):
            raise bad(f"entry {i}'s unit {u!r} is not a unit number")
        if u in seen:
            raise bad(f"unit {u} is explained twice")
        seen.add(u)
        if e["rule"] is not None:
            try:
                check_rule(e["rule"])
            except ValueError as err:
                raise bad(f"unit {u}'s rule: {err}") from None
        if not isinstance(e["words"], str) or not 0 < len(e["words"]) <= 500:
            raise bad(f"unit {u}'s words must be text of 1 to 500 characters")
        for f in FIELDS[3:]:
            v = e[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
                raise bad(f"unit {u}'s {f} must be a finite number from 0 to 1, got {v!r}")
    return data


def load_explanations(folder, n_units: int | None = None) -> list | None:
    """The explanations saved in ``folder`` (None when there is no file), checked: at most MAX_FILE_BYTES, inside
    the folder, valid JSON, ``check_explanations``. ValueError naming the file otherwise."""
    from core.serve.folder_files import read_text_inside

    path = Path(folder) / FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = json.loads(read_text_inside(folder, FILE, MAX_FILE_BYTES))
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deep") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable explanations file ({e})") from None
    return check_explanations(data, n_units, str(path))


def write_explanations(folder, explanations: list, replace: bool = True) -> Path:
    """Write ``explanations`` (checked first) as ``folder``/explanations.json, atomically. A file already there is
    replaced only with ``replace`` and only when it is itself an explanations file (one this module writes): any
    other file of that name is refused (FileExistsError), never overwritten."""
    folder = Path(folder)
    check_explanations(explanations)
    path = folder / FILE
    if path.exists() or path.is_symlink():
        if not replace:
            raise FileExistsError(f"{path} exists (replace it with --overwrite)")
        try:
            load_explanations(folder)
        except ValueError:
            raise FileExistsError(f"{path} is not an explanations file this app wrote; it is left as it is") from None
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{FILE}.")
    try:
        with os.fdopen(fd, "w") as f:  # one unit a line: a diff of two runs reads unit by unit
            f.write("[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in explanations) + "\n]\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
