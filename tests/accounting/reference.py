"""Test references for the accountants: graphs as topologies, and straightforward dense versions.

The dense versions follow the definitions literally (dense matrix products, one message at a
time); the product code must agree with them. The benchmark times them against the product.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from node.mixing import edge_weights, spectral_gap
from node.topology import Edge, MuffliatoParams, NodeSpec, Topology


def topology_from_graph(
    graph: nx.Graph,
    *,
    rounds: int,
    accelerated: bool,
    weighting: str = "metropolis",
    sigma: float = 1.0,
    sensitivity: float = 1.0,
    alpha: float = 2.0,
) -> Topology:
    """A published topology for `graph` (nodes relabelled 0..n-1) with exact-rule weights."""
    graph = nx.convert_node_labels_to_integers(graph, ordering="sorted")
    weights = edge_weights(graph, weighting)
    edges = [Edge(u=u, v=v, weight=float(w)) for (u, v), w in sorted(weights.items())]
    n = graph.number_of_nodes()
    matrix = np.eye(n)
    for edge in edges:
        matrix[edge.u, edge.v] = matrix[edge.v, edge.u] = edge.weight
        matrix[edge.u, edge.u] -= edge.weight
        matrix[edge.v, edge.v] -= edge.weight
    gap, gamma = spectral_gap(matrix)
    return Topology(
        run_id="accounting-test",
        graph="test",
        nodes=[NodeSpec(id=k, address=f"127.0.0.1:{20000 + k}") for k in range(n)],
        edges=edges,
        weighting=weighting,
        spectral_gap=min(max(gap, 1e-12), 1.0),
        gamma=min(max(gamma, 1e-12), 2.0),
        protocol=MuffliatoParams(
            sigma=sigma, sensitivity=sensitivity, alpha=alpha, rounds=rounds, accelerated=accelerated, dimension=1
        ),
    )
