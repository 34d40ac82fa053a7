"""Zero-sum averaging (Zip-DL, Biswas et al., PoPETs 2025, Algorithm 1): noise that cancels in every node's sends.

One round per step, T steps. In round t node a, with closed neighbourhood Γ_a (its neighbours and
itself, d_a = |Γ_a|) and mixing row W_a, draws Y_{a→j} ~ N(0, σ² I) for every j ∈ Γ_a from its own
sampler, and turns them into
Z_{a→j} = Y_{a→j} − (1 / (d_a W_aj)) Σ_{k∈Γ_a} W_ak Y_{a→k},
so that Σ_{j∈Γ_a} W_aj Z_{a→j} = 0 (the paper's Lemma 3.1). As the paper does, the share a keeps
for itself (j = a) is one of the d_a: the zero sum runs over the closed neighbourhood, weighted by
the mixing row, so a node whose every neighbour is curious still keeps a share they never see. It
sends x_a + Z_{a→j} to each neighbour j and mixes x_a^{t+1} = W_aa (x_a + Z_{a→a}) + Σ_j W_aj
(x_j + Z_{j→a}) (a neighbour dropped for the round gives its weight to W_aa). With a symmetric W
every node's shares cancel in the network's sum, which no round moves; a dropped message leaves
its sender's shares uncancelled, and the audit accounts for the realized mixing.

Inputs are clipped to norm Δ/2 (sensitivity Δ). Private log: the input and every Y_{a→j}^t (purpose
SHARE_PURPOSE, step t·n + j); the Z follow from them. The view log holds the values sent and received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from node.data import clip_to_ball
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds, mix
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from collections.abc import Mapping

    from node.context import ProtocolContext
    from node.topology import NetworkParams

PROTOCOL_NAME = "zero-sum"
SHARE_PURPOSE = "zero_sum_share"  # Y_{a→j}^t, at step t·n + j (j = a: the share the node keeps)


def share_step(round_index: int, receiver: int, n: int) -> int:
    """The private-log step of the round-t draw Y_{a→j} that becomes the share for `receiver` j."""
    return round_index * n + receiver


def zero_sum_coefficients(row: Mapping[int, float]) -> dict[int, dict[int, float]]:
    """C with Z_{a→j} = Σ_k C[j][k] Y_{a→k} over the closed neighbourhood (`row`: W_a, self weight included).

    C[j][k] = [j = k] − W_ak / (d_a W_aj): Σ_j W_aj C[j][k] = W_ak − W_ak = 0, the paper's Algorithm 1,
    line 3; the audit builds its rows from the same coefficients.
    """
    if any(weight <= 0.0 for weight in row.values()):
        raise ValueError(f"zero-sum noise needs a positive weight on every member of the closed neighbourhood, "
                         f"got {dict(row)}")
    size = len(row)
    return {j: {k: float(j == k) - row[k] / (size * row[j]) for k in row} for j in row}


class ZeroSumParams(NoisyVectorParams):
    """Zip-DL averaging: the std σ of every draw Y, sensitivity, order, dimension, rounds."""

    name: Literal["zero-sum"] = "zero-sum"
    sigma: float = Field(gt=0.0, description="std of each draw Y a node makes per member of its closed "
                         "neighbourhood every round, before the draws are made to sum to zero")
    sensitivity: float = Field(1.0, gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    rounds: int = Field(10, ge=1, description="rounds T, one per step, each with fresh zero-sum noise")

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Every round waiting its deadline twice over (`netdp run`'s time limit)."""
        return self.rounds * network.round_deadline_s * 2 + network.startup_deadline_s


class ZeroSumNode:
    """One node's part: clip, then T rounds of zero-sum shares sent to the neighbours and mixed."""

    def __init__(self, context: ProtocolContext[ZeroSumParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._rounds = BarrierRounds(context)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        row = context.topology.weight_row(context.node_id)
        coefficients = zero_sum_coefficients(row)
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        value = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        for t in range(params.rounds):
            await context.step_started(t)
            shares = await zero_sum_shares(context, coefficients, t, value.size, params.sigma)
            sent = {peer: value + share for peer, share in shares.items() if peer != context.node_id}
            received = await self._rounds.exchange(t, sent)
            value = mix(value + shares[context.node_id], received, row, context.node_id)
        return NodeOutput(value, params.rounds)


async def zero_sum_shares(context: ProtocolContext[Any], coefficients: Mapping[int, Mapping[int, float]],
                          round_index: int, size: int, sigma: float) -> dict[int, np.ndarray]:
    """Z_{a→j} for every j of the closed neighbourhood, from fresh draws Y ~ N(0, σ² I) logged privately.

    Zero-sum averaging and learning (`node.protocols.zero_sum_gd`) draw their round's or step's shares alike.
    """
    draws = {k: await context.noise.gaussian(np.zeros(size), sigma, purpose=SHARE_PURPOSE,
                                             step=share_step(round_index, k, context.topology.n))
             for k in sorted(coefficients)}
    return {j: sum((weight * draws[k] for k, weight in row.items()), np.zeros(size))
            for j, row in coefficients.items()}


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, ZeroSumParams, ZeroSumNode, sweep=SweepShape("averaging", "rounds")),
    auditor="coordinator_tools.audit.protocols.zero_sum:AUDITOR",
)
