"""DECOR averaging (Allouah et al., ICML 2024): independent noise plus pairwise-cancelling noise every round.

Before round 0 the node agrees a secret with every neighbour (`node.pairwise_secrets`). A node
clips its input x_v to norm Δ/2 (x_v^0). In round t it draws η_v^t ~ N(0, σ² I) from its own
sampler and, for every neighbour j, the edge's shared draw v_e^t = σ_cor · ξ_e^t, ξ from the
edge's secret (σ_cor = sigma_cor_ratio · σ: the ratio is published, so calibrating σ keeps the
two scales in proportion and the audit's geometry σ-free); it sends
y_v^t = x_v^t + η_v^t + Σ_j s_vj v_e^t (s = +1 at the lower end of the edge, −1 at the higher)
to every neighbour and mixes with its own noisy value:
x_v^{t+1} = W_vv y_v^t + Σ_w W_vw y_w^t (a neighbour dropped for the round gives its weight to
W_vv). With doubly stochastic W the pairwise terms cancel in the network's sum, which every
noisy round moves by Σ_v η_v^t alone.

Noisy rounds: the paper draws both noises every round (`noisy_rounds` unset), which learning
needs (every step releases a fresh gradient). For averaging that costs utility and buys little
privacy: every round's mean noise stays in the network's mean (MSE T·σ²/n), while only the first
round's protects x against an observer of the running mean. With `noisy_rounds` = k the node
draws in rounds 0..k−1 only and then gossips its value as is: the mean's error is k·σ²/n, and the
remaining rounds mix the pairwise terms out (they shrink as λ₂^t), so with a large σ_cor a curious
node that does not hold an edge's secret still sees its neighbours' values hidden by it.

Private log: the input, every η_v^t (purpose NOISE_PURPOSE, step t), every agreed secret, and
each edge's draw v_e^t as the lower end adds it (purpose PAIRWISE_PURPOSE, step t·n + the
peer), at both ends. The view log holds the key shares and the values sent and received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from node.data import clip_to_ball
from node.pairwise_secrets import PairwiseAgreement, PairwiseSecret, edge_sign
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds, mix
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "decor"
NOISE_PURPOSE = "decor_independent"  # η_v^t, at step t
PAIRWISE_PURPOSE = "decor_pairwise"  # v_e^t as the edge's lower end adds it, at step t·n + the peer
# One flag for averaging and learning (`decor_gd`), so `netdp topology generate` defines it once.
SIGMA_COR_DESCRIPTION = ("std of each edge's pairwise-cancelling noise, every noisy round (averaging) or step "
                         "(decor-gd), as a multiple of sigma (sigma_cor = ratio x sigma)")


def pairwise_step(round_index: int, peer: int, n: int) -> int:
    """The private-log step of an edge's round-t draw, as the node at the other end of `peer` logs it."""
    return round_index * n + peer


class DecorParams(NoisyVectorParams):
    """DECOR's two noise scales (σ independent, σ_cor = ratio·σ pairwise), sensitivity, order, dimension, rounds."""

    name: Literal["decor"] = "decor"
    sigma: float = Field(gt=0.0, description="std of each node's independent Gaussian noise, every round")
    sensitivity: float = Field(1.0, gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    sigma_cor_ratio: float = Field(1.0, ge=0.0, description=SIGMA_COR_DESCRIPTION)
    rounds: int = Field(10, ge=1, description="gossip rounds T")
    noisy_rounds: int | None = Field(None, ge=1, description="the first rounds that draw fresh independent and "
                                     "pairwise noise; the others gossip without noise (none: every round, the "
                                     "paper's)", exclude_if=lambda count: count is None)

    @model_validator(mode="after")
    def _noisy_rounds_within_rounds(self) -> DecorParams:
        if self.noisy_rounds is not None and self.noisy_rounds > self.rounds:
            raise ValueError(f"noisy_rounds {self.noisy_rounds} exceeds rounds {self.rounds}")
        return self

    @property
    def drawing_rounds(self) -> int:
        """How many rounds, from round 0, draw noise."""
        return self.rounds if self.noisy_rounds is None else self.noisy_rounds

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """The key agreement and every round waiting their deadlines twice over (`netdp run`'s time limit)."""
        return network.key_agreed_rounds_s(self.rounds)


class DecorNode:
    """One node's part: agree the pairwise secrets, clip, then T rounds of sends (noisy in the first) and mixing."""

    def __init__(self, context: ProtocolContext[DecorParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._agreement = PairwiseAgreement(context)  # registers the key-share mailbox before serving anyone
        self._rounds = BarrierRounds(context)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        secrets = await self._agreement.agree()
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        value = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        row = context.topology.weight_row(context.node_id)
        for t in range(params.rounds):
            await context.step_started(t)
            if t < params.drawing_rounds:
                noisy = await context.noise.gaussian(value, params.sigma, step=t, purpose=NOISE_PURPOSE)
                sent = noisy + pairwise_noise(context, secrets, t, value.size, params.sigma_cor_ratio * params.sigma)
            else:
                sent = value
            received = await self._rounds.exchange(t, sent)
            value = mix(sent, received, row, context.node_id)
        return NodeOutput(value, params.rounds)


def pairwise_noise(context: ProtocolContext[Any], secrets: dict[int, PairwiseSecret], step: int, size: int,
                   sigma_cor: float) -> np.ndarray:
    """Σ_j s_vj v_e^step over the neighbours, every edge's draw logged privately as its lower end adds it.

    DECOR's averaging rounds and its learning steps (`node.protocols.decor_gd`) add the same term.
    """
    total = np.zeros(size)
    for peer, agreed in sorted(secrets.items()):
        draw = sigma_cor * agreed.normals(step=step, purpose=PAIRWISE_PURPOSE, size=size)
        context.journal.noise(PAIRWISE_PURPOSE, draw, step=pairwise_step(step, peer, context.topology.n),
                             mechanism="gaussian", scale=sigma_cor)
        total += edge_sign(context.node_id, peer) * draw
    return total


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, DecorParams, DecorNode, sweep=SweepShape("averaging", "rounds")),
    auditor="coordinator_tools.audit.protocols.decor:AUDITOR",
    demo="coordinator_tools.cluster.demo_protocols:DECOR",
)
