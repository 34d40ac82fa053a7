"""Synchronous Muffliato (Alg. 1): noise once, then T rounds of plain or Chebyshev gossip.

Pure protocol logic: it knows nothing of gRPC. Each round the node delivers x^t to every
neighbour and collects theirs at its round barrier; a neighbour missing from a round was
dropped for that round and its weight goes to the self-loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Literal

import numpy as np

from pydantic import Field

from node.data import clip_to_ball
from node.delivery import BarrierDelivery
from node.mailboxes.round_barrier import NeighbourFates
from node.message import GOSSIP, Message, MessageId
from node.mixing import accelerated_step, chebyshev_omega
from node.protocols.base import NodeOutput, ProtocolSpec
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.journal import Delivery
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "muffliato"
NOISE_PURPOSE = "muffliato_init"
PROBE_TIMEOUT_S = 2.0  # a ping slower than this counts as no answer


class MuffliatoParams(NoisyVectorParams):
    """Public parameters of synchronous Muffliato (Alg. 1)."""

    name: Literal["muffliato"] = "muffliato"
    rounds: int = Field(ge=1, description="number of gossip rounds T")
    accelerated: bool = Field(True, description="Chebyshev acceleration (Muffliato Def. 3)")

    def worst_case_duration_s(self, network: NetworkParams) -> float:
        """How long a run may take when every round waits its deadline twice over."""
        return self.rounds * network.round_deadline_s * 2


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


class MuffliatoNode:
    """One node's part: clip, add noise once, then T rounds at the round barrier."""

    def __init__(self, context: ProtocolContext, value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._barrier = context.round_barrier()

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        clipped, was_clipped = clip_to_ball(self._value, params.sensitivity / 2.0)
        await context.private_input(clipped, was_clipped)
        noisy = await context.noise.gaussian(clipped, params.sigma, step=0, purpose=NOISE_PURPOSE)
        estimate = await run_gossip(context.topology, context.node_id, noisy, self._exchange)
        return NodeOutput(estimate, params.rounds)

    async def _exchange(self, round_index: int, value: np.ndarray) -> dict[int, np.ndarray]:
        """Deliver x^t to every neighbour while collecting theirs; returns the values that came in time."""
        context, network = self._context, self._context.network
        await context.step_started(round_index)
        budget = network.startup_deadline_s if round_index == 0 else network.round_deadline_s
        fates = NeighbourFates()

        async def record_fate(peer: int, delivery: Delivery) -> None:
            if fates.record(peer, delivery):
                await self._barrier.wake()

        async def probe(peer: int) -> bool:
            return await context.reachable(peer, min(budget, PROBE_TIMEOUT_S))

        # In round 0 a send waits for the peer to come up (peers start at different times);
        # later, a peer that cannot be connected to fails at once.
        sending = asyncio.create_task(context.broadcast(
            context.neighbours(), Message(GOSSIP, MessageId(round=round_index), value),
            BarrierDelivery(network.send_attempts), budget, wait_for_peer=round_index == 0, on_fate=record_fate))
        received = await self._barrier.collect(round_index, budget, patience_s=budget * network.patience_factor,
                                               fates=fates, probe=probe)
        await sending
        return received


SPEC = ProtocolSpec(PROTOCOL_NAME, MuffliatoParams, MuffliatoNode)
