"""Sending a node's value to its neighbours: bounded retries within a deadline, then log.

Once the fate of every message of a round is known (delivered or not, after how many
attempts), they are logged as sent together, with the full-precision payload: one fsync
per round rather than one per neighbour.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import numpy as np

from netdp.v1 import peer_pb2
from node.codec import pack
from node.journal import Delivery, Journal
from node.transport.base import LinkError, PeerLink

RETRY_BACKOFF_S = 0.05


class Outbox:
    """The sending side of one node: one link per neighbour."""

    def __init__(self, links: dict[int, PeerLink], journal: Journal, *, run_id: str, protocol: str,
                 sender: int, attempts: int) -> None:
        self._links = links
        self._journal = journal
        self._run_id = run_id
        self._protocol = protocol
        self._sender = sender
        self._attempts = attempts

    async def broadcast(self, round_index: int, value: np.ndarray, budget_s: float,
                        on_fate: Callable[[int, Delivery], Awaitable[None]]) -> dict[int, bool]:
        """Send the round's value to every neighbour concurrently; return who got it.

        `on_fate(peer, delivery)` runs as soon as a message's fate is known: an
        acknowledgement proves the peer alive, a final failure to connect shows it unreachable,
        a "round closed" refusal shows it has moved on.
        In round 0 a send waits for the peer to come up (peers start at different times);
        later, a peer that cannot be connected to fails at once.
        """
        data, shape = pack(value)
        envelope = peer_pb2.Envelope(
            run_id=self._run_id, protocol=self._protocol, sender=self._sender, round=round_index, shape=shape
        )
        peers = sorted(self._links)
        wait_for_peer = round_index == 0
        outcomes = await asyncio.gather(
            *(self._send(peer, envelope, data, budget_s, wait_for_peer, on_fate) for peer in peers))
        deliveries = dict(zip(peers, outcomes))
        await self._journal.sent(round_index, value, deliveries)
        return {peer: delivery.delivered for peer, delivery in deliveries.items()}

    async def _send(self, peer: int, envelope: peer_pb2.Envelope, data: bytes, budget_s: float,
                    wait_for_peer: bool, on_fate: Callable[[int, Delivery], Awaitable[None]]) -> Delivery:
        delivery = await self._deliver(peer, envelope, data, budget_s, wait_for_peer)
        await on_fate(peer, delivery)
        return delivery

    async def _deliver(self, peer: int, envelope: peer_pb2.Envelope, data: bytes, budget_s: float,
                       wait_for_peer: bool) -> Delivery:
        """Up to `attempts` failed tries within the budget, backing off after each retryable one.

        A peer that is behind (it refuses rounds too far ahead) is asked again, less and less
        often, until the budget runs out, without using up tries: it takes the value once it
        catches up, which is how two nodes that drifted apart (a network cut) get back in step.
        """
        deadline = time.monotonic() + budget_s
        failure: LinkError | None = None
        attempts = failures = 0
        behind_pause = RETRY_BACKOFF_S
        while failures < self._attempts and (remaining := deadline - time.monotonic()) > 0:
            attempts += 1
            try:
                await self._links[peer].send(envelope, data, remaining, wait_for_peer=wait_for_peer)
                return Delivery(True, attempts)
            except LinkError as exc:
                if exc.code == "ALREADY_EXISTS" and attempts > 1:
                    return Delivery(True, attempts)  # a retry after a lost acknowledgement finds it there
                failure = exc
                if exc.peer_behind:
                    pause, behind_pause = behind_pause, 2 * behind_pause
                else:
                    failures += 1
                    if not exc.retryable:
                        break
                    pause = RETRY_BACKOFF_S * failures
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        if failure is None:
            return Delivery(False, attempts, "deadline passed before sending")
        return Delivery(False, attempts, str(failure), unreachable=failure.unreachable,
                        peer_moved_on=failure.peer_moved_on)
