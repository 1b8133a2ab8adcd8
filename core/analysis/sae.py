"""The sparse autoencoder: an activation x (d_in) written as a sparse, non-negative mix of d_sae learned directions.

    encode(x) = act((x - b_dec) @ W_enc + b_enc)        f: (..., d_sae), most entries 0   (apply_b_dec_to_input)
    encode(x) = act(x @ W_enc + b_enc)                  the same without it: a transcoder's
    decode(f) = f @ W_dec + b_dec                       x_hat: (..., d_in)

``act`` is TopK (the k largest pre-activations kept, a ReLU on them, every other latent 0: Gao et al. 2024, the
default) or a ReLU trained with an L1 penalty (Anthropic 2023). Each row of W_dec is a feature's direction, of unit
norm, so a feature's activation is its size in the stream. Tensor names, shapes and the ``apply_b_dec_to_input``
switch are SAELens's, so its users read ours without a dictionary. An SAE centres its input on b_dec, the mean of
what it reconstructs; a transcoder reads one vector and writes another, so b_dec (the bias of its *output*) has no
business on its input: its encoder is ``x @ W_enc + b_enc``, as SAELens's ``Transcoder`` and circuit-tracer's
``SingleLayerTranscoder`` compute it (``fold_input_centring`` turns the one layout into the other exactly).

On disk (beside a model, ``sae/<site>/``, or ``transcoders/layer-L/``): ``sae_weights.safetensors`` (the four
tensors), ``config.json`` (site, d_in, d_sae, kind, k, apply_b_dec_to_input, a transcoder's ``reads``, and
``trained_on``: the fingerprint of the model weights it was trained on), ``cfg.json`` (the same SAE as SAELens's
``SAE.load_from_disk`` reads it: see core/features/README.md) and ``metrics.json`` (the health numbers). A folder
written before these names (``sae.safetensors``, a config.json without apply_b_dec_to_input: b_dec-centred, as
every SAE and transcoder then was) loads as it is and encodes exactly as before. Loading reads only safetensors
and JSON, inside the folder, bounded and checked (names, shapes, finite values, the model it was trained for)
before anything trusts them."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from core.analysis.sites import Site, parse_site
from core.nn.safetensors_header import read_header
from core.serve.folder_files import OutsideFolder, inside, is_inside, read_text_inside

SAE_DIR = "sae"
# SAELens's file names (sae_lens/constants.py: SAE_WEIGHTS_FILENAME, SAE_CFG_FILENAME) for the weights and its config;
# config.json is ours (what this app checks), cfg.json is written for SAELens and never read here
WEIGHTS, CONFIG, METRICS, SAELENS_CONFIG = "sae_weights.safetensors", "config.json", "metrics.json", "cfg.json"
LEGACY_WEIGHTS = "sae.safetensors"  # the weights' name before issue 57: still read, replaced when saved again
SAELENS_FORMAT = "6.0.0"  # the cfg.json format written (SAELens reads a config without it as a pre-6.0 one)
KINDS = ("topk", "relu")
MAX_D_IN = 8192
MAX_D_SAE = 131_072
MAX_SAE_BYTES = 256 * 2**20
MAX_JSON_BYTES = 64 * 1024
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{16,64}")
_HOOK = re.compile(r"blocks\.\d{1,4}\.[a-z0-9_.]{1,64}")  # a transcoder's input: a hook name (not an SAE site)


class SAEFileError(Exception):
    """An SAE folder that cannot be used, with the file and the reason in words."""

    def __init__(self, path, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")

    def words(self, models_folder) -> str:
        """The message with the file named from ``models_folder`` ("copy/transcoders/layer-0/config.json: ..."):
        a page never shows the server's absolute paths."""
        return relative_words(f"{self.path}: {self.problem}", models_folder)


def relative_words(text: str, models_folder) -> str:
    """``text`` with every absolute path under ``models_folder`` (as given and as its real path) written from it."""
    for root in {str(Path(models_folder)), os.path.realpath(models_folder)}:
        text = text.replace(root.rstrip(os.sep) + os.sep, "")
    return text


def model_fingerprint(model, cache: bool = True) -> str:
    """Names a model's weights: sha256 over its state dict (each tensor's name, dtype, shape and bytes, in name
    order). An SAE or transcoder records the fingerprint of the weights it was trained on (``trained_on``), and one
    whose record differs from the model it is loaded for is refused. ``cache``: kept on the model object, so a page
    computes it once per loaded model (about 0.3 s per 100 M parameters); training code, whose model may still
    change, asks afresh."""
    known = getattr(model, "_te_fingerprint", None)
    if cache and known:
        return known
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)};".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())  # the raw bytes, without a copy
    fp = "sha256:" + h.hexdigest()[:32]
    if cache:
        object.__setattr__(model, "_te_fingerprint", fp)  # a plain attribute: not a parameter, buffer or module
    return fp


@dataclass(frozen=True)
class SAEConfig:
    site: str  # the site's name, as config.json says it (a Site given is kept as its name)
    d_in: int
    d_sae: int
    kind: str = "topk"
    k: int = 8
    l1: float = 0.0  # the L1 penalty a ReLU SAE was trained with (0 for TopK)
    trained_on: str | None = None  # model_fingerprint of the weights it was trained on (None: not recorded)
    # SAELens's name: the encoder centres its input on b_dec (an SAE: True; a transcoder: False, see the docstring)
    apply_b_dec_to_input: bool = True
    reads: str | None = None  # the site a transcoder reads (None: an SAE, which reads the site it writes)

    def __post_init__(self):
        if isinstance(self.site, Site):  # checked against its model when it was made: only its name is stored
            object.__setattr__(self, "site", self.site.name)
        else:  # a name read from a file: its form checked here, the model it fits by load_sae's d_in
            parse_site(self.site)
        for name, value, top in (("d_in", self.d_in, MAX_D_IN), ("d_sae", self.d_sae, MAX_D_SAE)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"{name} must be a whole number from 1 to {top:,}, got {value!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= self.d_sae:
            raise ValueError(f"k must be a whole number from 1 to d_sae={self.d_sae}, got {self.k!r}")
        if not isinstance(self.l1, (int, float)) or not math.isfinite(self.l1) or self.l1 < 0:
            raise ValueError(f"l1 must be a finite number ≥ 0, got {self.l1!r}")
        if self.trained_on is not None and not (isinstance(self.trained_on, str) and
                                                _FINGERPRINT.fullmatch(self.trained_on)):
            raise ValueError(f"trained_on must be a model fingerprint (sha256:...), got {str(self.trained_on)[:80]!r}")
        if not isinstance(self.apply_b_dec_to_input, bool):
            raise ValueError(f"apply_b_dec_to_input must be true or false, got {self.apply_b_dec_to_input!r}")
        if self.reads is not None and not (isinstance(self.reads, str) and _HOOK.fullmatch(self.reads)):
            raise ValueError(f"reads must be a hook name such as blocks.0.hook_mlp_in, got {str(self.reads)[:80]!r}")

    def to_dict(self) -> dict:
        out = {"site": self.site, "d_in": self.d_in, "d_sae": self.d_sae, "kind": self.kind, "k": self.k,
               "l1": self.l1, "apply_b_dec_to_input": self.apply_b_dec_to_input}
        if self.reads is not None:
            out["reads"] = self.reads
        return out if self.trained_on is None else {**out, "trained_on": self.trained_on}


def saelens_config(config: SAEConfig) -> dict:
    """cfg.json: ``config`` as SAELens 6 reads it (``SAE.load_from_disk``: sae_lens/saes/sae.py SAEConfig and
    TopKSAEConfig fields; unknown keys are ignored there). A TopK SAE is its ``topk`` architecture, a ReLU one its
    ``standard``; a transcoder keeps its input uncentred (apply_b_dec_to_input false) and names what it reads
    (hook_name) and writes (hook_name_out). SAELens has no TopK transcoder class: a TopK transcoder (it reads and
    writes d_model numbers) is written as a ``topk`` SAE without input centring, which computes exactly its
    encode and decode; a ReLU transcoder is SAELens's ``transcoder``."""
    transcoder = config.reads is not None
    if config.kind == "topk":
        arch = {"architecture": "topk", "k": config.k, "rescale_acts_by_decoder_norm": False}
    elif transcoder:
        arch = {"architecture": "transcoder", "d_out": config.d_in}
    else:
        arch = {"architecture": "standard"}
    meta = {"sae_lens_version": SAELENS_FORMAT, "hook_name": config.reads if transcoder else config.site,
            "prepend_bos": False}  # these models have no beginning-of-text token
    if transcoder:
        meta["hook_name_out"] = config.site
    return {**arch, "d_in": config.d_in, "d_sae": config.d_sae, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": config.apply_b_dec_to_input, "normalize_activations": "none",
            "reshape_activations": "none", "metadata": meta}


class SAE(torch.nn.Module):
    def __init__(self, config: SAEConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = config
        d_in, d_sae = config.d_in, config.d_sae
        w_dec = torch.randn(d_sae, d_in, generator=generator)
        w_dec /= w_dec.norm(dim=1, keepdim=True)  # unit-norm feature directions
        self.W_dec = torch.nn.Parameter(w_dec)                  # (d_sae, d_in)
        self.W_enc = torch.nn.Parameter(w_dec.t().clone())      # (d_in, d_sae): the decoder's transpose to start
        self.b_enc = torch.nn.Parameter(torch.zeros(d_sae))     # (d_sae,)
        self.b_dec = torch.nn.Parameter(torch.zeros(d_in))      # (d_in,): set to the activations' mean before training

    @property
    def site(self) -> str:
        return self.config.site

    def pre_acts(self, x: torch.Tensor, latents=None) -> torch.Tensor:
        """(..., d_in) -> (..., d_sae): every latent's pre-activation; with ``latents`` (an index, or a list of them)
        only those: (...) or (..., len(latents)), the rest never computed (an attribution target reads one)."""
        if self.config.apply_b_dec_to_input:  # an SAE's input centred on b_dec (SAELens's process_sae_in)
            x = x - self.b_dec
        if latents is None:
            return x @ self.W_enc + self.b_enc
        return x @ self.W_enc[:, latents] + self.b_enc[latents]

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.config.kind == "relu":
            return torch.relu(pre)
        top = pre.topk(self.config.k, dim=-1)  # the k largest per vector
        # scattered into zeros: every latent outside the top k is exactly 0; a ReLU on the kept ones
        return torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder(self):
        """Rows of W_dec back to unit norm (after an optimiser step), so a feature's activation measures its size."""
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name).detach().contiguous() for name in ("W_enc", "b_enc", "W_dec", "b_dec")}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return expected_shapes(self.config)


@torch.no_grad()
def fold_input_centring(sae: SAE) -> SAE:
    """The same map in the layout without b_dec on the input: (x - b_dec) @ W_enc + b_enc = x @ W_enc + b_enc',
    b_enc' = b_enc - b_dec @ W_enc (exact up to float32 rounding; computed in float64). ``sae`` itself when it
    already has that layout."""
    if not sae.config.apply_b_dec_to_input:
        return sae
    out = SAE(replace(sae.config, apply_b_dec_to_input=False))
    for name, t in sae.tensors().items():
        getattr(out, name).copy_(t)
    out.b_enc.copy_((sae.b_enc.double() - sae.b_dec.double() @ sae.W_enc.double()).float())  # (d_in,) @ (d_in, d_sae)
    out.requires_grad_(sae.b_enc.requires_grad)
    return out.train(sae.training)


def expected_shapes(config: SAEConfig) -> dict[str, tuple[int, ...]]:
    return {"W_enc": (config.d_in, config.d_sae), "b_enc": (config.d_sae,), "W_dec": (config.d_sae, config.d_in),
            "b_dec": (config.d_in,)}


def sae_folder(model_folder, site: Site | str) -> Path:
    """Where the SAE of ``site`` lives beside a model: ``<model>/sae/<site>/``."""
    if not isinstance(site, Site):
        parse_site(site)  # a site name is a plain folder name: no '/' or '..' can pass
    return Path(model_folder) / SAE_DIR / str(site)


def saved_sites(model_folder) -> list[str]:
    """The sites that have an SAE folder beside a model (each still checked when it is loaded)."""
    root = Path(model_folder) / SAE_DIR
    if not root.is_dir() or root.is_symlink():
        return []
    out = []
    for child in sorted(root.iterdir()):
        try:
            parse_site(child.name)
        except ValueError:
            continue
        # a linked folder is not listed: its files would lie outside the model's folder
        if child.is_dir() and not child.is_symlink() and weights_name(child) is not None:
            out.append(child.name)
    return out


def linked_out(model_folder) -> list[str]:
    """The SAE folders beside a model (``sae`` itself or one of its sites) that are links leading out of the model's
    folder, as "sae/<site>": ``saved_sites`` leaves them out, and a page says why."""
    root = Path(model_folder) / SAE_DIR
    if root.is_symlink() and not is_inside(root, model_folder):
        return [SAE_DIR]
    if not root.is_dir():
        return []
    return [f"{SAE_DIR}/{child.name}" for child in sorted(root.iterdir())
            if child.is_symlink() and not is_inside(child, model_folder)]


def weights_name(folder) -> str | None:
    """The weights file's name in ``folder``: SAELens's (sae_weights.safetensors), else the one used before it
    (sae.safetensors); None when there is neither."""
    return next((n for n in (WEIGHTS, LEGACY_WEIGHTS) if os.path.lexists(Path(folder) / n)), None)


def save_sae(sae: SAE, folder, metrics: dict | None = None) -> Path:
    """Write ``sae`` into ``folder`` (made if missing): weights, config.json, SAELens's cfg.json and metrics; each
    file written to a temporary name and renamed, so a reader never sees half a file. A weights file of the name
    used before (sae.safetensors) is removed once the new one is there: one copy of the weights."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def atomic(name: str, write):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600: another user serving the folder must read it
            os.replace(tmp, folder / name)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    atomic(WEIGHTS, lambda p: save_file(sae.tensors(), p))
    atomic(CONFIG, lambda p: Path(p).write_text(json.dumps(sae.config.to_dict(), indent=2) + "\n"))
    atomic(SAELENS_CONFIG, lambda p: Path(p).write_text(json.dumps(saelens_config(sae.config), indent=2) + "\n"))
    if metrics is not None:
        atomic(METRICS, lambda p: Path(p).write_text(json.dumps(metrics, indent=2) + "\n"))
    legacy = folder / LEGACY_WEIGHTS
    if legacy.is_file() and not legacy.is_symlink():
        legacy.unlink()
    return folder


def _json(folder: Path, name: str) -> dict:
    try:
        data = json.loads(read_text_inside(folder, name, MAX_JSON_BYTES))
    except FileNotFoundError:
        raise SAEFileError(folder / name, "missing") from None
    except RecursionError:  # "[[[[..." within the size cap: Python's parser gives up, as it should
        raise SAEFileError(folder / name, "JSON nested too deep") from None
    except (OSError, ValueError) as e:
        raise SAEFileError(folder / name, str(e) if isinstance(e, OutsideFolder) else f"not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise SAEFileError(folder / name, "not a JSON object")
    return data


def read_sae_config(folder) -> SAEConfig:
    folder = Path(folder)
    data = _json(folder, CONFIG)
    # every key the format names must be there: a missing k read as a default would splice an SAE with another k
    # than it was trained with (l1 alone may be absent: 0, a TopK SAE's)
    missing = [key for key in ("site", "d_in", "d_sae", "kind", "k") if key not in data]
    if missing:
        raise SAEFileError(folder / CONFIG, f"it lacks {', '.join(missing)}")
    try:
        # no apply_b_dec_to_input: a folder written before the field, when every SAE and transcoder centred its
        # input on b_dec; read as such, it encodes exactly as it did
        return SAEConfig(site=data["site"], d_in=data["d_in"], d_sae=data["d_sae"], kind=data["kind"], k=data["k"],
                         l1=data.get("l1", 0.0), trained_on=data.get("trained_on"),
                         apply_b_dec_to_input=data.get("apply_b_dec_to_input", True), reads=data.get("reads"))
    except (TypeError, ValueError) as e:
        raise SAEFileError(folder / CONFIG, str(e)) from None


def read_metrics(folder) -> dict:
    """metrics.json's numbers ({} when there is none or it is unreadable: the numbers can be measured again)."""
    try:
        data = _json(Path(folder), METRICS)
    except SAEFileError:
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, (int, float, str, bool))}


def check_trained_on(config: SAEConfig, folder, model: str, what: str = "SAE"):
    """SAEFileError unless ``config`` records the weights of fingerprint ``model``: an SAE or transcoder of other
    weights (another model, or this one before it was retrained) fits the shapes and splices garbage in silently."""
    if config.trained_on is None:  # saved before the record existed: a user's earlier work, kept usable (shapes and
        return                      # site are still checked); only a record that names other weights is refused
    if config.trained_on != model:
        raise SAEFileError(Path(folder) / CONFIG, f"this {what} was trained for another model (its weights are not "
                           "this model's: another model, or this one before it was trained again): train it again "
                           "for this one")


def load_sae(folder, site: Site | str | None = None, d_in: int | None = None, trained_on: str | None = None,
             root=None, what: str = "SAE") -> SAE:
    """The SAE saved in ``folder``, checked: config.json valid, the weights file safetensors (never a pickle), inside
    the folder (no link out), with exactly the four tensors of the stated shapes, float32 and finite; ``site`` and
    ``d_in``, when given, must match (an SAE of another site or width would splice garbage); ``trained_on``, when
    given, the fingerprint of the model it must have been trained on; ``root``, when given, the model's folder, which
    ``folder`` must lie in (a linked folder leading out of it is refused). SAEFileError otherwise."""
    folder = Path(folder)
    if root is not None and not is_inside(folder, root):
        raise SAEFileError(folder, f"the {what}'s folder is a link leading out of its model's folder; this app reads "
                           "only what lies inside it (copy the real files in)")
    config = read_sae_config(folder)
    if site is not None and config.site != str(site):
        raise SAEFileError(folder / CONFIG, f"it is an SAE of {config.site}, not of {site}")
    if d_in is not None and config.d_in != d_in:
        raise SAEFileError(folder / CONFIG, f"its d_in is {config.d_in}, but the site's vectors have {d_in} numbers")
    name = weights_name(folder) or WEIGHTS
    path = folder / name
    try:
        real = inside(folder, name)
        if real.stat().st_size > MAX_SAE_BYTES:
            raise SAEFileError(path, f"larger than the {MAX_SAE_BYTES // 2**20} MiB an SAE may be")
        header = read_header(folder, name)
    except FileNotFoundError:
        raise SAEFileError(path, "missing") from None
    except (OSError, ValueError) as e:
        raise SAEFileError(path, f"not a safetensors file this app reads ({e})") from None
    want = expected_shapes(config)
    if set(header) - {"__metadata__"} != set(want):
        raise SAEFileError(path, f"holds {sorted(set(header) - {'__metadata__'})}, not {sorted(want)}")
    for name, shape in want.items():
        got, dtype = header[name]
        if tuple(got) != shape or dtype != "F32":
            raise SAEFileError(path, f"{name} is {dtype} {tuple(got)}, not F32 {shape}")
    try:
        tensors = load_file(str(real))
    except Exception as e:  # the library's own error type varies by version; any failure is a refusal
        raise SAEFileError(path, f"not readable ({e})") from None
    for name, t in tensors.items():
        if not torch.isfinite(t).all():
            raise SAEFileError(path, f"{name} holds NaN or infinite values")
    if trained_on is not None:  # after the file's own checks: a broken file is named as broken first
        check_trained_on(config, folder, trained_on, what)
    sae = SAE(config)
    with torch.no_grad():
        for name, t in tensors.items():
            getattr(sae, name).copy_(t)
    sae.requires_grad_(False)
    return sae.eval()
