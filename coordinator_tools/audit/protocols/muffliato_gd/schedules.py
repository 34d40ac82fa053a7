"""A fixed graph against a fresh Erdős–Rényi graph every step (Muffliato Fig. 1b): the spread of pairwise losses.

Drawing the graph anew every step spreads every node's gradients over changing neighbours, so
the pairwise losses come out more even than on a fixed graph, where a neighbour sees far more
than a distant node. The audited run gives one side (its realized schedule, drop-outs
included); the other schedule is planned (ex ante: every node completes every round) on the
same nodes, steps, gossip rounds, noise and accounting options:

* a run on a fixed graph is compared with G(n, p) drawn per step at the fixed graph's mean
  degree, p = mean degree / (n − 1), from the public seed COUNTERPART_SEED, with plain gossip
  (a graph drawn per step has no spectral gap to accelerate with);
* a run on graphs drawn per step is compared with the first of its step graphs that is
  connected, kept fixed for every step (Fig. 1b's fixed Erdős–Rényi graph).

Each side is summarised by the exact ε (the proven bound) over its ordered pairs: mean, deviation
and quantiles at QUANTILE_LEVELS, so the report stays small whatever n; and the same of the
linearized ε (upper end), the fixed-gradient model Muffliato's figure draws, which is no bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import networkx as nx
import numpy as np

from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account
from coordinator_tools.topology.build import build_topology
from node.topology import ErdosRenyiSchedule, Topology, erdos_renyi_edges

Role = Literal["realized", "planned"]
COUNTERPART_SEED = 0
QUANTILE_LEVELS = tuple(step / 20 for step in range(21))


def schedule_comparison(topology: Topology, losses: PairwiseLosses,
                        accounting: Mapping[str, Any]) -> dict[str, object] | None:
    """The report's `learning.schedule_comparison`: the run (realized) against the other schedule (planned).

    None when there is nothing to compare: without noise every loss is infinite, and a run on
    graphs drawn per step none of which is connected has no fixed counterpart.
    """
    if losses.sigma == 0:
        return None
    counterpart = counterpart_topology(topology)
    if counterpart is None:
        return None
    planned = account(planned_transcript(counterpart, rounds_per_step=counterpart.protocol.gossip_rounds),
                      **accounting)
    return {
        "eps": f"exact eps (the proven bound) at delta = {losses.delta:g} over the n(n-1) ordered pairs",
        "linearized_eps": f"linearized eps (upper end; no bound on the run) at delta = {losses.delta:g}, likewise",
        "quantile_levels": list(QUANTILE_LEVELS),
        "realized": _side(topology, losses, "realized"),
        "planned": _side(counterpart, planned, "planned"),
    }


def counterpart_topology(topology: Topology) -> Topology | None:
    """The run's topology on the other schedule (see the module's docstring), or None if it has none."""
    params = topology.protocol
    same_nodes = {"run_id": topology.run_id, "addresses": [node.address for node in topology.nodes],
                  "network": topology.network}
    if isinstance(topology.schedule, ErdosRenyiSchedule):
        step = _first_connected_step(topology)
        if step is None:
            return None
        return build_topology(_step_graph(topology, step), protocol=params, weighting=topology.weighting,
                              graph_name=f"step {step}'s G(n, p = {topology.schedule.p:.3g})", **same_nodes)
    p = _mean_degree(topology) / (topology.n - 1)
    return build_topology(nx.empty_graph(topology.n), graph_name=f"G(n, p = {p:.3g}) per step",
                          protocol=params.model_copy(update={"accelerated": False}),
                          weighting="metropolis" if topology.weighting == "explicit" else topology.weighting,
                          schedule=ErdosRenyiSchedule(p=p, seed=COUNTERPART_SEED), **same_nodes)


def _side(topology: Topology, losses: PairwiseLosses, role: Role) -> dict[str, object]:
    """One schedule's description and the distribution of its pairwise ε, exact and linearized."""
    off = ~np.eye(losses.n, dtype=bool)
    drawn = isinstance(topology.schedule, ErdosRenyiSchedule)
    return {
        "role": role,
        "schedule": topology.schedule.kind,
        "graph": topology.graph,
        "mean_degree": topology.schedule.p * (topology.n - 1) if drawn else _mean_degree(topology),
        "edge_probability": topology.schedule.p if drawn else None,
        "seed": topology.schedule.seed if drawn else None,
        "accelerated": topology.protocol.accelerated,
        "eps": _spread(losses.exact_eps_upper[off]),
        "linearized_eps": _spread(losses.columns["linearized"].eps_upper[off]),
    }


def _spread(eps: np.ndarray) -> dict[str, object]:
    """Mean, deviation, extremes and quantiles of the pairs' ε."""
    return {"mean": float(eps.mean()), "std": float(eps.std()), "min": float(eps.min()), "max": float(eps.max()),
            "quantiles": [float(q) for q in np.quantile(eps, QUANTILE_LEVELS)]}


def _mean_degree(topology: Topology) -> float:
    return 2 * len(topology.edges) / topology.n


def _step_graph(topology: Topology, step: int) -> nx.Graph:
    graph = nx.empty_graph(topology.n)
    graph.add_edges_from(erdos_renyi_edges(topology.n, topology.schedule.p, topology.schedule.seed, step))
    return graph


def _first_connected_step(topology: Topology) -> int | None:
    return next((step for step in range(topology.protocol.steps) if nx.is_connected(_step_graph(topology, step))),
                None)
