"""Why a node refuses an incoming message, in transport-neutral terms.

Codes are gRPC status code names so the gRPC server can map them one to one, while the
in-process transport and the tests use the same values without importing gRPC. A detail that
names the sender says so (`names_sender`): a sender-anonymous view logs another in its place.
"""

from __future__ import annotations

from typing import Literal

RefusalCode = Literal[
    "INVALID_ARGUMENT",  # malformed: shape, length, NaN/Inf, missing envelope
    "FAILED_PRECONDITION",  # wrong run or protocol, or a round that is already closed
    "PERMISSION_DENIED",  # unknown sender, not a neighbour, or identity mismatch
    "OUT_OF_RANGE",  # a round too far in the future, or an id beyond the published schedule
    "ALREADY_EXISTS",  # a second message under an id already taken (the same value, or another)
    "RESOURCE_EXHAUSTED",  # payload larger than the node accepts
    "NOT_FOUND",  # a message for a node id the receiving process does not host
    "UNAVAILABLE",  # the receiving node has stopped: its view log is closed
]


class Refusal(Exception):
    """An incoming message was refused; nothing of it was applied."""

    def __init__(self, code: RefusalCode, detail: str, *, names_sender: bool = False) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.names_sender = names_sender
