"""Reading a user's graph from a networkx-style edge list file.

One edge ``u v`` per line, nodes numbered 0..n-1; ``#`` starts a comment; a third column,
when present on every line, gives the edge's explicit gossip weight W_uv. Any problem is a
ConfigError naming the file and line, because the file is the user's to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from node.errors import ConfigError


@dataclass(frozen=True)
class EdgeList:
    """The graph of an edge list file and, if the file gave them, its weights {(u, v): W_uv} with u < v."""

    graph: nx.Graph
    weights: dict[tuple[int, int], float] | None


def read_edge_list(path: Path) -> EdgeList:
    """Parse and check an edge list: integer ids 0..n-1, no self-loops, no repeated edges."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read edge list ({exc})") from None
    first_line: dict[tuple[int, int], int] = {}
    weights: dict[tuple[int, int], float] = {}
    weighted: bool | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path}:{lineno}"
        if len(fields) not in (2, 3):
            raise ConfigError(f"{where}: expected 'u v' or 'u v weight', got {len(fields)} columns")
        if weighted is None:
            weighted = len(fields) == 3
        elif weighted != (len(fields) == 3):
            raise ConfigError(f"{where}: either every edge has a weight or none does")
        u, v = (_node_id(token, where) for token in fields[:2])
        if u == v:
            raise ConfigError(f"{where}: self-loop on node {u}")
        edge = (min(u, v), max(u, v))
        if edge in first_line:
            raise ConfigError(f"{where}: edge {edge} already given on line {first_line[edge]}")
        first_line[edge] = lineno
        if weighted:
            weights[edge] = _weight(fields[2], where)
    if not first_line:
        raise ConfigError(f"{path}: no edges")
    named = {node for edge in first_line for node in edge}
    n = max(named) + 1
    if len(named) != n:
        absent = min(set(range(n)) - named)
        raise ConfigError(f"{path}: node ids must be 0..n-1 with an edge each; node {absent} of 0..{n - 1} has none")
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(first_line)
    return EdgeList(graph, weights if weighted else None)


def _node_id(token: str, where: str) -> int:
    try:
        node = int(token)
    except ValueError:
        raise ConfigError(f"{where}: node id {token!r} is not an integer") from None
    if node < 0:
        raise ConfigError(f"{where}: node id {node} is negative")
    return node


def _weight(token: str, where: str) -> float:
    try:
        weight = float(token)
    except ValueError:
        raise ConfigError(f"{where}: weight {token!r} is not a number") from None
    if not 0.0 < weight <= 1.0:
        raise ConfigError(f"{where}: weight {weight} is not in (0, 1]")
    return weight
