"""What a transport must offer the node: a link to each peer that delivers a message or calls.

A link knows nothing of protocols: it moves one envelope and its payload and reports the
outcome as a gRPC status name. What a status means for a protocol (a peer that is behind,
a round that has closed) is decided by the delivery policies in `node.delivery`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from netdp.v1 import peer_pb2

# Failures worth another attempt: the peer may be starting, restarting or briefly unreachable.
RETRYABLE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED"})


class LinkError(Exception):
    """One attempt failed; `code` is a gRPC status code name."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES

    @property
    def unreachable(self) -> bool:
        """No connection to the peer (dead, cut off or not up yet), as opposed to a peer that answered."""
        return self.code == "UNAVAILABLE"


class PeerLink(Protocol):
    """A long-lived connection to one peer."""

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        """Deliver one message; return once the peer durably logged it, else raise LinkError.

        With `wait_for_peer`, a peer not yet reachable is waited for until the timeout;
        without, an unreachable peer fails the attempt at once.
        """
        ...

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        """Send one request and return the peer's reply (envelope and payload), else raise LinkError."""
        ...

    async def ping(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        """Check that the peer answers at all (the envelope is a `ping` request); raise LinkError if not."""
        ...

    async def close(self) -> None: ...


def settle(outcome: asyncio.Future[None], error: BaseException | None) -> None:
    """End a posted message's future, if its sender still waits: with `error`, or as delivered."""
    if outcome.done():
        return
    if error is None:
        outcome.set_result(None)
    else:
        outcome.set_exception(error)
