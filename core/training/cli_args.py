"""What the three command lines (``python -m core.train``, ``core.study``, ``core.variants``) share: an argument
parser whose errors take one line, and the checks of a folder a run will write, made before any work."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

MODEL_MARK = "config.json"  # every saved model folder has it (core.nn.checkpoint.CONFIG_FILE)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line, the status 2 it always had: argparse's own prints its whole usage
    first (26 lines for core.train), and the one line that says what is wrong scrolls out of sight."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def writable_place(out: Path) -> str | None:
    """Why a folder cannot be made at ``out`` (None: it can): the nearest part of its path that exists must be a
    folder this process may write in. Checked before a run, not after it: the run would otherwise be lost."""
    parent = out.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a folder, so {out} cannot be made in it"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} cannot be written to, so {out} cannot be made in it"
    return None


def model_out_problem(out, overwrite: bool) -> str | None:
    """Why ``python -m core.train --out OUT`` could not save there (None: it can), before minutes of training:
    a folder already there (without ``overwrite``), something there that is not a saved model (``overwrite``
    replaces only a model folder, or an empty one: never a file or a folder of other things), the same name in
    other letters beside it (one folder on a case-insensitive disk), or a place it cannot write."""
    from core.nn.checkpoint import same_name

    out = Path(out)
    if os.path.lexists(out):
        if not overwrite:
            return f"--out {out} already exists; give another folder, or --overwrite to replace it"
        is_model = out.is_dir() and not out.is_symlink() and ((out / MODEL_MARK).is_file() or not any(out.iterdir()))
        if not is_model:
            return (f"--out {out} is not a saved model (it has no {MODEL_MARK}); --overwrite replaces only a model "
                    "folder: give another folder")
    twin = same_name(out.parent, out.name)
    if twin != out.name:
        return f"--out {out}: {out.parent / twin} is already there, the same name in other letters; give another name"
    problem = writable_place(out)
    return None if problem is None else f"--out: {problem}"
