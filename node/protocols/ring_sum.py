"""Ring real summation (PAbD Alg. 1, and the distributed noise of its Remark 1) on the public ring.

The token τ, the zero vector, starts at node 0 and goes K times round the public ring
0 → 1 → … → n−1 → 0: node u holds it at the hops h ≡ u (mod n), its visit k = h // n, and
adds x_u plus noise by `noise_sigma`. With single placement (Alg. 1) the counter a is 0
exactly when h mod (n − 1) = 0, so those contributions are Perturb(x_u; σ_loc) and the
others x_u: ⌈Kn/(n − 1)⌉ noise draws by the algorithm's loop (Thm 1 writes ⌊Kn/(n − 1)⌋,
which leaves out the first contribution's draw whenever n − 1 does not divide Kn). With
distributed placement (Remark 1) every contribution adds N(0, σ_loc²/n), the first N(0, σ_loc²).
The rule reads the public hop only: the token carries no counter.

One addition to both: the last contribution (hop Kn − 1) always adds N(0, σ_loc²). Alg. 1
returns τ; here every node gets it, and a node that saw the token at its last visit and then
sees τ learns the contributions in between. Under Alg. 1 alone those can be bare (n = 4,
K = 2: hop 7 is, and node 2 would read x_3 exactly), and under Remark 1 they carry σ_loc/√n
only. A full draw in the last contribution makes τ itself a release at σ_loc over that tail.

After the K·n-th contribution node n − 1 holds the sum. It originates a `result` token
carrying it, which goes once more round the ring (hops 1..n − 1, custody-logged like the
sum's); each node outputs the result as soon as it has passed it on (node n − 2, the last,
as it takes it). It then takes its leave of its two ring neighbours (`token_sum.Farewell`) and
exits once both have taken theirs: its predecessor may still be retrying the last hand-over to
it (the token taken here, the acknowledgements lost), and is acknowledged, not left without an
answer; no node waits a fixed linger.

Failures: a ring allows no other hop. A holder whose successor cannot take the token
retries (each try is a custody delivery with its own retries) until the run deadline, then
exits with the reason; a node waiting for a token that does not come gives up at the same
deadline (`token_sum`). A token is refused unless it comes from this node's predecessor at
a hop that this node holds.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

import numpy as np
from pydantic import Field

from node.mailboxes.token_slot import AdmitRule, Token, TokenSlot
from node.message import MessageId
from node.protocols.base import NodeOutput, ProtocolPlugin, ProtocolSpec
from node.protocols.token_sum import (
    SUM_TOKEN_ID,
    TOKEN,
    Contributor,
    Deadline,
    Farewell,
    HopCounted,
    TokenSumParams,
    TokenWalkError,
)
from node.refusal import Refusal

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "ring-sum"
RESULT = "result"  # the kind of the result token's messages
RESULT_TOKEN_ID = "result"
RETRY_PAUSE_S = 0.5  # between tries to pass a token to a successor that cannot take it

NoisePlacement = Literal["single", "distributed"]


def noise_sigma(hop: int, n: int, cycles: int, sigma: float, placement: NoisePlacement) -> float | None:
    """The noise std of the contribution made at `hop` (contributions so far); None: x_u goes in bare."""
    if hop in (0, cycles * n - 1):  # the first, and the last before the sum is released to every node
        return sigma
    if placement == "distributed":
        return sigma / math.sqrt(n)
    return sigma if hop % (n - 1) == 0 else None


class RingSumParams(TokenSumParams):
    """Public parameters of ring real summation (PAbD Alg. 1, Remark 1)."""

    name: Literal["ring-sum"] = "ring-sum"
    cycles: int = Field(1, ge=1, description="K: times the token goes round the ring")
    noise_placement: NoisePlacement = Field(
        "single", description="single: Perturb(x; σ_loc) every n − 1 contributions (Alg. 1); distributed: "
                              "N(0, σ_loc²/n) in every contribution, N(0, σ_loc²) in the first (Remark 1); either way "
                              "the last contribution adds N(0, σ_loc²)")

    def hops(self, n: int) -> int:
        return (self.cycles + 1) * n

    def noise_sigmas(self, n: int) -> list[float]:
        sigmas = (noise_sigma(hop, n, self.cycles, self.sigma, self.noise_placement)
                  for hop in range(self.cycles * n))
        return [sigma for sigma in sigmas if sigma is not None]


class RingParams(HopCounted, Protocol):
    """What a ring token node reads off its protocol's Params (ring-sum's and ring-histogram's)."""

    @property
    def cycles(self) -> int: ...

    @property
    def vector_length(self) -> int: ...


RP = TypeVar("RP", bound=RingParams)


def successor(node: int, n: int) -> int:
    return (node + 1) % n


def check_graph(topology: Topology) -> None:
    """The graph must be the public ring 0 → 1 → … → n−1 → 0 (as edges, or arcs that way round), no more."""
    n = topology.n
    ring = {frozenset((v, successor(v, n))) for v in range(n)}
    links = {frozenset(link) for link in topology.edge_weights}
    if links != ring or any(successor(v, n) not in topology.out_neighbours[v] for v in range(n)):
        raise ValueError(f"{topology.protocol_name} passes its token round the public ring 0 -> 1 -> ... -> {n - 1} "
                         "-> 0 and this graph is not that ring; publish one with `netdp topology generate ring`")


async def take(slot: TokenSlot, deadline: Deadline, what: str) -> Token:
    """The next token to arrive at `slot`; TokenWalkError if none comes before the run deadline."""
    token = await slot.take(deadline.remaining())
    if token is None:
        raise TokenWalkError(f"no {what} came within the run deadline ({deadline.seconds:g} s after this node "
                             "started): a node before this one on the ring stopped or cannot pass it on")
    return token


async def pass_on(slot: TokenSlot, peer: int, token: Token, value: np.ndarray, deadline: Deadline,
                  network: NetworkParams) -> None:
    """Hand `token`, now carrying `value`, to the successor, retrying until the run deadline.

    A forward whose acknowledgement was lost may still have passed custody on: the token then
    came back here at a newer hop, and is not ours to send again.
    """
    while True:
        delivery = await slot.forward(peer, token, value, network.round_deadline_s)
        if delivery.delivered or not slot.holds(token):
            return
        if deadline.remaining() <= 0.0:
            raise TokenWalkError(f"node {peer} did not take the {token.token_id} token (hop {token.hop + 1}) "
                                 f"before the run deadline ({deadline.seconds:g} s): {delivery.failure}")
        await asyncio.sleep(min(RETRY_PAUSE_S, deadline.remaining()))


class RingTokenNode(Generic[RP]):
    """One node's part of a ring token walk: K contributions as the token passes, then the result passed on once.

    What a node adds at its visit (`_contribute`), what the originator starts the token with
    (`_initial_value`) and what it outputs from the result (`_output`) are the protocol's;
    custody, the ring's admit rule, deadlines and the farewell are shared (ring-sum, ring-histogram).
    """

    def __init__(self, context: ProtocolContext[RP]) -> None:
        self._context = context
        params, n, node = context.params, context.topology.n, context.node_id
        self._n, self._node = n, node
        sum_hops = set(range(node, params.cycles * n, n)) - {0}
        self._sum = context.token_slot(TOKEN, admit=self._ring_rule(SUM_TOKEN_ID, sum_hops))
        self._result = context.token_slot(RESULT, admit=self._ring_rule(RESULT_TOKEN_ID, {node + 1} - {n}))
        self._farewell = Farewell(context)

    async def _initial_value(self) -> np.ndarray:
        """The token's value as node 0 originates it."""
        return np.zeros(self._context.params.vector_length)

    async def _contribute(self, token: Token, visit: int) -> np.ndarray:
        """The token's value once this node's contribution at `visit` is in."""
        raise NotImplementedError

    def _output(self, result: np.ndarray) -> np.ndarray:
        """What this node outputs from the result."""
        return result

    def _ring_rule(self, token_id: str, hops: Collection[int]) -> AdmitRule:
        """Take token `token_id` only from the predecessor, and only at the hops this node holds."""
        predecessor = (self._node - 1) % self._n

        def admit(sender: int | None, message_id: MessageId) -> None:
            if sender != predecessor:
                raise Refusal("PERMISSION_DENIED", f"the ring passes tokens to node {self._node} from node "
                                                   f"{predecessor} only, not from node {sender}", names_sender=True)
            if message_id.hop not in hops or message_id.token_id != token_id:
                raise Refusal("FAILED_PRECONDITION", f"hop {message_id.hop} of the token is not node "
                                                     f"{self._node}'s to hold on this ring")

        return admit

    async def run(self) -> NodeOutput:
        context, params = self._context, self._context.params
        n, network = self._n, context.network
        deadline = Deadline.for_run(params, network, n)
        await context.step_started(0)
        await context.wait_for_peers([successor(self._node, n)], network.startup_deadline_s)
        held = self._sum.originate(SUM_TOKEN_ID, await self._initial_value()) if self._node == 0 else None
        for visit in range(params.cycles):
            token = held if held is not None else await take(self._sum, deadline, "sum token")
            held = None
            value = await self._contribute(token, visit)
            if token.hop == params.cycles * n - 1:  # the last contribution: this node holds the sum
                return await self._finish(self._result.originate(RESULT_TOKEN_ID, value), deadline)
            await pass_on(self._sum, successor(self._node, n), token, value, deadline, network)
            await context.step_started(visit + 1)
        return await self._finish(await take(self._result, deadline, "result token"), deadline)

    async def _finish(self, result: Token, deadline: Deadline) -> NodeOutput:
        """Pass the result on unless every node has had it (the last holder is its originator's predecessor)."""
        if result.hop < self._n - 1:
            await pass_on(self._result, successor(self._node, self._n), result, result.value, deadline,
                          self._context.network)
        await self._farewell.part(deadline)  # a retried hand-over to this node is still acknowledged
        return NodeOutput(self._output(result.value), self._context.params.cycles)


class RingSumNode(RingTokenNode[RingSumParams]):
    """Ring real summation: each visit adds the clipped input, plus noise where `noise_sigma` says."""

    def __init__(self, context: ProtocolContext[RingSumParams], value: np.ndarray) -> None:
        super().__init__(context)
        self._contributor = Contributor(context, value)

    async def _contribute(self, token: Token, visit: int) -> np.ndarray:
        params = self._context.params
        sigma = noise_sigma(token.hop, self._n, params.cycles, params.sigma, params.noise_placement)
        return await self._contributor.add(token.value, sigma, visit)


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, RingSumParams, RingSumNode, graphs=frozenset({"undirected", "directed"}),
                 check_graph=check_graph),
    auditor="coordinator_tools.audit.protocols.token_sum:RING_SUM",
    options="coordinator_tools.topology.protocol_options:RING_SUM",
)
