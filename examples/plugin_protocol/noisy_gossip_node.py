"""Noisy gossip: each round, every node sends its value plus fresh Gaussian noise, and mixes what arrives.

A node clips its input x_v to norm Δ/2 (x_v^0). In round t it draws η_v^t ~ N(0, σ² I) anew,
sends y_v^t = x_v^t + η_v^t to every neighbour and collects theirs at the round barrier, then
x_v^{t+1} = W_vv x_v^t + Σ_w W_vw y_w^t over the neighbours w whose value arrived (a neighbour
dropped for the round gives its weight to W_vv). Noise perturbs only what leaves a node: its own
value never carries its own noise, and every value sent carries a draw no one has seen before.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from node.plugin import (
    BarrierRounds,
    NetworkParams,
    NodeOutput,
    NoisyVectorParams,
    ProtocolContext,
    ProtocolPlugin,
    ProtocolSpec,
    SweepShape,
    clip_to_ball,
    mix,
)

PROTOCOL_NAME = "noisy-gossip"
NOISE_PURPOSE = "noisy_gossip_round"  # every draw is logged under it, at its round


class NoisyGossipParams(NoisyVectorParams):
    """The published parameters: NoisyVectorParams' noise, sensitivity, order and dimension, and the rounds."""

    name: Literal["noisy-gossip"] = "noisy-gossip"
    sigma: float = Field(ge=0.0, description="std of the Gaussian noise on every value a node sends")
    sensitivity: float = Field(1.0, gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    rounds: int = Field(3, ge=1, description="gossip rounds T, each with a fresh draw per node")

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """How long a run may take when every round waits its deadline twice over (`netdp run`'s time limit)."""
        return self.rounds * network.round_deadline_s * 2


class NoisyGossipNode:
    """One node's part: clip, then T rounds of noisy sends and plain mixing at the round barrier."""

    def __init__(self, context: ProtocolContext[NoisyGossipParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        self._rounds = BarrierRounds(context)  # registers the round mailbox before the node serves anyone

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        value = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        row = context.topology.weight_row(context.node_id)
        for t in range(params.rounds):
            await context.step_started(t)
            sent = await context.noise.gaussian(value, params.sigma, step=t, purpose=NOISE_PURPOSE)
            received = await self._rounds.exchange(t, sent)
            value = mix(value, received, row, context.node_id)
        return NodeOutput(value, params.rounds)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, NoisyGossipParams, NoisyGossipNode, sweep=SweepShape("averaging", "rounds")),
    auditor="noisy_gossip_audit:AUDITOR",
)
