"""Checkpoints: one folder per model, safetensors and JSON only (no pickle anywhere).

    <name>/config.json        model config, tokenizer vocabulary, format version, training metadata
    <name>/model.safetensors  the weights
    <name>/README.md          the model card
    <name>/log.csv            step, train_loss, val_loss, tokens_per_s
    <name>/heads.csv          optional: every head's probe scores during training (core.induction)

config.json's top-level "owner" names who saved the model from the app (an opaque per-session id; null for a
model saved by the command line): one person cannot replace another's model (``user_model_folder``).

Replacing a model swaps two folders with two renames (``_swap_into_place``); a process killed between them
leaves the old model under ``.<name>.old``, which ``recover_interrupted_saves`` puts back.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import io
import json
import math
import os
import random
import re
import shutil
import tempfile
import threading
import time
import unicodedata
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

try:
    import fcntl
except ImportError:  # Windows: saves are serialised within the process only
    fcntl = None

from core.fmt import head_label, md_escape
from core.folder_files import (OutsideFolder, inside, is_inside, lstamp, open_inside, read_text_inside,
                               size_inside)
from core.safetensors_header import read_header
from core.induction import HEADS_CSV, parse_heads_csv, write_heads_csv
from core.hf import (PICKLE_SUFFIXES, config_from_hf, expected_shapes as hf_expected_shapes, file_prefix,
                     is_hf_config, relevant as hf_relevant, state_from_hf)
from core.model import ModelConfig, Transformer
from core.tokenizer import (MERGES_FILE, TOKENIZER_FILE, VOCAB_FILE, Tokenizer, hf_tokenizer, hf_tokenizer_files,
                            tokenizer_from_dict)

FORMAT_VERSION = 1
CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, LOG_FILE = "config.json", "model.safetensors", "README.md", "log.csv"
HEADS_FILE = HEADS_CSV  # per-head probe scores recorded during training (core.induction), when there are any
LOG_FIELDS = ["step", "train_loss", "val_loss", "tokens_per_s"]
MAX_WEIGHTS_BYTES = 512 * 1024 * 1024  # refuse absurd files before reading them
MAX_HF_WEIGHTS_BYTES = 2 * 1024**3     # a GPT-2 folder: small (0.5 GB in float32) and medium (1.4 GB) fit
MAX_CONFIG_BYTES = 1024 * 1024
TIED_NAME = "head.weight"  # a tied output map is the token embedding: saved once, under tok_emb.weight
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}  # safetensors' names for the floating-point dtypes


class CheckpointError(Exception):
    """A checkpoint folder could not be loaded; the message names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    @property
    def shown(self) -> str:
        """The message as a page shows it: the model folder and file, not where the server keeps its folders."""
        p = Path(self.path)
        where = p.name if p.suffix == "" and not p.parent.name else f"{p.parent.name}/{p.name}"
        return f"{where}: {self.problem}"


def _read_config(folder: Path) -> dict:
    """config.json as a JSON object (ours or a Hugging Face one); CheckpointError otherwise. Read only from inside
    the folder (core.folder_files): a config.json that links elsewhere is refused."""
    path = folder / CONFIG_FILE
    try:
        raw = read_text_inside(folder, CONFIG_FILE, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise CheckpointError(path, "missing file (every checkpoint needs config.json)") from None
    except UnicodeDecodeError:
        raise CheckpointError(path, "not UTF-8 text") from None
    except OSError as e:  # a link out of the folder, too large, unreadable
        raise CheckpointError(path, _os_problem(e)) from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise CheckpointError(path, f"bad JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:  # JSON nested thousands deep: the parser runs out of stack
        raise CheckpointError(path, "JSON nested too deeply to read") from None
    except ValueError as e:  # an integer of thousands of digits (past Python's int_max_str_digits), say
        words = "a number of thousands of digits" if "digits" in str(e) else str(e)[:120]
        raise CheckpointError(path, f"unreadable JSON: {words}") from None
    if not isinstance(data, dict):
        raise CheckpointError(path, "expected a JSON object at the top level")
    return data


def _os_problem(e: OSError) -> str:
    """An OSError in words, without the path the CheckpointError names already."""
    if isinstance(e, OutsideFolder):
        return str(e)
    return e.strerror or str(e) or type(e).__name__


def _refuse_pickles(folder: Path) -> None:
    """A folder without model.safetensors but with PyTorch's own weight files (pickles, which can run any code
    when opened) is refused by name; nothing is unpickled, ever. A sharded safetensors checkpoint is refused too."""
    if (folder / WEIGHTS_FILE).is_file():
        return
    pickles = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointError(pickles[0], "PyTorch pickle weights, which this app never opens (unpickling can run "
                              "any code). Convert the folder to safetensors where you trust the file, e.g. with "
                              "transformers: GPT2LMHeadModel.from_pretrained(folder).save_pretrained(folder), "
                              "which writes model.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        raise CheckpointError(index, "weights split over several safetensors files; this app reads one "
                              "model.safetensors (save the model again with a larger max_shard_size)")


@dataclass
class _Info:
    """What config.json (and the tokenizer files) of a checkpoint folder say, before any weights are read."""
    config: ModelConfig
    tokenizer: Tokenizer | None  # None when read without the tokenizer (discovery)
    training: dict
    owner: str | None
    hf: bool  # a Hugging Face GPT-2 folder rather than one of ours


def read_config(path) -> tuple[ModelConfig, Tokenizer, dict]:
    """Validated (model config, tokenizer, training metadata) of a checkpoint folder, weights untouched."""
    info = _read_all(Path(path))
    return info.config, info.tokenizer, info.training


def _read_all(folder: Path, with_tokenizer: bool = True) -> _Info:
    """One reading of config.json: ours or a Hugging Face GPT-2 one. ``with_tokenizer=False`` only checks
    that the tokenizer's files are there (discovery runs on every page load; parsing GPT-2's 50,257-token
    tokenizer each time would cost more than the rest)."""
    if not folder.is_dir():
        raise CheckpointError(folder, "not a checkpoint folder (it does not exist or is a file)")
    _refuse_pickles(folder)
    data = _read_config(folder)
    cfg_path = folder / CONFIG_FILE
    if is_hf_config(data):
        return _read_hf(folder, data, with_tokenizer)
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(cfg_path, f"unknown format_version {version!r} (this app reads version {FORMAT_VERSION}); "
                              "a Hugging Face folder's config.json names its model_type")
    for key in ("model", "tokenizer"):
        if not isinstance(data.get(key), dict):
            raise CheckpointError(cfg_path, f"missing or malformed '{key}' entry")
    try:
        config = ModelConfig(**data["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(cfg_path, f"invalid model config: {e}") from None
    tokenizer = None
    entry = data["tokenizer"]
    if with_tokenizer or entry.get("type") == "char":  # characters are in config.json itself: cheap
        try:
            tokenizer = tokenizer_from_dict(entry, folder)
        except ValueError as e:
            raise CheckpointError(cfg_path if entry.get("type") != "bpe" else folder / TOKENIZER_FILE,
                                  f"invalid tokenizer: {e}") from None
        if tokenizer.vocab_size != config.vocab_size:
            raise CheckpointError(cfg_path, f"tokenizer has {tokenizer.vocab_size} {tokenizer.units} but the model "
                                            f"expects vocab_size={config.vocab_size}")
    elif entry.get("type") == "bpe" and not (folder / TOKENIZER_FILE).is_file():
        raise CheckpointError(folder / TOKENIZER_FILE, "missing file (this model's tokenizer)")
    elif entry.get("type") not in ("char", "bpe"):
        raise CheckpointError(cfg_path, f"invalid tokenizer: unknown tokenizer type {entry.get('type')!r}")
    training = data.get("training") or {}
    if not isinstance(training, dict):
        raise CheckpointError(cfg_path, "'training' must be a JSON object")
    owner = data.get("owner")
    return _Info(config, tokenizer, training, owner if isinstance(owner, str) and owner else None, hf=False)


def _read_hf(folder: Path, data: dict, with_tokenizer: bool) -> _Info:
    cfg_path = folder / CONFIG_FILE
    try:
        config = config_from_hf(data)
    except (TypeError, ValueError) as e:
        raise CheckpointError(cfg_path, f"not a checkpoint this app can open: {e}") from None
    files = hf_tokenizer_files(folder)
    if not files:
        raise CheckpointError(folder / TOKENIZER_FILE, f"missing file: a GPT-2 folder needs its tokenizer, "
                                                       f"{TOKENIZER_FILE} or {VOCAB_FILE} and {MERGES_FILE}")
    tokenizer = None
    if with_tokenizer:
        try:
            tokenizer = hf_tokenizer(folder, vocab_size=config.vocab_size)
        except ValueError as e:
            raise CheckpointError(files[0], f"invalid tokenizer: {e}") from None
    training = {"source": "a Hugging Face GPT-2 folder"}
    return _Info(config, tokenizer, training, None, hf=True)


def check_checkpoint(path) -> tuple[ModelConfig, Tokenizer, dict]:
    """Validate a checkpoint folder without reading its weights: the config, and the safetensors header
    (tensor names, shapes and dtypes against a model built on the meta device, which costs no memory).
    Returns what ``read_config`` returns; raises CheckpointError naming the file and the problem."""
    info = _check(Path(path))
    return info.config, info.tokenizer, info.training


# What this server loads at most, checked from config.json and the weights header before anything is built: a
# config claiming 100,000 layers over a 1 MB file used to build a meta-device model of them first (248 s, 3.4 GB).
MAX_LOAD_LAYERS = 128         # GPT-3 175B has 96
MAX_LOAD_VOCAB = 262_144      # the largest vocabularies in use (Gemma's 256k)
MAX_LOAD_PARAMS = 1_000_000_000  # float32 in memory: 4 GB; GPT-2 large (774M) fits


def _size_problem(config: ModelConfig, weights_bytes: int, n_tensors: int) -> str | None:
    """Why a config cannot be what the weights file holds, or cannot be loaded here; None when it may be. Pure
    arithmetic on the config (core.params' count, no model built): every parameter takes at least 2 bytes
    (float16), and every layer holds at least one tensor of the header."""
    from core.params import count_parameters  # local import: params imports model only

    if config.n_layers > MAX_LOAD_LAYERS:
        return f"the config has {config.n_layers:,} layers; this server loads at most {MAX_LOAD_LAYERS}"
    if config.vocab_size > MAX_LOAD_VOCAB:
        return f"the config has a vocabulary of {config.vocab_size:,}; this server loads at most {MAX_LOAD_VOCAB:,}"
    if config.n_layers > n_tensors:
        return f"the config has {config.n_layers:,} layers but the weights file holds only {n_tensors:,} tensors"
    params = count_parameters(config)["total"]
    if params > MAX_LOAD_PARAMS:
        return f"the config describes {params:,} parameters; this server loads at most {MAX_LOAD_PARAMS:,}"
    if 2 * params > weights_bytes:
        return (f"the config describes {params:,} parameters, at least {2 * params:,} bytes of weights, but "
                f"{WEIGHTS_FILE} has {weights_bytes:,} bytes")
    return None


@functools.lru_cache(maxsize=64)
def _block_shapes(config: ModelConfig) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(shapes outside the blocks, shapes of block 0 without its 'blocks.0.' prefix) of a one-layer model built on
    the meta device (no memory, about 20 ms through torch's dispatch): every block has the same tensors, so a
    config's expected names cost the same for 2 layers or 96."""
    one = dataclasses.replace(config, n_layers=1)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in Transformer(one).state_dict().items()}
    outside = {k: v for k, v in shapes.items() if not k.startswith("blocks.")}
    block = {k[len("blocks.0."):]: v for k, v in shapes.items() if k.startswith("blocks.0.")}
    return outside, block


@functools.lru_cache(maxsize=64)
def _expected(config: ModelConfig) -> dict[str, tuple]:
    """Our tensor names and shapes for a config (a tied output map is stored once, as the embedding). Cached: the
    sidebar checks model folders on every page run. Callers must not change the returned dict."""
    outside, block = _block_shapes(config)
    shapes = dict(outside)
    for i in range(config.n_layers):
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    if config.tie_weights:
        del shapes[TIED_NAME]
    return shapes


def _check(folder: Path, with_tokenizer: bool = True) -> _Info:
    """check_checkpoint's reading, with the owner and the folder's kind (config.json is read once). The weights'
    header is read by core.safetensors_header (bounded in size and entries), from inside the folder only."""
    info = _read_all(folder, with_tokenizer)
    wpath = folder / WEIGHTS_FILE
    limit = MAX_HF_WEIGHTS_BYTES if info.hf else MAX_WEIGHTS_BYTES
    try:
        size = size_inside(folder, WEIGHTS_FILE)
    except FileNotFoundError:
        raise CheckpointError(wpath, "missing file (the weights)") from None
    except OSError as e:
        raise CheckpointError(wpath, _os_problem(e)) from None
    if size > limit:
        raise CheckpointError(wpath, f"file is larger than {limit // 2**20} MiB")
    try:
        found = read_header(folder, WEIGHTS_FILE)
    except ValueError as e:
        raise CheckpointError(wpath, f"not a readable safetensors file ({e})") from None
    except OSError as e:
        raise CheckpointError(wpath, _os_problem(e)) from None
    problem = _size_problem(info.config, size, len(found))
    if problem:
        raise CheckpointError(folder / CONFIG_FILE, problem)
    expected = _expected(info.config)
    if info.hf:
        found = {k: found[k] for k in hf_relevant(found, info.config)}
        expected = hf_expected_shapes(info.config, expected, file_prefix(found))
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:
        raise CheckpointError(wpath, f"missing tensors: {', '.join(missing[:5])}")
    if unexpected:
        raise CheckpointError(wpath, f"unexpected tensors: {', '.join(u[:80] for u in unexpected[:5])}")
    for name, (shape, dtype) in found.items():
        if shape != expected[name]:
            raise CheckpointError(wpath, f"shape mismatch for {name}: file has {shape}, config implies {expected[name]}")
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(wpath, f"{name} has dtype {dtype}, expected floating point")
    return info


def load_checkpoint(path) -> tuple[Transformer, Tokenizer]:
    """Load and validate a checkpoint folder: ours, or a Hugging Face GPT-2 folder (config.json with
    model_type gpt2, model.safetensors, tokenizer.json or vocab.json + merges.txt). Returns (model in eval
    mode, tokenizer).

    Raises CheckpointError naming the file and the problem: missing file, bad JSON, unknown version,
    invalid config, missing or unexpected tensors, shape mismatch, non-finite weights, pickle weights, a
    model type other than GPT-2 or custom code.
    """
    folder = Path(path)
    info = _check(folder)
    wpath = folder / WEIGHTS_FILE
    try:
        state = load_file(str(inside(folder, WEIGHTS_FILE)), device="cpu")  # the real file, checked to be inside
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(wpath, f"not a readable safetensors file ({e})") from None
    if info.hf:
        state = state_from_hf({k: state[k] for k in hf_relevant(state, info.config)}, info.config)
    for name, tensor in state.items():
        if not torch.isfinite(tensor).all():
            raise CheckpointError(wpath, f"{name} holds non-finite values (NaN or infinity)")
    config = info.config
    if config.tie_weights:
        state[TIED_NAME] = state["tok_emb.weight"]
    # built on the meta device and given the file's tensors: no random initialisation, no second copy
    with torch.device("meta"):
        model = Transformer(config)
    model.load_state_dict({k: v.float().contiguous() for k, v in state.items()}, assign=True)
    if config.tie_weights:  # assign=True gave each module its own Parameter: tie them again
        model.head.weight = model.tok_emb.weight
    model.eval().requires_grad_(False)
    return model, info.tokenizer


OWNER_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
STALE_TMP_S = 3600  # a temporary save folder this old belongs to no save still running


def check_owner(owner) -> str | None:
    """``owner`` unchanged if it is None or a short printable id (1 to 64 of A-Z a-z 0-9 '_' '-'); else ValueError."""
    if owner is None or (isinstance(owner, str) and OWNER_RE.fullmatch(owner)):
        return owner
    raise ValueError("a model owner must be 1 to 64 letters, digits, '_' or '-'")


def checkpoint_owner(path) -> str | None:
    """The owner recorded in a checkpoint folder's config.json; None when there is none or it cannot be read."""
    try:
        data = _read_config(Path(path))
    except CheckpointError:
        return None
    owner = data.get("owner")
    return owner if isinstance(owner, str) and owner else None


# Serialises, within this process (the Streamlit server, where every session is a thread), the folder swap of
# a save and the recovery of interrupted swaps, so that recovery never mistakes a swap in progress for one
# that was interrupted. Other processes (replicas of the app sharing one models folder) are serialised by
# _swap_lock's lock on the folder itself.
_SWAP_LOCK = threading.Lock()


@contextmanager
def _swap_lock(parent: Path):
    """Hold _SWAP_LOCK and, where the system allows it, an exclusive ``flock`` on the folder ``parent`` itself,
    so that processes sharing a models folder (replicas of the app, in containers on one host too, and the
    command line) never interleave a swap with another swap or a recovery. No lock file is created. Where the
    folder cannot be locked (Windows, a network file system without flock) only this process is serialised;
    a save is still atomic there, but a replica's recovery could then undo another replica's swap in progress
    and make that save fail (never leave a half-written model)."""
    with _SWAP_LOCK:
        fd = None
        if fcntl is not None:
            try:
                fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                if fd is not None:
                    os.close(fd)
                fd = None
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # closing the only descriptor releases the flock


def _remove_quietly(path: Path) -> None:
    """Remove a folder (or a link, never what it points to); failing is harmless to the caller."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def _restore_locked(parent: Path, name: str) -> bool:
    """Put ``parent/.<name>.old`` back as ``parent/<name>`` if a swap was interrupted between its two renames
    (the old folder is there and nothing is under the name). Caller holds _swap_lock. True if restored."""
    if not name or name.startswith(".") or "/" in name or os.sep in name:
        return False  # a plain, visible name only (the command line may save names the app would not choose)
    old, target = parent / f".{name}.old", parent / name
    if old.is_symlink() or not old.is_dir() or os.path.lexists(target):
        return False
    os.rename(old, target)
    return True


def _swap_into_place(tmp: Path, folder: Path) -> None:
    """Replace the complete folder ``folder`` by the complete folder ``tmp``. Caller holds _swap_lock.

    1. rename folder -> .<name>.old   (fails: nothing moved)
    2. rename tmp -> folder           (fails: the old folder is renamed back, and the error re-raised)
    3. remove .<name>.old             (fails: harmless, a leftover that the next replacement removes)
    Between 1 and 2 only the hidden name holds the model; a process killed there leaves exactly the state
    that ``recover_interrupted_saves`` (run by discover_models) and the next save to the same name undo."""
    old = folder.with_name(f".{folder.name}.old")
    if os.path.lexists(old):  # left by a replacement whose step 3 failed; ``folder`` is complete
        _remove_quietly(old)
    os.rename(folder, old)
    try:
        os.rename(tmp, folder)
    except BaseException:
        try:
            os.rename(old, folder)
        except OSError:
            pass  # still recoverable: .<name>.old with nothing under the name
        raise
    _remove_quietly(old)


def recover_interrupted_saves(models_dir, stale_tmp_s: float = STALE_TMP_S) -> list[str]:
    """Undo what a process killed in the middle of a save left in ``models_dir``, a folder that holds only
    models (the app's user folder; not an arbitrary parent folder such as a command-line --out's):

    * every folder ``.<name>.old`` with nothing called ``<name>`` beside it is renamed back to ``<name>``
      (a replacement killed between its two renames);
    * every temporary folder ``.<name>.<random>.tmp`` not modified for ``stale_tmp_s`` seconds (an hour by
      default) is removed. Younger ones are kept: they may belong to a save still writing, in another thread
      or process, and a save takes seconds.

    Links are never followed, renamed or removed through: only real folders directly inside ``models_dir``
    are touched. Errors on one entry are ignored. Returns the restored names."""
    base = Path(models_dir)
    restored: list[str] = []
    if not base.is_dir():
        return restored
    now = time.time()
    with _swap_lock(base):
        try:
            entries = list(os.scandir(base))
        except OSError:
            return restored
        for entry in entries:
            try:
                if not entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                if entry.name.endswith(".old"):
                    name = entry.name[1:-len(".old")]
                    if _restore_locked(base, name):
                        restored.append(name)
                elif re.fullmatch(r"\..+\.[A-Za-z0-9_]+\.tmp", entry.name):
                    if now - entry.stat(follow_symlinks=False).st_mtime > stale_tmp_s:
                        shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue
    return restored


def save_checkpoint(path, model: Transformer, tokenizer: Tokenizer, training: dict | None = None,
                    log: list[dict] | None = None, card: str | None = None, overwrite: bool = False,
                    owner: str | None = None, heads: list[dict] | None = None) -> Path:
    """Write a checkpoint folder atomically: everything goes to a temporary folder beside the target,
    which is renamed into place only once complete, so a crash never leaves a half-written model.

    ``owner`` (None, or an id accepted by ``check_owner``) is recorded in config.json. Replacing an existing
    folder (``overwrite``) keeps the old model until the new one is in place (``_swap_into_place``); with an
    ``owner``, a folder recorded as someone else's is never replaced (ValueError). A replacement of this same
    folder that was killed half-way is undone first."""
    folder = Path(path)
    check_owner(owner)
    if folder.parent.is_dir():
        with _swap_lock(folder.parent):
            try:
                _restore_locked(folder.parent, folder.name)
            except OSError:
                pass
    if folder.exists() and not overwrite:
        raise FileExistsError(f"{folder} already exists")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError("tokenizer and model disagree on the vocabulary size")
    folder.parent.mkdir(parents=True, exist_ok=True)
    training = dict(training or {})
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes a private folder; a checkpoint is an ordinary readable one
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()
                 if not (model.config.tie_weights and k == TIED_NAME)}  # a tied matrix is stored once
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        for name, text in tokenizer.files().items():  # a BPE's tokenizer.json; nothing for characters
            (tmp / name).write_text(text, encoding="utf-8")
        config = {
            "format_version": FORMAT_VERSION,
            "model": model.config.to_dict(),
            "tokenizer": tokenizer.to_dict(),
            "training": training,
            "owner": owner,
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        (tmp / LOG_FILE).write_text(format_log(log or []), encoding="utf-8")
        if heads:
            write_heads_csv(tmp / HEADS_FILE, heads)
        (tmp / CARD_FILE).write_text(card if card is not None else model_card(folder.name, model.config, training,
                                                                                    tokenizer),
                                     encoding="utf-8")
        for f in tmp.iterdir():  # flush to disk before the rename makes the folder visible
            f.chmod(0o644)
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        with _swap_lock(folder.parent):  # checked again here: another save (thread or process) may have finished
            twin = same_name(folder.parent, folder.name)
            if twin != folder.name:  # saved meanwhile under the same name in other letters
                raise FileExistsError(f"{folder.parent / twin} already exists (the same name as {folder.name})")
            if os.path.lexists(folder):
                if not overwrite:
                    raise FileExistsError(f"{folder} already exists")
                if owner is not None and checkpoint_owner(folder) != owner:
                    raise ValueError(_someone_elses(folder.name))
                _swap_into_place(tmp, folder)
            else:
                try:
                    os.rename(tmp, folder)
                except OSError as e:  # made meanwhile by a process that _swap_lock could not hold off
                    if os.path.lexists(folder):
                        raise FileExistsError(f"{folder} already exists") from e
                    raise
    except BaseException:
        _remove_quietly(tmp)
        raise
    return folder


MAX_NAME_CHARS = 64


def sanitise_model_name(raw: str) -> str:
    """A folder name made from what the user typed: ASCII letters, digits, '-', '_' and '.' only (anything
    else, path separators included, becomes '-'), no leading dot, at most MAX_NAME_CHARS. ValueError if nothing
    usable is left."""
    # accents fall away ('é' -> 'e'); other non-ASCII letters are dropped
    name = unicodedata.normalize("NFKD", raw or "").encode("ascii", "ignore").decode("ascii").strip()
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name)   # '/', '\\', spaces, ':' ... all become '-'
    name = re.sub(r"-{2,}", "-", name).strip("-._")[:MAX_NAME_CHARS].strip("-._")
    if not name:
        raise ValueError("give the model a name made of letters, digits, '-', '_' or '.'")
    return name


def name_key(name: str) -> str:
    """What makes two model names the same name: letter case and Unicode's compatibility forms do not count
    ('case-Test', 'CASE-test'; a folder another tool made with an 'ﬁ' ligature and one with 'fi')."""
    return unicodedata.normalize("NFKC", name).casefold()


def same_name(models_dir, name: str) -> str:
    """The name of the folder in ``models_dir`` that is the same name as ``name`` (``name_key``), spelled as it
    already is on disk; ``name`` itself when there is none."""
    key = name_key(name)
    try:
        with os.scandir(models_dir) as it:
            for e in it:
                if not e.name.startswith(".") and e.name != name and name_key(e.name) == key:
                    return e.name
    except OSError:
        pass
    return name


def _someone_elses(name: str) -> str:
    return f"a model called '{name}' already exists and belongs to someone else; choose another name"


def user_model_folder(models_dir, raw_name: str, protected=(), overwrite: bool = False,
                      owner: str | None = None, heads: list[dict] | None = None) -> Path:
    """Where a user's model called ``raw_name`` is saved: always a direct child of ``models_dir``.
    Refuses (ValueError) a name that sanitises to nothing, one of the ``protected`` (shipped) names in any
    letter case, a folder outside models_dir (a symlink), a bad ``owner`` (see ``check_owner``), an existing
    folder recorded as someone else's even with ``overwrite`` (a model with no recorded owner, saved by the
    command line, belongs to no one who passes an owner), and any other existing folder unless ``overwrite``."""
    name = sanitise_model_name(raw_name)
    check_owner(owner)
    if name_key(name) in {name_key(p) for p in protected}:
        raise ValueError(f"'{name}' is the name of a shipped model; choose another name")
    base = Path(models_dir).resolve()
    name = same_name(base, name)
    folder = base / name
    if folder.resolve().parent != base:
        raise ValueError(f"'{name}' points outside {base}; choose another name")
    if os.path.lexists(folder):
        if folder.is_symlink() or not folder.is_dir():
            raise ValueError(f"'{name}' exists in {base} and is not a model folder; choose another name")
        if checkpoint_owner(folder) != owner:
            raise ValueError(_someone_elses(name))
        if not overwrite:
            raise ValueError(f"you already have a model called '{name}'; choose another name or replace it")
    return folder


def default_model_name(corpus_name: str, now: datetime | None = None, rng: random.Random | None = None) -> str:
    """A default name to save a model under, unlikely to be anyone else's: a short slug of the corpus name
    (its extension dropped, at most 20 characters of a-z, 0-9 and '-'; "model" when nothing is left), then
    month-day, hour-minute and 4 random hex digits, e.g. ``shakespeare-1130-0912-7f3a``. ``sanitise_model_name``
    leaves it unchanged."""
    base = re.split(r"[\\/]", corpus_name or "")[-1]
    base = re.sub(r"\.[A-Za-z0-9]{1,5}$", "", base)  # 'shakespeare.txt' -> 'shakespeare'
    slug = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")[:20].strip("-") or "model"
    now = now or datetime.now()
    rng = rng or random.SystemRandom()
    return f"{slug}-{now:%m%d-%H%M}-{rng.getrandbits(16):04x}"


def checkpoint_zip(path) -> bytes:
    """The checkpoint folder as a zip archive in memory, files under '<name>/' so it unpacks to one folder."""
    folder = Path(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.iterdir()):
            if f.is_symlink() or not f.is_file():
                continue  # links are never packed, not even to a file of the folder
            try:
                with open_inside(folder, f.name) as fh:
                    zf.writestr(f"{folder.name}/{f.name}", fh.read())
            except OSError:
                continue  # gone or refused meanwhile
    return buf.getvalue()


def format_log(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=LOG_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in LOG_FIELDS})
    return buf.getvalue()


MAX_LOG_BYTES = 32 * 2**20    # log.csv and heads.csv: a long run's are a few MB


def _read_inside(path, name: str, max_bytes: int, what: str) -> str | None:
    """The text of a model folder's file ``name`` (core.folder_files: never through a link out of the folder);
    None when there is no such file; CheckpointError naming ``what`` when it cannot be read."""
    folder = Path(path)
    try:
        return read_text_inside(folder, name, max_bytes)
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CheckpointError(folder / name, f"unreadable {what}: not UTF-8 text") from None
    except OSError as e:
        raise CheckpointError(folder / name, f"unreadable {what}: {_os_problem(e)}") from None


def read_log(path) -> list[dict]:
    """Rows of a checkpoint's log.csv as dicts of floats (None where a value is absent); [] if no log."""
    text = _read_inside(path, LOG_FILE, MAX_LOG_BYTES, "log")
    if text is None:
        return []
    rows = []
    try:
        for raw in csv.DictReader(io.StringIO(text, newline="")):
            row = {}
            for k in LOG_FIELDS:
                value = (raw.get(k) or "").strip()
                try:
                    row[k] = float(value) if value else None
                except ValueError:
                    row[k] = None
            if row["step"] is not None:
                rows.append(row)
    except csv.Error as e:
        raise CheckpointError(Path(path) / LOG_FILE, f"unreadable log: {e}") from None
    return rows


def read_heads(path) -> list[dict] | None:
    """Rows of a checkpoint's heads.csv (core.induction.parse_heads_csv); None when the model has none."""
    text = _read_inside(path, HEADS_FILE, MAX_LOG_BYTES, "head scores")
    if text is None:
        return None
    try:
        return parse_heads_csv(text)
    except (csv.Error, ValueError) as e:
        raise CheckpointError(Path(path) / HEADS_FILE, f"unreadable head scores: {e}") from None


def read_training(path) -> dict:
    """The training metadata in a checkpoint's config.json ({} when there is none or it cannot be read); no
    tokenizer is built, so a page may call it on every run."""
    try:
        data = _read_config(Path(path))
    except CheckpointError:
        return {}
    training = data.get("training")
    return training if isinstance(training, dict) else {}


MAX_CARD_BYTES = 2**20


def read_card(path) -> str:
    """The model card's Markdown; "" when the folder has none. CheckpointError when it is there but cannot be read
    (a link out of the folder, not UTF-8, over MAX_CARD_BYTES)."""
    return _read_inside(path, CARD_FILE, MAX_CARD_BYTES, "model card") or ""


def weights_size(path) -> int:
    """The size of a checkpoint's weights file in bytes; 0 when it is gone (replaced meanwhile) or refused."""
    try:
        return size_inside(Path(path), WEIGHTS_FILE)
    except OSError:
        return 0


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _recipe(tc) -> str:
    """The optimiser and schedule of a training record's train_config, in words."""
    if not isinstance(tc, dict):
        return "n/a"
    opt = {"muon": "Muon (block matrices) + AdamW", "adamw": "AdamW"}.get(tc.get("optimizer", "adamw"), "n/a")
    sched = {"wsd": "warmup, constant, linear cooldown", "cosine": "warmup, cosine decay"}.get(
        tc.get("schedule", "cosine"), "n/a")
    return md_escape(f"{opt}; {sched}; peak lr {tc.get('lr')}" + (f", Muon {tc.get('muon_lr')}" if tc.get("optimizer") == "muon" else ""))


def model_card(name: str, config: ModelConfig, training: dict, tokenizer: Tokenizer | None = None) -> str:
    """A short markdown card from the config, the training metadata and (when given) the tokenizer."""
    from core.params import count_parameters  # local import: params imports model only

    counts = count_parameters(config)
    t = training

    def text(key, default="n/a"):
        # card fields can come from users (an upload's file name): escape them so the card, rendered as
        # Markdown for every session, cannot carry links, images or a broken table
        return md_escape(str(t.get(key, default))).replace("\n", " ")

    char_model = tokenizer.kind == "char" if tokenizer is not None else t.get("tokenizer", "char") == "char"
    per = "char" if char_model else "token"  # the losses are per token of the model's own tokenizer
    lines = [
        f"# {md_escape(name)}",
        "",
        "A character-level transformer trained by Transformer Explorer." if char_model
        else f"A transformer over {md_escape(tokenizer.describe() if tokenizer is not None else 'sub-word tokens')} "
             "trained by Transformer Explorer.",
        "",
        "| property | value |",
        "|---|---|",
        f"| architecture | d={config.d_model}, h={config.n_heads}, L={config.n_layers}, d_ff={config.d_ff}, "
        f"n_ctx={config.n_ctx}{'' if char_model else ' tokens'}, vocabulary m={config.vocab_size} |",
        f"| parameters | {counts['per_block']:,} per block, {counts['total']:,} in total |",
    ]
    if not char_model:
        what = md_escape(tokenizer.describe()) if tokenizer is not None else text("tokenizer_description")
        lines.append(f"| tokenizer | {what}, learned from the training part only (saved as tokenizer.json) |")
        lines.append(f"| characters per token | {_fmt(t.get('val_chars_per_token'), '.3f')} on average over the "
                     f"held-out part |")
    lines += [
        f"| data | {text('corpus')} ({_fmt(t.get('corpus_chars'), ',')} characters) |",
        f"| split | {text('split')} |",
        f"| steps | {_fmt(t.get('steps'), ',')} of batch {text('batch_size')} |",
        f"| recipe | {_recipe(t.get('train_config'))} |",
        f"| tokens seen | {_fmt(t.get('tokens_seen'), ',')} |",
        f"| wall time | {_fmt(t.get('wall_time_s'), '.0f')} s |",
        f"| final train loss | {_fmt(t.get('train_loss'), '.4f')} nats/{per} |",
        f"| final validation loss | {_fmt(t.get('val_loss'), '.4f')} nats/{per} |",
    ]
    bits = t.get("val_bits_per_char")
    if bits is None and char_model and isinstance(t.get("val_loss"), (int, float)):
        bits = t["val_loss"] / math.log(2)  # one token per character: nats/char over ln 2
    if bits is not None:
        lines.append(f"| validation bits per character | {_fmt(bits, '.4f')} (comparable across tokenizers) |")
    if t.get("val_loss_method"):
        lines.append(f"| validation loss measured as | {text('val_loss_method')} |")
    tc = t.get("train_config") if isinstance(t.get("train_config"), dict) else {}
    if tc.get("repeat_fraction") or tc.get("repeat_first_steps"):
        lines.append(f"| repeat mixture | {_repeats(tc, 'characters' if char_model else 'tokens')} |")
    cmp = t.get("compared_to")
    if isinstance(cmp, dict) and isinstance(cmp.get("val_loss"), (int, float)):
        lines.append(f"| against plain text | validation loss {_fmt(t.get('val_loss'), '.4f')} vs "
                     f"{_fmt(cmp['val_loss'], '.4f')} for {md_escape(str(cmp.get('model', '?')))} (no repeats), "
                     f"a difference of {_fmt(cmp.get('difference'), '+.4f')} nats/{per} |")
    if isinstance(t.get("induction"), dict):
        lines.append(f"| induction head | {_induction(t['induction'])} |")
    if t.get("source"):
        lines.append(f"| trained with | {text('source')} |")
    if t.get("stopped_early") and t.get("planned_steps"):
        lines.append(f"| stopped early | after {_fmt(t.get('steps'), ',')} of {_fmt(t['planned_steps'], ',')} planned steps |")
    if t.get("note"):
        lines.append(f"| note | {text('note')} |")
    if t.get("command"):  # inside a code fence Markdown is inert; only a fence in the text could end it
        lines += ["", "Reproduce with:", "", "```", str(t["command"]).replace("`", "'"), "```"]
    return "\n".join(lines) + "\n"


def _repeats(tc: dict, units: str = "characters") -> str:
    parts = []
    if tc.get("repeat_first_steps"):
        parts.append(f"every row for the first {_fmt(tc['repeat_first_steps'], ',')} steps")
    if tc.get("repeat_fraction"):
        parts.append(f"{_fmt(100 * tc['repeat_fraction'], '.0f')}% of rows after that" if parts
                     else f"{_fmt(100 * tc['repeat_fraction'], '.0f')}% of rows")
    span = f"{_fmt(tc.get('repeat_min_span'), 'd')}-{_fmt(tc.get('repeat_max_span'), 'd')}"
    return (", ".join(parts) + f" hold a span of {span} random {units} written again at a random later place "
            "(see heads.csv)")


def _induction(s: dict) -> str:
    try:
        layer, head = (int(v) for v in s["best_head"])
        text = (f"{head_label(layer, head)} (counted from 1): induction score {float(s['best_induction']):.2f} at step "
                f"{int(s['measured_at_step']):,}")
        formed = s.get("formed_at_step")
        text += (f"; crossed {float(s['threshold']):.2f} at step {int(formed):,}" if formed is not None
                 else f"; never reached {float(s['threshold']):.2f}")
        if s.get("first_copy_loss") is not None:
            text += (f"; probe loss {float(s['first_copy_loss']):.2f} nats on a first copy, "
                     f"{float(s['second_copy_loss']):.2f} on the second")
        return text
    except (KeyError, TypeError, ValueError):
        return "n/a"


@dataclass
class ModelEntry:
    name: str
    path: Path
    shipped: bool
    error: str | None = None
    owner: str | None = None  # who saved it from the app (config.json's "owner"); None if no one recorded
    hf: bool = False  # a Hugging Face GPT-2 folder (read as it is; never written by this app)


MAX_MODEL_FOLDERS = 200   # folders read per models folder; past that the picker says how many were left out
RECOVER_EVERY_S = 60.0    # recovery of interrupted saves: when the folder changed, else at most this often
# Discovery runs on every page run of every session: each folder's check is kept for as long as nothing in the
# folder changes (core.folder_files.lstamp: names, inodes, sizes, times), so a folder is read once, not per run.
# A folder of 1,000 broken models, or one with a 54 MB weights header, then costs a stat per file and run.
_SEEN: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()  # (path, shipped) -> (stamp, entry)
_SEEN_LOCK = threading.Lock()
_RECOVERED: dict[str, tuple] = {}  # models folder -> (its stamp, time) of the last recovery


def discover_models(shipped_dir, user_dir=None) -> list[ModelEntry]:
    """Every checkpoint folder under the shipped and user folders, each checked without reading its
    weights (``check_checkpoint``). A broken folder is listed with its error instead of hiding the others;
    any failure to read one (even an unexpected one) stays that folder's error. A folder that is a link is
    listed only if it leads to a folder inside the same models folder. At most MAX_MODEL_FOLDERS per models
    folder are read; an entry with an error says how many more were left out. Saves into the user folder that
    were killed half-way are undone first (``recover_interrupted_saves``)."""
    if user_dir is not None:
        _recover_now_and_then(Path(user_dir))
    entries = []
    for base, shipped in ((shipped_dir, True), (user_dir, False)):
        if base is None:
            continue
        base = Path(base)
        try:
            with os.scandir(base) as it:  # d_type from the listing: no stat per entry
                names = sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
        except OSError:
            continue
        for name in names[:MAX_MODEL_FOLDERS]:
            entry = _discovered(base / name, shipped, base)
            if entry is not None:
                entries.append(entry)
        if len(names) > MAX_MODEL_FOLDERS:
            left = len(names) - MAX_MODEL_FOLDERS
            entries.append(ModelEntry(name=f"({left:,} more folders)", path=base, shipped=shipped,
                                      error=f"{base.name} holds {len(names):,} folders; the picker reads the first "
                                            f"{MAX_MODEL_FOLDERS} by name and left {left:,} out"))
    return entries


def _recover_now_and_then(user_dir: Path) -> None:
    """``recover_interrupted_saves`` when the folder's own entries changed since the last time (a killed save
    leaves a renamed folder, which changes them) or RECOVER_EVERY_S has passed (old temporary folders)."""
    try:
        st = os.stat(user_dir)
    except OSError:
        return
    key, stamp, now = str(user_dir), (st.st_ino, st.st_mtime_ns), time.monotonic()
    last = _RECOVERED.get(key)
    if last is not None and last[0] == stamp and now - last[1] < RECOVER_EVERY_S:
        return
    try:
        recover_interrupted_saves(user_dir)
        st = os.stat(user_dir)  # recovery may have renamed something itself
        _RECOVERED[key] = ((st.st_ino, st.st_mtime_ns), now)
    except OSError:
        pass


def _discovered(folder: Path, shipped: bool, base: Path | None = None, tries: int = 3) -> ModelEntry | None:
    """``folder``'s entry, checked, or the one kept from the last check while the folder has not changed.
    Another replica may replace the folder while it is read (a save swaps a whole new folder in under the name): a
    file that vanished mid-check means "read it again", and a folder that is gone is not listed. None when it is
    gone."""
    if base is not None and folder.is_symlink() and not is_inside(folder, base):
        return ModelEntry(name=folder.name, path=folder, shipped=shipped,
                          error=f"{folder.name} is a link to a folder outside {base.name}; this app lists only "
                                "folders inside the models folder")
    for _ in range(tries):
        try:
            stamp = lstamp(folder)
        except FileNotFoundError:
            return None
        except OSError as e:
            return ModelEntry(name=folder.name, path=folder, shipped=shipped, error=f"{folder.name}: {_os_problem(e)}")
        key = (str(folder), shipped)
        with _SEEN_LOCK:
            seen = _SEEN.get(key)
            if seen is not None and seen[0] == stamp:
                _SEEN.move_to_end(key)
                return dataclasses.replace(seen[1])  # a copy: callers may not change the shared one
        entry = _check_entry(folder, shipped)
        if entry is None:
            continue  # a file vanished mid-check: the folder is being replaced, read it again
        try:
            if lstamp(folder) != stamp:
                continue  # changed while it was checked: what was read may mix two versions
        except OSError:
            return None
        with _SEEN_LOCK:
            _SEEN[key] = (stamp, entry)
            while len(_SEEN) > 4 * MAX_MODEL_FOLDERS:
                _SEEN.popitem(last=False)
        return dataclasses.replace(entry)
    return ModelEntry(name=folder.name, path=folder, shipped=shipped,
                      error="it was being replaced while this page read it; it will be listed again on the next page run")


def _check_entry(folder: Path, shipped: bool) -> ModelEntry | None:
    """One check of ``folder`` (config and weight header only): its entry, with the reason when it cannot be
    loaded; None when a file vanished while it was read."""
    entry = ModelEntry(name=folder.name, path=folder, shipped=shipped)
    try:
        info = _check(folder, with_tokenizer=False)
        entry.owner, entry.hf = info.owner, info.hf
    except CheckpointError as e:
        entry.error = e.shown
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - one odd folder must never break the picker for everyone
        entry.error = f"{folder.name}: could not be read ({type(e).__name__}: {str(e)[:200]})"
    return entry
