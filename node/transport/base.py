"""What a transport must offer the node: a link to each neighbour that delivers one message."""

from __future__ import annotations

from typing import Protocol

from netdp.v1 import peer_pb2

# Failures worth another attempt: the peer may be starting, restarting or briefly unreachable.
RETRYABLE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED"})


class LinkError(Exception):
    """One delivery attempt failed; `code` is a gRPC status code name."""

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

    @property
    def peer_behind(self) -> bool:
        """The peer refused a round too far ahead of its own: it takes the value once it catches up."""
        return self.code == "OUT_OF_RANGE"

    @property
    def peer_moved_on(self) -> bool:
        """The peer closed the round without our value (or is in another run): it has moved past it."""
        return self.code == "FAILED_PRECONDITION"


class PeerLink(Protocol):
    """A long-lived connection to one neighbour."""

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        """Deliver one message; return once the peer durably logged it, else raise LinkError.

        With `wait_for_peer`, a peer not yet reachable is waited for until the timeout;
        without, an unreachable peer fails the attempt at once.
        """
        ...

    async def close(self) -> None: ...
