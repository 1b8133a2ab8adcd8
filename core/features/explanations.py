"""``explanations.json``: the explanations of an SAE's or transcoder's units, saved beside it (core.features.explain
makes them): a list of {"unit", "rule", "words", "detection", "fuzz_precision", "fuzz_recall", "control"}, one unit a
line, checked on load (size, fields, rules, finite numbers in [0, 1]) and refused by name when broken; and what a
learner reads of them: a unit's short words, a search over them, where a rule holds in a unit's contexts."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from core.features.rules import UNEXPLAINED, Context, check_rule

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


# ------------------------------------------------------------------ what a learner reads and looks up
NAMED = {"line break": "\n", "linebreak": "\n", "newline": "\n", "new line": "\n", "⏎": "\n", "space": " ",
         "␣": " ", "apostrophe": "'", "blank line": "\n\n", "tab": "\t"}  # a query naming a token in words
SHORT = 44  # characters of words a unit's button shows; the rest is in its tooltip


def short_words(e: dict | None, width: int = SHORT) -> str:
    """A unit's explanation as a button says it: "'u' after 'o' · 0.93" (the detection score); "unexplained · 0.58";
    "" without one. Words longer than ``width`` are cut with an ellipsis."""
    if e is None:
        return ""
    said = e["words"] if len(e["words"]) <= width else e["words"][:width - 1].rstrip() + "…"
    return f"{said} · {e['detection']:.2f}"


def _rule_texts(rule) -> set[str]:
    """The token texts and endings a rule names (its token lists, its "after" n-gram), over both parts of an and."""
    if rule is None:
        return set()
    if rule["kind"] == "and":
        return set().union(*(_rule_texts(r) for r in rule["rules"]))
    return set(rule.get("tokens", ())) | ({rule["ngram"]} if rule["kind"] == "after" else set())


def _same_token(text: str, token: str) -> bool:
    # a sub-word token's text may lead with a space (" the"): "the" finds it; a space alone matches only itself
    return text == token or (token.strip() != "" and text.strip() == token.strip())


def _items(said: str) -> int:
    """How many things a unit's words list ("a space or a line break": 2)."""
    return 1 + said.count(", ") + said.count(" or ")


def search(explanations, query: str, top_tokens: dict | None = None, limit: int = 50) -> list[dict]:
    """The units whose explanation matches ``query``, best first: a token or ending its rule names (the query as
    typed, or a token named in words: "line break", "space"), the query (two characters or more) inside its words
    ("capital", "line break"), or a token among ``top_tokens[unit]`` (the tokens its direction promotes, most first).
    A unit whose words are "unexplained" is found by its top tokens only (its rule is no explanation).

    Best first: explained units before unexplained ones, then by detection times how much of the match is the query
    (1 / the tokens its rule names, or 1 / the things its words list: "a line break" before "a space or a line
    break"; a promoted token counts half, less further down its list). Each hit: {"unit", "words", "detection",
    "control", "matched"} ("matched": what matched, in words); at most ``limit``."""
    raw = query if query.strip() == "" else query.strip()  # a lone space is a query for the space token
    if not raw:
        return []
    token = NAMED.get(raw.lower(), raw)
    phrase = raw.lower() if len(raw) > 1 else None
    ranked = []
    for e in explanations.values() if isinstance(explanations, dict) else explanations:
        explained = e["words"] != UNEXPLAINED
        matched, share = [], 0.0
        texts = _rule_texts(e["rule"]) if explained else set()
        if any(_same_token(t, token) for t in texts):
            matched.append("its rule")
            share = 1 / len(texts)
        if explained and phrase and phrase in e["words"].lower():
            matched.append("its words")
            share = max(share, 1 / _items(e["words"]))
        top = list((top_tokens or {}).get(e["unit"], ()))
        at = next((j for j, t in enumerate(top) if _same_token(t, token)), None)
        if at is not None:
            matched.append("the tokens it promotes")
            share = max(share, 0.5 / (1 + at))
        if matched:
            hit = {"unit": e["unit"], "words": e["words"], "detection": e["detection"], "control": e["control"],
                   "matched": " and ".join(matched)}
            ranked.append(((not explained, -share * e["detection"], e["unit"]), hit))
    ranked.sort(key=lambda r: r[0])
    return [hit for _, hit in ranked[:limit]]


def context_marks(rule, contexts, windows, tokenizer) -> list[list[bool]]:
    """Where ``rule`` holds in each of ``contexts`` (core.features.browse.Context, cut from the token ``windows``
    (W, T) they name): the rule applied to each whole window, as the scorer applied it (an "after" or position rule
    reads the text before the context), then cut as the context was. No rule: nothing marked."""
    if rule is None or not contexts:
        return [[False] * len(c.tokens) for c in contexts]
    wins = sorted({c.window for c in contexts})
    ids = np.asarray(windows)[wins]  # (W, T) -> (n, T): the windows the contexts come from
    m = Context(ids, tokenizer).mask(rule)  # (n, T)
    row = {w: j for j, w in enumerate(wins)}
    out = []
    for c in contexts:
        a = c.pos - c.at  # the window position of the context's first token
        out.append(m[row[c.window], a:a + len(c.tokens)].tolist())
    return out


def promoted_tokens(model, writes, tokenizer, n: int = 5) -> dict[int, list[str]]:
    """{unit: the ``n`` token texts its write direction (``writes`` (units, d_model)) raises most} straight through
    the final LayerNorm and W_U (core.analysis.trace.direct_read; a frozen LayerNorm scale changes no ranking)."""
    import torch

    from core.analysis.trace import direct_read

    pieces, out = tokenizer.pieces, {}
    for lo in range(0, len(writes), 256):  # (256, m) float64 at a time: a GPT-2-sized vocabulary stays small
        with torch.no_grad():
            top = direct_read(model, writes[lo:lo + 256]).topk(min(n, len(pieces)), dim=-1).indices  # (b, n)
        out.update({lo + j: [pieces[i] for i in row] for j, row in enumerate(top.tolist())})
    return out
