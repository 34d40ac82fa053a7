"""The exchange desk's commit rule, driven without a network: decline, commit, abort, doubt, idempotence, and
the decisions it refuses (logged by the receiver in front of it, payload bounded and digested)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import peer_pb2, viewlog_pb2
from node.codec import from_tensor
from node.context import ProtocolContext
from node.delivery import Outbox
from node.journal import Journal
from node.mailboxes.exchange_desk import (
    ABORT,
    ABORTED,
    ACCEPT,
    COMMIT,
    COMMITTED,
    DECLINE,
    PROPOSE,
    STATUS_ATTEMPTS,
    ExchangeDesk,
)
from node.message import Message, MessageId, to_wire
from node.noise import SimulationSampler
from node.protocols.muffliato_async import MuffliatoAsyncParams, average
from node.receiver import Receiver
from node.refusal import Refusal
from node.topology import NetworkParams
from node.transport.base import LinkError
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME, read_log


class UnreachableOutbox:
    """An outbox whose peers never answer."""

    async def call(self, peer: int, message: Message, timeout_s: float, **options: object) -> Message:
        raise LinkError("UNAVAILABLE", "gone")

    async def deliver(self, *args: object, **options: object) -> None:
        raise AssertionError("a responder never delivers")


@pytest.fixture
def desk(tmp_path: Path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    desk = ExchangeDesk(1, average, journal, UnreachableOutbox(), timeout_s=0.01, attempts=2)
    desk.open(np.array([2.0, 4.0]))
    yield desk
    journal.close()


def proposal(initiator: int, sequence: int) -> Message:
    return Message(PROPOSE, MessageId(sequence=sequence, exchange_id=f"{initiator}-{sequence}"))


async def test_a_desk_has_a_value_to_exchange_only_once_opened(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    desk = ExchangeDesk(1, average, journal, UnreachableOutbox(), timeout_s=0.01, attempts=2)
    with pytest.raises(RuntimeError, match="has not been opened"):
        await desk.initiate(0)
    assert (await desk.on_propose(0, proposal(0, 1))).kind == DECLINE  # a proposal before `open` is declined
    desk.open(np.array([2.0, 4.0]))
    assert np.array_equal(desk.opened_value, [2.0, 4.0])
    journal.close()


async def test_a_busy_desk_declines_and_a_commit_applies_the_average_once(desk):
    accepted = await desk.on_propose(0, proposal(0, 1))
    assert accepted.kind == ACCEPT and np.array_equal(accepted.payload, [2.0, 4.0])
    assert (await desk.on_propose(2, proposal(2, 1))).kind == DECLINE  # in doubt about 0-1: busy
    commit = Message(COMMIT, MessageId(sequence=1, exchange_id="0-1"), np.array([0.0, 0.0]))
    await desk.on_commit(0, commit)
    assert np.array_equal(desk.value, [1.0, 2.0])
    with pytest.raises(Refusal) as again:
        await desk.on_commit(0, commit)
    assert again.value.code == "ALREADY_EXISTS" and np.array_equal(desk.value, [1.0, 2.0])
    with pytest.raises(Refusal) as stranger:
        await desk.on_commit(2, Message(COMMIT, MessageId(sequence=4, exchange_id="2-4"), np.zeros(2)))
    assert stranger.value.code == "FAILED_PRECONDITION"


async def test_a_proposal_from_a_lower_id_waits_for_the_busy_desk_and_one_from_a_higher_id_is_declined(tmp_path):
    """Waiting only up the order of ids cannot close a cycle; the waiter gets the value the first exchange left."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    desk = ExchangeDesk(1, average, journal, UnreachableOutbox(), timeout_s=1.0, attempts=2)
    desk.open(np.array([2.0, 4.0]))
    assert (await desk.on_propose(2, proposal(2, 1))).kind == ACCEPT
    assert (await desk.on_propose(3, proposal(3, 1))).kind == DECLINE  # higher id: declined at once
    waiting = asyncio.ensure_future(desk.on_propose(0, proposal(0, 1)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await desk.on_commit(2, Message(COMMIT, MessageId(sequence=1, exchange_id="2-1"), np.array([0.0, 0.0])))
    second = await asyncio.wait_for(waiting, timeout=1.0)
    assert second.kind == ACCEPT and second.id.sequence == 2 and np.array_equal(second.payload, [1.0, 2.0])
    await desk.on_commit(0, Message(COMMIT, MessageId(sequence=1, exchange_id="0-1"), np.array([3.0, 2.0])))
    assert np.array_equal(desk.value, [2.0, 2.0])
    journal.close()
    phases = [(event.exchange_id, event.phase) for event in read_log(tmp_path / VIEW_LOG_NAME).of_kind("exchange")]
    assert phases == [("2-1", "accepted"), ("3-1", "declined"), ("2-1", "committed"), ("0-1", "accepted"),
                      ("0-1", "committed")]


async def test_a_proposal_waits_for_a_busy_desk_only_a_fraction_of_the_timeout(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    desk = ExchangeDesk(1, average, journal, UnreachableOutbox(), timeout_s=0.2, attempts=2)
    desk.open(np.array([2.0, 4.0]))
    assert (await desk.on_propose(2, proposal(2, 1))).kind == ACCEPT
    assert (await asyncio.wait_for(desk.on_propose(0, proposal(0, 1)), timeout=0.2)).kind == DECLINE
    await desk.on_commit(2, Message(COMMIT, MessageId(sequence=1, exchange_id="2-1"), np.array([0.0, 0.0])))
    journal.close()


async def test_a_responder_in_doubt_aborts_when_the_initiator_cannot_be_reached(desk, tmp_path):
    await desk.on_propose(0, proposal(0, 1))
    await asyncio.wait_for(desk.drain(), timeout=5.0)
    assert np.array_equal(desk.value, [2.0, 4.0])  # nothing applied
    phases = [event.phase for event in read_log(tmp_path / VIEW_LOG_NAME).of_kind("exchange")]
    assert phases == ["accepted", "aborted"]
    with pytest.raises(Refusal):  # a late commit of the aborted exchange is refused, not applied
        await desk.on_commit(0, Message(COMMIT, MessageId(sequence=1, exchange_id="0-1"), np.zeros(2)))


class WrongAnswerOutbox:
    """A peer that answers a proposal with another exchange's value; takes the initiator's abort."""

    def __init__(self) -> None:
        self.delivered: list[Message] = []

    async def call(self, peer: int, message: Message, timeout_s: float, **options: object) -> Message:
        return Message(ACCEPT, MessageId(sequence=7, exchange_id="9-9"), np.array([5.0, 6.0]))

    async def deliver(self, peer: int, message: Message, *args: object, **options: object) -> None:
        self.delivered.append(message)


async def test_an_answer_the_initiator_refuses_stays_in_its_view_and_aborts(tmp_path):
    """The refused reply's payload reached the node: it is logged (auditors count it), nothing is applied."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    outbox = WrongAnswerOutbox()
    desk = ExchangeDesk(1, average, journal, outbox, timeout_s=0.01, attempts=2)
    desk.open(np.array([2.0, 4.0]))
    assert await desk.initiate(0) == "aborted"
    journal.close()
    log = read_log(tmp_path / VIEW_LOG_NAME)
    (refused,) = log.of_kind("rejected")
    assert (refused.claimed_sender, refused.kind, refused.exchange_id) == (0, ACCEPT, "9-9")
    assert np.array_equal(from_tensor(refused.payload), [5.0, 6.0])
    assert [event.phase for event in log.of_kind("exchange")] == ["proposed", "aborted"]
    assert np.array_equal(desk.value, [2.0, 4.0]) and [m.kind for m in outbox.delivered] == [ABORT]


def test_in_process_exchanges_conserve_the_sum_exactly(tmp_path):
    topology = build_topology(
        generate("hypercube", n=8), graph_name="hypercube", run_id="desk",
        protocol=MuffliatoAsyncParams(sigma=0.0, sensitivity=100.0, alpha=2.0, dimension=2, exchanges=40,
                                      tick_rate=1000.0),
        network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))
    values = np.arange(16.0).reshape(8, 2) ** 1.2  # norms below the clip radius 50
    outcomes = asyncio.run(run_inprocess(topology, values, tmp_path, lambda v: SimulationSampler(v)))
    total = sum(outcome.estimate for outcome in outcomes.values())
    np.testing.assert_allclose(total, values.sum(axis=0), rtol=1e-12)
    assert all(outcome.steps_completed == 40 for outcome in outcomes.values())


RING = build_topology(nx.cycle_graph(3), graph_name="ring", run_id="r", protocol=MuffliatoAsyncParams(
    sigma=0.0, sensitivity=100.0, alpha=2.0, dimension=2, exchanges=1))
Send = Callable[..., Awaitable[object]]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ExchangeDesk, Send]]:
    """Node 1's desk behind its receiver, and `send(sender, message)` through that receiver."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    receiver = Receiver(RING, 1, journal)
    context = ProtocolContext(RING, 1, journal, receiver, UnreachableOutbox(), noise=None, on_step=None)
    desk = context.exchange_desk(average, timeout_s=5.0)  # in doubt for 10 s: the tests decide first
    desk.open(np.array([2.0, 4.0]))

    async def send(sender: int, message: Message, *, call: bool | None = None) -> object:
        """As the Outbox sends it: a proposal as a call, a decision one-way (unless `call` says otherwise)."""
        envelope, data = to_wire(message, run_id="r", protocol=RING.protocol.name, sender=sender, receiver=1)
        return await receiver.accept(envelope, data, None, call=message.kind == PROPOSE if call is None else call)

    yield desk, send
    journal.close()


def commit(sequence: int, exchange_id: str, *value: float) -> Message:
    return Message(COMMIT, MessageId(sequence=sequence, exchange_id=exchange_id), np.array(value))


def refusals(tmp_path: Path) -> list[tuple]:
    """(claimed sender, kind, sequence, exchange id, code, payload, payload digest) of every rejected record."""
    return [(r.claimed_sender, r.kind, r.sequence, r.exchange_id, r.status_code,
             from_tensor(r.payload).tolist() if r.payload.data else None, r.payload_sha256)
            for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("rejected")]


def sha256_of(*value: float) -> bytes:
    """The digest of a payload as packed on the wire (little-endian float64), computed here by hand."""
    return hashlib.sha256(np.array(value, dtype="<f8").tobytes()).digest()


async def test_an_abort_of_an_exchange_never_accepted_here_is_refused_and_logged(served, tmp_path):
    desk, send = served
    await send(0, proposal(0, 1))
    for sender, exchange_id in ((0, "0-3"), (2, "0-1")):  # never proposed; another node's pending exchange
        with pytest.raises(Refusal) as refused:
            await send(sender, Message(ABORT, MessageId(sequence=int(exchange_id[2:]), exchange_id=exchange_id)))
        assert refused.value.code == "FAILED_PRECONDITION"
    await send(0, commit(1, "0-1", 0.0, 0.0))  # the pending exchange was not touched
    assert desk.value.tolist() == [1.0, 2.0]
    assert refusals(tmp_path) == [(0, ABORT, 3, "0-3", "FAILED_PRECONDITION", None, sha256_of()),
                                  (2, ABORT, 1, "0-1", "FAILED_PRECONDITION", None, sha256_of())]


async def test_a_decision_whose_initiator_sequence_is_not_its_proposals_is_refused(served, tmp_path):
    desk, send = served
    await send(0, proposal(0, 1))
    with pytest.raises(Refusal) as refused:
        await send(0, commit(2, "0-1", 6.0, 6.0))
    assert refused.value.code == "INVALID_ARGUMENT" and desk.value.tolist() == [2.0, 4.0]
    await send(0, commit(1, "0-1", 0.0, 0.0))
    assert desk.value.tolist() == [1.0, 2.0]
    assert refusals(tmp_path) == [(0, COMMIT, 2, "0-1", "INVALID_ARGUMENT", [6.0, 6.0], sha256_of(6.0, 6.0))]


async def test_a_second_commit_with_another_value_is_refused_and_logged_with_it(served, tmp_path):
    desk, send = served
    await send(0, proposal(0, 1))
    await send(0, commit(1, "0-1", 0.0, 0.0))
    with pytest.raises(Refusal) as refused:
        await send(0, commit(1, "0-1", 6.0, -6.0))
    assert refused.value.code == "ALREADY_EXISTS" and desk.value.tolist() == [1.0, 2.0]
    assert refusals(tmp_path) == [(0, COMMIT, 1, "0-1", "ALREADY_EXISTS", [6.0, -6.0], sha256_of(6.0, -6.0))]


@pytest.mark.parametrize("exchange_id", ["2-1", "0-5", "0-01"])
async def test_a_proposal_whose_id_is_not_its_initiator_and_sequence_is_refused(served, tmp_path, exchange_id):
    desk, send = served
    with pytest.raises(Refusal) as refused:
        await send(0, Message(PROPOSE, MessageId(sequence=1, exchange_id=exchange_id)))
    assert refused.value.code == "INVALID_ARGUMENT" and desk.sequence == 0
    assert [(r.claimed_sender, r.exchange_id) for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("rejected")] == [
        (0, exchange_id)]


class AnsweringOutbox:
    """An initiator (node 0) that answers status questions with `answer`, running `meanwhile` first."""

    def __init__(self, answer: Message) -> None:
        self.answer = answer
        self.meanwhile: Callable[[], Awaitable[None]] | None = None
        self.questions = 0

    async def call(self, peer: int, message: Message, timeout_s: float, **options: object) -> Message:
        self.questions += 1
        if self.meanwhile is not None:
            await self.meanwhile()
        return self.answer


def desk_asking(tmp_path: Path, answer: Message) -> tuple[ExchangeDesk, AnsweringOutbox, Journal]:
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    outbox = AnsweringOutbox(answer)
    desk = ExchangeDesk(1, average, journal, outbox, timeout_s=0.01, attempts=1)
    desk.open(np.array([2.0, 4.0]))
    return desk, outbox, journal


async def test_an_answer_that_comes_after_the_decision_is_logged_as_refused(tmp_path):
    """The commit arrives while node 1 asks: it settles the exchange, and the answer, which reached node 1 all
    the same, is in its view as refused."""
    desk, outbox, journal = desk_asking(tmp_path, Message(COMMITTED, MessageId(sequence=1, exchange_id="0-1"),
                                                          np.array([0.0, 0.0])))
    outbox.meanwhile = lambda: desk.on_commit(0, commit(1, "0-1", 0.0, 0.0))
    await desk.on_propose(0, proposal(0, 1))
    await asyncio.wait_for(desk.drain(), timeout=5.0)
    journal.close()
    assert desk.value.tolist() == [1.0, 2.0]
    assert refusals(tmp_path) == [(0, COMMITTED, 1, "0-1", "ALREADY_EXISTS", [0.0, 0.0], sha256_of(0.0, 0.0))]


async def test_a_malformed_answer_is_logged_as_refused_and_asked_again_until_the_responder_aborts(tmp_path):
    """An `aborted` that carries a value is no answer: each is logged with its value, none is taken."""
    desk, outbox, journal = desk_asking(tmp_path, Message(ABORTED, MessageId(sequence=1, exchange_id="0-1"),
                                                          np.array([7.0, 7.0])))
    await desk.on_propose(0, proposal(0, 1))
    await asyncio.wait_for(desk.drain(), timeout=5.0)
    journal.close()
    assert outbox.questions == STATUS_ATTEMPTS and desk.value.tolist() == [2.0, 4.0]
    refused = (0, ABORTED, 1, "0-1", "INVALID_ARGUMENT", [7.0, 7.0], sha256_of(7.0, 7.0))
    assert refusals(tmp_path) == [refused] * STATUS_ATTEMPTS
    assert [e.phase for e in read_log(tmp_path / VIEW_LOG_NAME).of_kind("exchange")] == ["accepted", "aborted"]


class ForeignReplyLink:
    """A link to node 0 whose answer to every call comes as `envelope`'s, carrying `value`."""

    def __init__(self, envelope: peer_pb2.Envelope, value: np.ndarray) -> None:
        self.reply = envelope, value.astype("<f8").tobytes()

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        return self.reply


@pytest.mark.parametrize("claimed", [{"sender": 2}, {"run_id": "another"}, {"shape": [3]}])
async def test_a_reply_the_outbox_refuses_is_logged_with_its_value(tmp_path, claimed):
    """Another node's or run's answer, or one of the wrong size: refused, and in the view all the same."""
    fields = {"run_id": "r", "protocol": RING.protocol.name, "sender": 0, "receiver": 1,
              "kind": ACCEPT, "sequence": 1, "exchange_id": "1-1", "shape": [2]} | claimed
    value = np.arange(float(fields["shape"][0]))
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=1))
    outbox = Outbox(lambda peer: ForeignReplyLink(peer_pb2.Envelope(**fields), value), journal, run_id="r",
                    protocol=RING.protocol.name, sender=1)
    with pytest.raises(LinkError) as refused:
        await outbox.call(0, proposal(1, 1), 1.0, reply_dimension=2)
    journal.close()
    assert refused.value.code == "INVALID_ARGUMENT"
    assert refusals(tmp_path) == [(0, ACCEPT, 1, "1-1", "INVALID_ARGUMENT", value[:2].tolist(),
                                   sha256_of(*value))]


async def test_a_proposal_that_comes_one_way_is_refused_and_the_desk_stays_open(served, tmp_path):
    """Its acceptance would reach nobody: accepting it would hold the desk in doubt for every genuine proposal."""
    desk, send = served
    with pytest.raises(Refusal) as refused:
        await send(0, proposal(0, 1), call=False)
    assert refused.value.code == "INVALID_ARGUMENT" and "only as a call" in refused.value.detail
    envelope, data = await send(2, proposal(2, 1))
    assert (envelope.kind, envelope.exchange_id, data) == (ACCEPT, "2-1", np.array([2.0, 4.0]).tobytes())
    assert refusals(tmp_path) == [(0, PROPOSE, 1, "0-1", "INVALID_ARGUMENT", None, b"")]


async def test_a_neighbour_cannot_claim_another_initiators_exchange_id(served, tmp_path):
    """An exchange id is `<initiator>-<sequence>`, checked against the sender: node 2 cannot take node 0's id."""
    desk, send = served
    with pytest.raises(Refusal) as refused:
        await send(2, Message(PROPOSE, MessageId(sequence=1, exchange_id="0-1")))
    assert refused.value.code == "INVALID_ARGUMENT"
    envelope, _ = await send(0, proposal(0, 1))
    assert (envelope.kind, envelope.exchange_id) == (ACCEPT, "0-1")
    await send(0, commit(1, "0-1", 0.0, 0.0))
    assert desk.value.tolist() == [1.0, 2.0]
