"""Validation of every incoming message before anything of it is applied.

Transport-neutral: the gRPC servicer and the in-process transport both hand an envelope,
the raw payload bytes and the authenticated sender (if the transport knows one) to
`Receiver.accept`. A refused message is logged as rejected and raises Refusal.
"""

from __future__ import annotations

import asyncio

import numpy as np

from netdp.v1 import peer_pb2
from node.codec import PayloadError, unpack
from node.inbox import RoundInbox
from node.journal import Journal
from node.refusal import Refusal
from node.topology import Topology

# A detail quotes what the peer claimed, cut to this many characters: a hostile run id or
# shape must not make the status (a gRPC trailer of a few KiB at most) or the log unreadable.
MAX_QUOTED_CHARS = 64


class Receiver:
    """Checks who sent what for which run and round, then hands it to the round inbox."""

    def __init__(self, topology: Topology, node_id: int, journal: Journal) -> None:
        self._topology = topology
        self._node_id = node_id
        self._journal = journal
        self._neighbours = frozenset(topology.neighbours[node_id])
        self._shape = (topology.protocol.dimension,)
        self.inbox = RoundInbox(topology.neighbours[node_id], journal)

    @property
    def payload_bytes(self) -> int:
        """Byte length of a valid payload; a stream that grows past it is refused while streaming."""
        return min(self._topology.network.max_message_bytes, 8 * self._topology.protocol.dimension)

    async def admit(self, envelope: peer_pb2.Envelope, authenticated_sender: int | None) -> int:
        """Check the envelope alone (before any payload is read); log and raise on refusal."""
        try:
            return self._check_envelope(envelope, authenticated_sender)
        except Refusal as refusal:
            await self.reject(envelope, refusal)
            raise

    async def accept(self, envelope: peer_pb2.Envelope, data: bytes, authenticated_sender: int | None) -> None:
        """Validate and deliver one gossip value; raise Refusal (already logged) otherwise.

        Delivery is shielded from the caller's cancellation (a deadline, a disconnect): a value
        whose `received` record is being written is also stored, never logged and then lost.
        """
        sender = await self.admit(envelope, authenticated_sender)
        await asyncio.shield(self._deliver(sender, envelope, data))

    async def _deliver(self, sender: int, envelope: peer_pb2.Envelope, data: bytes) -> None:
        try:
            await self.inbox.deliver(sender, envelope.round, self._decode(envelope, data))
        except Refusal as refusal:
            await self.reject(envelope, refusal)
            raise

    async def reject(self, envelope: peer_pb2.Envelope | None, refusal: Refusal) -> None:
        """Log a refusal; the transport may refuse before `accept` (no envelope, oversized stream)."""
        sender, round_index = (-1, 0) if envelope is None else (int(envelope.sender), int(envelope.round))
        await self._journal.rejected(sender, round_index, refusal.code, refusal.detail)

    def _check_envelope(self, envelope: peer_pb2.Envelope, authenticated_sender: int | None) -> int:
        topology = self._topology
        if envelope.run_id != topology.run_id:
            raise Refusal("FAILED_PRECONDITION",
                          f"message for run {_quoted(envelope.run_id)}, this is {topology.run_id!r}")
        if envelope.protocol != topology.protocol.name:
            raise Refusal("FAILED_PRECONDITION",
                          f"protocol {_quoted(envelope.protocol)}, this run is {topology.protocol.name!r}")
        sender = int(envelope.sender)
        if sender >= topology.n:
            raise Refusal("PERMISSION_DENIED", f"unknown sender {sender}")
        if authenticated_sender is not None and authenticated_sender != sender:
            raise Refusal("PERMISSION_DENIED", f"authenticated as node {authenticated_sender}, claims {sender}")
        if sender not in self._neighbours:
            raise Refusal("PERMISSION_DENIED", f"node {sender} is not a neighbour of node {self._node_id}")
        if tuple(envelope.shape) != self._shape:
            raise Refusal("INVALID_ARGUMENT", f"shape {_quoted(tuple(envelope.shape))}, expected {self._shape}")
        if envelope.sequence or envelope.exchange_id:
            raise Refusal("INVALID_ARGUMENT", "a gossip message is synchronous: it carries no sequence or exchange id")
        return sender

    def _decode(self, envelope: peer_pb2.Envelope, data: bytes) -> np.ndarray:
        try:
            return unpack(data, envelope.shape)
        except PayloadError as exc:
            raise Refusal("INVALID_ARGUMENT", str(exc)) from None


def _quoted(value: object) -> str:
    """repr(value), cut to MAX_QUOTED_CHARS."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else f"{text[: MAX_QUOTED_CHARS - 3]}..."
