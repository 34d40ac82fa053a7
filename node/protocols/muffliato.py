"""Synchronous Muffliato (Alg. 1): noise once, then T rounds of plain or Chebyshev gossip.

Pure protocol logic: it knows nothing of gRPC. `exchange(t, x)` sends x^t to every
neighbour and returns the neighbours' round-t values that arrived in time; a neighbour
missing from the answer was dropped for that round and its weight goes to the self-loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import numpy as np

from node.mixing import accelerated_step, chebyshev_omega
from node.topology import Topology

PROTOCOL_NAME = "muffliato"
RoundExchange = Callable[[int, np.ndarray], Awaitable[Mapping[int, np.ndarray]]]


def mix(own: np.ndarray, received: Mapping[int, np.ndarray], row: Mapping[int, float], self_id: int) -> np.ndarray:
    """Σ_w W_vw x_w with the realized row: dropped neighbours' weight goes to x_v itself."""
    self_weight = row[self_id] + sum(weight for peer, weight in row.items() if peer != self_id and peer not in received)
    mixed = self_weight * own
    for peer, value in received.items():
        mixed = mixed + row[peer] * value
    return mixed


async def run_gossip(topology: Topology, node_id: int, noisy_value: np.ndarray, exchange: RoundExchange) -> np.ndarray:
    """Run the T gossip rounds from x_v^0 = x_v + η_v and return x_v^T."""
    params = topology.protocol
    row = topology.weight_row(node_id)
    omega = chebyshev_omega(topology.spectral_gap) if params.accelerated else 1.0
    previous: np.ndarray | None = None
    current = noisy_value
    for round_index in range(params.rounds):
        received = await exchange(round_index, current)
        mixed = mix(current, received, row, node_id)
        following = mixed if previous is None or not params.accelerated else accelerated_step(previous, mixed, omega)
        previous, current = current, following
    return current
