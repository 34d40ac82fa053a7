"""Client side: one long-lived gRPC channel per peer process, shared by every node id that
process's links lead to. A request that fits one chunk goes in a unary call, a larger one is
streamed in chunks. One-way messages that fit one chunk go in bundles (`Bundles`): what the ids
of this process send to the ids of one peer process in one turn of the event loop travels as one
DeliverBundle call, each message with its own outcome; a larger one is streamed alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass

import grpc

from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.codec import split_chunks
from node.transport.base import LinkError, settle

# The most messages one DeliverBundle call carries (published in peer.proto): a receiver refuses more.
MAX_BUNDLE_MESSAGES = 256
SETTLE_GRACE_S = 1.0  # past its deadline, a sender stops waiting for its bundle's answer
# What a bundle may hold beyond the published chunk size, for its envelopes: `NetworkParams.chunk_bytes` stays
# 4096 bytes below gRPC's default 4 MiB message limit, so a bundle of chunk_bytes + this fits one gRPC message.
BUNDLE_ENVELOPE_BYTES = 2048
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


@dataclass(frozen=True)
class _Posted:
    chunk: peer_pb2.Chunk
    size: int  # the chunk's bytes within a bundle
    deadline: float  # loop time by which its sender gives up on this attempt
    outcome: asyncio.Future[None]


class Bundles:
    """The one-way messages to one peer process, sent a loop turn at a time as DeliverBundle calls.

    A message posted in a turn joins the others posted to that process in the same turn (the ids of
    this process that run in it); at the end of the turn they leave as bundles of at most
    `MAX_BUNDLE_MESSAGES` messages and `bundle_bytes` bytes, each its own call (a bundle never waits
    for another: a receiver may hold a message that waits, an exchange or a token, until its reply).
    Each message's future ends with its own outcome: delivered (durably logged), or its LinkError,
    the call's own when the whole call failed (a transport failure, which the sender's delivery
    policy may retry).
    """

    def __init__(self, stub: peer_pb2_grpc.PeerStub, *, bundle_bytes: int) -> None:
        self._stub = stub
        self._bundle_bytes = bundle_bytes
        self._waiting: dict[bool, list[_Posted]] = {}  # by wait_for_peer: a bundle's call waits or not
        self._calls: set[asyncio.Task[None]] = set()

    def post(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
             ) -> asyncio.Future[None]:
        """Put a message in this turn's bundle; its future ends once the receiver logged it (LinkError: refused)."""
        loop = asyncio.get_running_loop()
        chunk = peer_pb2.Chunk(envelope=envelope, data=data)
        waiting = self._waiting.setdefault(wait_for_peer, [])
        if not waiting:
            loop.call_soon(self._flush, wait_for_peer)  # once the ids running in this turn have posted theirs
        posted = _Posted(chunk, chunk.ByteSize() + 8, loop.time() + timeout_s, loop.create_future())
        waiting.append(posted)
        return posted.outcome

    def _flush(self, wait_for_peer: bool) -> None:
        waiting = self._waiting.pop(wait_for_peer, [])
        for bundle in bundled(waiting, self._bundle_bytes):
            task = asyncio.get_running_loop().create_task(self._send(bundle, wait_for_peer))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    async def _send(self, bundle: list[_Posted], wait_for_peer: bool) -> None:
        timeout_s = min(posted.deadline for posted in bundle) - asyncio.get_running_loop().time()
        try:
            if timeout_s <= 0:
                raise LinkError("DEADLINE_EXCEEDED", "the deadline passed before the bundle left")
            receipt = await self._stub.DeliverBundle(peer_pb2.Bundle(messages=[posted.chunk for posted in bundle]),
                                                     timeout=timeout_s, wait_for_ready=wait_for_peer)
            if len(receipt.outcomes) != len(bundle):
                raise LinkError("INTERNAL", f"{len(receipt.outcomes)} outcomes for a bundle of {len(bundle)}")
        except grpc.aio.AioRpcError as exc:
            _settle(bundle, [LinkError(exc.code().name, exc.details() or "")] * len(bundle))
        except LinkError as error:
            _settle(bundle, [error] * len(bundle))
        except asyncio.CancelledError:  # the link is closing: its senders hear it as a failed call, as without bundles
            _settle(bundle, [LinkError("CANCELLED", "the link closed before the bundle was answered")] * len(bundle))
            raise
        except Exception as error:  # noqa: BLE001 - whatever else the call raised: no sender may wait forever
            _settle(bundle, [LinkError("UNKNOWN", f"the bundle's call failed: {type(error).__name__}")] * len(bundle))
        else:
            _settle(bundle, [LinkError(outcome.code, outcome.detail) if outcome.code else None
                             for outcome in receipt.outcomes])

    async def close(self) -> None:
        """Stop the calls still in flight (their senders hear CANCELLED)."""
        for task in list(self._calls):
            task.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)


def bundled(waiting: Sequence[_Posted], bundle_bytes: int) -> Iterator[list[_Posted]]:
    """The messages in order, cut into bundles of at most MAX_BUNDLE_MESSAGES messages and `bundle_bytes` bytes."""
    bundle: list[_Posted] = []
    size = 0
    for posted in waiting:
        if bundle and (len(bundle) == MAX_BUNDLE_MESSAGES or size + posted.size > bundle_bytes):
            yield bundle
            bundle, size = [], 0
        bundle.append(posted)
        size += posted.size
    if bundle:
        yield bundle


def _settle(bundle: Sequence[_Posted], errors: Sequence[LinkError | None]) -> None:
    """End each message's future (if its sender still waits) with its error, or as delivered."""
    for posted, error in zip(bundle, errors):
        settle(posted.outcome, error)


class GrpcPeerLink:
    """A PeerLink over a grpc.aio channel that lives as long as the run."""

    def __init__(self, address: str, *, chunk_bytes: int, credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, object]] = (), channel: grpc.aio.Channel | None = None,
                 bundles: Bundles | None = None) -> None:
        """`channel`: a channel to `address` that other links share; `close` leaves it to its owner. `bundles`: the
        bundles to that address that one-way messages of one chunk go in (None: each goes in its own call)."""
        self._owns_channel = channel is None
        self._channel = open_channel(address, credentials, options) if channel is None else channel
        self._stub = peer_pb2_grpc.PeerStub(self._channel)
        self._chunk_bytes = chunk_bytes
        self._bundles = bundles

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        if self._bundles is not None and len(data) <= self._chunk_bytes:
            try:  # the bundle's call has the deadline; this bound only keeps a sender from waiting past it
                async with asyncio.timeout(timeout_s + SETTLE_GRACE_S):
                    await self._bundles.post(envelope, data, timeout_s, wait_for_peer=wait_for_peer)
            except TimeoutError:
                raise LinkError("DEADLINE_EXCEEDED", "the bundle carrying the message was not answered") from None
            return
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
                 options_for: Callable[[int], Sequence[tuple[str, object]]] = lambda peer: (),
                 bundled: bool = True) -> None:
        """`bundled`: one-way messages to a process go in bundles (`Bundles`), else each in its own call."""
        self._address_of = address_of
        self._chunk_bytes = chunk_bytes
        self._credentials = credentials
        self._options_for = options_for
        self._bundled = bundled
        self._channels: dict[str, tuple[grpc.aio.Channel, Bundles | None]] = {}

    def link(self, peer: int) -> GrpcPeerLink:
        """A link to node `peer` over the channel to its process (closing the link keeps the channel)."""
        address = self._address_of(peer)
        if address not in self._channels:
            channel = open_channel(address, self._credentials, self._options_for(peer))
            bundles = Bundles(peer_pb2_grpc.PeerStub(channel), bundle_bytes=self._chunk_bytes + BUNDLE_ENVELOPE_BYTES
                              ) if self._bundled else None
            self._channels[address] = channel, bundles
        channel, bundles = self._channels[address]
        return GrpcPeerLink(address, chunk_bytes=self._chunk_bytes, channel=channel, bundles=bundles)

    async def close(self) -> None:
        await asyncio.gather(*(bundles.close() for _, bundles in self._channels.values() if bundles is not None))
        await asyncio.gather(*(channel.close() for channel, _ in self._channels.values()))


def wire_chunks(envelope: peer_pb2.Envelope, data: bytes, chunk_bytes: int) -> list[peer_pb2.Chunk]:
    """A message as chunks: the first carries the envelope, every one the next slice of the payload."""
    return [peer_pb2.Chunk(envelope=envelope, data=piece) if index == 0 else peer_pb2.Chunk(data=piece)
            for index, piece in enumerate(split_chunks(data, chunk_bytes))]
