"""Checkpoints: one folder per model, safetensors and JSON only (no pickle anywhere).

    <name>/config.json        model config, tokenizer vocabulary, format version, training metadata
    <name>/model.safetensors  the weights
    <name>/README.md          the model card
    <name>/log.csv            step, train_loss, val_loss, tokens_per_s
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from core.fmt import md_escape
from core.model import ModelConfig, Transformer
from core.tokenizer import CharTokenizer

FORMAT_VERSION = 1
CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, LOG_FILE = "config.json", "model.safetensors", "README.md", "log.csv"
LOG_FIELDS = ["step", "train_loss", "val_loss", "tokens_per_s"]
MAX_WEIGHTS_BYTES = 512 * 1024 * 1024  # refuse absurd files before reading them
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}  # safetensors' names for the floating-point dtypes


class CheckpointError(Exception):
    """A checkpoint folder could not be loaded; the message names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def _read_config(folder: Path) -> dict:
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(path, "missing file (every checkpoint needs config.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CheckpointError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(path, f"bad JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise CheckpointError(path, "expected a JSON object at the top level")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(path, f"unknown format_version {version!r} (this app reads version {FORMAT_VERSION})")
    for key in ("model", "tokenizer"):
        if not isinstance(data.get(key), dict):
            raise CheckpointError(path, f"missing or malformed '{key}' entry")
    return data


def read_config(path) -> tuple[ModelConfig, CharTokenizer, dict]:
    """Validated (model config, tokenizer, training metadata) of a checkpoint folder, weights untouched."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(folder, "not a checkpoint folder (it does not exist or is a file)")
    data = _read_config(folder)
    cfg_path = folder / CONFIG_FILE
    try:
        config = ModelConfig(**data["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(cfg_path, f"invalid model config: {e}") from None
    try:
        tokenizer = CharTokenizer.from_dict(data["tokenizer"])
    except ValueError as e:
        raise CheckpointError(cfg_path, f"invalid tokenizer: {e}") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(
            cfg_path, f"tokenizer has {tokenizer.vocab_size} characters but the model expects vocab_size={config.vocab_size}"
        )
    training = data.get("training") or {}
    if not isinstance(training, dict):
        raise CheckpointError(cfg_path, "'training' must be a JSON object")
    return config, tokenizer, training


def check_checkpoint(path) -> tuple[ModelConfig, CharTokenizer, dict]:
    """Validate a checkpoint folder without reading its weights: the config, and the safetensors header
    (tensor names, shapes and dtypes against a model built on the meta device, which costs no memory).
    Returns what ``read_config`` returns; raises CheckpointError naming the file and the problem."""
    folder = Path(path)
    config, tokenizer, training = read_config(folder)
    wpath = folder / WEIGHTS_FILE
    if not wpath.is_file():
        raise CheckpointError(wpath, "missing file (the weights)")
    if wpath.stat().st_size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(wpath, f"file is larger than {MAX_WEIGHTS_BYTES // 2**20} MiB")
    try:
        with safe_open(str(wpath), framework="pt", device="cpu") as f:
            found = {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(wpath, f"not a readable safetensors file ({e})") from None
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:
        raise CheckpointError(wpath, f"missing tensors: {', '.join(missing[:5])}")
    if unexpected:
        raise CheckpointError(wpath, f"unexpected tensors: {', '.join(unexpected[:5])}")
    for name, (shape, dtype) in found.items():
        if shape != expected[name]:
            raise CheckpointError(wpath, f"shape mismatch for {name}: file has {shape}, config implies {expected[name]}")
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(wpath, f"{name} has dtype {dtype}, expected floating point")
    return config, tokenizer, training


def load_checkpoint(path) -> tuple[Transformer, CharTokenizer]:
    """Load and validate a checkpoint folder. Returns (model in eval mode, tokenizer).

    Raises CheckpointError naming the file and the problem: missing file, bad JSON, unknown version,
    invalid config, missing or unexpected tensors, shape mismatch, non-finite weights.
    """
    folder = Path(path)
    config, tokenizer, _ = check_checkpoint(folder)
    wpath = folder / WEIGHTS_FILE
    try:
        state = load_file(str(wpath), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(wpath, f"not a readable safetensors file ({e})") from None
    for name, tensor in state.items():
        if not torch.isfinite(tensor).all():
            raise CheckpointError(wpath, f"{name} holds non-finite values (NaN or infinity)")
    model = Transformer(config)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    model.eval().requires_grad_(False)
    return model, tokenizer


def save_checkpoint(path, model: Transformer, tokenizer: CharTokenizer, training: dict | None = None,
                    log: list[dict] | None = None, card: str | None = None, overwrite: bool = False) -> Path:
    """Write a checkpoint folder atomically: everything goes to a temporary folder beside the target,
    which is renamed into place only once complete, so a crash never leaves a half-written model."""
    folder = Path(path)
    if folder.exists() and not overwrite:
        raise FileExistsError(f"{folder} already exists")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError("tokenizer and model disagree on the vocabulary size")
    folder.parent.mkdir(parents=True, exist_ok=True)
    training = dict(training or {})
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes a private folder; a checkpoint is an ordinary readable one
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        config = {
            "format_version": FORMAT_VERSION,
            "model": model.config.to_dict(),
            "tokenizer": tokenizer.to_dict(),
            "training": training,
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        (tmp / LOG_FILE).write_text(format_log(log or []), encoding="utf-8")
        (tmp / CARD_FILE).write_text(card if card is not None else model_card(folder.name, model.config, training),
                                     encoding="utf-8")
        for f in tmp.iterdir():  # flush to disk before the rename makes the folder visible
            f.chmod(0o644)
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
            tmp.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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


def user_model_folder(models_dir, raw_name: str, protected=(), overwrite: bool = False) -> Path:
    """Where a user's model called ``raw_name`` is saved: always a direct child of ``models_dir``.
    Refuses (ValueError) a name that sanitises to nothing, one of the ``protected`` (shipped) names in any
    letter case, a folder outside models_dir (a symlink), and an existing folder unless ``overwrite``."""
    name = sanitise_model_name(raw_name)
    if name.casefold() in {p.casefold() for p in protected}:
        raise ValueError(f"'{name}' is the name of a shipped model; choose another name")
    base = Path(models_dir).resolve()
    folder = base / name
    if folder.resolve().parent != base:
        raise ValueError(f"'{name}' points outside {base}; choose another name")
    if folder.exists() and not overwrite:
        raise ValueError(f"you already have a model called '{name}'; choose another name or replace it")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"'{name}' exists in {base} and is not a model folder; choose another name")
    return folder


def checkpoint_zip(path) -> bytes:
    """The checkpoint folder as a zip archive in memory, files under '<name>/' so it unpacks to one folder."""
    folder = Path(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.iterdir()):
            if f.is_file() and not f.is_symlink():
                zf.write(f, arcname=f"{folder.name}/{f.name}")
    return buf.getvalue()


def format_log(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=LOG_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in LOG_FIELDS})
    return buf.getvalue()


def read_log(path) -> list[dict]:
    """Rows of a checkpoint's log.csv as dicts of floats (None where a value is absent); [] if no log."""
    lpath = Path(path) / LOG_FILE
    if not lpath.is_file():
        return []
    rows = []
    try:
        with open(lpath, newline="", encoding="utf-8") as fh:
            for raw in csv.DictReader(fh):
                row = {}
                for k in LOG_FIELDS:
                    value = (raw.get(k) or "").strip()
                    try:
                        row[k] = float(value) if value else None
                    except ValueError:
                        row[k] = None
                if row["step"] is not None:
                    rows.append(row)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CheckpointError(lpath, f"unreadable log: {e}") from None
    return rows


def read_card(path) -> str:
    cpath = Path(path) / CARD_FILE
    try:
        return cpath.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def model_card(name: str, config: ModelConfig, training: dict) -> str:
    """A short markdown card from the config and the training metadata."""
    from core.params import count_parameters  # local import: params imports model only

    counts = count_parameters(config)
    t = training

    def text(key, default="n/a"):
        # card fields can come from users (an upload's file name): escape them so the card, rendered as
        # Markdown for every session, cannot carry links, images or a broken table
        return md_escape(str(t.get(key, default))).replace("\n", " ")

    lines = [
        f"# {md_escape(name)}",
        "",
        "A character-level transformer trained by Transformer Explorer.",
        "",
        "| property | value |",
        "|---|---|",
        f"| architecture | d={config.d_model}, h={config.n_heads}, L={config.n_layers}, d_ff={config.d_ff}, "
        f"n_ctx={config.n_ctx}, vocabulary m={config.vocab_size} |",
        f"| parameters | {counts['per_block']:,} per block, {counts['total']:,} in total |",
        f"| data | {text('corpus')} ({_fmt(t.get('corpus_chars'), ',')} characters) |",
        f"| split | {text('split')} |",
        f"| steps | {_fmt(t.get('steps'), ',')} of batch {text('batch_size')} |",
        f"| tokens seen | {_fmt(t.get('tokens_seen'), ',')} |",
        f"| wall time | {_fmt(t.get('wall_time_s'), '.0f')} s |",
        f"| final train loss | {_fmt(t.get('train_loss'), '.4f')} nats/char |",
        f"| final validation loss | {_fmt(t.get('val_loss'), '.4f')} nats/char |",
    ]
    if t.get("val_loss_method"):
        lines.append(f"| validation loss measured as | {text('val_loss_method')} |")
    if t.get("source"):
        lines.append(f"| trained with | {text('source')} |")
    if t.get("stopped_early") and t.get("planned_steps"):
        lines.append(f"| stopped early | after {_fmt(t.get('steps'), ',')} of {_fmt(t['planned_steps'], ',')} planned steps |")
    if t.get("command"):  # inside a code fence Markdown is inert; only a fence in the text could end it
        lines += ["", "Reproduce with:", "", "```", str(t["command"]).replace("`", "'"), "```"]
    return "\n".join(lines) + "\n"


@dataclass
class ModelEntry:
    name: str
    path: Path
    shipped: bool
    error: str | None = None


def discover_models(shipped_dir, user_dir=None) -> list[ModelEntry]:
    """Every checkpoint folder under the shipped and user folders, each checked without reading its
    weights (``check_checkpoint``). A broken folder is listed with its error instead of hiding the others."""
    entries = []
    for base, shipped in ((shipped_dir, True), (user_dir, False)):
        if base is None:
            continue
        base = Path(base)
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            entry = ModelEntry(name=folder.name, path=folder, shipped=shipped)
            try:
                check_checkpoint(folder)  # config and weight header only: cheap enough for every rerun
            except CheckpointError as e:
                entry.error = str(e)
            entries.append(entry)
    return entries
