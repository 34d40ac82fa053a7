"""Decentralized learning with secure neighbourhood summation: D-SGD whose gossip sends only masked models.

Koskela & Kulkarni (arXiv 2505.19969) analyse gossip with node noise where each node only learns
its neighbourhood's sum; this is that gossip after every noisy gradient step. Before step 0 the node
agrees a secret with every co-neighbour (`secure_neighbourhood.co_neighbours`, directly over their own
mutual-TLS channel). At step t it takes its clipped step gradient g_j^t and its own draw
z_j^t ~ N(0, σ² I) as Muffliato-GD does (`muffliato_gd.noisy_gradient`), θ_j ← θ_j − η (g_j^t + z_j^t),
and runs K gossip rounds r = t·K + k in which it sends each neighbour v

    z_{j→v}^r = W_vj θ_j^r + Σ_{k ∈ N(v), k ≠ j} s_jk m^{(v)}_{jk,r},

the masks at σ_m = mask_ratio · η σ (the step's noise in the model, so the ratio means what it
means in averaging), and mixes θ_v ← W'_vv θ_v + Σ_j z_{j→v}^r: the masks cancel in every sum, so
the models are D-SGD's exactly (to rounding) while no node sees a neighbour's model unmasked. The
sends are the averaging protocol's (`secure_neighbourhood.masked_sends`).

A protocol of its own beside `secure-neighbourhood`, as `decor-gd` is beside `decor`: a learning
node loads a dataset, and its audit has a gradient every step. `netdp compare --designs
secure-neighbourhood --task learning` runs it.

Private log: every step gradient and z_j^t (purpose "gradient", step t, as Muffliato-GD's), every agreed
secret, and every mask as either end adds it (`secure_neighbourhood.MASK_PURPOSE`, step
`mask_step(r, v, other end, n)`). The view log holds the key shares and the values sent and received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.learning import LocalData, load_local_data
from node.pairwise_secrets import PairwiseAgreement
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds
from node.protocols.key_agreed_learning import KeyAgreedLearningParams
from node.protocols.muffliato_gd import noisy_gradient
from node.protocols.secure_neighbourhood import MASK_RATIO_DESCRIPTION, co_neighbours, masked_sends, weighted_sum

if TYPE_CHECKING:
    from node.context import ProtocolContext

PROTOCOL_NAME = "secure-neighbourhood-gd"


class SecureNeighbourhoodGDParams(KeyAgreedLearningParams):
    """Learning with masked gossip: the step's noise σ, steps T, gossip rounds K, the masks' ratio to η σ."""

    name: Literal["secure-neighbourhood-gd"] = "secure-neighbourhood-gd"
    mask_ratio: float = Field(10.0, gt=0.0, description=MASK_RATIO_DESCRIPTION)

    @property
    def sigma_mask(self) -> float:
        """Each mask's std: mask_ratio times the step's noise in the model, η σ."""
        return self.mask_ratio * self.learning_rate * self.sigma


class SecureNeighbourhoodGDNode:
    """One node's part: agree secrets with its co-neighbours, then T noisy steps, each followed by K masked rounds."""

    def __init__(self, context: ProtocolContext[SecureNeighbourhoodGDParams], local: LocalData) -> None:
        self._context = context
        self._data = local
        self._agreement = PairwiseAgreement(context, co_neighbours(context.topology, context.node_id))
        self._rounds = BarrierRounds(context, rounds_per_step=context.params.gossip_rounds)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        node = context.node_id
        secrets = await self._agreement.agree()
        row = context.topology.weight_row(node)
        model = np.zeros(params.vector_length)
        for step in range(params.steps):
            await context.step_started(step)
            model = model - params.learning_rate * await noisy_gradient(context, self._data, model, step)
            for round_index in range(step * params.gossip_rounds, (step + 1) * params.gossip_rounds):
                sends = masked_sends(context, secrets, round_index, model, params.sigma_mask)
                model = weighted_sum(model, await self._rounds.exchange(round_index, sends), row, node)
        return NodeOutput(model, params.steps)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, SecureNeighbourhoodGDParams, SecureNeighbourhoodGDNode, load=load_local_data,
                 sweep=SweepShape("learning", "steps")),
    auditor="coordinator_tools.audit.protocols.secure_neighbourhood_gd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:SECURE_NEIGHBOURHOOD_GD",
)
