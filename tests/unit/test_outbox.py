"""The outbox's retry rules, and what each failure tells the round barrier about the peer.

A scripted link answers each attempt with a chosen gRPC status, so every rule is checked
without timing: tries are used up by transport failures only, a peer that is behind is
asked again until it takes the value, a peer that closed the round is given up at once,
and a round's sent records reach the log together.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import peer_pb2, viewlog_pb2
from node.journal import Delivery, Journal
from node.outbox import Outbox
from node.transport.base import LinkError
from node.viewlog import VIEW_LOG_NAME, read_log

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

    outbox = Outbox(links, journal, run_id="r", protocol="muffliato", sender=0, attempts=attempts)
    return await outbox.broadcast(round_index, np.ones(2), BUDGET_S, on_fate), fates


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
