"""The node ids one server hosts: which one an incoming message is for, and who may send it.

A process may host many node ids behind one server. A message goes to the Receiver of the id
its envelope names as receiver (an envelope that names none is for the only id of a process
hosting one). Before that Receiver checks the message as it checks every message, the caller's
certificate must name the claimed sender: a process certified for ids 0..3 can speak as any of
them and as no other. Refusals go to the receiving id's view log; one that is for no hosted id
goes to the log of a process hosting one id, else to the process's own log. A bundle of
messages for several hosted ids is routed and checked message by message, then handed to their
Receivers in one pass (`node.transport.bundles.accept_bundle`: one group commit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from netdp.v1 import peer_pb2
from node.idset import IdRanges, describe_nodes
from node.receiver import Receiver
from node.refusal import Refusal
from node.transport import bundles

LOG = logging.getLogger("netdp.node")
NO_NODE_NAMED = "the client certificate names no node of this cluster"


class HostedReceivers:
    """The Receivers of the node ids behind one server, and the identity check in front of them."""

    def __init__(self, receivers: Mapping[int, Receiver], *, authenticated: bool) -> None:
        """`authenticated`: callers prove node ids with a certificate (mutual TLS); else plain text, no check."""
        if not receivers:
            raise ValueError("a server hosts at least one node id")
        self._receivers = dict(receivers)
        self._sole = next(iter(self._receivers.values())) if len(self._receivers) == 1 else None
        self._authenticated = authenticated
        self._hosted = describe_nodes(self._receivers)
        self._node_count = next(iter(self._receivers.values())).node_count

    @property
    def payload_bytes(self) -> int:
        """Byte length of the largest valid payload (one topology: the same for every hosted id)."""
        return next(iter(self._receivers.values())).payload_bytes

    async def admit(self, envelope: peer_pb2.Envelope, identity: IdRanges | None,
                    arrived: bytes = b"") -> tuple[int, Receiver]:
        """The receiving id and its Receiver, once the caller may send this envelope; log and raise on refusal
        (`arrived`: the payload bytes that came with the envelope, kept in a refusal when they are all of it)."""
        node_id, receiver = await self._route(envelope)
        authenticated_sender = None
        if self._authenticated:
            refusal = _identity_refusal(envelope.sender, identity, self._node_count)
            if refusal is not None:
                await receiver.reject(envelope, refusal)
                raise refusal
            authenticated_sender = int(envelope.sender)
        await receiver.admit(envelope, authenticated_sender, arrived)
        return node_id, receiver

    async def deliver_bundle(self, messages: Sequence[peer_pb2.Chunk], identity: IdRanges | None
                             ) -> list[Refusal | None]:
        """Route, check, log and apply a bundle of one-way messages, each as if it had come alone through `admit`
        and `Receiver.accept`; per message None once durably logged, or its refusal (logged too)."""
        outcomes: list[Refusal | None] = [None] * len(messages)
        items: list[tuple[Receiver, peer_pb2.Envelope, bytes, int | None]] = []
        placed: list[int] = []
        for index, chunk in enumerate(messages):
            try:
                items.append(await self._admitted(chunk, identity))
                placed.append(index)
            except Refusal as refusal:
                outcomes[index] = refusal
        alone: list[tuple[int, tuple[Receiver, peer_pb2.Envelope, bytes, int | None]]] = []
        for index, item, settled in zip(placed, items, await bundles.accept_bundle(items) if items else []):
            if settled is None:  # its kind's mailbox may wait: accepted on its own, as Deliver would
                alone.append((index, item))
            else:
                outcomes[index] = settled.refusal
        for (index, _), outcome in zip(alone, await asyncio.gather(*(_accept(*item) for _, item in alone))):
            outcomes[index] = outcome
        return outcomes

    async def _admitted(self, chunk: peer_pb2.Chunk, identity: IdRanges | None
                        ) -> tuple[Receiver, peer_pb2.Envelope, bytes, int | None]:
        """A bundled message routed to its Receiver once its caller may send it, with its authenticated sender; the
        Receiver's own checks come in the bundle's pass. Log and raise on refusal."""
        if not chunk.HasField("envelope"):
            unrouted = Refusal("INVALID_ARGUMENT", "a bundled message carries no envelope")
            await self.reject_unrouted(None, unrouted)
            raise unrouted
        envelope = chunk.envelope
        _, receiver = await self._route(envelope)
        if not self._authenticated:
            return receiver, envelope, chunk.data, None
        impostor = _identity_refusal(envelope.sender, identity, self._node_count)
        if impostor is not None:
            await receiver.reject(envelope, impostor)
            raise impostor
        return receiver, envelope, chunk.data, int(envelope.sender)

    async def reject_unrouted(self, envelope: peer_pb2.Envelope | None, refusal: Refusal) -> None:
        """Log a refusal that no hosted id's receiver took: in the only id's view log, else the process log."""
        if self._sole is not None:
            await self._sole.reject(envelope, refusal)
        else:
            sender = "?" if envelope is None else envelope.sender
            LOG.warning("refused a message from node %s to %s: %s", sender, self._hosted, refusal)

    async def _route(self, envelope: peer_pb2.Envelope) -> tuple[int, Receiver]:
        if envelope.HasField("receiver"):
            receiver = self._receivers.get(envelope.receiver)
            if receiver is not None:
                return envelope.receiver, receiver
            refusal = Refusal("NOT_FOUND", f"node {envelope.receiver} is not hosted here (this server hosts "
                                           f"{self._hosted})")
        elif self._sole is not None:
            node_id, = self._receivers
            return node_id, self._sole
        else:
            refusal = Refusal("INVALID_ARGUMENT", f"the envelope names no receiver, and this server hosts "
                                                  f"{self._hosted}")
        await self.reject_unrouted(envelope, refusal)
        raise refusal


async def _accept(receiver: Receiver, envelope: peer_pb2.Envelope, data: bytes, sender: int | None
                  ) -> Refusal | None:
    """One message through `Receiver.accept` as a one-way message: None once logged, else its (logged) refusal."""
    try:
        await receiver.accept(envelope, data, sender, call=False)
    except Refusal as refusal:
        return refusal
    return None


def _identity_refusal(sender: int, identity: IdRanges | None, node_count: int) -> Refusal | None:
    """Why a caller certified for `identity` may not send as `sender`; None if it may. A certificate naming an id
    beyond the topology's `node_count` ids was not made for this cluster's processes, and is refused whole."""
    if not identity:
        return Refusal("PERMISSION_DENIED", NO_NODE_NAMED)
    if identity.highest >= node_count:
        return Refusal("PERMISSION_DENIED", f"the client certificate names ids up to {identity.highest}, beyond "
                                            f"this topology's {node_count} nodes")
    if sender not in identity:
        return Refusal("PERMISSION_DENIED", f"authenticated as {describe_nodes(identity)}, claims {sender}",
                       names_sender=True)
    return None
