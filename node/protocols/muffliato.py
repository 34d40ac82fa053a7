"""Synchronous Muffliato (Alg. 1): noise once, then T rounds of plain or Chebyshev gossip.

Pure protocol logic: it knows nothing of gRPC. Each round the node delivers x^t to every
neighbour and collects theirs at its round barrier; a neighbour missing from a round was
dropped for that round and its weight goes to the self-loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.data import clip_to_ball
from node.mixing import chebyshev_omega
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds, run_gossip
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "muffliato"
NOISE_PURPOSE = "muffliato_init"


class MuffliatoParams(NoisyVectorParams):
    """Public parameters of synchronous Muffliato (Alg. 1)."""

    name: Literal["muffliato"] = "muffliato"
    rounds: int = Field(ge=1, description="number of gossip rounds T")
    accelerated: bool = Field(True, description="Chebyshev acceleration (Muffliato Def. 3)")

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """How long a run may take when every round waits its deadline twice over."""
        return self.rounds * network.round_deadline_s * 2


class MuffliatoNode:
    """One node's part: clip, add noise once, then T rounds at the round barrier."""

    def __init__(self, context: ProtocolContext[MuffliatoParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._rounds = BarrierRounds(context)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        contribution = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        noisy = await context.noise.gaussian(contribution, params.sigma, step=0, purpose=NOISE_PURPOSE)
        omega = chebyshev_omega(context.topology.spectral_gap) if params.accelerated else None
        estimate = await run_gossip(noisy, range(params.rounds), context.topology.weight_row(context.node_id),
                                    context.node_id, self._exchange, omega)
        return NodeOutput(estimate, params.rounds)

    async def _exchange(self, round_index: int, value: np.ndarray) -> dict[int, np.ndarray]:
        await self._context.step_started(round_index)
        return await self._rounds.exchange(round_index, value)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, MuffliatoParams, MuffliatoNode, sweep=SweepShape("averaging", "rounds")),
    auditor="coordinator_tools.audit.protocols.muffliato:AUDITOR",
    options="coordinator_tools.topology.protocol_options:MUFFLIATO",
    demo="coordinator_tools.cluster.demo_protocols:MUFFLIATO",
)
