"""Checkpoints: one folder per model, safetensors and JSON only (no pickle anywhere).

    <name>/config.json        model config, tokenizer vocabulary, format version, training metadata
    <name>/model.safetensors  the weights
    <name>/README.md          the model card
    <name>/log.csv            step, train_loss, val_loss, tokens_per_s
    <name>/heads.csv          optional: every head's probe scores during training (core.analysis.induction)

This module reads and checks a folder (``load_checkpoint``, ``check_checkpoint``, ``CheckpointError``). The rest
lives in modules that build on this one (import each name from its module):

    core.nn.model_card       README.md, log.csv and heads.csv: written at a save, read back by the pages
    core.nn.model_store      owners, names, the lock and the atomic save and replace, recovery of killed saves
    core.nn.model_discovery  the models folders' listing for the picker, each folder checked once per change
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from core.serve.folder_files import OutsideFolder, inside, read_text_inside, size_inside
from core.nn.safetensors_header import read_header
from core.nn.hf import (PICKLE_SUFFIXES, config_from_hf, expected_shapes as hf_expected_shapes, file_prefix,
                     is_hf_config, relevant as hf_relevant, state_from_hf)
from core.nn.config import ModelConfig
from core.nn.model import Transformer
from core.nn.meta import meta_transformer
from core.nn.snapshots import SNAPSHOT_DIR, checkpoint_steps, snapshot_folder, snapshot_name
from core.nn.bpe import MERGES_FILE, TOKENIZER_FILE, VOCAB_FILE, hf_tokenizer, hf_tokenizer_files
from core.nn.tokenizer_base import Tokenizer
from core.nn.tokenizer import tokenizer_from_dict
from core.nn.params import count_parameters

FORMAT_VERSION = 1  # config.json's "format_version": bumped when a change would make old readers misread a folder
CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, LOG_FILE = "config.json", "model.safetensors", "README.md", "log.csv"
MAX_WEIGHTS_BYTES = 512 * 1024 * 1024  # refuse absurd files before reading them (the shipped models': under 1 MB)
MAX_HF_WEIGHTS_BYTES = 2 * 1024**3     # a GPT-2 folder: small (0.5 GB in float32) and medium (1.4 GB) fit
MAX_CONFIG_BYTES = 1024 * 1024  # ours are about 3 KB; the bound keeps a hostile file from filling memory
TIED_NAME = "head.weight"  # a tied output map is the token embedding: saved once, under tok_emb.weight
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}  # safetensors' names for the floating-point dtypes


class CheckpointError(Exception):
    """A checkpoint folder could not be loaded; the message names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)  # kept apart from the problem: pages show the folder's name, not the server's path
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    @property
    def shown(self) -> str:
        """The message as a page shows it: the model folder and file, not where the server keeps its folders."""
        p = Path(self.path)
        # a bare folder name is shown as it is; any other path by its last two parts (folder/file)
        where = p.name if p.suffix == "" and not p.parent.name else f"{p.parent.name}/{p.name}"
        return f"{where}: {self.problem}"


def _read_config(folder: Path) -> dict:
    """config.json as a JSON object (ours or a Hugging Face one); CheckpointError otherwise. Read only from inside
    the folder (core.serve.folder_files): a config.json that links elsewhere is refused."""
    path = folder / CONFIG_FILE
    # bounded and through core.serve.folder_files: a link to /proc/self/environ, or a 10 GB file, is never read
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
    if not isinstance(data, dict):  # every reader below calls data.get(...): a list or a number would crash them
        raise CheckpointError(path, "expected a JSON object at the top level")
    return data


def _os_problem(e: OSError) -> str:
    """An OSError in words, without the path the CheckpointError names already."""
    if isinstance(e, OutsideFolder):  # its own message says why the file was refused
        return str(e)
    return e.strerror or str(e) or type(e).__name__


def _refuse_pickles(folder: Path) -> None:
    """A folder without model.safetensors but with PyTorch's own weight files (pickles, which can run any code
    when opened) is refused by name; nothing is unpickled, ever. A sharded safetensors checkpoint is refused too."""
    if (folder / WEIGHTS_FILE).is_file():
        return  # Hugging Face folders often ship both; the safetensors file is read and the pickle ignored
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
    _refuse_pickles(folder)  # first: a PyTorch folder's config.json reads fine, the problem to name is its weights
    data = _read_config(folder)
    cfg_path = folder / CONFIG_FILE
    if is_hf_config(data):
        return _read_hf(folder, data, with_tokenizer)
    version = data.get("format_version")
    if version != FORMAT_VERSION:  # a newer app's folder: refuse rather than guess at fields it may have changed
        raise CheckpointError(cfg_path, f"unknown format_version {version!r} (this app reads version {FORMAT_VERSION}); "
                              "a Hugging Face folder's config.json names its model_type")
    for key in ("model", "tokenizer"):  # checked before use: ModelConfig(**x) needs a dict, not a string
        if not isinstance(data.get(key), dict):
            raise CheckpointError(cfg_path, f"missing or malformed '{key}' entry")
    try:
        config = ModelConfig(**data["model"])  # ModelConfig checks its own fields (d_model % n_heads, sizes > 0)
    except (TypeError, ValueError) as e:  # TypeError: a field it does not know
        raise CheckpointError(cfg_path, f"invalid model config: {e}") from None
    tokenizer = None
    entry = data["tokenizer"]
    if with_tokenizer or entry.get("type") == "char":  # characters are in config.json itself: cheap
        try:
            tokenizer = tokenizer_from_dict(entry, folder)
        except ValueError as e:  # a BPE's vocabulary is in its own file: name that file, not config.json
            raise CheckpointError(cfg_path if entry.get("type") != "bpe" else folder / TOKENIZER_FILE,
                                  f"invalid tokenizer: {e}") from None
        if tokenizer.vocab_size != config.vocab_size:  # else some ids would fall outside one of the two
            raise CheckpointError(cfg_path, f"tokenizer has {tokenizer.vocab_size} {tokenizer.units} but the model "
                                            f"expects vocab_size={config.vocab_size}")
    elif entry.get("type") == "bpe" and not (folder / TOKENIZER_FILE).is_file():
        raise CheckpointError(folder / TOKENIZER_FILE, "missing file (this model's tokenizer)")
    elif entry.get("type") not in ("char", "bpe"):
        raise CheckpointError(cfg_path, f"invalid tokenizer: unknown tokenizer type {entry.get('type')!r}")
    training = data.get("training") or {}  # absent or null means none: the card then says "n/a"
    if not isinstance(training, dict):
        raise CheckpointError(cfg_path, "'training' must be a JSON object")
    owner = data.get("owner")  # anything but a non-empty string means no owner: such a folder is no one's to replace
    return _Info(config, tokenizer, training, owner if isinstance(owner, str) and owner else None, hf=False)


def _read_hf(folder: Path, data: dict, with_tokenizer: bool) -> _Info:
    cfg_path = folder / CONFIG_FILE
    try:
        config = config_from_hf(data)  # refuses other model types and custom code (core.nn.hf): nothing is executed
    except (TypeError, ValueError) as e:
        raise CheckpointError(cfg_path, f"not a checkpoint this app can open: {e}") from None
    files = hf_tokenizer_files(folder)
    if not files:
        raise CheckpointError(folder / TOKENIZER_FILE, f"missing file: a GPT-2 folder needs its tokenizer, "
                                                       f"{TOKENIZER_FILE} or {VOCAB_FILE} and {MERGES_FILE}")
    tokenizer = None
    if with_tokenizer:  # GPT-2's 50,257 tokens take long to parse: discovery only checks the files are there
        try:
            tokenizer = hf_tokenizer(folder, vocab_size=config.vocab_size)
        except ValueError as e:
            raise CheckpointError(files[0], f"invalid tokenizer: {e}") from None
    training = {"source": "a Hugging Face GPT-2 folder"}  # the model card's "trained with" row
    return _Info(config, tokenizer, training, None, hf=True)  # no owner: the app never writes such a folder


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
    arithmetic on the config (core.nn.params' count, no model built): every parameter takes at least 2 bytes
    (float16), and every layer holds at least one tensor of the header."""
    if config.n_layers > MAX_LOAD_LAYERS:
        return f"the config has {config.n_layers:,} layers; this server loads at most {MAX_LOAD_LAYERS}"
    if config.vocab_size > MAX_LOAD_VOCAB:
        return f"the config has a vocabulary of {config.vocab_size:,}; this server loads at most {MAX_LOAD_VOCAB:,}"
    if config.n_layers > n_tensors:  # free to check, and it catches a config edited to claim more blocks
        return f"the config has {config.n_layers:,} layers but the weights file holds only {n_tensors:,} tensors"
    params = count_parameters(config)["total"]  # arithmetic on the config: no tensor is allocated
    if params > MAX_LOAD_PARAMS:
        return f"the config describes {params:,} parameters; this server loads at most {MAX_LOAD_PARAMS:,}"
    if 2 * params > weights_bytes:  # a lower bound only: the header check below finds the exact mismatch
        return (f"the config describes {params:,} parameters, at least {2 * params:,} bytes of weights, but "
                f"{WEIGHTS_FILE} has {weights_bytes:,} bytes")
    return None


@functools.lru_cache(maxsize=64)
def _block_shapes(config: ModelConfig) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(shapes outside the blocks, shapes of block 0 without its 'blocks.0.' prefix) of a one-layer model built on
    the meta device (no memory, about 20 ms through torch's dispatch): every block has the same tensors, so a
    config's expected names cost the same for 2 layers or 96."""
    one = dataclasses.replace(config, n_layers=1)
    # shapes only: parameters on the meta device have no storage (and no initialiser runs: core.nn.meta)
    shapes = {k: tuple(v.shape) for k, v in meta_transformer(one).state_dict().items()}
    outside = {k: v for k, v in shapes.items() if not k.startswith("blocks.")}
    block = {k[len("blocks.0."):]: v for k, v in shapes.items() if k.startswith("blocks.0.")}
    return outside, block


@functools.lru_cache(maxsize=64)
def _expected(config: ModelConfig) -> dict[str, tuple]:
    """Our tensor names and shapes for a config (a tied output map is stored once, as the embedding). Cached: the
    sidebar checks model folders on every page run. Callers must not change the returned dict."""
    outside, block = _block_shapes(config)  # 1 layer built; the other n_layers - 1 are copies of its names
    shapes = dict(outside)
    for i in range(config.n_layers):
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    if config.tie_weights:
        del shapes[TIED_NAME]  # save_checkpoint stores a tied matrix once, as the embedding
    return shapes


def _weights_file(folder: Path, step: int | None) -> tuple[Path, str]:
    """(the folder that holds the weights, the file's name): model.safetensors, or with a ``step`` the snapshot of
    that step under checkpoints/ (core.nn.snapshots). CheckpointError when the model kept no such snapshot."""
    if step is None:
        return folder, WEIGHTS_FILE
    sub = snapshot_folder(folder)
    if sub is None:
        raise CheckpointError(folder / SNAPSHOT_DIR, "this model kept no snapshots of its training")
    if isinstance(step, bool) or not isinstance(step, int) or step not in checkpoint_steps(folder):
        raise CheckpointError(sub / snapshot_name(max(0, int(step)) if isinstance(step, int) else 0),
                              f"no snapshot at step {step!r}")
    return sub, snapshot_name(step)


def _check(folder: Path, with_tokenizer: bool = True, step: int | None = None) -> _Info:
    """check_checkpoint's reading, with the owner and the folder's kind (config.json is read once). The weights'
    header is read by core.nn.safetensors_header (bounded in size and entries), from inside the folder only.
    ``step``: check the snapshot of that step instead of the final weights."""
    info = _read_all(folder, with_tokenizer)
    wdir, wname = _weights_file(folder, step)
    wpath = wdir / wname
    limit = MAX_HF_WEIGHTS_BYTES if info.hf else MAX_WEIGHTS_BYTES
    try:
        size = size_inside(wdir, wname)  # a stat through the link checks: a link out is refused here
    except FileNotFoundError:
        raise CheckpointError(wpath, "missing file (the weights)") from None
    except OSError as e:
        raise CheckpointError(wpath, _os_problem(e)) from None
    if size > limit:  # refused on its size alone: no byte of it is read
        raise CheckpointError(wpath, f"file is larger than {limit // 2**20} MiB")
    try:
        found = read_header(wdir, wname)
    except ValueError as e:
        raise CheckpointError(wpath, f"not a readable safetensors file ({e})") from None
    except OSError as e:
        raise CheckpointError(wpath, _os_problem(e)) from None
    # the config's sizes against this server's bounds and the file's size, before any model is built for it
    problem = _size_problem(info.config, size, len(found))
    if problem:
        raise CheckpointError(folder / CONFIG_FILE, problem)
    expected = _expected(info.config)
    if info.hf:  # GPT-2's own names and shapes, its non-weight buffers (attn.bias masks) left out
        found = {k: found[k] for k in hf_relevant(found, info.config)}
        expected = hf_expected_shapes(info.config, expected, file_prefix(found))
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:  # five names are enough to see the pattern (a whole missing block names many more)
        raise CheckpointError(wpath, f"missing tensors: {', '.join(missing[:5])}")
    if unexpected:  # names come from the file: cut each to 80 characters so a page's message stays readable
        raise CheckpointError(wpath, f"unexpected tensors: {', '.join(u[:80] for u in unexpected[:5])}")
    for name, (shape, dtype) in found.items():
        if shape != expected[name]:
            raise CheckpointError(wpath, f"shape mismatch for {name}: file has {shape}, config implies {expected[name]}")
        if dtype not in FLOAT_DTYPES:  # int8 (quantised) weights cast to float without their scales: nonsense
            raise CheckpointError(wpath, f"{name} has dtype {dtype}, expected floating point")
    return info


def load_checkpoint(path, step: int | None = None) -> tuple[Transformer, Tokenizer]:
    """Load and validate a checkpoint folder: ours, or a Hugging Face GPT-2 folder (config.json with
    model_type gpt2, model.safetensors, tokenizer.json or vocab.json + merges.txt). Returns (model in eval
    mode, tokenizer). ``step``: the model as it was at that step of its training, from its snapshot
    (``checkpoint_steps`` lists them); None, the final weights.

    Raises CheckpointError naming the file and the problem: missing file, bad JSON, unknown version,
    invalid config, missing or unexpected tensors, shape mismatch, non-finite weights, pickle weights, a
    model type other than GPT-2 or custom code, a step the model kept no snapshot of.
    """
    folder = Path(path)
    info = _check(folder, step=step)  # every check that needs no tensor data first: a refused file is never read whole
    state = _read_tensors(folder, step)
    if info.hf:
        state = state_from_hf({k: state[k] for k in hf_relevant(state, info.config)}, info.config)
    wpath = Path(*_weights_file(folder, step))
    for name, tensor in state.items():  # a NaN weight would turn every page's output into NaN without a word
        if not torch.isfinite(tensor).all():
            raise CheckpointError(wpath, f"{name} holds non-finite values (NaN or infinity)")
    config = info.config
    if config.tie_weights:  # stored once (see _expected); load_state_dict wants both names
        state[TIED_NAME] = state["tok_emb.weight"]
    # built on the meta device and given the file's tensors: no random initialisation, no second copy
    model = meta_transformer(config)
    model.load_state_dict({k: v.float().contiguous() for k, v in state.items()}, assign=True)
    if config.tie_weights:  # assign=True gave each module its own Parameter: tie them again
        model.head.weight = model.tok_emb.weight
    model.eval().requires_grad_(False)  # shared read-only by every session: no autograd graph is ever built
    return model, info.tokenizer


def _read_tensors(folder: Path, step: int | None) -> dict[str, torch.Tensor]:
    """The tensors of the final weights or of a snapshot, read from inside the folder; CheckpointError if unreadable."""
    wdir, wname = _weights_file(folder, step)
    try:
        return load_file(str(inside(wdir, wname)), device="cpu")  # the real file, checked to be inside
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(wdir / wname, f"not a readable safetensors file ({e})") from None


def snapshot_tensors(path, step: int) -> dict[str, torch.Tensor]:
    """A snapshot's tensors as stored (float16), checked as load_checkpoint checks them: to copy into a new folder."""
    folder = Path(path)
    _check(folder, with_tokenizer=False, step=step)
    return _read_tensors(folder, step)


def weights_size(path) -> int:
    """The size of a checkpoint's weights file in bytes; 0 when it is gone (replaced meanwhile) or refused."""
    try:
        return size_inside(Path(path), WEIGHTS_FILE)
    except OSError:  # a page's size line must not fail while another session swaps the folder
        return 0

