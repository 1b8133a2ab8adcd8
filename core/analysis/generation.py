"""Measures for the Generation page: how temperature moves p(T) between its two limits, how repetitive
a continuation is, and one batched continuation per temperature. Figures and HTML: generation_figures."""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from core.analysis import sampling
from core.analysis.sampling import entropy, temperature_softmax

DEFAULT_TEMPERATURES = (0.0, 0.25, 0.5, 1.0, 2.0, 5.0)
MAX_TEMPERATURES = 8
REPAINT_TOKENS = 25   # the streamed text is redrawn after at least this many new tokens ...
REPAINT_SECONDS = 0.25  # ... and at least this long after the previous redraw


# ---------------------------------------------------------------- streaming

def repaint_due(new_tokens: int, seconds: float) -> bool:
    """Whether a page streaming generated text should redraw it now: ``new_tokens`` drawn and ``seconds``
    passed since the last redraw. Every redraw sends the whole text again (about 0.2 kB per token with its
    hover alternatives), so a rule on time alone would redraw after every token exactly when the server is
    busy and each step slow: a 200-token text then travels 200 times. Both conditions bound it: at most
    one redraw per REPAINT_TOKENS tokens, and none more often than every REPAINT_SECONDS."""
    return new_tokens >= REPAINT_TOKENS and seconds >= REPAINT_SECONDS


# ---------------------------------------------------------------- measures

def tv_distance(p, q) -> float:
    """Total variation distance 1/2 sum |p_i - q_i|: 0 for equal distributions, 1 for disjoint ones."""
    return float(0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def limits(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The claim's two limits for one logit vector (m,): T -> 0 (one-hot on the argmax, uniform over
    tied maxima) and T -> inf (uniform 1/m)."""
    z = logits.double()
    return temperature_softmax(z, 0.0).numpy(), temperature_softmax(z, math.inf).numpy()


def log_grid(lo: float = 1e-3, hi: float = 1e3, n: int = 121) -> np.ndarray:
    """Temperatures evenly spaced on a log scale."""
    return np.logspace(math.log10(lo), math.log10(hi), n)


def sweep(logits: torch.Tensor, temperatures) -> dict:
    """For each T: entropy, largest probability, and the distance to each limit of p(T)."""
    z = logits.double()
    zero, inf = limits(logits)
    rows = {"T": [], "entropy": [], "max_prob": [], "to_one_hot": [], "to_uniform": []}
    for t in temperatures:
        p = temperature_softmax(z, float(t)).numpy()
        rows["T"].append(float(t))
        rows["entropy"].append(entropy(p))
        rows["max_prob"].append(float(p.max()))
        rows["to_one_hot"].append(tv_distance(p, zero))
        rows["to_uniform"].append(tv_distance(p, inf))
    return {k: np.array(v) for k, v in rows.items()}


def tied_maxima(logits: torch.Tensor) -> list[int]:
    """The ids whose logit ties for the largest (exactly), in id order: one id when the maximum is unique, the
    one greedy decoding picks (torch's argmax gives the first of tied maxima)."""
    return np.flatnonzero(limits(logits)[0] > 0).tolist()


def sweep_table(logits: torch.Tensor, temperatures) -> list[dict]:
    """``sweep`` at each of ``temperatures`` and at the two limits themselves (computed from the limit
    distributions), as the rows of the page's table: T named, then the four measures."""
    temps = [float(t) for t in temperatures] + [0.0, math.inf]  # the limits last: 0 and inf are the limits exactly
    table = sweep(logits, temps)
    names = [format_t(t) for t in temps[:-2]] + ["limit T → 0⁺", "limit T → ∞"]
    return [{"T": name, "entropy (nats)": table["entropy"][i], "largest probability": table["max_prob"][i],
             "distance to one-hot": table["to_one_hot"][i], "distance to uniform": table["to_uniform"][i]}
            for i, name in enumerate(names)]


def distinct_n(ids, n: int = 3) -> float | None:
    """Distinct n-grams / all n-grams of a token sequence: 1 when nothing repeats, near 0 for a loop.
    None when the sequence is shorter than n."""
    ids = list(ids)
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def parse_temperatures(text: str, max_count: int = MAX_TEMPERATURES) -> tuple[list[float], list[str]]:
    """Temperatures from a comma- or space-separated list, sorted; plus messages about what was left out."""
    values, bad, negative, messages = [], [], [], []
    for part in (p for p in re.split(r"[,;\s]+", text or "") if p):
        try:
            t = float(part)
        except ValueError:
            bad.append(part)
            continue
        if not math.isfinite(t):
            bad.append(part)
        elif t < 0:
            negative.append(part)
        else:
            values.append(t)
    if bad:
        messages.append("Not a finite number, left out: " + ", ".join(f"'{b[:20]}'" for b in bad[:10])
                        + ". Write temperatures like 0, 0.5, 2 (a very large T like 1000 stands in for infinity).")
    if negative:
        messages.append("A temperature must be 0 or positive, left out: " + ", ".join(negative[:10]) + ".")
    unique = sorted(set(values))
    if len(unique) < len(values):
        messages.append("Repeated temperatures are shown once.")
    if len(unique) > max_count:
        messages.append(f"At most {max_count} temperatures fit side by side; the first {max_count} (smallest) are used.")
        unique = unique[:max_count]
    return unique, messages


def format_t(t: float) -> str:
    return "0" if t == 0 else f"{t:.3g}"


def step_records(step, chars) -> list[dict]:
    """Every row of a sampling.Step as plain data (for the page, its session memo and the HTML), one dict a row.
    Each tensor is read out once (``tolist``), not element by element: for six continuations that was a few
    thousand tensor indexings a second of text."""
    tokens, probs, sample_probs = step.token.tolist(), step.prob.tolist(), step.sample_prob.tolist()
    top_ids, top_probs = step.top_ids.tolist(), step.top_probs.tolist()
    return [{"id": t, "ch": chars[t], "prob": p, "sample_prob": q,
             "alternatives": [(chars[i], a) for i, a in zip(ids, alts)], "slid": step.slid}
            for t, p, q, ids, alts in zip(tokens, probs, sample_probs, top_ids, top_probs)]


def step_record(step, chars, row: int = 0) -> dict:
    """One row of a sampling.Step as plain data (``step_records``)."""
    return step_records(step, chars)[row]


def continuations(model, ids, temperatures, n: int, seed: int, chars, hooks=None) -> list[list[dict]]:
    """One continuation of ``ids`` per temperature, each equal to a one-sequence run at that T with a generator
    seeded with ``seed``. All temperatures share one batched forward pass per step, which is several times faster
    than running them one after another, and one generator: rows that hold the same generator share its draws
    (``core.analysis.sampling.stream``). ``hooks``: run in every forward (steering, core.analysis.steering)."""
    temps = [float(t) for t in temperatures]
    if not temps:
        return []
    idx = torch.tensor([list(ids)] * len(temps), dtype=torch.long)  # (T, n): the prompt once per temperature
    gen = torch.Generator().manual_seed(int(seed))  # shared by the rows: one draw per step serves them all
    runs = [[] for _ in temps]
    for s in sampling.stream(model, idx, n, temps, generator=[gen] * len(temps), hooks=hooks):  # looked up now: see draw
        for run, record in zip(runs, step_records(s, chars)):
            run.append(record)
    return runs


def draw(model, ids, n_new: int, temperature: float, top_k: int | None = None, top_p: float | None = None,
         seed: int = 0, chars=(), repaint: Callable[[list[dict]], None] | None = None,
         hooks=None) -> tuple[list[dict], float]:
    """The Generation page's text: ``n_new`` tokens after ``ids``, drawn with a generator seeded with ``seed``, as
    ``step_record`` dicts, and the seconds it took. ``repaint(steps)``, when given, is called whenever
    ``repaint_due`` says the text drawn so far should be shown again (its time counts in the seconds). ``hooks``:
    (name, fn) pairs run in every forward of the loop (steering: ``core.analysis.steering.steer_hooks``); None or
    empty is the plain forward, exactly as without them."""
    steps, shown, shown_at = [], 0, time.perf_counter()
    gen = torch.Generator().manual_seed(int(seed))
    t0 = time.perf_counter()
    # sampling.stream is looked up at each call, not bound at import: a test replaces it to prove a text is not
    # drawn again
    for s in sampling.stream(model, [list(ids)], n_new, temperature, top_k, top_p, generator=gen, hooks=hooks):
        steps.append(step_record(s, chars))
        if repaint is not None and repaint_due(len(steps) - shown, time.perf_counter() - shown_at):
            repaint(steps)
            shown, shown_at = len(steps), time.perf_counter()
    return steps, time.perf_counter() - t0


def slid_steps(n_prompt: int, n_new: int, n_ctx: int) -> int:
    """Of n_new steps after a prompt of n_prompt tokens, how many re-read the whole window of n_ctx positions
    because the text has outgrown it (``core.analysis.sampling.stream`` flags them ``slid``): each costs a full forward
    pass over n_ctx positions instead of one position with the key/value cache."""
    return max(0, min(n_new, n_prompt + n_new - n_ctx - 1))


def fit_in_window(n_prompt: int, n_new: int, n_ctx: int) -> tuple[int, int]:
    """(prompt tokens to read, new tokens) such that the text never outgrows the window, for a model whose slid
    steps would take too long: at most n_ctx // 2 new tokens, after the last n_ctx - new tokens of the prompt."""
    new = min(n_new, max(1, n_ctx // 2))
    return min(n_prompt, n_ctx - new), new


@dataclass
class WindowPlan:
    """What a text of ``new`` tokens after the prompt reads (``window_plan``)."""
    read: int       # prompt tokens read: its last ones
    new: int        # tokens to generate
    slid: int       # of the tokens asked for, how many would re-read the whole window (``slid_steps``)
    seconds: float  # what those slid steps would take (0 when none would slide)
    cut: bool       # whether the text was shortened to fit the window (read or new less than asked)


def window_plan(n_prompt: int, n_new: int, n_ctx: int, window_seconds: Callable[[], float], rows: int = 1,
                budget_s: float = 30.0) -> WindowPlan:
    """All of the prompt and every token asked for, unless the text would outgrow n_ctx and its slid steps, for
    ``rows`` texts drawn side by side, would take over ``budget_s``: then ``fit_in_window``, and the key/value
    cache serves every step. ``window_seconds()`` is one slid step (a pass over n_ctx positions), asked only
    when some step would slide: timing it costs one."""
    slid = slid_steps(n_prompt, n_new, n_ctx)
    seconds = slid * rows * window_seconds() if slid else 0.0
    if seconds <= budget_s:
        return WindowPlan(read=n_prompt, new=n_new, slid=slid, seconds=seconds, cut=False)
    read, new = fit_in_window(n_prompt, n_new, n_ctx)
    return WindowPlan(read=read, new=new, slid=slid, seconds=seconds, cut=True)


@torch.no_grad()
def next_logits(model, ids) -> torch.Tensor:
    """The model's scores for the token after ``ids`` (non-empty, at most n_ctx): (m,) in float64."""
    return model(torch.tensor([list(ids)], dtype=torch.long), last_only=True).logits[0, -1].double()


def decoding_notes(temperature: float, m: int, top_k: int | None = None, top_p: float | None = None,
                   unit: str = "character") -> list[str]:
    """What a decoding setting amounts to, in words, where it reaches one of the limits: T = 0 or a tiny T
    is greedy, a huge T is uniform, top-k = 1 or top-p = 0 is greedy, top-k >= m or top-p >= 1 is plain
    sampling. Empty when nothing is special."""
    notes = []
    t = float(temperature)
    if t == 0:
        notes.append("T = 0 is the limit of the formula: all the probability sits on the largest logit, so this is "
                     "greedy decoding and the seed plays no role.")
    elif t < 0.01:
        notes.append(f"T = {t:g} is tiny: p(T) is practically one-hot, so this behaves like greedy decoding.")
    elif t > 100:
        notes.append(f"T = {t:g} is huge: p(T) is practically uniform (1/m = {1 / m:.4f} for every "
                     f"{unit}), so the text is close to random {unit}s.")
    if top_k is not None and t > 0:
        if top_k == 1:
            notes.append(f"top-k = 1 keeps only the most likely {unit}: this is greedy decoding.")
        elif top_k >= m:
            notes.append(f"top-k = {top_k} keeps all m = {m} {unit}s: this is plain sampling.")
    if top_p is not None and t > 0:
        if top_p < 1e-9:
            notes.append(f"top-p = 0 still keeps the most likely {unit}, and only it: this is greedy decoding.")
        elif top_p >= 1:
            notes.append(f"top-p = 1 keeps every {unit}: this is plain sampling.")
        elif top_p < 0.05:
            notes.append(f"top-p = {top_p:g} is tiny: almost always only the most likely {unit} survives, "
                         "which is nearly greedy.")
    return notes


def text_measures(steps: list[dict]) -> dict:
    """Of a generated text (``step_record`` dicts): distinct 3-grams, the mean probability the model gave its
    tokens, the perplexity exp(-mean log p) at T = 1, and the step at which the window began to slide
    (None if it never did)."""
    if not steps:
        return {"distinct_3": None, "mean_prob": None, "perplexity": None, "slid_at": None}
    mean_lp = sum(math.log(max(s["prob"], 1e-300)) for s in steps) / len(steps)
    return {"distinct_3": distinct_n([s["id"] for s in steps], 3),
            "mean_prob": sum(s["prob"] for s in steps) / len(steps),
            "perplexity": math.exp(-mean_lp),
            "slid_at": next((i for i, s in enumerate(steps) if s["slid"]), None)}

