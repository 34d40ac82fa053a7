"""Refusals the audit counts: another value under an id already taken (an equivocation), and anonymous refusals.

A node that took a value and then refused another payload under the same MessageId holds two values
the transcript names alike: the replay reports it as an error (only the first is accounted), while a
refused copy of the same payload is nothing new. In a sender-anonymous view a refusal names no sender
(-1); its value is keyed like an anonymous receive instead of being dropped as a stranger's.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import networkx as nx
import numpy as np

from coordinator_tools.audit.replay import replay_run
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.learning import LocalData
from node.mailboxes.exchange_desk import COMMIT
from node.noise import SimulationSampler
from node.protocols.rw_sgd import MODEL_TOKEN_ID, RwSgdParams
from node.protocols.token_sum import TOKEN
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME, ViewLogWriter, read_log
from tests.accounting.simulated_async_run import Tick, async_topology, simulate_async_run


def append_to_log(path: Path, *records: viewlog_pb2.Record) -> None:
    """Rewrite a log with `records` added at its end (as if the node had logged them last)."""
    logged = read_log(path).records
    path.unlink()
    with ViewLogWriter(path, logged[0].header) as log:
        log.append_many([*logged[1:], *records])


def refused(claimed_sender: int, kind: str, payload: np.ndarray, **message_id: object) -> viewlog_pb2.Record:
    """A refusal as the node logs it: the payload whole (it has the dimension) and its SHA-256."""
    tensor = to_tensor(payload)
    return viewlog_pb2.Record(rejected=viewlog_pb2.Rejected(
        claimed_sender=claimed_sender, kind=kind, status_code="ALREADY_EXISTS", detail="taken before",
        payload=tensor, payload_sha256=hashlib.sha256(tensor.data).digest(), **message_id))


def test_a_second_commit_with_another_value_is_an_equivocation(tmp_path: Path) -> None:
    simulate_async_run(tmp_path, async_topology(nx.path_graph(3), ticks=1), [Tick(0, 1)])
    log = tmp_path / "node-1" / VIEW_LOG_NAME
    (commit,) = [r for r in read_log(log).of_kind("received") if r.kind == COMMIT]
    value = from_tensor(commit.payload)
    append_to_log(log, refused(0, COMMIT, value, sequence=1, exchange_id="0-1"),  # a lost acknowledgement's retry
                  refused(0, COMMIT, value + 1.0, sequence=1, exchange_id="0-1"))
    replay = replay_run(tmp_path)
    assert [(f.kind, f.node, f.severity) for f in replay.node_problems] == [("equivocation", 1, "error")]
    assert "exchange.commit of exchange 0-1" in replay.node_problems[0].detail
    assert replay.to_json()["nodes"][1]["rejected_messages"] == 2
    assert replay.realized.received[1] == ((0, 0),)  # the value taken, once
    ((_, in_view),) = [(k, p) for k, p in replay.logs[1].values_in_view().items() if k.kind == COMMIT]
    assert from_tensor(in_view).tolist() == value.tolist()


def test_a_sender_anonymous_refusal_is_keyed_like_an_anonymous_receive(tmp_path: Path) -> None:
    """A 4-node anonymous walk in process; one receiver then logs, naming no sender, a copy of a hop it took
    and another payload under it: the copy joins nothing new, the other payload is an equivocation."""
    params = RwSgdParams(sigma=1.0, sensitivity=2.0, alpha=2.0, dimension=2, task="least_squares", steps=6,
                         learning_rate=0.1, clip=1.0, sender="anonymous")
    topology = build_topology(generate("complete", n=4), graph_name="complete", run_id="anonymous", protocol=params,
                              network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(0)
    data = [LocalData(rng.normal(size=(3, 2)) * 0.3, rng.normal(size=3)) for _ in range(4)]
    asyncio.run(run_inprocess(topology, data, tmp_path, lambda v: SimulationSampler(v)))
    node, taken = next((v, r) for v in range(4) for r in read_log(tmp_path / f"node-{v}" / VIEW_LOG_NAME)
                       .of_kind("received") if r.kind == TOKEN)
    assert not taken.HasField("peer")
    value = from_tensor(taken.payload)
    append_to_log(tmp_path / f"node-{node}" / VIEW_LOG_NAME,
                  refused(-1, TOKEN, value, token_id=MODEL_TOKEN_ID, hop=taken.hop),
                  refused(-1, TOKEN, value * 2.0, token_id=MODEL_TOKEN_ID, hop=taken.hop))
    replay = replay_run(tmp_path)
    assert [(f.kind, f.node) for f in replay.node_problems] == [("equivocation", node)]
    assert [(key.peer, key.id.hop) for key in replay.logs[node].refused] == [(None, taken.hop)]
