"""The token slot's custody rules, between in-process nodes: logged before acknowledged, once per hop, never stale.

Nodes 0 and 1 of a 3-ring run in this event loop (node 2 is absent: unreachable), each with
its own journal, receiver and outbox, so a forward goes through the real receiver checks.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.context import NodeNoise, ProtocolContext
from node.delivery import CustodyDelivery, Outbox
from node.journal import Delivery, Journal
from node.mailboxes.token_slot import ACKNOWLEDGED, FORWARDED, KEPT, RECEIVED, TokenSlot
from node.message import Message, MessageId, to_wire
from node.noise import SimulationSampler
from node.protocols.muffliato import MuffliatoParams
from node.receiver import SENDER_WITHHELD, Receiver
from node.refusal import Refusal
from node.transport.inprocess import InProcessLink
from node.viewlog import VIEW_LOG_NAME, read_log

RUN = "walk"
TOKEN = "token"  # the tokens' kind
BUDGET_S = 5.0
TOPOLOGY = build_topology(nx.cycle_graph(3), graph_name="ring", run_id=RUN, protocol=MuffliatoParams(
    sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=2))


@dataclass
class Node:
    context: ProtocolContext
    slot: TokenSlot
    log: Path

    def events(self) -> list[tuple]:
        """The node's sent, received and custody records, in log order, reduced to what the tests check."""
        out: list[tuple] = []
        for record in read_log(self.log).records:
            kind = record.WhichOneof("kind")
            entry = getattr(record, kind)
            peer = entry.peer if kind in ("sent", "received", "token") and entry.HasField("peer") else None
            if kind == "token":
                out.append(("custody", entry.phase, entry.token_id, entry.hop, peer))
            elif kind in ("sent", "received"):
                out.append((kind, entry.token_id, entry.hop, peer, from_tensor(entry.payload).tolist()))
        return out


async def _no_hook(step: int) -> None:
    return None


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    yield from make_nodes(tmp_path)


@pytest.fixture
def anonymous_nodes(tmp_path: Path) -> Iterator[dict[int, Node]]:
    yield from make_nodes(tmp_path, anonymous=True)


def make_nodes(tmp_path: Path, *, anonymous: bool = False) -> Iterator[dict[int, Node]]:
    """Nodes 0 and 1, each with its slot; `anonymous`: the slots' kind is registered sender-anonymous."""
    receivers: dict[int, Receiver] = {}
    nodes: dict[int, Node] = {}
    for v in (0, 1):
        journal = Journal(tmp_path / f"node-{v}", viewlog_pb2.RunHeader(run_id=RUN, node_id=v))
        receivers[v] = Receiver(TOPOLOGY, v, journal)
        outbox = Outbox(lambda peer, v=v: InProcessLink(v, receivers.get(peer)), journal, run_id=RUN,
                        protocol=TOPOLOGY.protocol.name, sender=v)
        context = ProtocolContext(TOPOLOGY, v, journal, receivers[v], outbox,
                                  NodeNoise(SimulationSampler(v), journal), _no_hook)
        nodes[v] = Node(context, context.token_slot(TOKEN, anonymous=anonymous),
                        tmp_path / f"node-{v}" / VIEW_LOG_NAME)
    yield nodes
    for node in nodes.values():
        node.context.journal.close()


def token(token_id: str, hop: int, *value: float) -> Message:
    return Message(TOKEN, MessageId(token_id=token_id, hop=hop), np.array(value))


async def test_custody_is_durable_before_the_delivery_is_acknowledged(nodes, monkeypatch):
    receiver = nodes[1]
    journal = receiver.context.journal
    write, gate = journal.write, asyncio.Event()

    async def slow_write(*records: viewlog_pb2.Record) -> None:
        await gate.wait()
        await write(*records)

    monkeypatch.setattr(journal, "write", slow_write)
    handled = asyncio.create_task(receiver.slot.handle(0, token("t", 1, 1.0, 2.0)))
    await asyncio.sleep(0.05)
    assert not handled.done() and receiver.events() == []  # not acknowledged while the log lags
    assert await receiver.slot.take(timeout_s=0.0) is None  # nor handed to the protocol
    gate.set()
    await handled
    assert receiver.events() == [("received", "t", 1, 0, [1.0, 2.0]), ("custody", RECEIVED, "t", 1, 0)]
    taken = await receiver.slot.take(timeout_s=0.0)
    assert (taken.token_id, taken.hop, taken.sender, taken.value.tolist()) == ("t", 1, 0, [1.0, 2.0])


async def test_a_forward_logs_custody_on_both_sides_and_passes_it_on(nodes):
    walker, holder = nodes[0].slot, nodes[1].slot
    origin = walker.originate("t", np.array([0.0, 0.0]))
    delivery = await walker.forward(1, origin, np.array([1.0, 1.0]), BUDGET_S)
    assert delivery.delivered
    assert nodes[0].events() == [("custody", FORWARDED, "t", 1, 1), ("sent", "t", 1, 1, [1.0, 1.0]),
                                 ("custody", ACKNOWLEDGED, "t", 1, 1)]
    assert nodes[1].events() == [("received", "t", 1, 0, [1.0, 1.0]), ("custody", RECEIVED, "t", 1, 0)]
    with pytest.raises(ValueError, match="not in custody"):  # passed on: forwarding it again would fork it
        await walker.forward(1, origin, np.array([1.0, 1.0]), BUDGET_S)
    arrived = await holder.take(timeout_s=1.0)
    assert (await holder.forward(0, arrived, np.array([2.0, 2.0]), BUDGET_S)).delivered
    back = await walker.take(timeout_s=1.0)  # the walk comes back: a newer hop is taken again
    assert (back.hop, back.sender, back.value.tolist()) == (2, 1, [2.0, 2.0])


async def test_several_tokens_walk_at_once_each_by_its_own_id(nodes):
    """Two tokens held at one node at the same time, crossing on the same link: custody is per token id."""
    walker, holder = nodes[0].slot, nodes[1].slot
    first, second = walker.originate("a", np.zeros(2)), walker.originate("b", np.ones(2))
    assert (await walker.forward(1, first, np.array([1.0, 0.0]), BUDGET_S)).delivered
    assert walker.holds(second) and not walker.holds(first)
    a_here = await holder.take(timeout_s=1.0)
    assert (await holder.forward(0, a_here, np.array([2.0, 0.0]), BUDGET_S)).delivered  # "a" comes back
    assert (await walker.forward(1, second, np.array([1.0, 1.0]), BUDGET_S)).delivered  # while "b" goes out
    back, b_here = await walker.take(timeout_s=1.0), await holder.take(timeout_s=1.0)
    assert (back.token_id, back.hop, back.value.tolist()) == ("a", 2, [2.0, 0.0])
    assert (b_here.token_id, b_here.hop, b_here.value.tolist()) == ("b", 1, [1.0, 1.0])
    assert [e for e in nodes[1].events() if e[0] == "custody"] == [
        ("custody", RECEIVED, "a", 1, 0), ("custody", FORWARDED, "a", 2, 0), ("custody", ACKNOWLEDGED, "a", 2, 0),
        ("custody", RECEIVED, "b", 1, 0)]


async def test_a_retried_forward_is_acknowledged_without_a_second_custody(nodes):
    holder = nodes[1]
    for _ in range(2):
        assert await holder.slot.handle(0, token("t", 1, 1.0, 2.0)) is None
    assert [event[:2] for event in holder.events()] == [("received", "t"), ("custody", RECEIVED)]
    assert (await holder.slot.take(timeout_s=0.0)).hop == 1
    assert await holder.slot.take(timeout_s=0.05) is None


async def test_another_payload_under_a_hop_taken_here_is_refused_and_logged_with_it(nodes):
    """An equivocating sender: the hop's first payload is the one taken, the second is in the view as refused."""
    walker, holder = nodes[0].context, nodes[1]
    for value in ((1.0, 2.0), (7.0, 8.0), (1.0, 2.0)):
        await walker.deliver(1, token("t", 1, *value), CustodyDelivery(1), BUDGET_S)
    assert [event for event in holder.events() if event[0] == "received"] == [("received", "t", 1, 0, [1.0, 2.0])]
    holder.context.journal.close()
    (refused,) = read_log(holder.log).of_kind("rejected")
    assert (refused.claimed_sender, refused.token_id, refused.hop, refused.status_code) == (0, "t", 1, "ALREADY_EXISTS")
    assert from_tensor(refused.payload).tolist() == [7.0, 8.0]
    assert refused.payload_sha256 == hashlib.sha256(np.array([7.0, 8.0], dtype="<f8").tobytes()).digest()


async def test_an_older_hop_is_refused_as_stale_every_time(nodes):
    holder = nodes[1].slot
    await holder.handle(0, token("t", 3, 3.0, 3.0))
    await holder.forward(0, await holder.take(timeout_s=0.0), np.array([4.0, 4.0]), BUDGET_S)  # hop 4 seen here
    for stale_hop in (2, 2, 4):
        with pytest.raises(Refusal) as stale:
            await holder.handle(0, token("t", stale_hop, 0.0, 0.0))
        assert stale.value.code == "FAILED_PRECONDITION" and "stale" in stale.value.detail
    await holder.handle(0, token("t", 3, 3.0, 3.0))  # the hop it took: still the same answer
    assert [event[:4] for event in nodes[1].events() if event[:2] == ("custody", RECEIVED)] == [
        ("custody", RECEIVED, "t", 3)]


async def test_a_second_copy_of_a_token_held_here_is_refused(nodes):
    holder = nodes[1].slot
    await holder.handle(0, token("t", 1, 1.0, 1.0))
    with pytest.raises(Refusal) as copy:
        await holder.handle(2, token("t", 5, 5.0, 5.0))
    assert copy.value.code == "FAILED_PRECONDITION" and "in custody" in copy.value.detail


async def test_a_token_without_a_hop_is_refused(nodes):
    for bad in (token("t", 0, 1.0, 1.0), token("", 1, 1.0, 1.0)):
        with pytest.raises(Refusal) as invalid:
            await nodes[1].slot.handle(0, bad)
        assert invalid.value.code == "INVALID_ARGUMENT"


async def test_a_failed_forward_keeps_custody_for_another_peer(nodes):
    walker = nodes[0].slot
    origin = walker.originate("t", np.zeros(2))
    failed = await walker.forward(2, origin, np.array([1.0, 1.0]), BUDGET_S)  # node 2 is down
    assert not failed.delivered and failed.unreachable
    assert (await walker.forward(1, origin, np.array([1.0, 1.0]), BUDGET_S)).delivered
    assert nodes[0].events() == [("custody", FORWARDED, "t", 1, 2), ("sent", "t", 1, 2, [1.0, 1.0]),
                                 ("custody", FORWARDED, "t", 1, 1), ("sent", "t", 1, 1, [1.0, 1.0]),
                                 ("custody", ACKNOWLEDGED, "t", 1, 1)]


class EchoOutbox:
    """The next holder takes the token and sends it straight back, then its acknowledgement is lost."""

    def __init__(self) -> None:
        self.slot: TokenSlot | None = None

    async def deliver(self, peer: int, message: Message, *args: object) -> Delivery:
        await self.slot.handle(peer, token(message.id.token_id, message.id.hop + 1, *message.payload))
        return Delivery(False, 1, "DEADLINE_EXCEEDED: the acknowledgement was lost")


async def test_a_token_back_before_its_forwards_acknowledgement_is_the_one_in_custody(tmp_path):
    """The forward failed as far as the sender knows, but the walk went on: custody is not handed back."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=0))
    outbox = EchoOutbox()
    slot = outbox.slot = TokenSlot(TOKEN, journal, outbox, attempts=1)
    origin = slot.originate("t", np.zeros(2))
    assert not (await slot.forward(1, origin, np.array([1.0, 1.0]), BUDGET_S)).delivered
    with pytest.raises(ValueError, match="not in custody"):
        await slot.forward(2, origin, np.array([1.0, 1.0]), BUDGET_S)
    back = await slot.take(timeout_s=0.0)
    journal.close()
    assert (back.hop, back.sender) == (2, 1)


async def test_a_kept_token_takes_its_next_hop_here_without_a_network_hop(nodes):
    walker = nodes[0].slot
    origin = walker.originate("t", np.zeros(2))
    kept = await walker.keep(origin, np.array([1.0, 1.0]))
    assert (kept.hop, kept.sender, kept.value.tolist()) == (1, None, [1.0, 1.0])
    assert walker.holds(kept) and not walker.holds(origin)
    with pytest.raises(ValueError, match="not in custody"):  # the older hop is gone: it cannot fork the walk
        await walker.keep(origin, np.zeros(2))
    assert (await walker.forward(1, kept, np.array([2.0, 2.0]), BUDGET_S)).delivered
    assert nodes[0].events() == [("custody", KEPT, "t", 1, None), ("custody", FORWARDED, "t", 2, 1),
                                 ("sent", "t", 2, 1, [2.0, 2.0]), ("custody", ACKNOWLEDGED, "t", 2, 1)]
    with pytest.raises(Refusal) as stale:  # a copy of the kept hop coming in is stale here
        await walker.handle(1, token("t", 1, 0.0, 0.0))
    assert stale.value.code == "FAILED_PRECONDITION"


async def test_the_protocols_rule_refuses_a_token_before_it_is_logged(tmp_path):
    def only_from_node_0(sender: int | None, message_id: MessageId) -> None:
        if sender != 0:
            raise Refusal("PERMISSION_DENIED", "not from node 0")

    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=1))
    slot = TokenSlot(TOKEN, journal, outbox=None, attempts=1, admit=only_from_node_0)
    with pytest.raises(Refusal, match="not from node 0"):
        await slot.handle(2, token("t", 1, 1.0, 1.0))
    await slot.handle(0, token("t", 1, 1.0, 1.0))
    journal.close()
    assert [(e.hop, e.phase) for e in read_log(tmp_path / VIEW_LOG_NAME).of_kind("token")] == [(1, RECEIVED)]


async def test_a_token_cannot_be_originated_twice(nodes):
    nodes[0].slot.originate("t", np.zeros(2))
    with pytest.raises(ValueError):
        nodes[0].slot.originate("t", np.zeros(2))


async def test_a_sender_anonymous_kind_is_neither_logged_nor_handed_on_with_its_sender(anonymous_nodes):
    """The receiver checks the sender, then forgets it: taken, refused and custody records name no one."""
    walker, holder = anonymous_nodes[0], anonymous_nodes[1]
    origin = walker.slot.originate("t", np.zeros(2))
    assert (await walker.slot.forward(1, origin, np.array([1.0, 2.0]), BUDGET_S)).delivered
    assert (await holder.slot.take(timeout_s=0.0)).sender is None
    hopless = await walker.context.deliver(1, token("x", 0, 9.0, 9.0), CustodyDelivery(1), BUDGET_S)
    assert not hopless.delivered  # a forwarded token without a hop is refused, and logged
    holder.context.journal.close()
    log = read_log(holder.log)
    assert [e.HasField("peer") for e in log.of_kind("received")] == [False]
    assert [e.HasField("peer") for e in log.of_kind("token")] == [False]
    assert [e.claimed_sender for e in log.of_kind("rejected")] == [-1]



@pytest.mark.parametrize("anonymous", [False, True])
async def test_refusals_of_a_sender_anonymous_kind_name_no_sender(tmp_path, anonymous):
    """Node 11 hands node 10 of a 12-ring a token, then an equivocating copy, a hop while the token is held
    here, and a message its certificate does not back: every refusal is logged, none names node 11 when the
    kind is sender-anonymous (and each does otherwise: the scrubbing is what keeps it out)."""
    ring = build_topology(nx.cycle_graph(12), graph_name="ring", run_id=RUN, protocol=TOPOLOGY.protocol)
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=10))
    receiver = Receiver(ring, 10, journal)
    slot = TokenSlot(TOKEN, journal, outbox=None, attempts=1)
    receiver.register(TOKEN, slot.handle, scheme="hop", payload=True, anonymous=anonymous)

    async def send(message: Message, authenticated: int | None = None) -> None:
        envelope, data = to_wire(message, run_id=RUN, protocol=ring.protocol.name, sender=11, receiver=10)
        await receiver.accept(envelope, data, authenticated)

    await send(token("t", 1, 1.0, 2.0))
    for message, authenticated in ((token("t", 1, 3.0, 4.0), None), (token("t", 2, 5.0, 6.0), None),
                                   (token("u", 1, 1.0, 1.0), 9)):
        with pytest.raises(Refusal):
            await send(message, authenticated)
    journal.close()
    rejected = read_log(tmp_path / VIEW_LOG_NAME).of_kind("rejected")
    assert [r.status_code for r in rejected] == ["ALREADY_EXISTS", "FAILED_PRECONDITION", "PERMISSION_DENIED"]
    if anonymous:
        assert [r.claimed_sender for r in rejected] == [-1, -1, -1]
        assert not any("11" in r.detail for r in rejected) and rejected[2].detail == SENDER_WITHHELD
        assert b"node 11" not in (tmp_path / VIEW_LOG_NAME).read_bytes()
    else:
        assert [r.claimed_sender for r in rejected] == [11, 11, 11] and "11" in rejected[2].detail
