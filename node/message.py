"""One message, whatever the protocol: its kind, its MessageId and an optional vector payload.

The envelope on the wire and the records in the view log carry the same identifying fields
(`round`, `sequence`, `exchange_id`, `token_id`, `hop`); `MessageId` reads and writes them
in one place, so a message is recognised (and made idempotent) by the same key everywhere.
Which fields a kind uses is its `IdScheme`: a field outside the scheme must stay unset.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Literal, Protocol

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


@dataclass(frozen=True, order=True)
class MessageId:
    """Where a message sits in its protocol: round | sequence + exchange id | token id + hop | sequence."""

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
        """Write the id into an envelope or a log record."""
        for name in ID_FIELDS:
            setattr(target, name, getattr(self, name))

    def outside(self, scheme: IdScheme) -> list[str]:
        """The fields this id sets that `scheme` does not use."""
        allowed = SCHEME_FIELDS[scheme]
        return [name for name in ID_FIELDS if name not in allowed and getattr(self, name) != getattr(UNSET, name)]


# Every message is stamped and checked field by field: the names are looked up once, not per message.
ID_FIELDS = tuple(f.name for f in fields(MessageId))
UNSET = MessageId()


def oversized_field(envelope: peer_pb2.Envelope) -> str | None:
    """The first string field of `envelope` longer than its published maximum, or None."""
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
        message.__dict__["packed"] = (data, tuple(int(d) for d in payload.shape))  # the cached_property's slot
        return message

    def payload_tensor(self) -> viewlog_pb2.Tensor:
        """The payload as a log record's tensor, from the packed bytes."""
        data, shape = self.packed
        return viewlog_pb2.Tensor(shape=shape, data=data)


def to_wire(message: Message, *, run_id: str, protocol: str, sender: int, receiver: int
            ) -> tuple[peer_pb2.Envelope, bytes]:
    """The envelope and packed payload of a message from `sender` to `receiver`."""
    data, shape = message.packed
    envelope = peer_pb2.Envelope(run_id=run_id, protocol=protocol, sender=sender, receiver=receiver,
                                 kind="" if message.kind == GOSSIP else message.kind, shape=shape)
    message.id.fill(envelope)
    return envelope, data
