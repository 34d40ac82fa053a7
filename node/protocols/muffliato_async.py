"""Randomized Muffliato (Muffliato Alg. 2): noise once, then asynchronous pairwise averaging.

Each node adds N(0, σ² I) to its clipped input once, then runs its own Poisson clock. On a
tick it picks a neighbour (with the edge's activation probability) and the two replace
their values by the pair's average, atomically for both sides.

Commit rule (initiator decides, presumed abort):
1. the initiator logs `proposed` and calls the peer with `exchange.propose` (no payload);
2. a busy peer answers `exchange.decline` (to a lower id, only if it stays busy a fraction
   of the timeout); a free one locks itself, logs `accepted` and answers `exchange.accept`
   with its value;
3. the initiator, on that reply, logs the received value and `committed` (the commit
   point), applies the average, then delivers `exchange.commit` with its own value; the
   responder logs it, `committed`, applies the average and unlocks. An initiator that gets
   no reply logs `aborted` and delivers `exchange.abort`;
4. a responder left in doubt asks the initiator (`exchange.status`), which answers the
   exchange's peer only, with its decision and, on a commit, the value its commit carries
   (the answer logged at both ends); if the initiator cannot be reached it aborts.
The desk that implements this rule is `node.mailboxes.exchange_desk`; this module is the
clock, the choice of peer and the stopping rule (a node that has made its ticks tells its
neighbours `done` and keeps answering until each of them is done or dead). The one window
this cannot close, an initiator that dies between its commit record and the delivery of
`exchange.commit`, is visible in the two logs and reported by the auditor.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from node.data import clip_to_ball
from node.delivery import CustodyDelivery
from node.message import Message, MessageId
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec, SweepShape
from node.protocols.params import NoisyVectorParams
from node.refusal import Refusal

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "muffliato-async"
NOISE_PURPOSE = "muffliato_init"
DONE = "done"  # Deliver, no payload: the sender has finished its own ticks
# How often a node that has finished checks that the neighbours it still waits for are alive.
LIVENESS_INTERVAL_S = 0.5

Activation = Literal["weights", "uniform"]


class MuffliatoAsyncParams(NoisyVectorParams):
    """Public parameters of randomized (pairwise, asynchronous) Muffliato."""

    name: Literal["muffliato-async"] = "muffliato-async"
    exchanges: int | None = Field(None, ge=1, description="ticks of its own clock each node makes")
    duration_s: float | None = Field(None, gt=0.0, description="or: seconds each node keeps ticking")
    tick_rate: float = Field(20.0, gt=0.0, le=10_000.0, description="rate of each node's Poisson clock, per second")
    activation: Activation = Field(
        "weights", description="how a ticking node picks its peer: proportional to W_vw, or uniformly")
    exchange_timeout_s: float = Field(2.0, gt=0.0, description="wait for a peer's answer before aborting")

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """A generous bound on a run: three times the clock's expected time, plus the wind-down."""
        ticking = self.duration_s if self.duration_s is not None else self.exchanges_per_node / self.tick_rate
        return 3 * ticking + 4 * self.exchange_timeout_s + 2 * network.round_deadline_s

    @property
    def exchanges_per_node(self) -> int:
        """The ticks each node makes, in a run stopped by their number (not by `duration_s`)."""
        if self.exchanges is None:
            raise ValueError("this run is stopped by duration_s, not by a number of exchanges")
        return self.exchanges

    @model_validator(mode="after")
    def _one_stopping_rule(self) -> MuffliatoAsyncParams:
        if (self.exchanges is None) == (self.duration_s is None):
            raise ValueError("give exactly one of 'exchanges' (ticks per node) and 'duration_s'")
        return self


def activation(topology: Topology, node: int) -> tuple[tuple[int, ...], np.ndarray]:
    """A node's neighbours and the probability of picking each on a tick; the planner draws schedules with it too."""
    neighbours = topology.neighbours[node]
    if not isinstance(topology.protocol, MuffliatoAsyncParams):
        raise ValueError(f"{topology.protocol_name} nodes have no {PROTOCOL_NAME} activation")
    if topology.protocol.activation == "uniform":
        return neighbours, np.full(len(neighbours), 1.0 / len(neighbours))
    row = topology.weight_row(node)
    weights = np.array([row[peer] for peer in neighbours])
    return neighbours, weights / weights.sum()


def average(own: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """The pairwise update of randomized gossip: both ends take the pair's mean."""
    mean: np.ndarray = (own + peer) / 2.0
    return mean


class MuffliatoAsyncNode:
    """One node's part: noise once, tick on a Poisson clock, exchange with a drawn neighbour."""

    def __init__(self, context: ProtocolContext[MuffliatoAsyncParams], value: np.ndarray) -> None:
        self._context = context
        self._value = value
        params = context.params
        self._desk = context.exchange_desk(average, timeout_s=params.exchange_timeout_s)
        self._finished: set[int] = set()  # neighbours that sent DONE
        self._news = asyncio.Event()
        context.on(DONE, self._on_done, scheme="none", payload=False)

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        clipped, was_clipped = clip_to_ball(self._value, context.clip_bound(params.sensitivity / 2.0))
        contribution = await context.contribution(clipped, was_clipped, sensitivity=params.sensitivity)
        self._desk.open(await context.noise.gaussian(contribution, params.sigma, step=0, purpose=NOISE_PURPOSE))
        await context.wait_for_peers(context.neighbours(), context.network.startup_deadline_s)
        ticks = await self._tick()
        await context.broadcast(context.neighbours(), Message(DONE, MessageId()),
                                CustodyDelivery(context.network.send_attempts), context.network.round_deadline_s)
        await self._wait_for_neighbours()
        await self._desk.drain()
        return NodeOutput(self._desk.opened_value, ticks)

    async def _tick(self) -> int:
        """Run the node's Poisson clock until its stopping rule; return the ticks made."""
        params = self._context.params
        rng = np.random.default_rng()  # the schedule is public: it needs no secret randomness
        neighbours, weights = activation(self._context.topology, self._context.node_id)
        stop_at = None if params.duration_s is None else time.monotonic() + params.duration_s
        ticks = 0
        while (stop_at is None and ticks < params.exchanges_per_node
               or stop_at is not None and time.monotonic() < stop_at):
            await asyncio.sleep(rng.exponential(1.0 / (params.tick_rate * self._context.clock_speedup)))
            peer = int(rng.choice(neighbours, p=weights))
            await self._desk.initiate(peer, before=partial(self._context.step_started, ticks))
            ticks += 1
        return ticks

    async def _on_done(self, sender: int, message: Message) -> None:
        if sender in self._finished:
            raise Refusal("ALREADY_EXISTS", f"node {sender} already said it is done", names_sender=True)
        await self._context.journal.received(sender, message)
        self._finished.add(sender)
        self._news.set()

    async def _wait_for_neighbours(self) -> None:
        """Keep answering until every neighbour is done too, or no longer answers at all."""
        context = self._context
        dead: set[int] = set()
        while missing := [peer for peer in context.neighbours() if peer not in self._finished | dead]:
            self._news.clear()
            try:
                async with asyncio.timeout(LIVENESS_INTERVAL_S):
                    await self._news.wait()
                continue
            except TimeoutError:
                pass
            dead |= await context.silent(missing, LIVENESS_INTERVAL_S)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, MuffliatoAsyncParams, MuffliatoAsyncNode,
                 sweep=SweepShape("averaging", "exchanges", length_required=True)),
    auditor="coordinator_tools.audit.protocols.muffliato_async:AUDITOR",
    options="coordinator_tools.topology.protocol_options:MUFFLIATO_ASYNC",
    demo="coordinator_tools.cluster.demo_protocols:MUFFLIATO_ASYNC",
)
