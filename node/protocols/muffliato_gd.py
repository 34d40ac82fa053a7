"""Muffliato-GD / SGD (Muffliato Alg. 3): a noisy local gradient step, then K gossip rounds, T times.

At step t every node computes its step gradient on its own data (the whole local set, or a
minibatch of b examples taken cyclically from it: a fixed schedule that needs no secret),
each example's gradient clipped to norm C, adds N(0, σ² I) to it (a fresh draw every step,
logged privately under the step), takes θ ← θ − η (g + z), then runs K rounds of plain or
Chebyshev gossip on the models with that step's neighbours: the fixed graph, or the step's
Erdős–Rényi graph that every node derives from the published seed. Round r of the run is
gossip round r mod K of step r // K; a value from a node that is not a neighbour in that
step is refused. Drop-outs are handled as in synchronous Muffliato. The output is the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.learning import LocalData, clipped_gradient, load_local_data
from node.mixing import chebyshev_omega
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds, run_gossip
from node.protocols.params import LearningParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "muffliato-gd"
NOISE_PURPOSE = "gradient"


class MuffliatoGDParams(LearningParams):
    """Public parameters of Muffliato-GD/SGD (Alg. 3)."""

    name: Literal["muffliato-gd"] = "muffliato-gd"
    steps: int = Field(ge=1, description="gradient steps T")
    gossip_rounds: int = Field(ge=1, description="gossip rounds K after every step")
    accelerated: bool = Field(False, description="Chebyshev acceleration of the K rounds (fixed graphs only)")

    @property
    def rounds(self) -> int:
        """Gossip rounds in the whole run: K per step."""
        return self.steps * self.gossip_rounds

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """How long a run may take when every round waits its deadline twice over."""
        return self.rounds * network.round_deadline_s * 2


class MuffliatoGDNode:
    """One node's part: T noisy gradient steps, each followed by K gossip rounds on the step's graph."""

    def __init__(self, context: ProtocolContext[MuffliatoGDParams], local: LocalData) -> None:
        self._context = context
        self._data = local
        self._rounds = BarrierRounds(context, rounds_per_step=context.params.gossip_rounds)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        topology, node = context.topology, context.node_id
        # Every node the schedule may pair this one with must be up before step 0's graph is used.
        await context.wait_for_peers(topology.neighbours[node], context.network.startup_deadline_s)
        omega = chebyshev_omega(topology.spectral_gap) if params.accelerated else None
        model = np.zeros(params.vector_length)
        for step in range(params.steps):
            await context.step_started(step)
            noisy = await noisy_gradient(context, self._data, model, step)
            first = step * params.gossip_rounds
            model = await run_gossip(model - params.learning_rate * noisy,
                                     range(first, first + params.gossip_rounds),
                                     topology.weight_row_at(node, step), node, self._rounds.exchange, omega)
        return NodeOutput(model, params.steps)


async def noisy_gradient(context: ProtocolContext[LearningParams], data: LocalData, model: np.ndarray,
                         step: int) -> np.ndarray:
    """The step's gradient (`step_gradient`) plus its own draw N(0, σ² I) (purpose "gradient", logged under the
    step): what every D-SGD step of netdp with independent noise releases."""
    contribution = await step_gradient(context, data, model, step)
    return await context.noise.gaussian(contribution, context.params.sigma, step=step, purpose=NOISE_PURPOSE)


async def step_gradient(context: ProtocolContext[LearningParams], data: LocalData, model: np.ndarray,
                        step: int) -> np.ndarray:
    """The step's clipped gradient at `model` on the step's batch, logged as the step's input: what every learning
    protocol's step starts from, whatever noise it then adds (zero-sum learning adds its noise to the models sent)."""
    params = context.params
    x, y = data.batch(step, params.batch)
    gradient = clipped_gradient(params.task, model[: params.dimension], x, y, clip=context.clip_bound(params.clip),
                                regularization=params.regularization)
    return await context.contribution(gradient.value, gradient.clipped > 0, sensitivity=params.sensitivity)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, MuffliatoGDParams, MuffliatoGDNode, load=load_local_data,
                 graphs=frozenset({"undirected", "erdos_renyi"}), sweep=SweepShape("learning", "steps")),
    auditor="coordinator_tools.audit.protocols.muffliato_gd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:MUFFLIATO_GD",
    demo="coordinator_tools.cluster.demo_protocols:MUFFLIATO_GD",
)
