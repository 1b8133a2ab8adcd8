"""What the command lines (``python -m core.train``, ``core.variants``, ``core.study``, ``core.features``,
``core.bpe_induction``, ``core.forecast_study``) share: an argument parser whose errors take one line, and the
rule for their ``--out`` folder, judged before any work.

The rule: each command says, by name, which files it writes (``Outputs``). An ``--out`` that holds anything else
(a model, a study, an SAE, a file of yours) is refused in one line unless ``--overwrite``; even then only the
command's own files are replaced and every other file is left byte for byte as it was. A name the command writes
that is there but of another kind (a model's config.json where an SAE would write its own) is refused even with
``--overwrite``: writing it would replace a file the command did not write. Names, not a manifest: the shipped
folders were written before any manifest existed, and a name with a content check says the same thing."""
from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable
from core.nn.model_store import same_name
from core.nn.model_store import save_checkpoint
from core.nn.model_card import model_card
from core.nn.model_store import _swap_into_place, models_folder_lock

from core.training.study_engines import ENGINES

MODEL_MARK = "config.json"  # every saved model folder has it (core.nn.checkpoint.CONFIG_FILE)
MAX_MARK_BYTES = 2**20  # a config.json larger than this is nobody's here (the shipped ones are a few KB)
MOST_WORKERS = 64  # processes or CPUs a command line asks for, at most (or the cores, if more): 10^6 would fork-bomb


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line, the status 2 it always had: argparse's own prints its whole usage
    first (26 lines for core.train), and the one line that says what is wrong scrolls out of sight."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def most_workers() -> int:
    return max(MOST_WORKERS, os.cpu_count() or 1)


def workers_problem(workers: int | None) -> str | None:
    """Why ``--workers`` cannot be used (None: it can). The engines took 0 as "every core" and -5 as 1, silently."""
    if workers is None or 1 <= workers <= most_workers():
        return None
    return f"--workers must be from 1 to {most_workers()} (got {workers:,}); leave it out for one per core"


# ---------------------------------------------------------------- a study's command line (every study's main)

def study_parser(prog: str, description: str, out_help: str, overwrite_help: str, *, runs: tuple[str, ...] = (),
                 steps: int | None = None, max_steps: int | None = None, out_required: bool = True,
                 corpus_help: str = "the text to train on (default: Tiny Shakespeare)", corpus_required: bool = False,
                 engine: bool = True):
    """The one command-line shape of the studies (core.study, core.variants, core.bpe_induction,
    core.forecast_study): --out and --overwrite; for a study that trains, --engine, --workers and --corpus; for one
    of named runs (``runs``), --steps and --only. Flags left out are None, so a study can tell them from defaults
    (``--table`` refuses them); ``study_problem`` checks them in one line before any work."""
    p = OneLineParser(prog=prog, description=description)
    if runs:
        p.add_argument("--steps", type=int, default=None, help=f"steps of every run, 1 to {max_steps:,} (default "
                                                               f"{steps})")
        p.add_argument("--only", default=None, help="comma-separated run ids (default: all): " + ", ".join(runs))
    p.add_argument("--out", required=out_required, default=None, help=out_help)
    if engine:
        p.add_argument("--engine", choices=ENGINES, default=None, help="local: a process pool on this machine "
                       "(default); ray: Ray tasks on RAY_ADDRESS's cluster or on a local Ray instance")
        p.add_argument("--workers", type=int, default=None, help=f"processes (local) or CPUs (a local Ray instance), "
                                                                 f"1 to {most_workers()}; default: every core")
        p.add_argument("--corpus", required=corpus_required, default=None, help=corpus_help)
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    return p


def chosen_runs(only: str | None, ids) -> list[str]:
    """The runs --only names, each once, in the order named; every run of ``ids`` when it names none."""
    return list(dict.fromkeys(s for s in (only or "").split(",") if s)) or list(ids)


def study_problem(args, runs: tuple[str, ...] = (), max_steps: int | None = None, what: str = "run") -> str | None:
    """Why the study flags of ``args`` (study_parser's) cannot be used (None: they can), said in one line."""
    if getattr(args, "workers", None) is not None and workers_problem(args.workers):
        return workers_problem(args.workers)
    if runs and args.steps is not None and not 1 <= args.steps <= max_steps:
        return (f"--steps must be a whole number from 1 to {max_steps:,} (every {what} trains that long), got "
                f"{args.steps:,}")
    if runs and args.only:  # "" is as if left out
        named = [s for s in args.only.split(",") if s]
        unknown = [s for s in named if s not in runs]
        if unknown:
            return f"unknown {what}{'s' * (len(unknown) > 1)} {', '.join(unknown)}; choose from {', '.join(runs)}"
        if not named:  # "--only ," named nothing: not "every run", hours of CPU
            return f"--only names no {what}; choose from {', '.join(runs)}, or leave it out for all"
    return None


# ---------------------------------------------------------------- what a command writes into its --out

def json_with(path: Path, *keys: str) -> bool:
    """Whether ``path`` is a JSON object (of a sane size) holding every one of ``keys``: how a file of a generic
    name (config.json) tells whose it is."""
    try:
        if path.is_symlink() or path.stat().st_size > MAX_MARK_BYTES:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and all(k in data for k in keys)


@dataclass(frozen=True)
class Outputs:
    """The files one command writes into a folder. ``files``: (name pattern, check) pairs; a check (None: none)
    says whether a file of that name is of this command's kind, for names another kind of folder uses too.
    ``folders``: (name pattern, Outputs) of the folders it writes, and what it writes in them. ``merges``: a
    rerun adds to what an earlier run wrote (its own files are then no reason to refuse). ``fixed``: the command
    chooses the folder itself (a transcoder's), so the messages never say "give another folder"."""
    command: str
    what: str  # "a saved model", "an SAE": for the messages
    files: tuple[tuple[str, Callable[[Path], bool] | None], ...] = ()
    folders: tuple[tuple[str, "Outputs"], ...] = ()
    merges: bool = False
    fixed: bool = False

    def file_check(self, name: str):
        """(True, check) when ``name`` is a file this command writes, or the hidden temporary of one (``.NAME.*``:
        an atomic write killed half-way), else (False, None)."""
        for pattern, check in self.files:
            if fnmatchcase(name, pattern):
                return True, check
            if fnmatchcase(name, f".{pattern}.*"):
                return True, None
        return False, None

    def folder(self, name: str) -> "Outputs | None":
        return next((sub for pattern, sub in self.folders if fnmatchcase(name, pattern)), None)


@dataclass
class Survey:
    """What a folder holds, by whose it is; paths relative to the folder, a folder's with a trailing '/'."""
    own: list[str] = field(default_factory=list)      # written by the command (an earlier run of it)
    others: list[str] = field(default_factory=list)   # not written by it: left as they are
    clashes: list[str] = field(default_factory=list)  # not written by it, under a name it writes: it would replace them


def survey(out, outputs: Outputs, inputs=()) -> Survey:
    """``out``'s contents sorted by ``outputs``. ``inputs``: files the command reads that may lie in its own folder
    (the study a page starts writes its corpus and grid file there first): neither its own nor another's."""
    s = Survey()
    skip = {os.path.realpath(p) for p in inputs if p}
    _walk(Path(out), outputs, "", skip, s)
    return s


def _walk(folder: Path, outputs: Outputs, prefix: str, skip: set, s: Survey):
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        rel = prefix + e.name
        if os.path.realpath(e.path) in skip:
            continue
        is_file, check = outputs.file_check(e.name)
        sub = outputs.folder(e.name)
        if e.is_symlink():  # no command writes a link: it is someone's, and never followed
            s.others.append(rel)
        elif is_file and e.is_file(follow_symlinks=False):
            (s.own if check is None or check(Path(e.path)) else s.clashes).append(rel)
        elif sub is not None and e.is_dir(follow_symlinks=False):
            _walk(Path(e.path), sub, rel + "/", skip, s)
        else:
            s.others.append(rel + ("/" if e.is_dir(follow_symlinks=False) else ""))


def _listing(paths: list[str], most: int = 3) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def out_problem(out, outputs: Outputs, overwrite: bool, inputs=(), label: str | None = None) -> str | None:
    """Why ``outputs.command`` may not write into ``out`` (None: it may), said in one line before any work.
    ``label``: how the message names the folder (default "--out OUT")."""
    out = Path(out)
    where = label or (str(out) if outputs.fixed else f"--out {out}")
    other = "" if outputs.fixed else "give another folder, or "
    if os.path.lexists(out):
        if out.is_symlink() or not out.is_dir():
            return f"{where} is there and is not a folder; " + ("remove it" if outputs.fixed else "give a folder")
        try:
            s = survey(out, outputs, inputs)
        except OSError as e:
            return f"{where} cannot be read: {e.strerror or e}"
        if s.clashes:  # refused even with --overwrite: these names are the command's, the files are not
            return (f"{where} holds {_listing(s.clashes)}, which {outputs.command} did not write and would write "
                    f"over (it is not {outputs.what}); "
                    + ("move them away" if outputs.fixed else "give another folder"))
        if s.others and not overwrite:
            return (f"{where} holds {_listing(s.others)}, which {outputs.command} did not write; "
                    + ("" if outputs.fixed else "give a new or empty folder, or ")
                    + "--overwrite to write beside them (they are left as they are)")
        if s.own and not outputs.merges and not overwrite:
            return f"{where} already holds {outputs.what}; {other}--overwrite to replace it"
        if not os.access(out, os.W_OK | os.X_OK):
            return f"{where} cannot be written to"
        return None
    problem = writable_place(out)
    return None if problem is None else f"{'' if outputs.fixed else '--out: '}{problem}"


def remove_own(folder: Path, outputs: Outputs) -> None:
    """Remove what ``outputs`` wrote in ``folder`` (each own file, then each folder it leaves empty), nothing
    else: --overwrite drops an earlier run's files, never another file kept there."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return
    for rel in survey(folder, outputs).own:
        (folder / rel).unlink(missing_ok=True)
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        if not any(sub.iterdir()):  # deepest first: a folder emptied of own files only
            sub.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


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


# ---------------------------------------------------------------- a saved model's folder (core.train, core.variants)

def _model_config(path: Path) -> bool:
    return json_with(path, "format_version", "model")  # this app's checkpoint, not an SAE's or GPT-2's config


def _beside_a_model(path: Path) -> bool:
    return _model_config(path.parent / MODEL_MARK)  # a README.md or log.csv is a model's when its config is


# core.nn.model_store.save_checkpoint's files; sae/ and transcoders/ beside them are core.features's, not these
MODEL_NAMES = ("config.json", "model.safetensors", "README.md", "log.csv", "heads.csv", "tokenizer.json")
SNAPSHOTS = Outputs("python -m core.train", "a saved model", files=(("step-*.safetensors", None),))
MODEL = Outputs("python -m core.train", "a saved model",
                files=(("config.json", _model_config),
                       *((n, _beside_a_model) for n in MODEL_NAMES if n != "config.json")),
                folders=(("checkpoints", SNAPSHOTS),))
# inside a study's own models/<id>/ (core.variants): the names alone, as that place is the command's own
MODEL_BY_NAME = Outputs("python -m core.variants", "a saved model", files=tuple((n, None) for n in MODEL_NAMES),
                        folders=(("checkpoints", SNAPSHOTS),))


def model_out_problem(out, overwrite: bool) -> str | None:
    """Why ``python -m core.train --out OUT`` could not save there (None: it can), before minutes of training:
    a folder already there (without ``overwrite``), something there that is not a saved model (``overwrite``
    replaces only a model folder's own files, or fills an empty one: never a file or a folder of other things),
    the same name in other letters beside it (one folder on a case-insensitive disk), or a place it cannot write."""
    out = Path(out)
    if os.path.lexists(out):
        other = out.is_dir() and not out.is_symlink() and any(out.iterdir()) and not _model_config(out / MODEL_MARK)
        if other:  # --overwrite would not help: say so now, not on the rerun
            return (f"--out {out} already exists and is not a saved model (it has no {MODEL_MARK} of one); "
                    "--overwrite replaces only a model folder's own files: give another folder")
        if not overwrite:
            return f"--out {out} already exists; give another folder, or --overwrite to replace the model there"
        problem = out_problem(out, MODEL, overwrite)
        if problem:
            return problem
    twin = same_name(out.parent, out.name)
    if twin != out.name:
        return f"--out {out}: {out.parent / twin} is already there, the same name in other letters; give another name"
    problem = writable_place(out)
    return None if problem is None else f"--out: {problem}"


def _link_tree(src: Path, dst: Path) -> None:
    """``src`` again at ``dst``: files hard-linked (the same bytes, no copy; copied where links are refused),
    folders made, links kept as links."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        dst.mkdir(exist_ok=True)
        for child in src.iterdir():
            _link_tree(child, dst / child.name)
    else:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def save_model(out, model, tokenizer, training: dict, log, overwrite: bool, **kw) -> Path:
    """core.nn.model_store.save_checkpoint, keeping what else ``out`` holds (its SAEs, transcoders, your notes):
    replacing a model swaps whole folders (atomically), which would drop them. The new model is saved beside
    ``out`` under a hidden name, the other entries are linked into it, and the two folders are swapped the way
    save_checkpoint swaps them (a process killed half-way leaves the old folder whole, or the new one)."""
    out = Path(out)
    others = []
    if overwrite and out.is_dir() and not out.is_symlink():
        others = survey(out, MODEL_BY_NAME).others
    if not others:
        return save_checkpoint(out, model, tokenizer, training, log, overwrite=overwrite, **kw)

    stage = out.with_name(f".{out.name}.{os.getpid()}.keep")
    # a leftover of a killed process of the same id: a save that never finished (what it kept are links)
    shutil.rmtree(stage, ignore_errors=True)
    try:
        # the card names the folder the model ends up in, not the hidden one it is written to
        save_checkpoint(stage, model, tokenizer, training, log, card=model_card(out.name, model.config, training,
                                                                               tokenizer), **kw)
        for rel in others:
            _link_tree(out / rel.rstrip("/"), stage / rel.rstrip("/"))
        with models_folder_lock(out.parent):
            _swap_into_place(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return out
