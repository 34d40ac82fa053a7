"""Zero-sum learning (Zip-DL, Biswas et al., PoPETs 2025): D-SGD whose only noise is each node's zero-sum shares.

At step t node a computes its clipped step gradient g_a^t on its own data at its model θ_a^t as
Muffliato-GD does (`step_gradient`, logged as the step's input), takes the local step
θ_a^{t+½} = θ_a^t − η g_a^t, draws its zero-sum shares Z_{a→j}^t over its closed neighbourhood
exactly as zero-sum averaging does (`zero_sum.zero_sum_shares`: Σ_{j∈Γ_a} W_aj Z_{a→j} = 0, the kept
share j = a included), sends each neighbour j its own value y_{a→j}^t = θ_a^{t+½} − η Z_{a→j}^t and
mixes θ_a^{t+1} = W_aa (θ_a^{t+½} − η Z_{a→a}^t) + Σ_j W_aj y_{j→a}^t (a neighbour dropped for the step
gives its weight to W_aa). One communication round per gradient step, as the paper's; no other noise.

The shares are scaled by η, so σ is in gradient units as every learning protocol's here (Zip-DL's model-unit
std is η σ): the audit's factors are then σ-free in (Δ/σ)² like decor-gd's and Muffliato-GD's. With a
symmetric W the shares cancel in the network's sum of models, which every step moves by −η Σ_a g_a^t alone.

Private log: every step gradient, and every draw Y_{a→k}^t (purpose `zero_sum.SHARE_PURPOSE`, step t·n + k);
the shares follow from them. The view log holds the values sent (each with its receiver) and received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.learning import LocalData, load_local_data
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds, mix
from node.protocols.muffliato_gd import step_gradient
from node.protocols.params import LearningParams
from node.protocols.zero_sum import zero_sum_coefficients, zero_sum_shares

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "zero-sum-gd"


class ZeroSumGDParams(LearningParams):
    """Zip-DL learning: the std σ of every draw Y (gradient units), steps T; one round per step."""

    name: Literal["zero-sum-gd"] = "zero-sum-gd"
    sigma: float = Field(gt=0.0, description="std of each draw Y a node makes per member of its closed "
                         "neighbourhood every step, before the draws are made to sum to zero (the share sent is "
                         "scaled by the learning rate, as a gradient's noise)")
    steps: int = Field(ge=1, description="gradient steps T, one communication round each")

    @property
    def gossip_rounds(self) -> int:
        """One round per step (the paper's): the synchronous-gossip rebuild reads the count."""
        return 1

    @property
    def accelerated(self) -> bool:
        """Plain mixing only: Muffliato-GD's audit, which this one builds on, reads the flag."""
        return False

    @property
    def rounds(self) -> int:
        """Rounds in the whole run: one per step."""
        return self.steps

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Every round waiting its deadline twice over (`netdp run`'s time limit)."""
        return self.rounds * network.round_deadline_s * 2 + network.startup_deadline_s


class ZeroSumGDNode:
    """One node's part: T steps, each a local gradient step, zero-sum shares sent to the neighbours, and mixing."""

    def __init__(self, context: ProtocolContext[ZeroSumGDParams], local: LocalData) -> None:
        self._context = context
        self._data = local
        self._rounds = BarrierRounds(context)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        node = context.node_id
        row = context.topology.weight_row(node)
        coefficients = zero_sum_coefficients(row)
        await context.wait_for_peers(context.topology.neighbours[node], context.network.startup_deadline_s)
        model = np.zeros(params.vector_length)
        for step in range(params.steps):
            await context.step_started(step)
            half = model - params.learning_rate * await step_gradient(context, self._data, model, step)
            shares = await zero_sum_shares(context, coefficients, step, model.size, params.sigma)
            sent = {peer: half - params.learning_rate * share for peer, share in shares.items() if peer != node}
            received = await self._rounds.exchange(step, sent)
            model = mix(half - params.learning_rate * shares[node], received, row, node)
        return NodeOutput(model, params.steps)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, ZeroSumGDParams, ZeroSumGDNode, load=load_local_data,
                 sweep=SweepShape("learning", "steps")),
    auditor="coordinator_tools.audit.protocols.zero_sum_gd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:ZERO_SUM_GD",
)
