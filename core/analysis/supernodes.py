"""Supernodes of an attribution graph (issue 57; circuit-tracer's issue #20, Neuronpedia's #144): kept features
grouped under one name and drawn as one node, its edges the sums of its members' edges, and the groups a page
proposes, features of one block whose decoder directions agree.

Works on the pruned graph's lists (nodes: dicts with "node", "kind", "pos", "row", "influence", ...; edges: dicts
with "source", "target", "weight"), as the Attribution graph page draws them. A group's node is numbered
``-1 - k`` (k its place in the groups), never a graph node's number. Pure numpy; no Streamlit."""
from __future__ import annotations

import numpy as np

AGREE = 0.5  # cosine of two decoder rows at or above which the page proposes their features as one group


def group_id(k: int) -> int:
    """The node number of the k-th group: negative, so it is never a graph node's."""
    return -1 - k


def group_id_of(node: int) -> int:
    """The place in the groups of a group's node number (group_id's inverse)."""
    return -1 - node


def switched_off(pinned, groups: list[tuple[str, list[int]]]) -> list[int]:
    """The feature nodes that switching off ``pinned`` switches off: a feature node itself, a group's node
    (``group_id``) its members; each once, in order. A link or an export names these, never a group's number."""
    out = []
    for i in map(int, pinned):
        if i >= 0:
            out.append(i)
        elif group_id_of(i) < len(groups):  # a group since ungrouped is nothing
            out += groups[group_id_of(i)][1]
    return list(dict.fromkeys(int(i) for i in out))


def merge(nodes: list[dict], edges: list[dict], groups: list[tuple[str, list[int]]]):
    """(nodes, edges) with each group's members replaced by one node: kind "groups", its label the group's name,
    its influence the members' sum, at the latest member's position in the highest member's row; an edge between
    a group and another node is the sum of the members' edges with that node (edges inside a group are dropped),
    strongest first. A node in two groups belongs to the first; a group with no kept member is left out."""
    owner, made = {}, []
    by_id = {n["node"]: n for n in nodes}
    for k, (name, members) in enumerate(groups):
        mine = [by_id[m] for m in members if m in by_id and m not in owner]
        if not mine:
            continue
        for m in mine:
            owner[m["node"]] = group_id(k)
        made.append({"node": group_id(k), "label": name, "kind": "groups", "members": [m["node"] for m in mine],
                     "pos": max(m["pos"] for m in mine), "row": max(m["row"] for m in mine),
                     "influence": float(sum(m["influence"] for m in mine)), "text": name})
    out_nodes = [n for n in nodes if n["node"] not in owner] + made
    summed: dict = {}
    for e in edges:
        s, t = owner.get(e["source"], e["source"]), owner.get(e["target"], e["target"])
        if s == t:  # inside one group
            continue
        summed[(s, t)] = summed.get((s, t), 0.0) + e["weight"]
    out_edges = [{"source": s, "target": t, "weight": w} for (s, t), w in summed.items()]
    out_edges.sort(key=lambda e: -abs(e["weight"]))
    return out_nodes, out_edges


def cosines(directions: np.ndarray) -> np.ndarray:
    """(k, k) cosine similarity of k directions (rows); a zero row agrees with nothing."""
    d = np.asarray(directions, dtype=np.float64)
    norm = np.linalg.norm(d, axis=1, keepdims=True)
    unit = np.divide(d, norm, out=np.zeros_like(d), where=norm > 0)
    return unit @ unit.T


def propose(layers: list[int], directions: np.ndarray, threshold: float = AGREE,
            words: list[str | None] | None = None) -> list[list[int]]:
    """Groups of indices into ``layers``/``directions`` (one row per kept feature: its block and its decoder row):
    features of one block joined whenever their cosine is at least ``threshold``, or their explanations read the
    same (``words``: one per feature, None where it has none or is unexplained), the joined sets (connected
    components) of two or more, largest first. The same feature at two positions has cosine 1: one group."""
    c = cosines(directions)
    said = words or [None] * len(layers)
    parent = list(range(len(layers)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i in range(len(layers)):
        for j in range(i + 1, len(layers)):
            if layers[i] == layers[j] and (c[i, j] >= threshold or (said[i] is not None and said[i] == said[j])):
                parent[root(i)] = root(j)
    sets: dict = {}
    for i in range(len(layers)):
        sets.setdefault(root(i), []).append(i)
    return sorted((s for s in sets.values() if len(s) > 1), key=lambda s: (-len(s), s[0]))
