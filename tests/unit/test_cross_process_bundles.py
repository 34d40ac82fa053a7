"""The client side of cross-process bundles: what is posted in one turn of the event loop leaves as one
DeliverBundle call per peer process (cut by count and bytes), and each sender hears its own message's outcome."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from netdp.v1 import peer_pb2
from node.transport.base import LinkError
from node.transport.grpc_link import MAX_BUNDLE_MESSAGES, Bundles, _Posted, bundled


class FakeStub:
    """Answers DeliverBundle with the given code for each message whose sender is in `refuse`, or fails whole."""

    def __init__(self, refuse: dict[int, str] | None = None, fail: grpc.StatusCode | None = None) -> None:
        self.calls: list[tuple[list[int], bool]] = []
        self._refuse = refuse or {}
        self._fail = fail

    async def DeliverBundle(self, bundle: peer_pb2.Bundle, *, timeout: float, wait_for_ready: bool
                            ) -> peer_pb2.BundleReceipt:
        assert timeout > 0
        self.calls.append(([chunk.envelope.sender for chunk in bundle.messages], wait_for_ready))
        if self._fail is not None:
            raise grpc.aio.AioRpcError(self._fail, grpc.aio.Metadata(), grpc.aio.Metadata(), "peer gone")
        return peer_pb2.BundleReceipt(outcomes=[
            peer_pb2.Outcome(code=self._refuse.get(chunk.envelope.sender, ""), detail="no")
            for chunk in bundle.messages])


def test_bundles_are_cut_by_count_and_bytes():
    loop = asyncio.new_event_loop()

    def posted(size: int) -> _Posted:
        return _Posted(peer_pb2.Chunk(), size, 0.0, loop.create_future())

    try:
        many = [posted(10) for _ in range(2 * MAX_BUNDLE_MESSAGES + 1)]
        assert [len(b) for b in bundled(many, 10**9)] == [MAX_BUNDLE_MESSAGES, MAX_BUNDLE_MESSAGES, 1]
        sizes = [posted(s) for s in (40, 40, 30, 100, 10)]
        assert [[p.size for p in b] for b in bundled(sizes, 100)] == [[40, 40], [30], [100], [10]]
        assert list(bundled([], 100)) == []
    finally:
        loop.close()


async def send_all(bundles: Bundles, senders: list[int], *, wait_for_peer: bool = False) -> list[object]:
    futures = [bundles.post(peer_pb2.Envelope(sender=s), b"\0" * 8, 5.0, wait_for_peer=wait_for_peer)
               for s in senders]
    return await asyncio.gather(*futures, return_exceptions=True)


def test_one_turn_goes_as_one_call_and_each_sender_hears_its_own_outcome():
    stub = FakeStub(refuse={2: "PERMISSION_DENIED", 3: "ALREADY_EXISTS"})

    async def scenario() -> tuple[list[object], list[object]]:
        bundles = Bundles(stub, bundle_bytes=1 << 20)  # type: ignore[arg-type]
        waiting, alone = await asyncio.gather(send_all(bundles, [1, 2, 3, 4]), send_all(bundles, [5],
                                                                                        wait_for_peer=True))
        return waiting, alone

    outcomes, alone = asyncio.run(scenario())
    assert stub.calls == [([1, 2, 3, 4], False), ([5], True)]  # one call per turn, and per wait_for_peer
    assert outcomes[0] is None and outcomes[3] is None and alone == [None]
    assert isinstance(outcomes[1], LinkError) and outcomes[1].code == "PERMISSION_DENIED"
    assert isinstance(outcomes[2], LinkError) and outcomes[2].code == "ALREADY_EXISTS"


def test_a_transport_failure_fails_every_message_of_the_bundle_retryably():
    stub = FakeStub(fail=grpc.StatusCode.UNAVAILABLE)
    outcomes = asyncio.run(send_all(Bundles(stub, bundle_bytes=1 << 20), [1, 2]))  # type: ignore[arg-type]
    assert len(stub.calls) == 1
    assert all(isinstance(o, LinkError) and o.code == "UNAVAILABLE" and o.retryable for o in outcomes)


@pytest.mark.parametrize("turns", [2, 3])
def test_each_turn_is_its_own_bundle(turns: int):
    stub = FakeStub()

    async def scenario() -> None:
        bundles = Bundles(stub, bundle_bytes=1 << 20)  # type: ignore[arg-type]
        for turn in range(turns):
            assert await send_all(bundles, [turn, turn + 10]) == [None, None]

    asyncio.run(scenario())
    assert stub.calls == [([turn, turn + 10], False) for turn in range(turns)]


def test_closing_fails_the_calls_in_flight_as_cancelled():
    class SlowStub(FakeStub):
        async def DeliverBundle(self, bundle: peer_pb2.Bundle, *, timeout: float, wait_for_ready: bool
                                ) -> peer_pb2.BundleReceipt:
            await asyncio.sleep(60)
            raise AssertionError("never answered")

    async def scenario() -> object:
        bundles = Bundles(SlowStub(), bundle_bytes=1 << 20)  # type: ignore[arg-type]
        sent = bundles.post(peer_pb2.Envelope(sender=1), b"", 5.0, wait_for_peer=False)
        await asyncio.sleep(0.01)
        await bundles.close()
        return (await asyncio.gather(sent, return_exceptions=True))[0]

    outcome = asyncio.run(scenario())
    assert isinstance(outcome, LinkError) and outcome.code == "CANCELLED"


def test_a_call_that_raises_anything_else_still_answers_every_sender():
    class BrokenStub(FakeStub):
        async def DeliverBundle(self, bundle: peer_pb2.Bundle, *, timeout: float, wait_for_ready: bool
                                ) -> peer_pb2.BundleReceipt:
            raise RuntimeError("the channel is in a state grpc did not expect")

    outcomes = asyncio.run(send_all(Bundles(BrokenStub(), bundle_bytes=10**6), [0, 1]))  # type: ignore[arg-type]
    assert [(o.code, "RuntimeError" in o.detail) for o in outcomes if isinstance(o, LinkError)] == [
        ("UNKNOWN", True), ("UNKNOWN", True)]
