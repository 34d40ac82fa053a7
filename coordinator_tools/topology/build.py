"""Turning a graph into a published topology: weights, spectral gap, addresses, run id.

The weights and the spectral gap are computed here once, at publication time, so every node
and the auditor read the same numbers from the file instead of recomputing them. A graph drawn
anew every step (schedule erdos_renyi) has neither: each node derives a step's graph itself.
Impossible inputs raise ValueError with a one-line message.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import networkx as nx
import numpy as np
from pydantic import ValidationError

from node.mixing import edge_weights, spectral_gap
from node.schema import describe_validation_error
from node.topology import (
    ROW_SUM_TOLERANCE,
    ErdosRenyiSchedule,
    FixedSchedule,
    GraphSchedule,
    NetworkParams,
    ProtocolParams,
    Topology,
    Weighting,
)

DerivedWeighting = Literal["metropolis", "min_degree"]
DEFAULT_HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 50100
# Below this the gossip matrix does not mix (a -1 eigenvalue, or a disconnected graph).
MIN_SPECTRAL_GAP = 1e-12


@dataclass(frozen=True)
class Mixing:
    """The gossip weights of a graph and the spectral numbers planners need before publishing."""

    weighting: Weighting
    weights: dict[tuple[int, int], float]
    spectral_gap: float
    gamma: float


def gossip_mixing(
    graph: nx.Graph,
    weighting: DerivedWeighting = "metropolis",
    explicit_weights: Mapping[tuple[int, int], float] | None = None,
) -> Mixing:
    """Weights of every edge u < v (derived from degrees, or the explicit ones) and the gap of W."""
    n = graph.number_of_nodes()
    if sorted(graph.nodes) != list(range(n)):
        raise ValueError("graph nodes must be 0..n-1")
    if n < 2:
        raise ValueError(f"a topology needs at least 2 nodes, the graph has {n}")
    if not nx.is_connected(graph):
        raise ValueError(f"graph is not connected: it has {nx.number_connected_components(graph)} components")
    if explicit_weights is None:
        weights = {edge: float(w) for edge, w in sorted(edge_weights(graph, weighting).items())}
        label: Weighting = weighting
    else:
        weights = _checked_explicit(graph, explicit_weights)
        label = "explicit"
    gap, gamma = spectral_gap(_gossip_matrix(n, weights))
    if gap < MIN_SPECTRAL_GAP:
        raise ValueError(
            f"{label} weights give spectral gap {gap:.3g}, so gossip does not converge (W has eigenvalue -1, "
            "as on a bipartite graph with no self-weight); use metropolis weights"
        )
    return Mixing(label, weights, gap, gamma)


def build_topology(
    graph: nx.Graph,
    *,
    graph_name: str,
    run_id: str,
    protocol: ProtocolParams,
    weighting: DerivedWeighting = "metropolis",
    graph_seed: int | None = None,
    addresses: Sequence[str] | None = None,
    host: str = DEFAULT_HOST,
    base_port: int = DEFAULT_BASE_PORT,
    ids_per_process: int = 1,
    network: NetworkParams = NetworkParams(),
    explicit_weights: Mapping[tuple[int, int], float] | None = None,
    schedule: GraphSchedule = FixedSchedule(),
) -> Topology:
    """The topology file's contents for `graph`; explicit_weights, when given, replace `weighting`.

    Nodes listen on host:base_port+id unless `addresses` lists one address per node; with
    `ids_per_process` K, ids id // K share host:base_port + id // K, i.e. one process hosts
    each K consecutive ids. With a schedule that draws the graph per step, `graph` only gives
    the number of nodes.
    """
    published_graph = _published_graph(graph, schedule, weighting, explicit_weights)
    n = graph.number_of_nodes()
    if addresses is None:
        if ids_per_process < 1:
            raise ValueError(f"ids per process must be at least 1, got {ids_per_process}")
        addresses = [f"{host}:{base_port + node // ids_per_process}" for node in range(n)]
    elif len(addresses) != n:
        raise ValueError(f"{len(addresses)} addresses given for {n} nodes")
    document = {
        "run_id": run_id,
        "graph": graph_name,
        "graph_seed": graph_seed,
        "nodes": [{"id": node, "address": address} for node, address in enumerate(addresses)],
        "schedule": schedule,
        **published_graph,
        "protocol": protocol,
        "network": network,
    }
    try:
        return Topology.model_validate(document)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc, document)) from None


def _published_graph(
    graph: nx.Graph,
    schedule: GraphSchedule,
    weighting: DerivedWeighting,
    explicit_weights: Mapping[tuple[int, int], float] | None,
) -> dict[str, object]:
    """A fixed graph's weighted edges and spectral numbers; for a graph drawn per step, only its weighting.

    Explicit weights on a drawn graph are published as such, for the topology to refuse in its own words.
    """
    if isinstance(schedule, ErdosRenyiSchedule):
        return {"weighting": weighting if explicit_weights is None else "explicit"}
    mixing = gossip_mixing(graph, weighting, explicit_weights)
    return {
        "edges": [{"u": u, "v": v, "weight": w} for (u, v), w in mixing.weights.items()],
        "weighting": mixing.weighting,
        "spectral_gap": mixing.spectral_gap,
        "gamma": mixing.gamma,
    }


def new_run_id(graph_name: str) -> str:
    """A run id that says what ran and cannot collide with another run: '<graph>-<8 hex digits>'."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", graph_name).strip("-.")[:48] or "run"
    return f"{slug}-{secrets.token_hex(4)}"


def _checked_explicit(graph: nx.Graph, weights: Mapping[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """Explicit weights keyed u < v, one per edge of `graph`, leaving every node a self-weight >= 0."""
    keyed = {(min(u, v), max(u, v)): float(w) for (u, v), w in weights.items()}
    edges = {(min(u, v), max(u, v)) for u, v in graph.edges()}
    if keyed.keys() != edges:
        odd = sorted(keyed.keys() ^ edges)[0]
        raise ValueError(f"explicit weights must cover exactly the graph's edges; edge {odd} does not match")
    outside = [(edge, w) for edge, w in keyed.items() if not 0.0 < w <= 1.0]
    if outside:
        raise ValueError(f"explicit weight {outside[0][1]} of edge {outside[0][0]} is not in (0, 1]")
    row_sums = np.zeros(graph.number_of_nodes())
    for (u, v), w in keyed.items():
        row_sums[u] += w
        row_sums[v] += w
    worst = int(np.argmax(row_sums))
    if row_sums[worst] > 1.0 + ROW_SUM_TOLERANCE:
        raise ValueError(f"explicit weights of node {worst} sum to {row_sums[worst]:.6f} > 1")
    return dict(sorted(keyed.items()))


def _gossip_matrix(n: int, weights: Mapping[tuple[int, int], float]) -> np.ndarray:
    """W = I - L, with L the Laplacian of the weighted graph: W_uv = w_uv, W_uu = 1 - sum_v w_uv."""
    weighted = nx.Graph()
    weighted.add_nodes_from(range(n))
    weighted.add_weighted_edges_from((u, v, w) for (u, v), w in weights.items())
    return np.eye(n) - nx.laplacian_matrix(weighted, nodelist=range(n)).toarray()
