"""Complete-graph walk summation (PAbD Alg. 3): each next holder is drawn uniformly from all nodes.

The token τ, the zero vector, starts at node 0. Its holder at hop h (h contributions so far)
adds Perturb(x_u; σ_loc) = x_u + N(0, σ_loc² I), the draw logged under the node's visit
index k, then draws the next holder uniformly among all n nodes, itself included, as Alg. 3
draws u ~ U(1..n) at every step: a node that draws itself contributes again at once, its
next hop `kept` in custody without a network hop, so hop h is always the (h + 1)-th visit.
The draws come from the operating system's CSPRNG (`secrets`), never from a published
seed: the path must stay secret. A drawn node whose custody delivery failed after its
retries without refusing may still have taken the token, only its acknowledgements lost:
while it answers a ping (and no result came), it is tried again with the same hop, which it
acknowledges without taking twice (drawing another would fork the walk). A drawn node that
refuses the hop or is down is left out and the holder draws again among the
others and itself, so the walk goes on while the holder lives. A next hop that took the
token durably and then died before acknowledging it cannot be told from one that never got
it: its copy dies with it, and the logs show it (received, never passed on).

After T contributions (hop T − 1) the holder delivers the sum to every other node as a
`result` message (a custody delivery: the receiver logs it before acknowledging) and outputs
it. The other nodes only learn that the walk is over from that message: each waits for the
token or the result until the run deadline (startup, then T + 1 round deadlines), then exits
with the reason. Every node that is done takes its leave (`token_sum.Farewell`), so none
leaves while another may still retry a hand-over to it. Node 0 waits for every node to be up before the walk starts, so
that no node is left out of draws because it started late.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from node.delivery import CustodyDelivery
from node.message import Message, MessageId
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec
from node.protocols.token_sum import (
    SUM_TOKEN_ID,
    TOKEN,
    Contributor,
    Deadline,
    Farewell,
    TokenSumParams,
    TokenWalkError,
    hand_on_drawn,
)
from node.refusal import Refusal

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.mailboxes.token_slot import Token
    from node.topology import Topology

PROTOCOL_NAME = "walk-sum"
RESULT = "result"  # Deliver, the final sum: the walk is over
START = 0  # the node the token starts at (public)


class WalkSumParams(TokenSumParams):
    """Public parameters of complete-graph walk summation (PAbD Alg. 3)."""

    name: Literal["walk-sum"] = "walk-sum"
    steps: int = Field(ge=1, description="T: contributions the walk collects (its length)")

    def hops(self, n: int) -> int:
        return self.steps + 1

    def noise_sigmas(self, n: int) -> list[float]:
        return [self.sigma] * self.steps


def check_graph(topology: Topology) -> None:
    """The next holder is drawn among all nodes: every node must be linked to every other."""
    n = topology.n
    short = [v for v in range(n) if len(topology.neighbours[v]) < n - 1]
    if short:
        raise ValueError(f"walk-sum draws every next holder among all nodes, so it runs on the complete graph, and "
                         f"node {short[0]} has {len(topology.neighbours[short[0]])} neighbours of {n - 1}; publish "
                         "one with `netdp topology generate complete`")


class WalkSumNode:
    """One node's part: a contribution at every visit of the token, then the result."""

    def __init__(self, context: ProtocolContext[WalkSumParams], value: np.ndarray) -> None:
        self._context = context
        self._contributor = Contributor(context, value)
        self._slot = context.token_slot(TOKEN, admit=self._admit)
        self._result: np.ndarray | None = None
        self._result_came = asyncio.Event()
        context.on(RESULT, self._on_result, scheme="none", payload=True)
        self._farewell = Farewell(context)

    def _admit(self, sender: int | None, message_id: MessageId) -> None:
        steps = self._context.params.steps
        if message_id.token_id != SUM_TOKEN_ID or message_id.hop >= steps:
            raise Refusal("FAILED_PRECONDITION", f"hop {message_id.hop} of the token is not part of this walk "
                                                 f"of {steps} contributions")

    async def _on_result(self, sender: int, message: Message) -> None:
        if self._result is not None:
            raise Refusal("ALREADY_EXISTS", "the result is here already")
        self._result = message.payload
        await self._context.journal.received(sender, message)
        self._result_came.set()

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        deadline = Deadline.for_run(params, context.network, context.topology.n)
        await context.step_started(0)
        held: Token | None = None
        if context.node_id == START:
            await context.wait_for_peers(self._others(), context.network.startup_deadline_s)
            held = self._slot.originate(SUM_TOKEN_ID, np.zeros(params.vector_length))
        visits = passes = 0
        while True:
            if held is None:
                held = await self._next_visit(deadline)
                if held is None:
                    assert self._result is not None  # `_next_visit` gives no visit only once the result came
                    output = self._result
                    break
            value = await self._contributor.add(held.value, params.sigma, visits)
            visits += 1
            if held.hop == params.steps - 1:
                await self._announce(value)
                output = value
                break
            held = await self._hand_on(held, value, deadline)
            if held is None:
                passes += 1
                await context.step_started(passes)
        await self._farewell.part(deadline)  # a hand-over retried to this node is still acknowledged
        return NodeOutput(output, visits)

    async def _announce(self, total: np.ndarray) -> None:
        """Deliver the sum to every other node: the walk is over (a node that is down misses it, and is logged so)."""
        network = self._context.network
        await self._context.broadcast(self._others(), Message(RESULT, MessageId(), total),
                                      CustodyDelivery(network.send_attempts), network.round_deadline_s)

    def _others(self) -> list[int]:
        return [v for v in range(self._context.topology.n) if v != self._context.node_id]

    async def _next_visit(self, deadline: Deadline) -> Token | None:
        """The token's next visit here, or None once the result came: the walk is over."""
        arrival = asyncio.create_task(self._slot.take(deadline.remaining()))
        result = asyncio.create_task(self._result_came.wait())
        try:
            await asyncio.wait((arrival, result), return_when=asyncio.FIRST_COMPLETED)
        finally:
            arrival.cancel()
            result.cancel()
        if self._result_came.is_set():
            return None
        token = arrival.result()
        if token is None:
            raise TokenWalkError(f"neither the token nor the result came within the run deadline ({deadline.seconds:g} "
                                 "s after this node started): the token's holder stopped, or the walk lost it")
        return token

    async def _hand_on(self, token: Token, value: np.ndarray, deadline: Deadline) -> Token | None:
        """Pass τ to a holder drawn uniformly among all nodes: the next hop if this node drew itself, else None.

        This node is always in the draw, so a hand-on always ends. A drawn node that is up is tried
        again rather than left out (it may hold the token, its acknowledgements lost), until the
        result shows that the walk went on.
        """
        n = self._context.topology.n
        return await hand_on_drawn(self._slot, token, value, dict.fromkeys(range(n), 1.0 / n),
                                   holder=self._context.node_id, budget_s=self._context.network.round_deadline_s,
                                   reachable=self._context.reachable, walk_over=self._result_came.is_set,
                                   deadline=deadline)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, WalkSumParams, WalkSumNode, check_graph=check_graph),
    auditor="coordinator_tools.audit.protocols.token_sum:WALK_SUM",
    options="coordinator_tools.topology.protocol_options:WALK_SUM",
)
