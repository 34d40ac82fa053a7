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


class PeerLink(Protocol):
    """A long-lived connection to one neighbour."""

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float) -> None:
        """Deliver one message; return once the peer durably logged it, else raise LinkError."""
        ...

    async def close(self) -> None: ...
