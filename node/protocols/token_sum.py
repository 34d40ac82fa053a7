"""What the token summations share (PAbD Alg. 1 on a ring, Alg. 3 on the complete graph).

One token τ, a vector, walks from holder to holder; custody is the token slot's
(`node.mailboxes.token_slot`). Its hop counts the contributions already in it: the holder
of hop h adds the (h + 1)-th, its clipped input x_u (the ball of radius Δ/2, as in the
averaging protocols) plus Gaussian noise from the node's own sampler when the protocol's
rule asks for it, then hands τ on. So everything a rule needs is the public hop: the token
carries no state beside its value.

Nodes share no clock, so every wait of a run is bounded by one deadline, counted from the
node's own start: the startup deadline, then one round deadline per hop the run makes. A
node that cannot pass the token on, or that waits for a token or result that does not come,
gives up then with a one-line reason (`TokenWalkError`, exit code 2).

A node's local step k (where `netdp run --kill NODE@k` strikes) starts when it has passed the
token on to another node for the k-th time (step 0 as it starts): a node killed there holds no
token, whatever visits it kept for itself on the way.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np
from pydantic import Field

from node.data import clip_to_ball
from node.delivery import CustodyDelivery
from node.errors import NetdpError
from node.message import Message, MessageId
from node.protocols.params import NoisyVectorParams
from node.transport.base import RETRYABLE_CODES

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.mailboxes.token_slot import Token, TokenSlot
    from node.topology import NetworkParams

TOKEN = "token"  # the kind of the summation token's messages
SUM_TOKEN_ID = "sum"
NOISE_PURPOSE = "perturb"  # Perturb(x_u^k; σ) of the paper; the draw's step is the node's visit index k
OVER = "over"  # Deliver, no payload: this node's part of the run is over (the farewell)
_PATH_DRAWS = secrets.SystemRandom()  # the OS CSPRNG: no seed exists to leak a walk's secret path
Reachable = Callable[[int, float], Awaitable[bool]]  # (peer, timeout) -> whether it answers a ping


class HopCounted(Protocol):
    """A token protocol's parameters, as far as its deadlines go."""

    def hops(self, n: int) -> int: ...


class TokenSumParams(NoisyVectorParams):
    """What both summations publish beside their walk: σ_loc, Δ, the Rényi order and D."""

    sigma: float = Field(ge=0.0, description="σ_loc: std of the Gaussian noise of one noisy contribution")
    sensitivity: float = Field(gt=0.0, description="l2 sensitivity Δ; every contribution is clipped to norm Δ/2")

    @abstractmethod
    def hops(self, n: int) -> int:
        """Hand-overs of the whole run on n nodes (the result's included): what its deadlines are counted in."""

    @abstractmethod
    def noise_sigmas(self, n: int) -> list[float]:
        """The std of every noisy contribution of a run on n nodes, in walk order."""

    def sum_noise_std(self, n: int) -> float:
        """Std of the noise in the final sum (per coordinate): the draws are independent."""
        return math.sqrt(sum(sigma**2 for sigma in self.noise_sigmas(n)))

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Twice the round deadlines a run's node allows its hops (the launcher adds the startup deadline)."""
        return 2 * self.hops(n) * network.round_deadline_s


class TokenWalkError(NetdpError):
    """The walk cannot go on from this node (a next hop never took the token, or nothing came in time)."""


class Deadline:
    """The run's deadline as this node's clock sees it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    @classmethod
    def for_run(cls, params: HopCounted, network: NetworkParams, n: int) -> Deadline:
        """From now, as the node starts: the startup deadline, then a round deadline per hop of the run."""
        return cls(network.startup_deadline_s + params.hops(n) * network.round_deadline_s)

    def remaining(self) -> float:
        return max(0.0, self._at - time.monotonic())


class Farewell:
    """The end of a token run for every node, with no fixed linger.

    A node whose part is over tells every neighbour so (`over`, a custody delivery) and stays
    until each neighbour that took the notice has told it the same, or the run deadline. So no
    node leaves while a neighbour may still retry a hand-over to it whose acknowledgements were
    lost: that neighbour's notice comes only after its last hand-over. A notice received is
    logged (it carries nothing but its sender); a retried copy is acknowledged, not logged again.
    The first notice also tells a waiting node that the walk ended without it (`came`).
    """

    def __init__(self, context: ProtocolContext[object]) -> None:
        self._context = context
        self._heard: set[int | None] = set()
        self._news = asyncio.Event()
        self.came = asyncio.Event()
        context.on(OVER, self._on_notice, scheme="none", payload=False)

    async def _on_notice(self, sender: int | None, message: Message) -> None:
        if sender in self._heard:  # a retry whose acknowledgement was lost
            return
        await self._context.journal.received(sender, message)
        self._heard.add(sender)
        self._news.set()
        self.came.set()

    async def part(self, deadline: Deadline) -> None:
        """Tell every neighbour this node is done, then wait for the notice of each one that took it."""
        context = self._context
        fates = await context.broadcast(context.neighbours(), Message(OVER, MessageId()),
                                        CustodyDelivery(context.network.send_attempts),
                                        min(context.network.round_deadline_s, deadline.remaining()))
        told = {peer for peer, fate in fates.items() if fate.delivered}
        try:
            async with asyncio.timeout(deadline.remaining()):
                while not told <= self._heard:
                    self._news.clear()
                    await self._news.wait()
        except TimeoutError:
            pass  # a neighbour that took the notice and stopped before its own: the deadline ends the wait


class Contributor:
    """A node's contributions to the token: its clipped input, plus noise when the protocol's rule says so."""

    def __init__(self, context: ProtocolContext[NoisyVectorParams], value: np.ndarray) -> None:
        self._context = context
        self._input, self._clipped = clip_to_ball(value, context.clip_bound(context.params.sensitivity / 2.0))

    async def add(self, token: np.ndarray, sigma: float | None, visit: int) -> np.ndarray:
        """τ + x_u (+ N(0, σ² I) unless `sigma` is None); the input and the draw go to the private log."""
        context = self._context
        contribution = await context.contribution(self._input, self._clipped, sensitivity=context.params.sensitivity)
        if sigma is not None:
            contribution = await context.noise.gaussian(contribution, sigma, step=visit, purpose=NOISE_PURPOSE)
        carried: np.ndarray = token + contribution
        return carried


async def hand_on_drawn(slot: TokenSlot, token: Token, value: np.ndarray, weights: Mapping[int, float], *,
                        holder: int, budget_s: float, reachable: Reachable, walk_over: Callable[[], bool],
                        deadline: Deadline) -> Token | None:
    """Pass `token`, now `value`, to a next holder drawn from `weights` (the holder's row of the walk).

    Returns the next hop when the holder drew itself (custody stays: `keep`), None once another
    node took the token. A drawn node that cannot take it is left out and the rest of the row is
    drawn again, renormalised; when no one is left, the walk cannot go on from here.

    A drawn node whose delivery failed without an answer (no connection, no acknowledgement in
    time) is tried again with the same hop as long as it answers a ping (`reachable`), until
    `deadline`: it may have taken the token with only its acknowledgements lost, and drawing
    another node would fork the walk. `walk_over()` true (the walk's end came) means the token
    went on after all: nothing is left to hand on.
    """
    row = {peer: weight for peer, weight in weights.items() if weight > 0.0}
    while row:
        peers = list(row)
        peer = _PATH_DRAWS.choices(peers, weights=[row[p] for p in peers])[0]
        if peer == holder:
            return await slot.keep(token, value)
        while True:
            delivery = await slot.forward(peer, token, value, budget_s)
            if delivery.delivered or not slot.holds(token) or walk_over():
                return None
            answered = delivery.failure.partition(":")[0] not in RETRYABLE_CODES  # a refusal: it did not take it
            if answered or not await reachable(peer, budget_s):
                break  # it refused the hop, or it is down (with any copy it took)
            if walk_over():
                return None
            if deadline.remaining() <= 0.0:
                raise TokenWalkError(f"node {peer} answers but did not acknowledge the token at hop {token.hop + 1} "
                                     f"before the run deadline ({deadline.seconds:g} s): {delivery.failure}")
        del row[peer]
    raise TokenWalkError(f"no next holder could take the token at hop {token.hop + 1}: every peer of this "
                         "node's row failed its custody delivery")
