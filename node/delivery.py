"""Sending: one link per peer, delivery rules as policy objects, and the sent records.

A policy decides how often and how long to try one message and what each failure means
(`BarrierDelivery` for a round's value, `CustodyDelivery` for a message that must arrive
exactly once, `LatestValueDelivery` for a value that the next one supersedes); all three
try through one loop, `send_with_retries`, paced by `RetryPolicy` (exponential backoff with
jitter and a give-up rule). The `Outbox` builds envelopes, applies a policy per peer and
logs what became of each message.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from netdp.v1 import peer_pb2
from node.codec import PayloadError, unpack
from node.journal import Delivery, Journal
from node.message import Message, MessageId, kind_of, to_wire
from node.transport.base import RETRYABLE_CODES, LinkError, PeerLink

PING = "ping"  # a call every node answers: is the peer there at all?
BEHIND = "OUT_OF_RANGE"  # a peer that refuses a round too far ahead of its own
FateCallback = Callable[[int, Delivery], Awaitable[None]]
Jitter = Literal["none", "full", "decorrelated"]
FIRST_TRY = Delivery(True, 1)  # what most messages become: one shared, immutable fate


@dataclass(frozen=True)
class RetryPolicy:
    """When to try a failed message again, and how long to wait first (after Flower's `RetryInvoker`).

    Pauses grow from `base_delay_s` by `multiplier` up to `max_delay_s`. Jitter spreads them so
    that the peers of a node that restarts do not all knock again at the same instant: "full"
    draws each pause uniformly below its ceiling, "decorrelated" draws it between the base and
    `multiplier` times the previous pause (capped), "none" waits the ceiling. The draws come from
    `rng`, a plain `random.Random` that never touches a node's noise sampler (pauses are not
    private and need no secure randomness). The give-up rule: an error whose code is not in
    `retryable`, `max_attempts` failed tries (None: no limit), or `deadline_s` after the first
    try (None: the caller's budget only) ends the message's delivery.
    """

    base_delay_s: float = 0.05
    multiplier: float = 2.0
    max_delay_s: float = 1.0
    jitter: Jitter = "full"
    max_attempts: int | None = None
    deadline_s: float | None = None
    retryable: frozenset[str] = RETRYABLE_CODES
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.base_delay_s <= self.max_delay_s or self.multiplier < 1:
            raise ValueError("a retry policy needs 0 < base_delay_s <= max_delay_s and multiplier >= 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("a retry policy's max_attempts is at least 1")

    def delays(self) -> Iterator[float]:
        """The pauses before the 2nd, 3rd, ... try of one message (endless: the give-up rule ends them)."""
        ceiling = previous = self.base_delay_s
        while True:
            if self.jitter == "full":
                pause = self.rng.uniform(0.0, ceiling)
            elif self.jitter == "decorrelated":
                pause = previous = min(self.max_delay_s, self.rng.uniform(self.base_delay_s,
                                                                          previous * self.multiplier))
            else:
                pause = ceiling
            yield pause
            ceiling = min(self.max_delay_s, ceiling * self.multiplier)

    def retries(self, error: LinkError, failures: int) -> bool:
        """Whether a message that failed `failures` times, the last with `error`, is tried again."""
        return error.code in self.retryable and (self.max_attempts is None or failures < self.max_attempts)

    def budget_s(self, budget_s: float) -> float:
        """The time the caller's budget leaves this policy's tries: the smaller of the two."""
        return budget_s if self.deadline_s is None else min(budget_s, self.deadline_s)


# Transport failures (a peer starting, restarting or briefly cut off): 50 ms doubling to 1 s, full jitter.
TRANSPORT_RETRY = RetryPolicy()
# A peer that is behind, asked again less and less often without using up tries until it catches up.
BEHIND_RETRY = RetryPolicy(max_delay_s=2.0, jitter="decorrelated", retryable=frozenset({BEHIND}))
# One try and no retry, whatever the failure.
ONE_TRY = RetryPolicy(max_attempts=1)


async def send_with_retries(link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                            wait_for_peer: bool, policy: RetryPolicy, held: Callable[[int], bool],
                            behind: RetryPolicy | None = None, tried: LinkError | None = None) -> Delivery:
    """Try one message under `policy` within the budget: the one retry loop of every delivery rule.

    `held(attempt)` says whether ALREADY_EXISTS on that attempt means the peer holds the message.
    With `behind`, a peer that is behind (OUT_OF_RANGE) is asked again on that policy's pauses,
    without counting as a failure of `policy`. `tried`: the first attempt was made already (in a
    bundle) and failed so; the budget is what is left of it.
    """
    deadline = time.monotonic() + policy.budget_s(budget_s)
    pauses, behind_pauses = policy.delays(), (behind or policy).delays()
    failure: LinkError | None = None
    attempts = failures = 0
    while tried is not None or (remaining := deadline - time.monotonic()) > 0:
        attempts += 1
        try:
            if tried is not None:
                first, tried = tried, None
                raise first
            await link.send(envelope, data, remaining, wait_for_peer=wait_for_peer)
            return Delivery(True, attempts)
        except LinkError as exc:
            if exc.code == "ALREADY_EXISTS" and held(attempts):
                return Delivery(True, attempts)
            failure = exc
            if behind is not None and exc.code in behind.retryable:
                pause = next(behind_pauses)
            else:
                failures += 1
                if not policy.retries(exc, failures):
                    break
                pause = next(pauses)
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    return _failed(attempts, failure)


class DeliveryPolicy(Protocol):
    """How to get one message to one peer within a time budget (`tried`: the first attempt failed so already)."""

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool, tried: LinkError | None = None) -> Delivery: ...


class Bundler(Protocol):
    """What carries a node's one-way messages to the other ids of its process in bundles (`node.transport.bundles`)."""

    def post(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float) -> asyncio.Future[None] | None:
        """A first attempt in the next bundle, ended once the receiver logged it (LinkError: refused); None when the
        receiver is not in this process."""
        ...

    def answers(self, peer: int) -> bool | None:
        """Whether `peer`, an id of this process, still takes messages (what a ping would find); None when it is not
        in this process."""
        ...


@dataclass(frozen=True)
class BarrierDelivery:
    """A round's value for a neighbour's round barrier.

    Up to `attempts` failed tries, backing off (`retry`) after each retryable one. A peer that
    is behind (it refuses rounds too far ahead: OUT_OF_RANGE) is asked again, less and less
    often (`behind`), until the budget runs out, without using up tries: it takes the value once
    it catches up, which is how two nodes that drifted apart get back in step. A peer that
    closed the round without our value (FAILED_PRECONDITION) has moved on: it is not tried again.
    """

    attempts: int
    retry: RetryPolicy = TRANSPORT_RETRY
    behind: RetryPolicy = BEHIND_RETRY

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool, tried: LinkError | None = None) -> Delivery:
        # ALREADY_EXISTS on a retry: a retry after a lost acknowledgement finds the value there
        return await send_with_retries(link, envelope, data, budget_s, wait_for_peer=wait_for_peer,
                                       policy=replace(self.retry, max_attempts=self.attempts),
                                       held=lambda attempt: attempt > 1, behind=self.behind, tried=tried)


@dataclass(frozen=True)
class CustodyDelivery:
    """A message that must arrive exactly once (an exchange's decision, a token).

    Retried (`retry`) while the failure is retryable, up to `attempts` tries within the budget;
    the receiver is idempotent by MessageId, so ALREADY_EXISTS on any attempt means it holds
    the message.
    """

    attempts: int
    retry: RetryPolicy = TRANSPORT_RETRY

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool, tried: LinkError | None = None) -> Delivery:
        return await send_with_retries(link, envelope, data, budget_s, wait_for_peer=wait_for_peer,
                                       policy=replace(self.retry, max_attempts=self.attempts),
                                       held=lambda attempt: True, tried=tried)


@dataclass(frozen=True)
class LatestValueDelivery:
    """A value the sender's next one supersedes (broadcast models): one try, never retried."""

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool, tried: LinkError | None = None) -> Delivery:
        return await send_with_retries(link, envelope, data, budget_s, wait_for_peer=wait_for_peer,
                                       policy=ONE_TRY, held=lambda attempt: False, tried=tried)


def _failed(attempts: int, failure: LinkError | None) -> Delivery:
    if failure is None:
        return Delivery(False, attempts, "deadline passed before sending")
    return Delivery(False, attempts, str(failure), unreachable=failure.unreachable,
                    peer_moved_on=failure.code == "FAILED_PRECONDITION")


class Outbox:
    """The sending side of one node: a long-lived link per peer, opened on first use."""

    def __init__(self, link_for: Callable[[int], PeerLink], journal: Journal, *, run_id: str, protocol: str,
                 sender: int, courier: Bundler | None = None) -> None:
        """`courier`: first attempts to the ids of this process go in its bundles (else each over its link)."""
        self._link_for = link_for
        self._courier = courier
        self._links: dict[int, PeerLink] = {}
        self._journal = journal
        self._run_id = run_id
        self._protocol = protocol
        self._sender = sender

    def link(self, peer: int) -> PeerLink:
        if peer not in self._links:
            self._links[peer] = self._link_for(peer)
        return self._links[peer]

    def _wire(self, peer: int, message: Message) -> tuple[peer_pb2.Envelope, bytes]:
        return to_wire(message, run_id=self._run_id, protocol=self._protocol, sender=self._sender, receiver=peer)

    async def deliver(self, peer: int, message: Message, policy: DeliveryPolicy, budget_s: float, *,
                      wait_for_peer: bool = False) -> Delivery:
        """Deliver one message under `policy` and log it with its fate."""
        return (await self.broadcast((peer,), message, policy, budget_s, wait_for_peer=wait_for_peer))[peer]

    async def broadcast(self, peers: Sequence[int], message: Message, policy: DeliveryPolicy, budget_s: float, *,
                        wait_for_peer: bool = False, on_fate: FateCallback | None = None) -> dict[int, Delivery]:
        """Send one message to every peer concurrently; log all of them together (one fsync).

        `on_fate(peer, delivery)` runs as soon as a message's fate is known.
        """
        await self._journal.settled()  # the secrets behind what leaves are on disk before it does
        started = time.monotonic()

        async def send(peer: int, tried: LinkError | None = None) -> Delivery:
            envelope, data = self._wire(peer, message)
            left = budget_s - (time.monotonic() - started)
            delivery = await policy.deliver(self.link(peer), envelope, data, left, wait_for_peer=wait_for_peer,
                                            tried=tried)
            return await fated(peer, delivery)

        async def fated(peer: int, delivery: Delivery) -> Delivery:
            if on_fate is not None:
                await on_fate(peer, delivery)
            return delivery

        ordered = sorted(peers)
        bundled = self._bundled(ordered, message, budget_s)
        alone = asyncio.gather(*(send(peer) for peer in ordered if peer not in bundled))
        deliveries: dict[int, Delivery] = {}
        retried: dict[int, Awaitable[Delivery]] = {}
        for peer, first in bundled.items():  # a bundle's messages are settled together: no task of their own
            try:
                await first
            except LinkError as failure:
                retried[peer] = asyncio.ensure_future(send(peer, failure))
                continue
            deliveries[peer] = await fated(peer, FIRST_TRY)
        deliveries |= dict(zip((peer for peer in ordered if peer not in bundled), await alone))
        deliveries |= {peer: await retry for peer, retry in retried.items()}
        await self._journal.sent((peer, message, deliveries[peer]) for peer in ordered)
        return {peer: deliveries[peer] for peer in ordered}

    def _bundled(self, peers: Sequence[int], message: Message, budget_s: float) -> dict[int, asyncio.Future[None]]:
        """The first attempts posted to the courier (those to the ids of this process), by peer."""
        if self._courier is None:
            return {}
        posted = {}
        for peer in peers:
            first = self._courier.post(*self._wire(peer, message), budget_s)
            if first is not None:
                posted[peer] = first
        return posted

    async def call(self, peer: int, message: Message, timeout_s: float, *, wait_for_peer: bool = False,
                   reply_dimension: int | None = None) -> Message:
        """One request and its reply; raises LinkError on failure or on a reply that is not from `peer`.

        The reply is not logged here: the protocol logs what it takes from it. A reply refused here (not
        `peer`'s in this run, or a payload not of `reply_dimension`) is logged as refused: it reached the node.
        """
        await self._journal.settled()
        envelope, data = self._wire(peer, message)
        reply, reply_data = await self.link(peer).call(envelope, data, timeout_s, wait_for_peer=wait_for_peer)
        try:
            payload = unpack(reply_data, reply.shape)
        except PayloadError as exc:
            raise LinkError("INVALID_ARGUMENT", f"bad reply payload: {exc}") from None
        answer = Message(kind_of(reply), MessageId.of(reply), payload)
        if reply.run_id != self._run_id or reply.sender != peer:
            problem = f"the reply is not from node {peer} of this run"
        elif reply_dimension is not None and payload.size not in (0, reply_dimension):
            problem = f"reply payload of shape {payload.shape}"
        else:
            return answer
        await self._journal.refused_reply(peer, answer, problem, kept_elements=reply_dimension or 0)
        raise LinkError("INVALID_ARGUMENT", problem)

    async def reachable(self, peer: int, timeout_s: float, *, wait_for_peer: bool = False) -> bool:
        """Whether the peer answers a ping (a dead or cut-off peer does not); optionally wait for it to come up."""
        envelope, data = self._wire(peer, Message(PING, MessageId()))
        try:
            await self.link(peer).ping(envelope, data, timeout_s, wait_for_peer=wait_for_peer)
        except LinkError as exc:
            return not exc.unreachable and exc.code != "DEADLINE_EXCEEDED"
        return True

    def silent_here(self, peers: Sequence[int]) -> tuple[set[int], list[int]]:
        """Of `peers`, the ids of this process that no longer take messages (their node stopped), and the others:
        those only a ping can tell about.

        An id of this process is not pinged: it shares this process's life, and its node says whether it still
        takes messages (a virtual run's thousands of round barriers would otherwise ping each other at every
        check, a task per ping).
        """
        if self._courier is None:
            return set(), list(peers)
        stopped, elsewhere = set(), []
        for peer in peers:
            answers = self._courier.answers(peer)
            if answers is None:
                elsewhere.append(peer)
            elif not answers:
                stopped.add(peer)
        return stopped, elsewhere

    async def silent(self, peers: Sequence[int], timeout_s: float) -> set[int]:
        """The peers that do not answer a ping now (dead or cut off); ids of this process are not pinged
        (`silent_here`)."""
        stopped, elsewhere = self.silent_here(peers)
        answers = await asyncio.gather(*(self.reachable(peer, timeout_s) for peer in elsewhere))
        return stopped | {peer for peer, up in zip(elsewhere, answers) if not up}

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self._links.values()))

