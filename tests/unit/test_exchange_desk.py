"""The exchange desk's commit rule, driven without a network: decline, commit, abort, doubt, idempotence."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.journal import Journal
from node.codec import from_tensor
from node.mailboxes.exchange_desk import ABORT, ACCEPT, COMMIT, DECLINE, PROPOSE, ExchangeDesk
from node.message import Message, MessageId
from node.noise import SimulationSampler
from node.protocols.muffliato_async import MuffliatoAsyncParams, average
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
