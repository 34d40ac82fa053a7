"""A message whose caller gave up (a deadline, a disconnect) is still settled by the receiver.

The delivery runs on, shielded, so what it logs is also applied; when it ends in a refusal
nobody is left to hear it, and that refusal must not surface as an asyncio error report
("exception was never retrieved") on every late value of a long run.
"""

from __future__ import annotations

import asyncio
import gc

import networkx as nx
import numpy as np

from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.journal import Journal
from node.message import GOSSIP, Message, MessageId, to_wire
from node.protocols.muffliato import MuffliatoParams
from node.receiver import Receiver
from node.refusal import Refusal
from node.viewlog import VIEW_LOG_NAME, read_log

RUN = "cancelled-callers"
TOPOLOGY = build_topology(nx.cycle_graph(3), graph_name="ring", run_id=RUN, protocol=MuffliatoParams(
    sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=2))


async def test_a_refusal_after_the_caller_left_is_logged_and_not_reported_as_lost(tmp_path):
    loop = asyncio.get_running_loop()
    reports: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reports.append(context))
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=1))
    receiver = Receiver(TOPOLOGY, 1, journal)

    async def slow_refusal(sender: int | None, message: Message) -> None:
        await asyncio.sleep(0.05)
        raise Refusal("FAILED_PRECONDITION", "round 0 is closed")

    receiver.register(GOSSIP, slow_refusal, scheme="round", payload=True)
    envelope, data = to_wire(Message(GOSSIP, MessageId(round=0), np.ones(2)), run_id=RUN, protocol="muffliato",
                             sender=0, receiver=1)
    try:
        await asyncio.wait_for(receiver.accept(envelope, data, 0), 0.01)
    except TimeoutError:
        pass
    else:
        raise AssertionError("the caller should have given up first")
    await asyncio.sleep(0.2)  # the delivery settles without its caller
    gc.collect()
    await asyncio.sleep(0)
    journal.close()

    assert reports == []
    rejected = [record.rejected for record in read_log(tmp_path / VIEW_LOG_NAME).records
                if record.WhichOneof("kind") == "rejected"]
    assert [(r.claimed_sender, r.status_code) for r in rejected] == [(0, "FAILED_PRECONDITION")]
