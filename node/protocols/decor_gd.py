"""DECOR learning (Allouah et al., ICML 2024, Alg. 1): D-SGD with independent plus pairwise-cancelling noise.

Before step 0 the node agrees a secret with every neighbour (`node.pairwise_secrets`). At step t it
computes its clipped step gradient g_v^t on its own data as Muffliato-GD does (`node.learning`),
adds the paper's two noises, its own draw z_v^t ~ N(0, σ² I) and, per neighbour j, the edge's
shared draw v_e^t = σ_cor ξ_e^t with its sign (+1 at the edge's lower end, −1 at the higher;
σ_cor = sigma_cor_ratio · σ, as DECOR averaging publishes it), takes
θ_v ← θ_v − η (g_v^t + z_v^t + Σ_j s_vj v_e^t) and gossips the models for K rounds (the paper's
schedule is K = 1: one gossip round per step, the default). The pairwise terms cancel in the
network's sum of models; every step moves that sum by −η Σ_v (g_v^t + z_v^t).

It is a protocol of its own beside `decor` (averaging), as `muffliato-gd` is beside `muffliato`: a
topology's Params are told apart by name only, a learning node loads a dataset instead of a vector,
and its audit (a gradient every step) is another model. `netdp compare --designs decor --task
learning` runs it.

Private log: every step gradient, every z_v^t (purpose "gradient", step t, as Muffliato-GD's), every
agreed secret, and each edge's draw v_e^t (`decor.PAIRWISE_PURPOSE`, step t·n + the peer) at both ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.learning import LocalData, load_local_data
from node.pairwise_secrets import PairwiseAgreement
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.decor import SIGMA_COR_DESCRIPTION, pairwise_noise
from node.protocols.gossip import BarrierRounds, run_gossip
from node.protocols.key_agreed_learning import KeyAgreedLearningParams
from node.protocols.muffliato_gd import noisy_gradient

if TYPE_CHECKING:
    from node.context import ProtocolContext

PROTOCOL_NAME = "decor-gd"


class DecorGDParams(KeyAgreedLearningParams):
    """DECOR learning: the step's independent noise σ, the pairwise noise ratio σ_cor/σ, steps T, gossip rounds K."""

    name: Literal["decor-gd"] = "decor-gd"
    sigma_cor_ratio: float = Field(1.0, ge=0.0, description=SIGMA_COR_DESCRIPTION)


class DecorGDNode:
    """One node's part: agree the pairwise secrets, then T noisy gradient steps, each followed by K gossip rounds."""

    def __init__(self, context: ProtocolContext[DecorGDParams], local: LocalData) -> None:
        self._context = context
        self._data = local
        self._agreement = PairwiseAgreement(context)  # registers the key-share mailbox before serving anyone
        self._rounds = BarrierRounds(context, rounds_per_step=context.params.gossip_rounds)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        node = context.node_id
        secrets = await self._agreement.agree()
        row = context.topology.weight_row(node)
        sigma_cor = params.sigma_cor_ratio * params.sigma
        model = np.zeros(params.vector_length)
        for step in range(params.steps):
            await context.step_started(step)
            noisy = await noisy_gradient(context, self._data, model, step)
            noisy = noisy + pairwise_noise(context, secrets, step, model.size, sigma_cor)
            first = step * params.gossip_rounds
            model = await run_gossip(model - params.learning_rate * noisy, range(first, first + params.gossip_rounds),
                                     row, node, self._rounds.exchange, None)
        return NodeOutput(model, params.steps)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, DecorGDParams, DecorGDNode, load=load_local_data,
                 sweep=SweepShape("learning", "steps")),
    auditor="coordinator_tools.audit.protocols.decor_gd:AUDITOR",
    options="coordinator_tools.topology.protocol_options:DECOR_GD",
)
