"""A topology graph laid out for an SVG: nodes in columns by depth, edges as lines.

Guarantees: pure and deterministic (the same graph gives the same picture);
every node of the graph is placed once, in the column of its longest path
from a root, so every edge points right; a graph the engine accepted has no
cycle, and a node on one (never stored) is still placed, in column 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NODE_W = 150
NODE_H = 46
COL_GAP = 70
ROW_GAP = 24
MARGIN = 16


@dataclass(frozen=True)
class PlacedNode:
    id: str
    x: int
    y: int


@dataclass(frozen=True)
class PlacedEdge:
    source: str
    target: str
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    nodes: list[PlacedNode]
    edges: list[PlacedEdge]
    width: int
    height: int
    node_w: int = NODE_W
    node_h: int = NODE_H


def layout(graph: dict[str, Any]) -> Layout:
    """Columns by longest path from a root; rows in the graph's own node order."""
    ids = [str(n["id"]) for n in graph.get("nodes") or []]
    edges = [(str(e["from"]), str(e["to"])) for e in graph.get("edges") or []]
    edges = [(a, b) for a, b in edges if a in ids and b in ids]
    upstream: dict[str, list[str]] = {i: [] for i in ids}
    for a, b in edges:
        upstream[b].append(a)
    depth: dict[str, int] = {}

    def depth_of(node: str, seen: frozenset[str]) -> int:
        if node in depth:
            return depth[node]
        if node in seen:
            return 0
        ups = [depth_of(u, seen | {node}) + 1 for u in upstream[node]]
        depth[node] = max(ups, default=0)
        return depth[node]

    columns: dict[int, list[str]] = {}
    for node in ids:
        columns.setdefault(depth_of(node, frozenset()), []).append(node)
    where: dict[str, tuple[int, int]] = {}
    for col, members in columns.items():
        for row, node in enumerate(members):
            where[node] = (MARGIN + col * (NODE_W + COL_GAP), MARGIN + row * (NODE_H + ROW_GAP))
    placed = [PlacedNode(n, *where[n]) for n in ids]
    lines = [
        PlacedEdge(
            a,
            b,
            where[a][0] + NODE_W,
            where[a][1] + NODE_H // 2,
            where[b][0],
            where[b][1] + NODE_H // 2,
        )
        for a, b in edges
    ]
    rows = max((len(m) for m in columns.values()), default=1)
    width = 2 * MARGIN + len(columns) * NODE_W + max(len(columns) - 1, 0) * COL_GAP
    height = 2 * MARGIN + rows * NODE_H + (rows - 1) * ROW_GAP
    return Layout(placed, lines, max(width, NODE_W), height)
