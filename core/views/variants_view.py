"""What the shipped variant study (core.training.variants, assets/variants/) says about each lecture claim: the rows
read back, a verdict per variant, and the claims' numbers, some measured live on the study's kept models."""
from __future__ import annotations

import csv
from dataclasses import dataclass
import math
from pathlib import Path

import numpy as np
import torch

from core.analysis.picks import nan_argmax
from core.serve.paths import REPO_ROOT
from core.training.variants import BY_ID, CURVE_FIELDS, VARIANT_FIELDS


# the shipped study read back from its files (the page's figures draw it)
@dataclass
class Study:
    rows: dict[str, dict]           # variant id -> its variants.csv row, numbers as numbers
    curves: dict[str, list[dict]]   # variant id -> its evaluations, ascending steps
    problems: list[str]             # rows or files that could not be read, in words

    def has(self, *ids: str) -> bool:
        return all(i in self.rows for i in ids)

    def loss(self, vid: str, key: str = "causal_val_loss") -> float:
        return self.rows[vid][key]


# the shipped study the page reads, looked up at each page run (a test points it at a folder of its own)
STUDY_DIR = REPO_ROOT / "assets" / "variants"
NUMBERS = ("d_model", "n_heads", "n_layers", "params", "steps", "seconds", "train_loss", "val_loss", "causal_val_loss")
MAX_CSV_BYTES = 2 * 2**20  # the shipped files are a few KB; a bigger one is refused rather than read


def _read_csv(path: Path, problems: list[str]) -> list[dict]:
    try:
        if path.stat().st_size > MAX_CSV_BYTES:
            problems.append(f"{path.name} is larger than {MAX_CSV_BYTES // 2**20} MiB: not read")
            return []
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
        return []
    except OSError as e:  # its own message names the whole path, which is the server's and no reader's business
        problems.append(f"{path.name} could not be read ({e.strerror or type(e).__name__})")
        return []
    except (UnicodeDecodeError, csv.Error) as e:  # neither names a path: the byte or the line at fault
        problems.append(f"{path.name} could not be read ({type(e).__name__}: {e})")
        return []


def read_study(folder) -> Study:
    """The study in ``folder`` (variants.csv, curves.csv); a row with a missing or non-finite number is left out and
    named in ``problems``, so one bad row disables only what needs it."""
    folder, problems = Path(folder), []
    rows = {}
    for i, r in enumerate(_read_csv(folder / "variants.csv", problems), start=2):
        try:
            row = {k: r.get(k, "") for k in VARIANT_FIELDS}
            for k in NUMBERS:
                row[k] = float(r[k]) if k in ("seconds", "train_loss", "val_loss", "causal_val_loss") else int(r[k])
                if not math.isfinite(row[k]):
                    raise ValueError(f"{k} is {r[k]}")
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"variants.csv line {i} ({r.get('variant', '?')}): {e}")
            continue
        rows[row["variant"]] = row
    curves: dict[str, list[dict]] = {}
    for r in _read_csv(folder / "curves.csv", problems):
        try:
            point = {"step": int(r["step"]), "train_loss": float(r["train_loss"]), "val_loss": float(r["val_loss"])}
        except (KeyError, TypeError, ValueError):
            continue  # a bad point is one point of one curve: the rest still draws
        if r.get("variant") in rows and all(map(math.isfinite, (point["train_loss"], point["val_loss"]))):
            curves.setdefault(r["variant"], []).append(point)
    for points in curves.values():
        points.sort(key=lambda p: p["step"])
    return Study(rows, curves, problems)


def verdict(study: Study, vid: str) -> str:
    """One line on a variant, from its numbers against the lecture model's."""
    r = study.rows[vid]
    if vid == "lecture" or "lecture" not in study.rows:
        return "the reference"
    base = study.rows["deep-L2"] if vid.startswith("deep-") and "deep-L2" in study.rows else study.rows["lecture"]
    if vid == base["variant"]:
        return "the reference for the deep stacks"
    d = r["causal_val_loss"] - base["causal_val_loss"]
    if r["val_loss"] < base["val_loss"] - 0.05 and d > 0.05:  # better as trained, worse when it must generate
        return f"cheats: {r['val_loss']:.2f} as trained, {r['causal_val_loss']:.2f} under the causal mask"
    if abs(d) < 0.02:
        return f"about the same ({d:+.3f} nats)"
    return f"{'worse' if d > 0 else 'better'} by {abs(d):.3f} nats per character"


def table_rows(study: Study) -> list[dict]:
    return [{"variant": vid, "what changed": r["title"], "parameters": r["params"], "loss as trained": r["val_loss"],
             "loss under the causal mask": r["causal_val_loss"], "training loss": r["train_loss"],
             "seconds": r["seconds"], "verdict": verdict(study, vid)} for vid, r in study.rows.items()]


def best_heads(study: Study) -> tuple[int, float] | None:
    """(h, its loss) of the best head count at equal width, from h1, h2, lecture (h=4), h8, h16."""
    ids = {1: "h1", 2: "h2", 4: "lecture", 8: "h8", 16: "h16"}
    got = {h: study.loss(v) for h, v in ids.items() if v in study.rows}
    if len(got) < 2:
        return None
    h = min(got, key=got.get)
    return h, got[h]


@torch.no_grad()
def future_stare(model, ids: list[int]) -> tuple[tuple[int, int], float, np.ndarray]:
    """((layer, head), mean weight, its (n, n) pattern) of the head that puts most weight on the next position,
    a[i, i+1]: where a model trained without the mask finds the answer it is asked for."""
    pats = _patterns(model, ids)
    best, weight = (0, 0), -1.0
    for layer, pat in enumerate(pats):
        diag = torch.diagonal(pat[0], offset=1, dim1=-2, dim2=-1).mean(-1)  # (h,) over queries 0..n-2
        h = (nan_argmax(diag) or (0,))[0]  # NaN skipped (torch's argmax picks a NaN)
        if float(diag[h]) > weight:
            best, weight = (layer, h), float(diag[h])
    return best, weight, pats[best[0]][0, best[1]].numpy()


def _patterns(model, ids: list[int]) -> list[torch.Tensor]:
    """Every layer's attention pattern on ``ids``, (1, h, n, n) each, from the hooks ``attn.hook_pattern``."""
    _, cache = model.run_with_cache(torch.tensor([ids]), names=lambda name: name.endswith("attn.hook_pattern"))
    return cache.layer("attn.hook_pattern", model.config.n_layers)


@torch.no_grad()
def earlier_rows_change(model, ids: list[int], other_last: int) -> float:
    """The largest change, over every layer and head, in the attention weights of rows 0..n-2 when only the last
    token changes: 0 for a causal model, more when the mask comes after the softmax."""
    a, b = _patterns(model, ids), _patterns(model, [*ids[:-1], other_last])
    return max(float((x[0, :, :-1] - y[0, :, :-1]).abs().max()) for x, y in zip(a, b))


@torch.no_grad()
def shuffle_change(model, ids: list[int], seed: int = 0) -> float:
    """The largest change in the logits at the last position when every token before the last is shuffled."""
    g = np.random.default_rng(seed)
    perm = [*g.permutation(len(ids) - 1).tolist(), len(ids) - 1]
    a = model(torch.tensor([ids])).logits[0, -1]
    b = model(torch.tensor([[ids[i] for i in perm]])).logits[0, -1]
    return float((a - b).abs().max())


def claim_numbers(study: Study, kept: dict, ids: list[int], other_last: int) -> dict:
    """The numbers behind each lecture claim, from the study's rows and, live on ``ids``, from its kept models
    (``kept``: variant id -> model; a claim whose runs or models are missing is left out)."""
    out: dict = {}
    if study.has("lecture", "no-mask"):
        out["no_mask"] = {k: (study.rows["no-mask"][k], study.rows["lecture"][k])
                          for k in ("train_loss", "val_loss", "causal_val_loss")}
        if "no-mask" in kept:
            out["no_mask"]["stare"] = future_stare(kept["no-mask"], ids)
    if study.has("lecture", "mask-after-softmax"):
        out["after"] = {"causal": (study.loss("mask-after-softmax"), study.loss("lecture"))}
        if "mask-after-softmax" in kept and "lecture" in kept:
            out["after"]["change"] = (earlier_rows_change(kept["mask-after-softmax"], ids, other_last),
                                      earlier_rows_change(kept["lecture"], ids, other_last))
    if study.has("lecture", "no-mlp"):
        out["mlp"] = {vid: (study.loss(vid), study.rows[vid]["params"]) for vid in ("lecture", "no-mlp", "no-mlp-wide")
                      if vid in study.rows}
    deep = [v for v in ("deep-L2", "deep-L6", "deep-L12", "deep-L2-bare", "deep-L6-bare", "deep-L12-bare",
                        "deep-L12-post") if v in study.rows]
    if deep:
        out["deep"] = {v: study.loss(v) for v in deep}
    if best_heads(study):
        out["heads"] = {"best": best_heads(study), "all": {v: study.loss(v) for v in ("h1", "h2", "lecture", "h8", "h16")
                                                          if v in study.rows}}
    if study.has("lecture", "no-w_o"):
        out["w_o"] = {"loss": (study.loss("no-w_o"), study.loss("lecture")),
                      "saved": study.rows["lecture"]["params"] - study.rows["no-w_o"]["params"]}
    if "no-positions" in kept and "lecture" in kept:
        out["positions"] = (shuffle_change(kept["no-positions"], ids), shuffle_change(kept["lecture"], ids))
    return out


def title(vid: str) -> str:
    return BY_ID[vid].title if vid in BY_ID else vid


__all__ = ["Study", "read_study", "verdict", "table_rows", "best_heads", "future_stare", "earlier_rows_change",
           "shuffle_change", "claim_numbers", "title", "CURVE_FIELDS"]
