"""Gossip rounds at the round barrier, shared by the protocols that average synchronously.

Synchronous Muffliato runs T rounds once; Muffliato-GD runs K rounds after every gradient
step, each step on that step's graph. Both deliver x^r to the round's neighbours while
collecting theirs at the barrier (a neighbour missing from a round was dropped for it and
its weight goes to the self-loop), and both use the same plain or Chebyshev recursion. A protocol
whose round value differs per receiver (zero-sum noise, masked sums) hands `exchange` one value per
neighbour instead of one for all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from node.delivery import BarrierDelivery
from node.mailboxes.liveness import Liveness
from node.mailboxes.round_barrier import NeighbourFates
from node.message import GOSSIP, Message, MessageId
from node.mixing import accelerated_step

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.journal import Delivery

# A ping slower than this counts as no answer; stretched as the deadlines kept are (node ids sharing a loop).
PROBE_TIMEOUT_S = 2.0

RoundExchange = Callable[[int, np.ndarray], Awaitable[Mapping[int, np.ndarray]]]


def mix(own: np.ndarray, received: Mapping[int, np.ndarray], row: Mapping[int, float], self_id: int) -> np.ndarray:
    """Σ_w W_vw x_w with the realized row: dropped neighbours' weight goes to x_v itself. Summed in peer order, not
    arrival order, so that a run's values (and its view logs) do not depend on which message came first."""
    self_weight = row[self_id] + sum(weight for peer, weight in row.items() if peer != self_id and peer not in received)
    mixed = self_weight * own
    for peer in sorted(received):
        mixed = mixed + row[peer] * received[peer]
    return mixed


async def run_gossip(value: np.ndarray, rounds: range, row: Mapping[int, float], node_id: int,
                     exchange: RoundExchange, omega: float | None = None) -> np.ndarray:
    """Gossip `value` for the global round indices `rounds`; Chebyshev with `omega`, plain if None.

    The first round is plain (P_1 = W): the recursion never starts from a zero previous iterate.
    """
    previous: np.ndarray | None = None
    current = value
    for round_index in rounds:
        received = await exchange(round_index, current)
        mixed = mix(current, received, row, node_id)
        following = mixed if previous is None or omega is None else accelerated_step(previous, mixed, omega)
        previous, current = current, following
    return current


class BarrierRounds:
    """A node's gossip rounds: deliver x^r to the round's neighbours, collect theirs at the barrier.

    `rounds_per_step` rounds share one step's graph (its neighbours, read from the published
    schedule); a value from a node that is not a neighbour in that round's step is refused.
    """

    def __init__(self, context: ProtocolContext[object], *, rounds_per_step: int = 1) -> None:
        self._context = context
        self._rounds_per_step = rounds_per_step
        self._barrier = context.round_barrier(rounds_per_step=rounds_per_step)

    def step_of(self, round_index: int) -> int:
        return round_index // self._rounds_per_step

    async def exchange(self, round_index: int, value: np.ndarray | Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Deliver x^r to every neighbour while collecting theirs; returns the values that came in time.

        `value` is one array for every neighbour, or a mapping giving each neighbour of the round its own
        (a value that differs per receiver: each is its own message, logged with its receiver).
        """
        context, network = self._context, self._context.network
        neighbours = context.neighbours(self.step_of(round_index))
        if isinstance(value, Mapping) and set(value) != set(neighbours):
            raise ValueError(f"round {round_index}'s values are for nodes {sorted(value)}, its neighbours are "
                             f"{sorted(neighbours)}")
        budget = network.startup_deadline_s if round_index == 0 else network.round_deadline_s
        fates = NeighbourFates()

        async def record_fate(peer: int, delivery: Delivery) -> None:
            if fates.record(peer, delivery):
                await self._barrier.wake()

        probe_timeout_s = PROBE_TIMEOUT_S * network.round_deadline_s / context.topology.network.round_deadline_s

        async def ask(peers: Sequence[int]) -> set[int]:
            return await context.silent(peers, min(budget, probe_timeout_s))

        # In round 0 a send waits for the peer to come up (peers start at different times);
        # later, a peer that cannot be connected to fails at once.
        identifier, policy = MessageId(round=round_index), BarrierDelivery(network.send_attempts)
        if isinstance(value, Mapping):
            send = context.send_each({peer: Message(GOSSIP, identifier, own) for peer, own in value.items()}, policy,
                                     budget, wait_for_peer=round_index == 0, on_fate=record_fate)
        else:
            send = context.broadcast(neighbours, Message(GOSSIP, identifier, value), policy, budget,
                                     wait_for_peer=round_index == 0, on_fate=record_fate)
        sending = asyncio.create_task(send)
        received = await self._barrier.collect(round_index, budget, patience_s=budget * network.patience_factor,
                                               fates=fates, liveness=Liveness(context.silent_here, ask))
        await sending
        return received
