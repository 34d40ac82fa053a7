"""A bundle of messages to several ids of one process: each checked by its own receiver, logged in its own view
log in one group commit, applied only once durable; a refused message is refused alone, the rest go through."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from netdp.v1 import viewlog_pb2
from node.journal import Journal
from node.mailboxes.round_barrier import RoundBarrier
from node.message import GOSSIP, Message, MessageId, to_wire
from node.receiver import KindRule, Receiver
from node.transport.bundles import accept_bundle
from node.viewlog import VIEW_LOG_NAME, read_log
from tests.unit.test_node_runtime import ring_topology


def gossip_wire(topology, sender: int, receiver: int, round_index: int, value: float):
    return to_wire(Message(GOSSIP, MessageId(round=round_index), np.full(2, value)), run_id=topology.run_id,
                   protocol=topology.protocol_name, sender=sender, receiver=receiver)


async def test_a_bundle_is_checked_per_receiver_logged_per_id_and_applied_once_durable(tmp_path):
    topology = ring_topology(6)  # node 1's neighbours are 0 and 2; node 2's are 1 and 3
    receivers, barriers = {}, {}
    for node in (1, 2):
        journal = Journal(tmp_path / f"node-{node}", viewlog_pb2.RunHeader(run_id=topology.run_id, node_id=node))
        receivers[node] = Receiver(topology, node, journal)
        barriers[node] = RoundBarrier(lambda round_index, node=node: topology.neighbours[node], journal)
        receivers[node].add_rule(GOSSIP, KindRule(barriers[node].handle, "round", True, take=barriers[node].take))
    items = [(receivers[1], *gossip_wire(topology, 0, 1, 0, 1.5), 0),
             (receivers[1], *gossip_wire(topology, 2, 1, 0, 2.5), 2),
             (receivers[2], *gossip_wire(topology, 1, 2, 0, 3.5), 1),
             (receivers[2], *gossip_wire(topology, 4, 2, 0, 4.5), 4),  # not a neighbour of node 2
             (receivers[2], *gossip_wire(topology, 1, 2, 0, 3.5), 1)]  # the same round again
    settled = await accept_bundle(items)

    assert [None if s is None or s.refusal is None else s.refusal.code for s in settled] == [
        None, None, None, "PERMISSION_DENIED", "ALREADY_EXISTS"]
    assert {sender: value[0] for sender, value in barriers[1]._values[0].items()} == {0: 1.5, 2: 2.5}
    assert {sender: value[0] for sender, value in barriers[2]._values[0].items()} == {1: 3.5}
    for receiver in receivers.values():
        receiver.journal.close()
    one = read_log(tmp_path / "node-1" / VIEW_LOG_NAME).records
    two = read_log(tmp_path / "node-2" / VIEW_LOG_NAME).records
    assert [(r.WhichOneof("kind"), r.received.peer) for r in one[1:]] == [("received", 0), ("received", 2)]
    assert [r.WhichOneof("kind") for r in two[1:]] == ["received", "rejected", "rejected"]
    assert [r.rejected.claimed_sender for r in two[2:]] == [4, 1]
    # One group commit: every record of the bundle in a log carries the one moment that log's write was made.
    assert len({r.logged_unix for r in one[1:]}) == len({r.logged_unix for r in two[1:]}) == 1


async def test_a_stopped_node_refuses_a_bundle_without_logging(tmp_path):
    topology = ring_topology(6)
    journal = Journal(tmp_path / "node-1", viewlog_pb2.RunHeader(run_id=topology.run_id, node_id=1))
    receiver = Receiver(topology, 1, journal)
    barrier = RoundBarrier(lambda round_index: topology.neighbours[1], journal)
    receiver.add_rule(GOSSIP, KindRule(barrier.handle, "round", True, take=barrier.take))
    journal.close()
    settled = await accept_bundle([(receiver, *gossip_wire(topology, 0, 1, 0, 1.0), 0)])
    assert settled[0] is not None and settled[0].refusal is not None and settled[0].refusal.code == "UNAVAILABLE"
    assert [r.WhichOneof("kind") for r in read_log(tmp_path / "node-1" / VIEW_LOG_NAME).records] == ["header"]


async def test_a_bundle_whose_caller_leaves_mid_commit_is_still_applied(tmp_path):
    # The sender died (or gave up) while the bundle's records were being written: the values are applied all the
    # same, so the round barrier is not left waiting for values it was told are on their way to disk.
    topology = ring_topology(6)
    journal = Journal(tmp_path / "node-1", viewlog_pb2.RunHeader(run_id=topology.run_id, node_id=1))
    receiver = Receiver(topology, 1, journal)
    barrier = RoundBarrier(lambda round_index: topology.neighbours[1], journal)
    receiver.add_rule(GOSSIP, KindRule(barrier.handle, "round", True, take=barrier.take))
    call = asyncio.ensure_future(accept_bundle([(receiver, *gossip_wire(topology, 0, 1, 0, 1.5), 0),
                                                (receiver, *gossip_wire(topology, 2, 1, 0, 2.5), 2)]))
    await asyncio.sleep(0)  # taken, the group commit under way
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(200):
        if not barrier._logging.get(0):
            break
        await asyncio.sleep(0.01)
    assert not barrier._logging.get(0)
    assert {sender: value[0] for sender, value in barrier._values[0].items()} == {0: 1.5, 2: 2.5}
    journal.close()
    assert [r.received.peer for r in read_log(tmp_path / "node-1" / VIEW_LOG_NAME).records[1:]] == [0, 2]
