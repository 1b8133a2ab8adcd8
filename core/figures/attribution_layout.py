"""Where each kept node of the attribution graph is drawn (issue 57): a grid of cells, a column per position of the
prompt and a band per row (the embeddings at the bottom, then each block: its features and its error node); the
nodes of one cell spread within it in a small grid, the most influential first (top left, down the first column),
each with its short text to its right; the output's logits in a column of their own at the right, the likeliest on
top. Columns are as wide as their busiest cell needs, so a position with many features gets room and one with only
its token stays narrow.

Coordinates are design pixels: the figure's x axis spans the layout's width and its plot area is ``height`` tall,
so at a plot ``WIDTH`` px wide (or wider) a marker of ``size`` px drawn at (x, y) keeps clear of every other; on a
prompt too wide for it, everything (markers and text) is scaled down together. Pure function of the node lists."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

WIDTH = 840         # px of plot area the layout fits: the chart's at a 1400 px window, sidebar open (measured)
SIZES = (9.0, 24.0)  # px of the least and most influential feature's marker; embeddings, logits and errors in between
FONT = 11           # px of a node's text
CHAR = 0.62         # a character's width in FONT units (Plotly's default sans-serif, generous)
GAP = 5.0           # px between a marker and its text, and after the text
ROWS = 3            # nodes stacked in one cell before it opens another column
PITCH = 30.0        # px from one stacked node to the next (above SIZES[1])
BAND_PAD = 18.0     # px between two bands
EMBED = 12.0        # px of an embedding's and a logit's marker
EMBED_PITCH = 24.0  # px between the two staggered levels of the embeddings (their text above and below)


@dataclass
class Layout:
    x: dict = field(default_factory=dict)      # node -> x (design px)
    y: dict = field(default_factory=dict)      # node -> y (design px, 0 at the bottom)
    size: dict = field(default_factory=dict)   # node -> marker size in px at WIDTH
    width: float = 0.0                         # the x axis's span
    height: float = 0.0                        # the plot area's height in px (and the y axis's span)
    font: float = FONT
    bands: list = field(default_factory=list)  # (y centre, row) of each band, bottom up
    above: dict = field(default_factory=dict)  # embedding node -> its text above its marker (else below)
    output_x: float = 0.0                      # the logits column's x


def text_px(text: str, font: float = FONT) -> float:
    return len(text) * font * CHAR


def _sub(members: list[dict], size: dict) -> float:
    """px of one column of a cell's grid: its widest marker and text."""
    return max(size[n["node"]] + GAP + text_px(n["text"]) + GAP for n in members)


def marker_px(node: dict, big: float) -> float:
    """A node's marker: features and groups by the square root of their influence, the others a fixed middle size."""
    if node["kind"] in ("features", "groups", "errors"):
        lo, hi = SIZES
        return lo + (hi - lo) * math.sqrt(max(node["influence"], 0.0) / big)
    return EMBED


def _embeddings(lay: Layout, p: int, members: list[dict], x: float, middle: float):
    """One position's embeddings: even positions on the band's upper levels (text above), odd ones on its lower
    levels (text below), so two neighbours share the width of one text; the token outermost."""
    upper = p % 2 == 0
    first = middle + (len(members) - 0.5) * EMBED_PITCH if upper else middle - EMBED_PITCH / 2
    for k, n in enumerate(sorted(members, key=lambda n: (n["kind"] != "tokens") == upper)):
        lay.x[n["node"]], lay.y[n["node"]], lay.above[n["node"]] = x, first - k * EMBED_PITCH, upper


def place(nodes: list[dict], n_pos: int, width: float = WIDTH) -> Layout:
    """The layout of ``nodes`` (dicts with "node", "kind", "pos", "row", "influence", "text"; logits carry their
    rank as "pos") over ``n_pos`` positions."""
    big = max((n["influence"] for n in nodes), default=1.0) or 1.0
    size = {n["node"]: marker_px(n, big) for n in nodes}
    cells: dict = {}
    logits = []
    for n in nodes:
        (logits if n["kind"] == "logits" else cells.setdefault((n["pos"], n["row"]), [])).append(n)
    for members in cells.values():
        members.sort(key=lambda n: (-n["influence"], n["node"]))
    rows_of = {}  # row -> stacked nodes its busiest cell needs
    col_w = {p: 0.0 for p in range(n_pos)}
    for (p, row), members in cells.items():
        if row == 0:  # the embeddings: stacked, every other position a level lower, so a column takes half its text
            rows_of[0] = max(rows_of.get(0, 1), len(members))
            col_w[p] = max(col_w[p], max(max(size[n["node"]], text_px(n["text"])) + GAP for n in members) / 2)
            continue
        stack = min(ROWS, len(members))
        rows_of[row] = max(rows_of.get(row, 1), stack)
        col_w[p] = max(col_w[p], math.ceil(len(members) / stack) * _sub(members, size))
    left, x0 = {}, GAP
    for p in range(n_pos):
        left[p], x0 = x0, x0 + col_w[p]
    out_w = max((size[n["node"]] + GAP + text_px(n["text"]) + GAP for n in logits), default=0.0)
    out_x = x0 + 2 * GAP + (max((size[n["node"]] for n in logits), default=0.0)) / 2
    total_w = out_x + out_w
    band_rows = sorted(rows_of) if rows_of else [0]
    lay = Layout(width=total_w)
    y0 = BAND_PAD
    band_y = {}
    for row in range(0, max(band_rows) + 1):
        h = 2 * rows_of.get(0, 1) * EMBED_PITCH + PITCH if row == 0 else rows_of.get(row, 1) * PITCH
        band_y[row] = (y0, h)
        lay.bands.append((y0 + h / 2, row))
        y0 += h + BAND_PAD
    lay.height = max(y0, len(logits) * PITCH + 2 * BAND_PAD)
    for (p, row), members in cells.items():
        base, h = band_y[row]
        if row == 0:
            _embeddings(lay, p, members, left[p] + col_w[p] / 2, base + h / 2)
            continue
        stack = min(ROWS, len(members))
        sub = _sub(members, size)
        top = base + h / 2 + (stack - 1) * PITCH / 2  # the stack centred in its band
        for k, n in enumerate(members):
            col, r = divmod(k, stack)
            lay.x[n["node"]] = left[p] + col * sub + size[n["node"]] / 2
            lay.y[n["node"]] = top - r * PITCH
    logits.sort(key=lambda n: n["pos"])  # by rank: the likeliest on top
    for k, n in enumerate(logits):
        lay.x[n["node"]] = out_x
        lay.y[n["node"]] = lay.height - BAND_PAD - k * PITCH
    lay.output_x = out_x
    scale = min(1.0, width / total_w)  # too wide for the plot: markers and text shrink with the spacing
    lay.size = {k: v * scale for k, v in size.items()}
    lay.font = max(7.0, FONT * scale)
    return lay
