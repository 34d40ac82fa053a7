"""One message, whatever the protocol: its kind, its MessageId and an optional vector payload.

The envelope on the wire and the records in the view log carry the same identifying fields
(`round`, `sequence`, `exchange_id`, `token_id`, `hop`); `MessageId` reads and writes them
in one place, so a message is recognised (and made idempotent) by the same key everywhere.
Which fields a kind uses is its `IdScheme`: a field outside the scheme must stay unset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NamedTuple, Protocol

import numpy as np

from netdp.v1 import peer_pb2, viewlog_pb2
from node.codec import digest, pack

GOSSIP = "gossip"  # the kind of a version-1 envelope, whose `kind` is empty

# The published maximum length, in characters, of every string field of an Envelope (named in
# proto/netdp/v1/peer.proto): a longer one is refused before anything else is read of the message,
# so a peer's words cost a node at most this much to hold, quote or log.
MAX_FIELD_CHARS: dict[str, int] = {
    "run_id": 128,  # as long as a topology's run id may be
    "protocol": 64,
    "kind": 64,
    "exchange_id": 64,  # "<initiator>-<sequence>"
    "token_id": 64,
}
# A string field holds at most as many characters as the serialized envelope has bytes.
_SHORTEST_LIMIT = min(MAX_FIELD_CHARS.values())

IdScheme = Literal["round", "exchange", "hop", "sequence", "none"]
SCHEME_FIELDS: dict[IdScheme, frozenset[str]] = {
    "round": frozenset({"round"}),
    "exchange": frozenset({"sequence", "exchange_id"}),
    "hop": frozenset({"token_id", "hop"}),
    "sequence": frozenset({"sequence"}),
    "none": frozenset(),
}


class IdFields(Protocol):
    """A protobuf message with the identifying fields (Envelope, MessageSent, MessageReceived, ...)."""

    round: int
    sequence: int
    exchange_id: str
    token_id: str
    hop: int


class MessageId(NamedTuple):
    """Where a message sits in its protocol: round | sequence + exchange id | token id + hop | sequence.

    A named tuple: immutable, ordered and hashable field by field, and built in a fraction of a frozen
    dataclass's time (every message received builds one).
    """

    round: int = 0
    sequence: int = 0
    exchange_id: str = ""
    token_id: str = ""
    hop: int = 0

    @classmethod
    def of(cls, source: IdFields) -> MessageId:
        """The id carried by an envelope or a log record."""
        return cls(int(source.round), int(source.sequence), source.exchange_id, source.token_id, int(source.hop))

    def fill(self, target: IdFields) -> None:
        """Write the id into an envelope or a log record (an unset field is left at its default, which it has)."""
        if self.round:
            target.round = self.round
        if self.sequence:
            target.sequence = self.sequence
        if self.exchange_id:
            target.exchange_id = self.exchange_id
        if self.token_id:
            target.token_id = self.token_id
        if self.hop:
            target.hop = self.hop

    def outside(self, scheme: IdScheme) -> list[str]:
        """The fields this id sets that `scheme` does not use."""
        return stray_fields(self, scheme)


# Every message is stamped and checked field by field: the names are looked up once, not per message.
ID_FIELDS = MessageId._fields
# Per scheme, the id fields it leaves unset (every unset field is 0 or empty).
UNUSED_FIELDS: dict[IdScheme, tuple[str, ...]] = {
    scheme: tuple(name for name in ID_FIELDS if name not in used) for scheme, used in SCHEME_FIELDS.items()
}


def stray_fields(source: IdFields | MessageId, scheme: IdScheme) -> list[str]:
    """The id fields an envelope, record or MessageId sets that `scheme` does not use (read in place, no copy)."""
    return [name for name in UNUSED_FIELDS[scheme] if getattr(source, name)]


def oversized_field(envelope: peer_pb2.Envelope) -> str | None:
    """The first string field of `envelope` longer than its published maximum, or None."""
    if envelope.ByteSize() <= _SHORTEST_LIMIT:  # no string of it can be longer: the usual envelope
        return None
    for name, limit in MAX_FIELD_CHARS.items():
        if len(getattr(envelope, name)) > limit:
            return name
    return None


def kind_of(source: IdFields) -> str:
    """A record's or envelope's kind; empty (a version-1 sender) means gossip."""
    return getattr(source, "kind", "") or GOSSIP


@dataclass(frozen=True)
class Message:
    """What a protocol sends or receives: the payload is a float64 vector, empty for signals."""

    kind: str
    id: MessageId
    payload: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @cached_property
    def packed(self) -> tuple[bytes, tuple[int, ...]]:
        """The payload's wire bytes and shape, packed once however many peers and log records carry it."""
        return pack(self.payload)

    @cached_property
    def digest(self) -> bytes:
        """The payload's `digest`, of its wire bytes."""
        return digest(self.packed[0])

    @classmethod
    def decoded(cls, kind: str, message_id: MessageId, payload: np.ndarray, data: bytes) -> Message:
        """A message whose payload was unpacked from `data`: those bytes are its packed form already."""
        message = cls(kind, message_id, payload)
        message.__dict__["packed"] = (data, payload.shape)  # the cached_property's slot
        return message

    def payload_tensor(self) -> viewlog_pb2.Tensor:
        """The payload as a log record's tensor, from the packed bytes."""
        tensor = viewlog_pb2.Tensor()
        self.fill_tensor(tensor)
        return tensor

    def fill_tensor(self, tensor: viewlog_pb2.Tensor) -> None:
        """Write the payload into a record's (empty) tensor field in place, from the packed bytes; the field is set
        even for an empty payload."""
        data, shape = self.packed
        tensor.SetInParent()
        tensor.shape.extend(shape)
        tensor.data = data


def to_wire(message: Message, *, run_id: str, protocol: str, sender: int, receiver: int
            ) -> tuple[peer_pb2.Envelope, bytes]:
    """The envelope and packed payload of a message from `sender` to `receiver`."""
    data, shape = message.packed
    envelope = peer_pb2.Envelope(run_id=run_id, protocol=protocol, sender=sender, receiver=receiver, shape=shape)
    if message.kind != GOSSIP:
        envelope.kind = message.kind
    message.id.fill(envelope)
    return envelope, data
