"""Gossip averaging with secure neighbourhood summation (Koskela & Kulkarni, arXiv 2505.19969).

A node v only ever sees masked values of its neighbours, whose masks cancel in the one sum it
needs, Σ_j W_vj y_j. Before round 0 the node agrees a secret with every co-neighbour (a node
that shares a neighbour with it, `co_neighbours`) directly, over their own mutual-TLS channel
(`node.pairwise_secrets`): the neighbour whose sum the masks hide never relays a key, so it
cannot substitute one. A node clips its input to norm Δ/2 (x_j^0); in round t it draws
η_j^t ~ N(0, σ² I) from its own sampler, forms y_j^t = x_j^t + η_j^t, and sends each neighbour v

    z_{j→v}^t = W_vj y_j^t + Σ_{k ∈ N(v), k ≠ j} s_jk m^{(v)}_{jk,t},

m^{(v)}_{jk,t} = σ_m ξ the shared draw of pair (j, k) keyed per (step t, purpose naming v), with
σ_m = mask_ratio · σ (the ratio is published, so calibrating σ keeps the masks in proportion) and
s_jk = +1 at the pair's lower end, −1 at its higher. Node v mixes
x_v^{t+1} = W_vv y_v^t + Σ_j z_{j→v}^t: every pair's two terms reach v and cancel, leaving its
neighbourhood's weighted sum. Masks are Gaussian, not uniform over a group: a mask at a finite
scale hides an individual value imperfectly, and the audit counts exactly what the masks drawn
leave visible. A neighbour dropped for the round gives its weight to W_vv; its co-neighbours'
masks with it then stay in v's value (the audit models that too).

Private log: the input, every η_j^t (purpose NOISE_PURPOSE, step t), every agreed secret, and
every mask as either end of its pair adds it (purpose MASK_PURPOSE, step `mask_step`). The view
log holds the key shares and the values sent and received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from node.data import clip_to_ball
from node.pairwise_secrets import PairwiseAgreement, PairwiseSecret, edge_sign
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.gossip import BarrierRounds
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "secure-neighbourhood"
NOISE_PURPOSE = "secure_neighbourhood_noise"  # η_j^t, at step t
MASK_PURPOSE = "secure_neighbourhood_mask"  # m^{(v)}_{jk,t}, at step mask_step(t, v, the other end, n)
# One flag for averaging and learning (`secure_neighbourhood_gd`), so `netdp topology generate` defines it once.
MASK_RATIO_DESCRIPTION = ("std of each pairwise mask as a multiple of the noise it hides (sigma, or eta x sigma in "
                          "secure-neighbourhood-gd): masks hide a neighbour's value from the receiver, and cancel in "
                          "its sum")


def co_neighbours(topology: Topology, node: int) -> tuple[int, ...]:
    """The nodes that share a neighbour with `node`: the peers whose masks cancel against its own somewhere."""
    return tuple(sorted({k for v in topology.neighbours[node] for k in topology.neighbours[v]} - {node}))


def mask_step(round_index: int, receiver: int, other: int, n: int) -> int:
    """The private-log step of the mask a node shares with `other` in its round-t value for `receiver`."""
    return (round_index * n + receiver) * n + other


def mask_purpose(receiver: int) -> str:
    """The shared draw's purpose for masks hiding values sent to `receiver`: a pair's masks differ per receiver."""
    return f"{MASK_PURPOSE}|{receiver}"


def weighted_sum(own: np.ndarray, received: Mapping[int, np.ndarray], row: Mapping[int, float],
                 self_id: int) -> np.ndarray:
    """W_vv y_v + Σ_j z_{j→v} with the realized row: a dropped neighbour's weight goes to y_v itself."""
    self_weight = row[self_id] + sum(weight for peer, weight in row.items() if peer != self_id and peer not in received)
    total = self_weight * own
    for value in received.values():
        total = total + value
    return total


class SecureNeighbourhoodParams(NoisyVectorParams):
    """Node noise σ every round, masks at mask_ratio·σ, sensitivity, order, dimension, rounds."""

    name: Literal["secure-neighbourhood"] = "secure-neighbourhood"
    sigma: float = Field(gt=0.0, description="std of each node's Gaussian noise, every round")
    sensitivity: float = Field(1.0, gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    mask_ratio: float = Field(10.0, gt=0.0, description=MASK_RATIO_DESCRIPTION)
    rounds: int = Field(10, ge=1, description="gossip rounds T")

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """The key agreement and every round waiting their deadlines twice over (`netdp run`'s time limit)."""
        return network.key_agreed_rounds_s(self.rounds)


class SecureNeighbourhoodNode:
    """One node's part: agree secrets with its co-neighbours, clip, then T rounds of masked sends and sums."""

    def __init__(self, context: ProtocolContext[SecureNeighbourhoodParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._agreement = PairwiseAgreement(context, co_neighbours(context.topology, context.node_id))
        self._rounds = BarrierRounds(context)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        secrets = await self._agreement.agree()
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        value = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        topology, node_id = context.topology, context.node_id
        for t in range(params.rounds):
            await context.step_started(t)
            noisy = await context.noise.gaussian(value, params.sigma, step=t, purpose=NOISE_PURPOSE)
            received = await self._rounds.exchange(t, masked_sends(context, secrets, t, noisy,
                                                                   params.mask_ratio * params.sigma))
            value = weighted_sum(noisy, received, topology.weight_row(node_id), node_id)
        return NodeOutput(value, params.rounds)


def masked_sends(context: ProtocolContext[Any], secrets: Mapping[int, PairwiseSecret], round_index: int,
                 value: np.ndarray, sigma_mask: float) -> dict[int, np.ndarray]:
    """z_{j→v} = W_vj value + Σ_k s_jk m^{(v)}_{jk,t} for every neighbour v: what this node j sends in round t.

    Averaging rounds and learning's gossip rounds (`node.protocols.secure_neighbourhood_gd`) send the same.
    """
    topology, node_id = context.topology, context.node_id
    return {v: topology.weight_row(v)[node_id] * value + masks(context, secrets, round_index, v, value.size, sigma_mask)
            for v in context.neighbours()}


def masks(context: ProtocolContext[Any], secrets: Mapping[int, PairwiseSecret], round_index: int, receiver: int,
                size: int, sigma_mask: float) -> np.ndarray:
    """Σ_k s_jk m^{(v)}_{jk,t} over the receiver's other neighbours k, every mask logged privately."""
    n, node_id = context.topology.n, context.node_id
    total = np.zeros(size)
    for other in context.topology.neighbours[receiver]:
        if other == node_id:
            continue
        draw = sigma_mask * secrets[other].normals(step=round_index, purpose=mask_purpose(receiver), size=size)
        context.journal.noise(MASK_PURPOSE, draw, step=mask_step(round_index, receiver, other, n),
                             mechanism="gaussian", scale=sigma_mask)
        total += edge_sign(node_id, other) * draw
    return total


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, SecureNeighbourhoodParams, SecureNeighbourhoodNode,
                 sweep=SweepShape("averaging", "rounds")),
    auditor="coordinator_tools.audit.protocols.secure_neighbourhood:AUDITOR",
)
