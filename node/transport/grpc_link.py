"""Client side: one long-lived gRPC channel per peer process, shared by every node id that
process's links lead to. A message or request that fits one chunk goes in a unary call, a
larger one is streamed in chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.codec import split_chunks
from node.transport.base import LinkError

KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)


def open_channel(address: str, credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    """A channel with keepalive and quick reconnects; TLS when `credentials` are given."""
    all_options = [*KEEPALIVE_OPTIONS, *options]
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=all_options)
    return grpc.aio.secure_channel(address, credentials, options=all_options)


class GrpcPeerLink:
    """A PeerLink over a grpc.aio channel that lives as long as the run."""

    def __init__(self, address: str, *, chunk_bytes: int, credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, object]] = (), channel: grpc.aio.Channel | None = None) -> None:
        """`channel`: a channel to `address` that other links share; `close` leaves it to its owner."""
        self._owns_channel = channel is None
        self._channel = open_channel(address, credentials, options) if channel is None else channel
        self._stub = peer_pb2_grpc.PeerStub(self._channel)
        self._chunk_bytes = chunk_bytes

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        try:
            if len(data) <= self._chunk_bytes:
                await self._stub.Deliver(peer_pb2.Chunk(envelope=envelope, data=data), timeout=timeout_s,
                                         wait_for_ready=wait_for_peer)
            else:
                await self._stub.Gossip(self._chunks(envelope, data), timeout=timeout_s, wait_for_ready=wait_for_peer)
        except grpc.aio.AioRpcError as exc:
            raise LinkError(exc.code().name, exc.details() or "") from None

    async def ping(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        """A ping is a call every node answers: answered means up and reachable."""
        await self.call(envelope, data, timeout_s, wait_for_peer=wait_for_peer)

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        try:
            if len(data) <= self._chunk_bytes:
                reply = await self._stub.Call(peer_pb2.Chunk(envelope=envelope, data=data), timeout=timeout_s,
                                              wait_for_ready=wait_for_peer)
                return reply.envelope, reply.data
            replies = self._stub.CallStream(self._chunks(envelope, data), timeout=timeout_s,
                                            wait_for_ready=wait_for_peer)
            chunks = [chunk async for chunk in replies]
        except grpc.aio.AioRpcError as exc:
            raise LinkError(exc.code().name, exc.details() or "") from None
        if not chunks or not chunks[0].HasField("envelope"):
            raise LinkError("INTERNAL", "the reply carries no envelope")
        return chunks[0].envelope, b"".join(chunk.data for chunk in chunks)

    async def _chunks(self, envelope: peer_pb2.Envelope, data: bytes) -> AsyncIterator[peer_pb2.Chunk]:
        for chunk in wire_chunks(envelope, data, self._chunk_bytes):
            yield chunk

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close()


class PeerChannels:
    """One long-lived channel per peer process address, opened on first use, for all the ids a process hosts.

    `options_for(peer)` gives the options of the channel to `peer`'s address (with TLS, the
    node name the server certificate must carry), so it must answer the same for every id there.
    """

    def __init__(self, address_of: Callable[[int], str], *, chunk_bytes: int,
                 credentials: grpc.ChannelCredentials | None = None,
                 options_for: Callable[[int], Sequence[tuple[str, object]]] = lambda peer: ()) -> None:
        self._address_of = address_of
        self._chunk_bytes = chunk_bytes
        self._credentials = credentials
        self._options_for = options_for
        self._channels: dict[str, grpc.aio.Channel] = {}

    def link(self, peer: int) -> GrpcPeerLink:
        """A link to node `peer` over the channel to its process (closing the link keeps the channel)."""
        address = self._address_of(peer)
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self._credentials, self._options_for(peer))
        return GrpcPeerLink(address, chunk_bytes=self._chunk_bytes, channel=channel)

    async def close(self) -> None:
        await asyncio.gather(*(channel.close() for channel in self._channels.values()))


def wire_chunks(envelope: peer_pb2.Envelope, data: bytes, chunk_bytes: int) -> list[peer_pb2.Chunk]:
    """A message as chunks: the first carries the envelope, every one the next slice of the payload."""
    return [peer_pb2.Chunk(envelope=envelope, data=piece) if index == 0 else peer_pb2.Chunk(data=piece)
            for index, piece in enumerate(split_chunks(data, chunk_bytes))]
