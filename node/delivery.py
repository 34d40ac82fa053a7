"""Sending: one link per peer, delivery rules as policy objects, and the sent records.

A policy decides how often and how long to try one message and what each failure means
(`BarrierDelivery` for a round's value, `CustodyDelivery` for a message that must arrive
exactly once, `LatestValueDelivery` for a value that the next one supersedes); the
`Outbox` builds envelopes, applies a policy per peer and logs what became of each message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from netdp.v1 import peer_pb2
from node.codec import PayloadError, unpack
from node.journal import Delivery, Journal
from node.message import Message, MessageId, kind_of, to_wire
from node.transport.base import LinkError, PeerLink

RETRY_BACKOFF_S = 0.05
PING = "ping"  # a call every node answers: is the peer there at all?
FateCallback = Callable[[int, Delivery], Awaitable[None]]


class DeliveryPolicy(Protocol):
    """How to get one message to one peer within a time budget."""

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool) -> Delivery: ...


@dataclass(frozen=True)
class BarrierDelivery:
    """A round's value for a neighbour's round barrier.

    Up to `attempts` failed tries, backing off after each retryable one. A peer that is behind
    (it refuses rounds too far ahead: OUT_OF_RANGE) is asked again, less and less often,
    until the budget runs out, without using up tries: it takes the value once it catches
    up, which is how two nodes that drifted apart get back in step. A peer that closed the
    round without our value (FAILED_PRECONDITION) has moved on: it is not tried again.
    """

    attempts: int

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool) -> Delivery:
        deadline = time.monotonic() + budget_s
        failure: LinkError | None = None
        attempts = failures = 0
        behind_pause = RETRY_BACKOFF_S
        while failures < self.attempts and (remaining := deadline - time.monotonic()) > 0:
            attempts += 1
            try:
                await link.send(envelope, data, remaining, wait_for_peer=wait_for_peer)
                return Delivery(True, attempts)
            except LinkError as exc:
                if exc.code == "ALREADY_EXISTS" and attempts > 1:
                    return Delivery(True, attempts)  # a retry after a lost acknowledgement finds it there
                failure = exc
                if exc.code == "OUT_OF_RANGE":
                    pause, behind_pause = behind_pause, 2 * behind_pause
                else:
                    failures += 1
                    if not exc.retryable:
                        break
                    pause = RETRY_BACKOFF_S * failures
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        return _failed(attempts, failure)


@dataclass(frozen=True)
class CustodyDelivery:
    """A message that must arrive exactly once (an exchange's decision, a token).

    Retried while the failure is retryable, within the budget; the receiver is idempotent by
    MessageId, so ALREADY_EXISTS on any attempt means it holds the message.
    """

    attempts: int

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool) -> Delivery:
        deadline = time.monotonic() + budget_s
        failure: LinkError | None = None
        attempts = 0
        while attempts < self.attempts and (remaining := deadline - time.monotonic()) > 0:
            attempts += 1
            try:
                await link.send(envelope, data, remaining, wait_for_peer=wait_for_peer)
                return Delivery(True, attempts)
            except LinkError as exc:
                if exc.code == "ALREADY_EXISTS":
                    return Delivery(True, attempts)
                failure = exc
                if not exc.retryable:
                    break
                await asyncio.sleep(min(RETRY_BACKOFF_S * attempts, max(0.0, deadline - time.monotonic())))
        return _failed(attempts, failure)


@dataclass(frozen=True)
class LatestValueDelivery:
    """A value the sender's next one supersedes (broadcast models): one try, never retried."""

    async def deliver(self, link: PeerLink, envelope: peer_pb2.Envelope, data: bytes, budget_s: float, *,
                      wait_for_peer: bool) -> Delivery:
        try:
            await link.send(envelope, data, budget_s, wait_for_peer=wait_for_peer)
            return Delivery(True, 1)
        except LinkError as exc:
            return _failed(1, exc)


def _failed(attempts: int, failure: LinkError | None) -> Delivery:
    if failure is None:
        return Delivery(False, attempts, "deadline passed before sending")
    return Delivery(False, attempts, str(failure), unreachable=failure.unreachable,
                    peer_moved_on=failure.code == "FAILED_PRECONDITION")


class Outbox:
    """The sending side of one node: a long-lived link per peer, opened on first use."""

    def __init__(self, link_for: Callable[[int], PeerLink], journal: Journal, *, run_id: str, protocol: str,
                 sender: int) -> None:
        self._link_for = link_for
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

        async def send(peer: int) -> Delivery:
            envelope, data = self._wire(peer, message)
            delivery = await policy.deliver(self.link(peer), envelope, data, budget_s, wait_for_peer=wait_for_peer)
            if on_fate is not None:
                await on_fate(peer, delivery)
            return delivery

        ordered = sorted(peers)
        deliveries = dict(zip(ordered, await asyncio.gather(*(send(peer) for peer in ordered))))
        await self._journal.sent((peer, message, delivery) for peer, delivery in deliveries.items())
        return deliveries

    async def call(self, peer: int, message: Message, timeout_s: float, *, wait_for_peer: bool = False,
                   reply_dimension: int | None = None) -> Message:
        """One request and its reply; raises LinkError on failure or on a reply that is not from `peer`.

        The reply is not logged here: the protocol logs what it takes from it. A reply refused here (not
        `peer`'s in this run, or a payload not of `reply_dimension`) is logged as refused: it reached the node.
        """
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

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self._links.values()))

