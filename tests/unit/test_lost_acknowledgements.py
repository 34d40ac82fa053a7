"""Fault injection of lost acknowledgements (`node.transport.faults`), over real gRPC on loopback.

The network loses the acknowledgement of a token delivery after the receiver logged it: the
sender sees a failed attempt and retries the same (token id, hop), which the token slot
acknowledges again without taking it twice (logged once, acknowledged twice).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, node_command
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.cli import build_parser
from node.cli import main as node_main
from node.delivery import CustodyDelivery
from node.journal import Journal
from node.mailboxes.token_slot import RECEIVED, TokenSlot
from node.message import Message, MessageId, to_wire
from node.protocols.muffliato import MuffliatoParams
from node.receiver import Receiver
from node.transport.faults import LostAnswers
from node.transport.grpc_link import GrpcPeerLink
from node.transport.grpc_server import start_server, stop_server
from node.viewlog import VIEW_LOG_NAME, read_log

RUN = "lost-acks"
TOKEN = "token"
BUDGET_S = 5.0
TOPOLOGY = build_topology(nx.cycle_graph(3), graph_name="ring", run_id=RUN, protocol=MuffliatoParams(
    sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=2))


class ScriptedDraws:
    """A stand-in for random.Random whose draws are given: 0.0 loses an answer, 0.99 keeps it."""

    def __init__(self, *draws: float) -> None:
        self._draws = list(draws)

    def random(self) -> float:
        return self._draws.pop(0)


def test_lost_answers_take_a_share_in_0_to_1_and_lose_only_their_kind():
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            LostAnswers(acknowledgements=bad)
    assert not LostAnswers().active
    faults = LostAnswers(acknowledgements=1.0)
    assert faults.active and faults.lose_acknowledgement() and not faults.lose_reply()
    assert not LostAnswers(replies=1.0).lose_acknowledgement()


async def test_a_token_whose_acknowledgement_is_lost_is_logged_once_and_acknowledged_twice(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=1))
    receiver = Receiver(TOPOLOGY, 1, journal)
    slot = TokenSlot(TOKEN, journal, outbox=None, attempts=1)
    receiver.register(TOKEN, slot.handle, scheme="hop", payload=True)
    address = f"127.0.0.1:{free_loopback_ports(1)[0]}"
    server, health = await start_server({1: receiver}, address, credentials=None, authenticate=None,
                                        chunk_bytes=TOPOLOGY.network.chunk_bytes,
                                        faults=LostAnswers(acknowledgements=0.5, rng=ScriptedDraws(0.0, 0.99)))
    link = GrpcPeerLink(address, chunk_bytes=TOPOLOGY.network.chunk_bytes)
    message = Message(TOKEN, MessageId(token_id="t", hop=1), np.array([1.0, 2.0]))
    envelope, data = to_wire(message, run_id=RUN, protocol=TOPOLOGY.protocol.name, sender=0, receiver=1)
    try:
        delivery = await CustodyDelivery(attempts=3).deliver(link, envelope, data, BUDGET_S, wait_for_peer=True)
    finally:
        await link.close()
        await stop_server(server, health, 0)
        journal.close()
    assert (delivery.delivered, delivery.attempts) == (True, 2)  # the first acknowledgement was lost
    log = read_log(tmp_path / VIEW_LOG_NAME)
    assert [(r.token_id, r.hop) for r in log.of_kind("received")] == [("t", 1)]
    assert [(r.hop, r.phase) for r in log.of_kind("token")] == [(1, RECEIVED)]
    assert not log.of_kind("rejected")
    assert (await slot.take(timeout_s=0.0)).hop == 1
    assert await slot.take(timeout_s=0.0) is None


def test_the_flag_reaches_only_the_nodes_asked_to_lose_acknowledgements(tmp_path, capsys):
    options = LaunchOptions(lost_ack_fraction={1: 0.5})
    lossy, sound = (node_command(tmp_path, v, tmp_path / "data.json", options) for v in (1, 0))
    assert lossy[lossy.index("--fault-lose-acks") + 1] == "0.5" and "--fault-lose-acks" not in sound
    args = ["--topology", "t.json", "--id", "1", "--data", "d.json", "--log-dir", "l", "--insecure"]
    assert build_parser().parse_args([*args, "--fault-lose-acks", "0.5"]).fault_lose_acks == 0.5
    assert node_main([*args, "--fault-lose-acks", "1.5"]) == 2
    assert "--fault-lose-acks takes a fraction in 0..1" in capsys.readouterr().err
