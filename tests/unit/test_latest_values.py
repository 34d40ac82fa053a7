"""The latest-value mailbox without a network: newest per sender, idempotence, stale refusal, waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.dataprep.personalized_task import generate_task, task_topology
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.context import ProtocolContext
from node.host import NodeHost
from node.journal import Journal
from node.mailboxes.latest_value import LatestValues
from node.message import Message, MessageId, to_wire
from node.noise import make_samplers
from node.protocols.muffliato import MuffliatoParams
from node.protocols.personalized_cd import MODEL as PERSONALIZED_MODEL
from node.protocols.personalized_cd import PersonalizedCDParams
from node.receiver import Receiver
from node.refusal import Refusal
from node.transport.inprocess import InProcessLink
from node.viewlog import VIEW_LOG_NAME, read_log

MODEL = "model"  # the broadcasts' kind
LAST = 8  # the published number of broadcasts a sender makes


@pytest.fixture
def journal(tmp_path: Path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    yield journal
    journal.close()


@pytest.fixture
def mailbox(journal: Journal) -> LatestValues:
    return LatestValues(journal, last_sequence=LAST)


def broadcast(sequence: int, *value: float) -> Message:
    return Message(MODEL, MessageId(sequence=sequence), np.array(value))


def received(tmp_path: Path) -> list[tuple[int, int, list[float]]]:
    """(sender, sequence, payload) of every received record, in log order."""
    return [(r.peer, r.sequence, from_tensor(r.payload).tolist())
            for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("received")]


async def test_each_sender_keeps_its_newest_value_and_a_snapshot_does_not_move(mailbox, tmp_path):
    await mailbox.handle(0, broadcast(1, 1.0))
    await mailbox.handle(2, broadcast(4, 4.0))
    snapshot = mailbox.snapshot()
    await mailbox.handle(0, broadcast(3, 3.0))  # sequences may skip (a lost broadcast)
    assert {sender: (latest.sequence, latest.value.tolist()) for sender, latest in snapshot.items()} == {
        0: (1, [1.0]), 2: (4, [4.0])}
    assert (mailbox.snapshot()[0].sequence, mailbox.snapshot()[0].value.tolist()) == (3, [3.0])
    assert received(tmp_path) == [(0, 1, [1.0]), (2, 4, [4.0]), (0, 3, [3.0])]


async def test_a_stale_value_is_refused_every_time_and_changes_nothing(mailbox, tmp_path):
    await mailbox.handle(0, broadcast(5, 5.0))
    for _ in range(2):
        with pytest.raises(Refusal) as stale:
            await mailbox.handle(0, broadcast(4, 4.0))
        assert stale.value.code == "FAILED_PRECONDITION"
    assert mailbox.snapshot()[0].sequence == 5
    assert received(tmp_path) == [(0, 5, [5.0])]


async def test_a_copy_of_a_taken_value_is_acknowledged_again_without_a_second_record(mailbox, tmp_path):
    """Same MessageId, same answer: even once a newer value superseded it, a taken one is not called stale."""
    await mailbox.handle(0, broadcast(1, 1.0))
    await mailbox.handle(0, broadcast(1, 1.0))
    await mailbox.handle(0, broadcast(2, 2.0))
    await mailbox.handle(0, broadcast(1, 1.0))
    assert mailbox.snapshot()[0].sequence == 2
    assert received(tmp_path) == [(0, 1, [1.0]), (0, 2, [2.0])]


async def test_another_payload_under_a_sequence_taken_here_is_refused(mailbox, tmp_path):
    """An equivocating sender: the first value of a sequence is the one kept; the receiver logs the other."""
    await mailbox.handle(0, broadcast(1, 1.0))
    with pytest.raises(Refusal) as equivocation:
        await mailbox.handle(0, broadcast(1, 2.0))
    assert equivocation.value.code == "ALREADY_EXISTS"
    assert mailbox.snapshot()[0].value.tolist() == [1.0] and received(tmp_path) == [(0, 1, [1.0])]


async def test_a_sequence_beyond_the_schedule_is_refused_and_later_broadcasts_still_count(mailbox, tmp_path):
    """2^64 - 1 taken would make every genuine broadcast of the sender stale; past the published LAST it is refused."""
    for beyond in (2**64 - 1, LAST + 1):
        with pytest.raises(Refusal) as refused:
            await mailbox.handle(0, broadcast(beyond, 9.0))
        assert refused.value.code == "OUT_OF_RANGE"
    await mailbox.handle(0, broadcast(3, 3.0))
    await mailbox.handle(0, broadcast(LAST, 8.0))
    assert (mailbox.snapshot()[0].sequence, mailbox.snapshot()[0].value.tolist()) == (LAST, [8.0])
    assert received(tmp_path) == [(0, 3, [3.0]), (0, LAST, [8.0])]


async def test_a_personalized_cd_agent_holds_its_neighbours_to_their_published_releases(tmp_path):
    """The agent's mailbox takes sequences 1..releases (a warm start and 3 updates: 4); the poisoning sequence
    2^64 - 1 reaches the node, so it is logged as refused with its payload, and the genuine broadcast 1 is taken."""
    params = PersonalizedCDParams(dimension=2, mu=1.0, max_examples=100, updates=3, epsilon=4.0,
                                  warm_start_epsilon=1.0)
    task = generate_task(3, 2, seed=0)
    topology = task_topology(task, params, run_id="r")
    sender = topology.neighbours[0][0]
    samplers = make_samplers("simulation", 0)
    host = NodeHost(topology, 0, task.train[0], samplers.gaussian, tmp_path, lambda peer: InProcessLink(0, None),
                    laplace=samplers.laplace)

    async def accept(sequence: int, value: list[float]) -> None:
        message = Message(PERSONALIZED_MODEL, MessageId(sequence=sequence), np.array(value))
        envelope, data = to_wire(message, run_id="r", protocol=params.name, sender=sender, receiver=0)
        await host.receiver.accept(envelope, data, None)

    try:
        for beyond in (2**64 - 1, 5):
            with pytest.raises(Refusal):
                await accept(beyond, [9.0, 9.0])
        await accept(1, [1.0, 1.0])
        await accept(4, [4.0, 4.0])
    finally:
        await host.close()
    log = read_log(tmp_path / VIEW_LOG_NAME)
    assert [(r.claimed_sender, r.sequence, r.status_code, from_tensor(r.payload).tolist())
            for r in log.of_kind("rejected")] == [(sender, 2**64 - 1, "OUT_OF_RANGE", [9.0, 9.0]),
                                                  (sender, 5, "OUT_OF_RANGE", [9.0, 9.0])]
    assert [(r.peer, r.sequence) for r in log.of_kind("received")] == [(sender, 1), (sender, 4)]


async def test_a_broadcast_without_a_sequence_number_is_refused(mailbox, tmp_path):
    with pytest.raises(Refusal) as unordered:
        await mailbox.handle(0, broadcast(0, 1.0))
    assert unordered.value.code == "INVALID_ARGUMENT" and mailbox.snapshot() == {}


async def test_waiting_returns_once_the_senders_sequence_passes_the_mark(mailbox):
    await mailbox.handle(0, broadcast(2, 2.0))
    assert (await mailbox.wait_beyond(0, 1, timeout_s=0.0)).sequence == 2  # already past: no wait
    waiter = asyncio.create_task(mailbox.wait_beyond(0, 2, timeout_s=5.0))
    await mailbox.handle(3, broadcast(7, 7.0))  # another sender's value does not count
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await mailbox.handle(0, broadcast(4, 4.0))
    latest = await waiter
    assert (latest.sequence, latest.value.tolist()) == (4, [4.0])


async def test_waiting_gives_up_after_the_timeout(mailbox):
    await mailbox.handle(0, broadcast(2, 2.0))
    assert await mailbox.wait_beyond(0, 2, timeout_s=0.05) is None
    assert await mailbox.wait_beyond(1, 0, timeout_s=0.05) is None  # never heard from


async def test_the_context_routes_validated_broadcasts_of_its_kind_to_the_mailbox(journal, tmp_path):
    """Through the receiver: a stale value is logged as rejected with its payload (it reached the node)."""
    topology = build_topology(nx.cycle_graph(4), graph_name="ring", run_id="r", protocol=MuffliatoParams(
        sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=2))
    receiver = Receiver(topology, 1, journal)
    context = ProtocolContext(topology, 1, journal, receiver, outbox=None, noise=None, on_step=None)
    mailbox = context.latest_values(MODEL, last_sequence=LAST)

    async def accept(sequence: int, value: list[float]) -> None:
        envelope, data = to_wire(Message(MODEL, MessageId(sequence=sequence), np.array(value)), run_id="r",
                                 protocol=topology.protocol.name, sender=0, receiver=1)
        await receiver.accept(envelope, data, None)

    await accept(2, [2.0, 2.0])
    with pytest.raises(Refusal):
        await accept(1, [1.0, 1.0])
    assert mailbox.snapshot()[0].value.tolist() == [2.0, 2.0]
    log = read_log(tmp_path / VIEW_LOG_NAME)
    ((refused_sequence, code, payload),) = [(r.sequence, r.status_code, from_tensor(r.payload).tolist())
                                            for r in log.of_kind("rejected")]
    assert (refused_sequence, code, payload) == (1, "FAILED_PRECONDITION", [1.0, 1.0])
