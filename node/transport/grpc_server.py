"""A node process's gRPC server: the Peer service, the standard health and reflection services.

The servicer takes a message as one unary chunk or as a stream of chunks, reassembles it
(refusing it as soon as it grows past what a valid message can hold, a chunk does not
decode, or a chunk after the first carries an envelope), and passes it to the Receiver of
the hosted node id it is for, once the caller's certificate names its sender
(`node.transport.routing`). One-way messages (Deliver, Gossip) are answered
with a Receipt; a bundle of them (DeliverBundle, at most `MAX_BUNDLE_MESSAGES`) is handed to
the hosted ids in one pass and answered with each message's outcome; requests (Call,
CallStream) with the reply the Receiver returns. The
servicer knows no message kind: adding a protocol changes nothing here. Fault injection
(`node.transport.faults.LostAnswers`) may lose either answer once the message was handled.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NoReturn

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer

from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.errors import ConfigError
from node.idset import IdRanges
from node.receiver import Receiver, Reply
from node.refusal import Refusal, RefusalCode
from node.transport.faults import LOST_STATUS, LostAnswers
from node.transport.grpc_link import MAX_BUNDLE_MESSAGES, wire_chunks
from node.transport.routing import HostedReceivers

LOG = logging.getLogger("netdp.node")
# The node ids the caller's TLS certificate names; None if it names none.
Authenticator = Callable[[grpc.aio.ServicerContext], IdRanges | None]
PEER_SERVICE = peer_pb2.DESCRIPTOR.services_by_name["Peer"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Reflection v1 has the same messages as v1alpha under another package; current clients ask v1 first.
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
# Chunks a message may have beyond what its largest valid payload needs at the published chunk size: room
# for a sender that cuts finer, while a stream of empty chunks is refused after a few dozen, not read forever.
SPARE_CHUNKS = 64


class PeerServicer(peer_pb2_grpc.PeerServicer):  # type: ignore[misc]  # generated without stubs
    """Turns gRPC calls into Receiver.accept calls of the hosted ids and refusals into gRPC statuses."""

    def __init__(self, receivers: Mapping[int, Receiver], authenticate: Authenticator | None,
                 chunk_bytes: int, faults: LostAnswers | None = None) -> None:
        self._hosted = HostedReceivers(receivers, authenticated=authenticate is not None)
        self._authenticate = authenticate
        self._chunk_bytes = chunk_bytes
        self._faults = faults

    async def Gossip(self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
                     ) -> peer_pb2.Receipt:
        return await self._acknowledge(_parsed(request_iterator), context)

    async def Deliver(self, request: bytes, context: grpc.aio.ServicerContext) -> peer_pb2.Receipt:
        return await self._acknowledge(_parsed(_single(request)), context)

    async def _acknowledge(self, chunks: AsyncIterator[peer_pb2.Chunk], context: grpc.aio.ServicerContext
                           ) -> peer_pb2.Receipt:
        """Handle a delivery (its mailbox logs it durably) and acknowledge it with a Receipt."""
        envelope, node_id, _, _ = await self._receive(chunks, context, call=False)
        if self._faults is not None and self._faults.lose_acknowledgement():
            await context.abort(grpc.StatusCode[LOST_STATUS], "the acknowledgement was lost (fault injection)")
        return peer_pb2.Receipt(receiver=node_id, round=envelope.round)

    async def DeliverBundle(self, request: bytes, context: grpc.aio.ServicerContext) -> peer_pb2.BundleReceipt:
        """A bundle of one-way messages: each checked, logged and acknowledged (or refused) on its own, in one pass."""
        try:
            identity = self._authenticate(context) if self._authenticate else None
            try:
                bundle = peer_pb2.Bundle.FromString(request)
            except DecodeError:
                await self._refuse(None, None, "INVALID_ARGUMENT",
                                   f"a message is not a {peer_pb2.Bundle.DESCRIPTOR.full_name}")
            if len(bundle.messages) > MAX_BUNDLE_MESSAGES:
                await self._refuse(None, None, "RESOURCE_EXHAUSTED",
                                   f"a bundle has at most {MAX_BUNDLE_MESSAGES} messages, this one "
                                   f"{len(bundle.messages)}")
            refusals = await self._hosted.deliver_bundle(bundle.messages, identity)
        except Refusal as refusal:
            await context.abort(grpc.StatusCode[refusal.code], refusal.detail)
        if self._faults is not None and self._faults.lose_acknowledgement():
            await context.abort(grpc.StatusCode[LOST_STATUS], "the acknowledgement was lost (fault injection)")
        return peer_pb2.BundleReceipt(outcomes=[
            peer_pb2.Outcome() if refusal is None else peer_pb2.Outcome(code=refusal.code, detail=refusal.detail)
            for refusal in refusals])

    async def Call(self, request: bytes, context: grpc.aio.ServicerContext) -> peer_pb2.Chunk:
        reply_envelope, data = await self._answer(_parsed(_single(request)), context)
        return peer_pb2.Chunk(envelope=reply_envelope, data=data)

    async def CallStream(self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[peer_pb2.Chunk]:
        reply_envelope, data = await self._answer(_parsed(request_iterator), context)
        for chunk in wire_chunks(reply_envelope, data, self._chunk_bytes):
            yield chunk

    async def _answer(self, chunks: AsyncIterator[peer_pb2.Chunk], context: grpc.aio.ServicerContext
                      ) -> tuple[peer_pb2.Envelope, bytes]:
        """Handle a request and return its reply (an acknowledgement when the mailbox answers nothing)."""
        envelope, _, receiver, reply = await self._receive(chunks, context, call=True)
        if self._faults is not None and self._faults.lose_reply():
            await context.abort(grpc.StatusCode[LOST_STATUS], "the reply was lost (fault injection)")
        return reply or receiver.acknowledgement(envelope)

    async def _receive(self, chunks: AsyncIterator[peer_pb2.Chunk], context: grpc.aio.ServicerContext, *,
                       call: bool) -> tuple[peer_pb2.Envelope, int, Receiver, Reply]:
        """Authenticate, reassemble and hand over one message (`call`: a request); a refusal becomes its gRPC status.

        Returns the envelope, the id it was for, that id's Receiver and its reply.
        """
        try:
            identity = self._authenticate(context) if self._authenticate else None
            envelope, node_id, receiver, data = await self._reassemble(chunks, identity)
            # The identity was checked against the sender when the envelope was admitted.
            reply = await receiver.accept(envelope, data, None if identity is None else envelope.sender, call=call)
        except Refusal as refusal:
            await context.abort(grpc.StatusCode[refusal.code], refusal.detail)
        return envelope, node_id, receiver, reply

    async def _reassemble(self, chunks: AsyncIterator[peer_pb2.Chunk], identity: IdRanges | None
                          ) -> tuple[peer_pb2.Envelope, int, Receiver, bytes]:
        """Read the stream, routing and checking the envelope first and refusing payloads that grow too large."""
        limit = self._hosted.payload_bytes
        max_chunks = max_chunk_count(limit, self._chunk_bytes)
        envelope: peer_pb2.Envelope | None = None
        routed: tuple[int, Receiver] | None = None
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in chunks:  # gRPC parses each chunk as the loop asks for it
                if len(parts) == max_chunks:
                    await self._refuse(routed, envelope, "RESOURCE_EXHAUSTED",
                                       f"a message has at most {max_chunks} chunks")
                if envelope is None:
                    if not chunk.HasField("envelope"):
                        await self._refuse(None, None, "INVALID_ARGUMENT", "the first chunk carries no envelope")
                    envelope = chunk.envelope
                    routed = await self._hosted.admit(envelope, identity, chunk.data)
                elif chunk.HasField("envelope"):
                    await self._refuse(routed, envelope, "INVALID_ARGUMENT",
                                       "only the first chunk may carry an envelope")
                size += len(chunk.data)
                if size > limit:
                    await self._refuse(routed, envelope, "RESOURCE_EXHAUSTED", f"payload exceeds {limit} bytes")
                parts.append(chunk.data)
        except DecodeError:
            await self._refuse(routed, envelope, "INVALID_ARGUMENT",
                               f"a message is not a {peer_pb2.Chunk.DESCRIPTOR.full_name}")
        if envelope is None or routed is None:
            await self._refuse(None, None, "INVALID_ARGUMENT", "empty stream")
        node_id, receiver = routed
        return envelope, node_id, receiver, b"".join(parts)

    async def _refuse(self, routed: tuple[int, Receiver] | None, envelope: peer_pb2.Envelope | None,
                      code: RefusalCode, detail: str) -> NoReturn:
        """Log a refusal found while streaming (in the receiving id's log once routed), then raise it."""
        refusal = Refusal(code, detail)
        if routed is None:
            await self._hosted.reject_unrouted(envelope, refusal)
        else:
            await routed[1].reject(envelope, refusal)
        raise refusal


def max_chunk_count(payload_bytes: int, chunk_bytes: int) -> int:
    """The most chunks a message may come in: what its largest valid payload needs, and SPARE_CHUNKS more."""
    return -(-payload_bytes // chunk_bytes) + 1 + SPARE_CHUNKS


async def _single(message: bytes) -> AsyncIterator[bytes]:
    """A unary message as the one-chunk stream it is equivalent to."""
    yield message


async def _parsed(messages: AsyncIterator[bytes]) -> AsyncIterator[peer_pb2.Chunk]:
    """Parse each wire message when the reader asks for it, so a DecodeError reaches the reader."""
    async for wire in messages:
        yield peer_pb2.Chunk.FromString(wire)


def add_peer_service(servicer: PeerServicer, server: grpc.aio.Server) -> None:
    """Register the Peer service with requests left as bytes.

    The servicer parses them itself, so that a unary request that is not a Chunk is refused
    and logged like a bad chunk of a stream, rather than answered by gRPC with a bare error.
    """
    receipt = peer_pb2.Receipt.SerializeToString
    chunk = peer_pb2.Chunk.SerializeToString
    handlers = {
        "Gossip": grpc.stream_unary_rpc_method_handler(servicer.Gossip, response_serializer=receipt),
        "Deliver": grpc.unary_unary_rpc_method_handler(servicer.Deliver, response_serializer=receipt),
        "DeliverBundle": grpc.unary_unary_rpc_method_handler(
            servicer.DeliverBundle, response_serializer=peer_pb2.BundleReceipt.SerializeToString),
        "Call": grpc.unary_unary_rpc_method_handler(servicer.Call, response_serializer=chunk),
        "CallStream": grpc.stream_stream_rpc_method_handler(servicer.CallStream, response_serializer=chunk),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(PEER_SERVICE, handlers),))


async def start_server(receivers: Mapping[int, Receiver], address: str, *,
                       credentials: grpc.ServerCredentials | None,
                       authenticate: Authenticator | None,
                       chunk_bytes: int, faults: LostAnswers | None = None
                       ) -> tuple[grpc.aio.Server, HealthServicer]:
    """Bind and start the server of the node ids `receivers` hosts.

    Health reports SERVING (server-wide and for netdp.v1.Peer) once it listens.
    """
    # Without SO_REUSEPORT a port another server holds fails here, at once, rather than sharing its connections.
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    add_peer_service(PeerServicer(receivers, authenticate, chunk_bytes, faults), server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    add_reflection(server, (PEER_SERVICE, HEALTH_SERVICE))
    listen(server, address, credentials)
    await server.start()
    for name in ("", PEER_SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health


def add_reflection(server: grpc.aio.Server, services: tuple[str, ...]) -> None:
    """Server reflection under both v1alpha and v1 (one servicer: the two protocols share their messages)."""
    names = (*services, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE)
    servicer = ReflectionServicer(names)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
        for name in (reflection.SERVICE_NAME, REFLECTION_V1_SERVICE)
    ))


def listen(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> str:
    """Listen at the published address (its host: an address or a name of this machine), not on every interface,
    and return where. A TLS node whose published host is not this machine's (a container behind a port mapping
    publishes its machine's address) listens on every interface at the published port instead, where every
    caller must still present a cluster certificate; a plain-text node never does. ConfigError if it cannot."""
    for bind in (address, any_interface(address)) if credentials is not None else (address,):
        try:
            port = server.add_secure_port(bind, credentials) if credentials else server.add_insecure_port(bind)
        except RuntimeError:
            continue
        if port:
            if bind != address:
                LOG.warning("%s is not an address of this machine: listening on %s (mutual TLS)", address, bind)
            return bind
    raise ConfigError(f"cannot listen on {address}: its port is in use, or its host is not an address of this "
                      "machine")


def any_interface(address: str) -> str:
    """Every interface at the published port."""
    _, _, port = address.rpartition(":")
    return f"[::]:{port}"


async def stop_server(server: grpc.aio.Server, health: HealthServicer, grace_s: float) -> None:
    """Graceful shutdown: report NOT_SERVING, let in-flight calls finish, then stop."""
    await health.enter_graceful_shutdown()
    await server.stop(grace_s)
