"""Status questions between in-process exchange desks: answered to the exchange's peer only, logged at both ends.

A triangle of randomized-Muffliato desks, each with its own journal, receiver and outbox over the
in-process link, so every message passes the real receiver checks and is logged as a node logs it.
Node 0's commits to node 1 are lost on the way: node 1, in doubt, asks node 0 for its decision, and
the answer carries what the lost commit carried, node 0's value before the exchange, and nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.replay import replay_run
from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from coordinator_tools.topology.build import build_topology
from netdp.v1 import peer_pb2, viewlog_pb2
from node.codec import from_tensor
from node.context import ProtocolContext
from node.delivery import Outbox
from node.journal import Journal
from node.mailboxes.exchange_desk import COMMIT, COMMITTED, STATUS, ExchangeDesk
from node.message import Message, MessageId
from node.protocols.muffliato_async import MuffliatoAsyncParams, average
from node.receiver import Receiver
from node.topology import save_topology
from node.transport.base import LinkError
from node.transport.inprocess import InProcessLink
from node.viewlog import VIEW_LOG_NAME, read_log

TIMEOUT_S = 0.05  # a responder asks after twice this
TOPOLOGY = build_topology(nx.cycle_graph(3), graph_name="triangle", run_id="status", protocol=MuffliatoAsyncParams(
    sigma=0.0, sensitivity=100.0, alpha=2.0, dimension=2, exchanges=1, exchange_timeout_s=TIMEOUT_S))
VALUES = (np.array([1.0, 3.0]), np.array([5.0, -1.0]), np.array([0.5, 0.25]))


class CommitLosingLink(InProcessLink):
    """A link on which every commit is lost before it reaches the peer."""

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        if envelope.kind == COMMIT:
            raise LinkError("UNAVAILABLE", "the commit was lost")
        await super().send(envelope, data, timeout_s, wait_for_peer=wait_for_peer)


@dataclass(frozen=True)
class Node:
    desk: ExchangeDesk
    outbox: Outbox


async def _no_hook(step: int) -> None:
    return None


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    """The three nodes' desks, opened with VALUES; their logs are a run directory the auditor reads."""
    save_topology(TOPOLOGY, tmp_path / TOPOLOGY_FILE)
    receivers: dict[int, Receiver] = {}
    journals, nodes = [], {}
    for v in range(3):
        header = viewlog_pb2.RunHeader(run_id=TOPOLOGY.run_id, protocol=TOPOLOGY.protocol.name, node_id=v,
                                       topology_digest=TOPOLOGY.digest, sampler_kind="simulation",
                                       public_parameters_json=TOPOLOGY.public_parameters_json())
        journal = Journal(node_log_dir(tmp_path, v), header)
        receivers[v] = Receiver(TOPOLOGY, v, journal)

        def link(peer: int, v: int = v) -> InProcessLink:
            lossy = CommitLosingLink if (v, peer) == (0, 1) else InProcessLink
            return lossy(v, receivers.get(peer))

        outbox = Outbox(link, journal, run_id=TOPOLOGY.run_id, protocol=TOPOLOGY.protocol.name, sender=v)
        context = ProtocolContext(TOPOLOGY, v, journal, receivers[v], outbox, noise=None, on_step=_no_hook)
        nodes[v] = Node(context.exchange_desk(average, timeout_s=TIMEOUT_S), outbox)
        nodes[v].desk.open(VALUES[v])
        journals.append(journal)
    yield nodes
    for journal in journals:
        journal.close()


def records(rundir: Path, node: int, kind: str) -> list:
    return read_log(node_log_dir(rundir, node) / VIEW_LOG_NAME).of_kind(kind)


async def test_a_lost_commit_is_recovered_by_asking_and_the_answer_is_logged_at_both_ends(nodes, tmp_path):
    assert await nodes[0].desk.initiate(1) == "committed"
    await asyncio.wait_for(nodes[1].desk.drain(), timeout=5.0)
    mean = [3.0, 1.0]  # (1 + 5) / 2, (3 - 1) / 2
    assert nodes[0].desk.value.tolist() == nodes[1].desk.value.tolist() == mean
    sent = [(r.peer, r.kind, r.sequence, r.exchange_id, r.delivered, r.attempts > 0, from_tensor(r.payload).tolist())
            for r in records(tmp_path, 0, "sent")]
    assert sent == [(1, COMMIT, 1, "0-1", False, True, [1.0, 3.0]),  # lost on the way
                    (1, COMMITTED, 1, "0-1", False, False, [1.0, 3.0])]  # a reply: its arrival is not observable
    received = [(r.peer, r.kind, r.sequence, r.exchange_id, from_tensor(r.payload).tolist())
                for r in records(tmp_path, 1, "received")]
    assert received == [(0, COMMITTED, 1, "0-1", [1.0, 3.0])]
    accepted, committed = records(tmp_path, 1, "exchange")
    assert (accepted.phase, committed.phase, from_tensor(committed.value_after).tolist()) == (
        "accepted", "committed", mean)
    replay = replay_run(tmp_path)
    assert [f for f in (*replay.node_problems, *replay.consistency) if f.severity == "error"] == []
    (exchange,) = replay.realized.exchanges
    assert (exchange.exchange_id, exchange.status) == ("0-1", "committed")
    assert replay.realized.received[1] == ((0, 0),)  # node 1 holds node 0's value of exchange 0-1


async def test_a_status_question_about_anybody_elses_exchange_is_refused_and_logged(nodes, tmp_path):
    """Node 0 exchanged with node 2 (0-1); node 1 asks about it, and node 2 about an exchange never proposed."""
    assert await nodes[0].desk.initiate(2) == "committed"
    for asker, exchange_id in ((1, "0-1"), (2, "0-7")):
        with pytest.raises(LinkError) as refused:
            await nodes[asker].outbox.call(0, Message(STATUS, MessageId(sequence=1, exchange_id=exchange_id)), 1.0)
        assert refused.value.code == "PERMISSION_DENIED"
    assert [(r.claimed_sender, r.kind, r.exchange_id, r.status_code, r.payload.data)
            for r in records(tmp_path, 0, "rejected")] == [
        (1, STATUS, "0-1", "PERMISSION_DENIED", b""), (2, STATUS, "0-7", "PERMISSION_DENIED", b"")]
    # Nothing left node 0 but what its exchange with node 2 owed node 2: no answer went out at all.
    assert [(r.peer, r.kind) for r in records(tmp_path, 0, "sent")] == [(2, COMMIT)]
