"""Client side: one long-lived gRPC channel per peer. A message or request that fits one
chunk goes in a unary call, a larger one is streamed in chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

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


class GrpcPeerLink:
    """A PeerLink over a grpc.aio channel that lives as long as the run."""

    def __init__(self, address: str, *, chunk_bytes: int, credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, object]] = ()) -> None:
        all_options = [*KEEPALIVE_OPTIONS, *options]
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(address, options=all_options)
        else:
            self._channel = grpc.aio.secure_channel(address, credentials, options=all_options)
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
        await self._channel.close()


def wire_chunks(envelope: peer_pb2.Envelope, data: bytes, chunk_bytes: int) -> list[peer_pb2.Chunk]:
    """A message as chunks: the first carries the envelope, every one the next slice of the payload."""
    return [peer_pb2.Chunk(envelope=envelope, data=piece) if index == 0 else peer_pb2.Chunk(data=piece)
            for index, piece in enumerate(split_chunks(data, chunk_bytes))]
