"""The delivery policies' retry rules, and what each failure tells the round barrier about the peer.

A scripted link answers each attempt with a chosen gRPC status, so every rule is checked
without timing: under the barrier policy tries are used up by transport failures only, a
peer that is behind is asked again until it takes the value, a peer that closed the round
is given up at once, and a round's sent records reach the log together; custody retries
and counts a duplicate as held; latest-value tries once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import peer_pb2, viewlog_pb2
from node.delivery import BarrierDelivery, CustodyDelivery, LatestValueDelivery, Outbox
from node.journal import Delivery, Journal
from node.message import GOSSIP, Message, MessageId
from node.transport.base import LinkError
from node.transport.inprocess import InProcessLink
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter, read_log

BUDGET_S = 30.0


class ScriptedLink:
    """Answers attempt i with script[i] (a status code name; "OK" delivers), then OK forever."""

    def __init__(self, script: Sequence[str]) -> None:
        self._script = list(script)
        self.calls: list[bool] = []  # wait_for_peer of each attempt

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        self.calls.append(wait_for_peer)
        code = self._script.pop(0) if self._script else "OK"
        if code != "OK":
            raise LinkError(code, f"scripted {code}")

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        raise AssertionError("delivery never calls")

    async def close(self) -> None:
        return None


@pytest.fixture
def journal(tmp_path: Path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    yield journal
    journal.close()


async def broadcast(journal: Journal, links: dict[int, ScriptedLink], round_index: int = 1,
                    attempts: int = 2) -> tuple[dict[int, bool], dict[int, Delivery]]:
    """One round's broadcast; returns who got the value and every fate reported on the way."""
    fates: dict[int, Delivery] = {}

    async def on_fate(peer: int, delivery: Delivery) -> None:
        fates[peer] = delivery

    outbox = Outbox(links.__getitem__, journal, run_id="r", protocol="muffliato", sender=0)
    deliveries = await outbox.broadcast(list(links), Message(GOSSIP, MessageId(round=round_index), np.ones(2)),
                                        BarrierDelivery(attempts), BUDGET_S, wait_for_peer=round_index == 0,
                                        on_fate=on_fate)
    return {peer: delivery.delivered for peer, delivery in deliveries.items()}, fates


async def test_a_peer_that_is_behind_is_asked_again_without_using_up_tries(journal):
    link = ScriptedLink(["OUT_OF_RANGE"] * 4)
    delivered, fates = await broadcast(journal, {1: link}, attempts=1)
    assert delivered == {1: True}
    assert fates[1] == Delivery(True, 5)


async def test_a_peer_that_closed_the_round_is_given_up_at_once(journal):
    link = ScriptedLink(["FAILED_PRECONDITION"])
    delivered, fates = await broadcast(journal, {1: link}, attempts=3)
    assert delivered == {1: False}
    assert len(link.calls) == 1
    assert fates[1].peer_moved_on and not fates[1].unreachable


async def test_an_unreachable_peer_is_tried_as_often_as_allowed_then_reported_unreachable(journal):
    link = ScriptedLink(["UNAVAILABLE"] * 5)
    delivered, fates = await broadcast(journal, {1: link}, attempts=3)
    assert delivered == {1: False}
    assert len(link.calls) == 3
    assert fates[1].unreachable and not fates[1].peer_moved_on


async def test_a_retry_that_finds_the_value_already_there_counts_as_delivered(journal):
    delivered, fates = await broadcast(journal, {1: ScriptedLink(["DEADLINE_EXCEEDED", "ALREADY_EXISTS"])})
    assert delivered == {1: True} and fates[1] == Delivery(True, 2)


@pytest.mark.parametrize(("round_index", "waits"), [(0, True), (3, False)])
async def test_only_round_0_waits_for_a_peer_to_come_up(journal, round_index, waits):
    link = ScriptedLink([])
    await broadcast(journal, {1: link}, round_index=round_index)
    assert link.calls == [waits]


async def test_a_rounds_sent_records_are_logged_together_with_their_fates(journal, tmp_path):
    links = {1: ScriptedLink([]), 2: ScriptedLink(["FAILED_PRECONDITION"]), 3: ScriptedLink(["UNAVAILABLE"] * 2)}
    await broadcast(journal, links, round_index=4)
    sent = [r for r in read_log(tmp_path / VIEW_LOG_NAME).records if r.WhichOneof("kind") == "sent"]
    assert [(r.sent.peer, r.sent.round, r.sent.delivered, r.sent.attempts) for r in sent] == [
        (1, 4, True, 1), (2, 4, False, 1), (3, 4, False, 2)]
    assert [r.sent.failure.split(":")[0] for r in sent] == ["", "FAILED_PRECONDITION", "UNAVAILABLE"]
    assert len({r.logged_unix for r in sent}) == 1  # one append, one fsync


async def deliver_once(journal: Journal, link: ScriptedLink, policy) -> Delivery:
    outbox = Outbox({1: link}.__getitem__, journal, run_id="r", protocol="muffliato-async", sender=0)
    return await outbox.deliver(1, Message("exchange.commit", MessageId(sequence=3, exchange_id="0-3"), np.ones(2)),
                                policy, BUDGET_S)


async def test_custody_retries_transport_failures_and_counts_a_duplicate_as_held(journal):
    link = ScriptedLink(["UNAVAILABLE", "DEADLINE_EXCEEDED", "ALREADY_EXISTS"])
    assert await deliver_once(journal, link, CustodyDelivery(5)) == Delivery(True, 3)


async def test_custody_gives_up_on_a_refusal_and_after_its_attempts(journal):
    refused = await deliver_once(journal, ScriptedLink(["FAILED_PRECONDITION"]), CustodyDelivery(5))
    assert not refused.delivered and refused.attempts == 1 and refused.peer_moved_on
    unreachable = await deliver_once(journal, ScriptedLink(["UNAVAILABLE"] * 9), CustodyDelivery(2))
    assert not unreachable.delivered and unreachable.attempts == 2 and unreachable.unreachable


async def test_latest_value_tries_once(journal):
    link = ScriptedLink(["UNAVAILABLE"])
    delivery = await deliver_once(journal, link, LatestValueDelivery())
    assert not delivery.delivered and len(link.calls) == 1


async def test_a_message_is_logged_with_its_kind_and_message_id(journal, tmp_path):
    await deliver_once(journal, ScriptedLink([]), CustodyDelivery(1))
    sent = read_log(tmp_path / VIEW_LOG_NAME).of_kind("sent")[-1]
    assert ((sent.kind, sent.sequence, sent.exchange_id, sent.peer, sent.delivered)
            == ("exchange.commit", 3, "0-3", 1, True))


async def test_a_ping_in_process_answers_for_a_running_peer_without_a_message(journal):
    """Virtual nodes share one process: a running peer is up, so a liveness probe costs no envelope check."""

    class CountingReceiver:
        accepted = 0

        async def accept(self, envelope, data, sender):
            CountingReceiver.accepted += 1

    outbox = Outbox(lambda peer: InProcessLink(0, CountingReceiver() if peer == 1 else None), journal, run_id="r",
                    protocol="muffliato", sender=0)
    assert await outbox.reachable(1, timeout_s=1.0)
    assert not await outbox.reachable(2, timeout_s=1.0)  # not running: unreachable
    assert CountingReceiver.accepted == 0


async def test_a_secret_is_on_disk_before_the_message_carrying_it_leaves(journal, tmp_path):
    """A noise draw is held until the node's next commit; a send commits it first, so no value leaves without it."""
    private = tmp_path / PRIVATE_LOG_NAME
    journal.noise("perturb", np.full(2, 0.5), step=0, mechanism="gaussian", scale=1.0)
    assert read_log(private).of_kind("noise") == []  # held: no commit of its own

    class CheckingLink(ScriptedLink):
        async def send(self, envelope, data, timeout_s, *, wait_for_peer):
            assert [draw.step for draw in read_log(private).of_kind("noise")] == [0]
            await super().send(envelope, data, timeout_s, wait_for_peer=wait_for_peer)

    link = CheckingLink([])
    await broadcast(journal, {1: link})
    assert link.calls == [False]


async def test_a_sender_that_comes_while_the_secrets_are_being_committed_waits_for_them(journal, tmp_path,
                                                                                        monkeypatch):
    """Two values about to leave at once (a send and a reply): the first hands the held draw to the commit; the
    second finds nothing held and must still wait until the draw is on disk, even when the first gives up."""
    on_disk = threading.Event()
    append_many = ViewLogWriter.append_many

    def slow_private_append(writer: ViewLogWriter, records) -> None:
        if any(record.WhichOneof("kind") == "noise" for record in records):
            on_disk.wait(timeout=10)
        append_many(writer, records)

    monkeypatch.setattr(ViewLogWriter, "append_many", slow_private_append)
    journal.noise("perturb", np.full(2, 0.5), step=0, mechanism="gaussian", scale=1.0)
    first = asyncio.create_task(journal.settled())
    await asyncio.sleep(0)  # the first has handed the draw in
    second = asyncio.create_task(journal.settled())
    await asyncio.sleep(0.05)
    assert not second.done()
    first.cancel()  # a caller that gives up: the commit the second waits for goes on
    await asyncio.sleep(0.05)
    assert not second.done()
    on_disk.set()
    await second
    assert [draw.step for draw in read_log(tmp_path / PRIVATE_LOG_NAME).of_kind("noise")] == [0]
    await journal.settled()  # nothing held, the commit done: returns at once


async def test_held_secrets_go_out_with_the_next_public_commit_or_at_close(journal, tmp_path):
    journal.private_input(np.ones(2), clipped=False)
    await journal.write(viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=1, round=0, reason="test")))
    assert len(read_log(tmp_path / PRIVATE_LOG_NAME).of_kind("private_input")) == 1
    journal.noise("perturb", np.zeros(2), step=1, mechanism="gaussian", scale=1.0)
    journal.close()
    assert [draw.step for draw in read_log(tmp_path / PRIVATE_LOG_NAME).of_kind("noise")] == [1]


async def test_ids_of_this_process_are_asked_of_their_node_not_pinged(journal):
    """A liveness probe costs no ping (and no task) for an id this process hosts: it lives as long as the process."""

    class Hosting:
        def post(self, envelope, data, timeout_s):
            return None

        def answers(self, peer):
            return {1: True, 2: False}.get(peer)  # 1 runs here, 2 ran here and stopped, 3 is elsewhere

    pinged: list[int] = []

    class PingLink(ScriptedLink):
        def __init__(self, peer: int) -> None:
            super().__init__([])
            self.peer = peer

        async def ping(self, envelope, data, timeout_s, *, wait_for_peer):
            pinged.append(self.peer)
            raise LinkError("UNAVAILABLE", "down")

    outbox = Outbox(PingLink, journal, run_id="r", protocol="muffliato", sender=0, courier=Hosting())
    assert outbox.silent_here([1, 2, 3]) == ({2}, [3]) and pinged == []  # answered without asking anyone
    assert await outbox.silent([1, 2, 3], timeout_s=1.0) == {2, 3}
    assert pinged == [3]
