"""Validation of every incoming message before anything of it is applied, then dispatch by kind.

Transport-neutral: the gRPC servicer and the in-process transport both hand an envelope,
the raw payload bytes and the authenticated sender (if the transport knows one) to
`Receiver.accept`. The checks every message passes are here; what a kind means is the
business of the mailbox a protocol registered for it (`register`). A refused message is
logged as rejected and raises Refusal; a payload that reached the node is kept in that
record (at most the protocol's dimension of it, which a valid payload has, and its digest),
because a view is everything that reached the node, used or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

from netdp.v1 import peer_pb2
from node.codec import PayloadError, unpack
from node.journal import Journal, rejected_record
from node.mailboxes.quick_path import Taken, Taker
from node.message import (
    GOSSIP,
    MAX_FIELD_CHARS,
    IdScheme,
    Message,
    MessageId,
    kind_of,
    oversized_field,
    stray_fields,
    to_wire,
)
from node.refusal import Refusal
from node.topology import Topology

# A detail quotes what the peer claimed, cut to this many characters: a hostile run id or
# shape must not make the status (a gRPC trailer of a few KiB at most) or the log unreadable.
MAX_QUOTED_CHARS = 64
ACK = "ack"  # the reply to a call whose handler has nothing to answer
# Logged instead of a refusal's detail that names the sender, for a kind whose view is sender-anonymous.
SENDER_WITHHELD = "the reason names the sender, whom this sender-anonymous view does not log"

# A mailbox's handler: (sender, or None for a sender-anonymous kind; message) -> the reply to a call, or None.
Handler = Callable[[int | None, Message], Awaitable[Message | None]]
# The handler of a kind that names its sender: it is never handed None.
NamedHandler = Callable[[int, Message], Awaitable[Message | None]]
Reply = tuple[peer_pb2.Envelope, bytes] | None


@dataclass(frozen=True)
class KindRule:
    """How a registered kind is checked and whom it goes to."""

    handler: Callable[[Any, Message], Awaitable[Message | None]]  # a Handler, or a NamedHandler if not anonymous
    scheme: IdScheme  # which MessageId fields the kind uses
    payload: bool  # carries a vector of the protocol's dimension (else nothing)
    anonymous: bool = False  # the sender is checked, then forgotten: neither handed on nor logged
    call_only: bool = False  # a request: it comes only as a call, whose reply is its point (never one-way)
    senders: frozenset[int] | None = None  # who may send the kind (None: the node's neighbours in the topology)
    take: Taker | None = None  # the quick path of a one-way message, if the mailbox has one (same checks)


class Receiver:
    """Checks who sent what for which run, then hands the message to its kind's mailbox."""

    def __init__(self, topology: Topology, node_id: int, journal: Journal) -> None:
        self._topology = topology
        self._node_id = node_id
        self._journal = journal
        self._neighbours = frozenset(topology.neighbours[node_id])
        self._protocol = topology.protocol_name
        self._dimension = topology.published.vector_length
        self._rules: dict[str, KindRule] = {}

    @overload
    def register(self, kind: str, handler: NamedHandler, *, scheme: IdScheme, payload: bool,
                 anonymous: Literal[False] = False) -> None: ...

    @overload
    def register(self, kind: str, handler: Handler, *, scheme: IdScheme, payload: bool, anonymous: bool) -> None: ...

    def register(self, kind: str, handler: Handler | NamedHandler, *, scheme: IdScheme, payload: bool,
                 anonymous: bool = False) -> None:
        """Route messages of `kind` to `handler` (one mailbox per kind).

        `anonymous`: a sender-anonymous view of the kind. The sender is still authenticated and
        checked to be a neighbour (membership), then dropped: the handler gets None and no record
        of the kind, accepted or refused, names it.
        """
        self.add_rule(kind, KindRule(handler, scheme, payload, anonymous))

    def add_rule(self, kind: str, rule: KindRule) -> None:
        """Route messages of `kind` by `rule` (what `register` does, for a caller that built the rule)."""
        if kind in self._rules:
            raise ValueError(f"message kind {kind!r} is registered twice")
        self._rules[kind] = rule

    @property
    def journal(self) -> Journal:
        """The node's journal, where a bundle's records for this id are committed."""
        return self._journal

    @property
    def node_count(self) -> int:
        """How many node ids the topology has (n)."""
        return self._topology.n

    @property
    def payload_bytes(self) -> int:
        """Byte length of the largest valid payload; a stream that grows past it is refused while streaming."""
        return min(self._topology.network.max_message_bytes, 8 * self._dimension)

    async def admit(self, envelope: peer_pb2.Envelope, authenticated_sender: int | None, arrived: bytes = b"") -> int:
        """Check the envelope alone (before a streamed payload is read); log and raise on refusal. `arrived`: the
        payload bytes that came with the envelope (all of a unary message's): a refused message keeps them in
        the view if they are its whole payload. A node whose logs are closed refuses everything unread."""
        if self._journal.closed:
            raise Refusal("UNAVAILABLE", f"node {self._node_id} has stopped")
        try:
            return self._check_envelope(envelope, authenticated_sender)
        except Refusal as refusal:
            await self.reject(envelope, refusal, self._arrived_message(envelope, arrived))
            raise

    async def accept(self, envelope: peer_pb2.Envelope, data: bytes, authenticated_sender: int | None, *,
                     call: bool = False) -> Reply:
        """Validate and hand over one message; return the reply to a call, or raise Refusal (already logged).

        `call`: the message came as a request whose caller awaits the reply; a kind that is `call_only`
        is refused otherwise, since its reply (an exchange's acceptance) would reach nobody.
        Delivery is shielded from the caller's cancellation (a deadline, a disconnect): a message
        whose record is being written is also applied, never logged and then lost.
        """
        sender = await self.admit(envelope, authenticated_sender, data)
        kind = kind_of(envelope)
        if self._rules[kind].call_only and not call:
            refusal = Refusal("INVALID_ARGUMENT", f"a {kind} message is a request: it comes only as a call")
            await self.reject(envelope, refusal, self._arrived_message(envelope, data))
            raise refusal
        delivery = asyncio.ensure_future(self._deliver(sender, envelope, data))
        try:
            return await asyncio.shield(delivery)
        except asyncio.CancelledError:
            # The caller is gone; the delivery runs on, and a refusal it ends in is logged already.
            delivery.add_done_callback(_settled_without_caller)
            raise

    def take(self, envelope: peer_pb2.Envelope, data: bytes, authenticated_sender: int | None) -> Taken | None:
        """One one-way message of a bundle through the same checks as `accept`, taken by its mailbox's quick path:
        its records (or its refusal's) for the caller to commit with the bundle's, then `settle`. None when its
        kind has no quick path (the caller hands it to `accept`); Refusal, unlogged, when the node has stopped."""
        if self._journal.closed:
            raise Refusal("UNAVAILABLE", f"node {self._node_id} has stopped")
        try:
            sender = self._check_envelope(envelope, authenticated_sender)
        except Refusal as refusal:
            return self._refused(envelope, refusal, self._arrived_message(envelope, data))
        kind = kind_of(envelope)
        rule = self._rules[kind]
        if rule.take is None or rule.call_only:
            return None
        message: Message | None = None
        try:
            message = Message.decoded(kind, MessageId.of(envelope), self._decode(envelope, data), data)
            return rule.take(None if rule.anonymous else sender, message)
        except Refusal as refusal:
            return self._refused(envelope, refusal, message)

    def _refused(self, envelope: peer_pb2.Envelope, refusal: Refusal, message: Message | None) -> Taken:
        """A refusal as `reject` logs it, as records to commit."""
        anonymous, detail = self._logged_detail(envelope, refusal)
        return Taken((rejected_record(envelope, refusal.code, detail, message, kept_elements=self._dimension,
                                      anonymous=anonymous),), refusal=refusal)

    async def _deliver(self, sender: int, envelope: peer_pb2.Envelope, data: bytes) -> Reply:
        message: Message | None = None
        try:
            message = Message.decoded(kind_of(envelope), MessageId.of(envelope), self._decode(envelope, data), data)
            rule = self._rules[message.kind]
            reply = await rule.handler(None if rule.anonymous else sender, message)
        except Refusal as refusal:
            await self.reject(envelope, refusal, message)
            raise
        if reply is None:
            return None
        await self._journal.settled()  # the secrets behind the reply are on disk before it leaves
        return to_wire(reply, run_id=self._topology.run_id, protocol=self._protocol,
                       sender=self._node_id, receiver=sender)

    def acknowledgement(self, request: peer_pb2.Envelope) -> tuple[peer_pb2.Envelope, bytes]:
        """The reply to a call whose mailbox had nothing to answer: an empty `ack` with the request's id."""
        envelope, data = to_wire(Message(ACK, MessageId.of(request)), run_id=self._topology.run_id,
                                 protocol=self._protocol, sender=self._node_id,
                                 receiver=request.sender)
        return envelope, data

    async def reject(self, envelope: peer_pb2.Envelope | None, refusal: Refusal,
                     message: Message | None = None) -> None:
        """Log a refusal, with the message if it was read; the transport may refuse before `accept` (no
        envelope, oversized stream).

        A refused message of a sender-anonymous kind is logged without its claimed sender, and without a
        detail that names it.
        """
        if self._journal.closed:  # the node has stopped: its view is final, the refusal goes to the caller only
            return
        anonymous, detail = self._logged_detail(envelope, refusal)
        await self._journal.rejected(envelope, refusal.code, detail, message, kept_elements=self._dimension,
                                     anonymous=anonymous)

    def _logged_detail(self, envelope: peer_pb2.Envelope | None, refusal: Refusal) -> tuple[bool, str]:
        """Whether the refused message's kind is sender-anonymous, and the detail its record keeps."""
        rule = None if envelope is None else self._rules.get(kind_of(envelope))
        anonymous = rule is not None and rule.anonymous
        return anonymous, SENDER_WITHHELD if anonymous and refusal.names_sender else refusal.detail

    def _check_envelope(self, envelope: peer_pb2.Envelope, authenticated_sender: int | None) -> int:
        topology = self._topology
        oversized = oversized_field(envelope)
        if oversized is not None:
            raise Refusal("INVALID_ARGUMENT", f"{oversized} is {len(getattr(envelope, oversized))} characters, "
                                              f"at most {MAX_FIELD_CHARS[oversized]} are accepted")
        if envelope.run_id != topology.run_id:
            raise Refusal("FAILED_PRECONDITION",
                          f"message for run {_quoted(envelope.run_id)}, this is {topology.run_id!r}")
        if envelope.protocol != self._protocol:
            raise Refusal("FAILED_PRECONDITION",
                          f"protocol {_quoted(envelope.protocol)}, this run is {self._protocol!r}")
        sender = int(envelope.sender)
        if sender >= topology.n:
            raise Refusal("PERMISSION_DENIED", f"unknown sender {sender}", names_sender=True)
        if authenticated_sender is not None and authenticated_sender != sender:
            raise Refusal("PERMISSION_DENIED", f"authenticated as node {authenticated_sender}, claims {sender}",
                          names_sender=True)
        kind = kind_of(envelope)
        rule = self._rules.get(kind)
        if rule is not None and rule.senders is not None:
            if sender not in rule.senders:
                raise Refusal("PERMISSION_DENIED", f"node {sender} may not send {kind} messages to node "
                                                   f"{self._node_id}", names_sender=True)
        elif sender not in self._neighbours:
            raise Refusal("PERMISSION_DENIED", f"node {sender} is not a neighbour of node {self._node_id}",
                          names_sender=True)
        if envelope.HasField("receiver") and envelope.receiver != self._node_id:
            raise Refusal("FAILED_PRECONDITION", f"message for node {envelope.receiver}, this is node {self._node_id}")
        if rule is None:
            raise Refusal("INVALID_ARGUMENT", f"message kind {_quoted(kind)} is not part of {self._protocol}")
        shape = (self._dimension,) if rule.payload else (0,)
        if tuple(envelope.shape) != shape:
            raise Refusal("INVALID_ARGUMENT", f"shape {_quoted(tuple(envelope.shape))}, expected {shape}")
        stray = stray_fields(envelope, rule.scheme)
        if stray:
            what = ("a gossip message is synchronous: it carries no" if kind == GOSSIP
                    else f"a {kind} message carries no")
            raise Refusal("INVALID_ARGUMENT", f"{what} {' or '.join(name.replace('_', ' ') for name in stray)}")
        return sender

    def _arrived_message(self, envelope: peer_pb2.Envelope, data: bytes) -> Message | None:
        """A message refused on its envelope, as it reached the node, when its payload decodes: what reached a node
        is in its view (bounded and digested by the journal), even a message of no kind the protocol has."""
        if not data:
            return None
        try:
            return Message.decoded(kind_of(envelope), MessageId.of(envelope), unpack(data, envelope.shape), data)
        except PayloadError:
            return None

    def _decode(self, envelope: peer_pb2.Envelope, data: bytes) -> np.ndarray:
        try:
            return unpack(data, envelope.shape)
        except PayloadError as exc:
            raise Refusal("INVALID_ARGUMENT", str(exc)) from None


def _quoted(value: object) -> str:
    """repr(value), cut to MAX_QUOTED_CHARS."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else f"{text[: MAX_QUOTED_CHARS - 3]}..."


def _settled_without_caller(delivery: asyncio.Future[Reply]) -> None:
    """Retrieve the outcome nobody awaits any more, so asyncio does not report it as lost."""
    if not delivery.cancelled():
        delivery.exception()
