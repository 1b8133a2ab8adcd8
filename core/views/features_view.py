"""What the Features page says and draws as text: contexts as escaped HTML (each token shaded by the unit's
activation, the token a context is centred on outlined, spaces and newlines visible, every token its own box so a
sub-word token reads as one), the health numbers with a sentence each, and the prompt view's rows."""
from __future__ import annotations

import html
import json
import math

from core.features.browse import Context, PromptUnits

# the health numbers, SAELens's names and SAELens's formulas (core.features.train's docstring), each with how to read it
HEALTH = (
    ("l0", "L0", "{:.1f}", "How many latents are active on a token, on average (E #{j: f_j > 0}): a small number "
                           "means each token is described by a few features (TopK fixes it at k)."),
    ("explained_variance", "explained variance", "{:.3f}",
     "The share of the activations' variance the reconstruction keeps, 1 − E‖x − x̂‖² / E‖x − E x‖²: 1 is perfect, "
     "0 is no better than the mean."),
    ("dead_fraction", "dead latents", "{:.1%}", "Latents that never fire on the held-out text: wasted capacity; a few "
                                               "percent is fine, half is a failed run."),
    ("ce_loss_score", "CE loss score", "{:.3f}",
     "The model's loss with the SAE's reconstruction spliced in, scaled so that 1 is the clean model and 0 is the "
     "site zeroed, (CE zeroed − CE spliced) / (CE zeroed − CE clean): how much of what the model needs the SAE "
     "kept."),
    ("mse", "MSE", "{:.4f}", "SAELens's mse: the squared error of the reconstruction, E‖x − x̂‖², summed over a "
                             "token's numbers and averaged over the tokens: small against the activations' own size "
                             "(see explained variance)."),
)


def scroll_script(anchor: str, click: int) -> str:
    """A script that scrolls the element of id ``anchor`` into view; ``click`` makes each one new (the browser runs
    a script again only when its element changed)."""
    a = html.escape(json.dumps(str(anchor)), quote=False)  # a JS string literal, and nothing that ends the element
    return (f'<script data-click="{int(click)}">window.parent.document.getElementById({a})'
            '?.scrollIntoView({behavior: "smooth", block: "start"});</script>')


def health_rows(metrics: dict) -> list[tuple[str, str, str]]:
    """(label, value, help) per health number; "n/a" where the metrics lack one."""
    rows = []
    for key, label, fmt, words in HEALTH:
        v = metrics.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        rows.append((label, fmt.format(v) if ok else "n/a", words))
    return rows


def precision_words(metrics: dict) -> str:
    """A sentence saying which precision trained the SAE (its metrics.json's "precision", core.nn.precision); "" for
    one saved before SAEs recorded it, or a value that is neither (a hand-edited file says nothing)."""
    p = metrics.get("precision") if isinstance(metrics, dict) else None
    if p == "bfloat16":
        return (" Trained with bfloat16 matrix products, which a short probe measured faster on this CPU at this "
                "shape with the same loss.")
    return " Trained in float32." if p == "float32" else ""


def _shade(a: float, top: float) -> str:
    """An orange background whose strength is the activation's share of ``top`` (none at 0 or below)."""
    s = 0.0 if top <= 0 or a <= 0 else min(1.0, a / top)
    return f"rgba(230,85,13,{0.85 * s:.2f})"


MARK = "#2c7fb8"  # blue: where a unit's explanation (its rule) holds, under the orange of its activation


def context_html(c: Context, top: float | None = None, marks: list[bool] | None = None) -> str:
    """One context as a line of HTML: the tokens (already visible strings: ␣ ⏎), shaded by activation against
    ``top`` (default: this context's own largest), the centre token outlined, each activation in its tooltip; with
    ``marks`` (one bool per token), the tokens where the unit's rule holds underlined in blue."""
    top = max(c.acts) if top is None else top
    cells = []
    for j, (t, a) in enumerate(zip(c.tokens, c.acts)):
        border = "2px solid #222" if j == c.at else "1px solid #ddd"
        marked = bool(marks and marks[j])
        tip = f"{t}: {a:.3f}" + (" (the rule holds here)" if marked else "")
        line = f"box-shadow:inset 0 -4px 0 {MARK};" if marked else ""
        cells.append(f'<span title="{html.escape(tip, quote=True)}" style="background:{_shade(a, top)};{line}'
                     f'border:{border};padding:0 2px;margin:0 1px;border-radius:3px;white-space:pre">'
                     f'{html.escape(t)}</span>')
    return (f'<div style="font-family:monospace;font-size:15px;line-height:1.9;overflow-x:auto;white-space:nowrap">'
            f'<span style="display:inline-block;width:4.5em;color:#666">{c.value:.2f}</span>{"".join(cells)}</div>')


def contexts_html(contexts: list[Context], top: float | None = None, marks: list | None = None) -> str:
    """Contexts one per line, all shaded against ``top`` (default: the largest of them); ``marks``: one list of
    bools per context, where the unit's rule holds (core.features.explanations.context_marks)."""
    if not contexts:
        return f'<div style="color:#666">{html.escape("none on the held-out text")}</div>'  # escaped: the check reads it
    top = max(c.value for c in contexts) if top is None else top
    return "".join(context_html(c, top, marks[i] if marks else None) for i, c in enumerate(contexts))


def prompt_rows(pu: PromptUnits, kind: str, last: int | None = None) -> list[dict]:
    """One row per position (the last ``last`` only, when given): the token and its top units firing (> 0) as
    "#unit (activation)"."""
    T = len(pu.tokens)
    start = 0 if last is None else max(0, T - last)
    rows = []
    for t in range(start, T):
        row = {"position": t + 1, "token": pu.tokens[t]}
        for j, (u, v) in enumerate(zip(pu.units[t], pu.values[t])):
            row[f"{kind} {j + 1}"] = f"#{int(u)} ({v:.2f})" if v > 0 else ""
        rows.append(row)
    return rows


def firing_units(pu: PromptUnits, pos: int) -> list[tuple[int, float]]:
    """(unit, activation) of the units that fire at position ``pos`` (counted from 0), largest first."""
    return [(int(u), float(v)) for u, v in zip(pu.units[pos], pu.values[pos]) if v > 0]


def purity_words(kind_a: str, a: dict, kind_b: str, b: dict) -> str:
    """One sentence comparing two purity summaries, whichever way they go."""
    if not a.get("units") or not b.get("units"):
        return "One of the two sets has no unit that fires, so there is nothing to compare."
    more = kind_a if a["mean"] > b["mean"] else kind_b
    return (f"{kind_a}: mean purity {a['mean']:.2f} (median {a['median']:.2f}, {a['above_half']:.0%} above 0.5) "
            f"against {kind_b}: {b['mean']:.2f} (median {b['median']:.2f}, {b['above_half']:.0%} above 0.5). "
            f"On this measure the {more} are the more single-token.")
