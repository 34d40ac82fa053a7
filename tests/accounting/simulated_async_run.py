"""A randomized Muffliato run simulated in numpy and written as the real logs of a run directory.

The async auditor's tests need run directories whose truth they know. This helper plays a
schedule of pairwise exchanges one at a time, each with a chosen fate, and writes through
`ViewLogWriter` exactly the records the node's exchange desk writes
(`node.mailboxes.exchange_desk`): the initiator's proposed / declined / aborted / committed
events, the responder's accept reply (a sent record with attempts = 0), the received values,
the commit or abort delivery, `done` messages, outputs and private logs. It keeps the truth
(who applied which exchange, what each node received) for the tests to compare against.

Fates: "committed"; "declined" (the responder is busy); "lost" (no answer, the responder never
saw the proposal, and refuses the abort of it if it is alive); "reply_lost" (the responder
accepted, its answer was lost, both abort); "half_applied" (the initiator commits and dies
before its commit is delivered: the responder aborts in doubt, the initiator logs nothing
more); "late_commit" (the responder gave up in doubt, then the initiator's commit arrives and
is refused with its value kept); "commit_lost" (the commit never arrives: the responder in
doubt asks the initiator, whose `committed` answer, logged at both ends, carries its value).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import networkx as nx
import numpy as np

from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from coordinator_tools.dataprep.datasets import synthetic_values
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.journal import REPLY_FAILURE
from node.mailboxes.exchange_desk import ABORT, ACCEPT, COMMIT, COMMITTED
from node.protocols.muffliato_async import DONE, NOISE_PURPOSE, PROTOCOL_NAME, MuffliatoAsyncParams
from node.topology import Topology, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter

SIGMA = 0.5
Fate = Literal["committed", "declined", "lost", "reply_lost", "half_applied", "late_commit", "commit_lost"]
EMPTY = np.zeros(0)


def async_topology(graph: nx.Graph | None = None, *, ticks: int = 4, dimension: int = 2,
                   sigma: float = SIGMA) -> Topology:
    """A small randomized Muffliato topology (a 5-node ring with the chord 0-2 by default)."""
    if graph is None:
        graph = nx.cycle_graph(5)
        graph.add_edge(0, 2)
    params = MuffliatoAsyncParams(sigma=sigma, sensitivity=1.0, alpha=2.0, dimension=dimension, exchanges=ticks)
    return build_topology(graph, graph_name="test", run_id="async-test", protocol=params)


@dataclass(frozen=True)
class Tick:
    """One tick's exchange: who proposes to whom, and how it ends."""

    initiator: int
    responder: int
    fate: Fate = "committed"


@dataclass
class Truth:
    """What really happened, kept by the simulator."""

    exchanges: list[tuple[str, int, int, bool, bool, Fate]] = field(default_factory=list)  # id, a, b, a/b applied
    views: list[list[tuple[int, int]]] = field(default_factory=list)  # per node: (sender, exchange position)
    ticks: list[int] = field(default_factory=list)
    dead: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class SimulatedAsyncRun:
    rundir: Path
    topology: Topology
    truth: Truth
    inputs: np.ndarray
    noise: np.ndarray
    final: np.ndarray

    def status(self, exchange_id: str) -> str:
        for xid, _, _, a_applied, b_applied, fate in self.truth.exchanges:
            if xid == exchange_id:
                if a_applied and b_applied:
                    return "committed"
                return "half_applied" if a_applied or b_applied else "declined" if fate == "declined" else "aborted"
        raise KeyError(exchange_id)


def random_ticks(topology: Topology, rng: np.random.Generator, per_node: int,
                 fates: dict[int, Fate] | None = None) -> list[Tick]:
    """Every node ticks `per_node` times in a random interleaving, picking a neighbour uniformly;
    `fates` maps a tick's position to how it ends (default committed)."""
    order = rng.permutation(np.repeat(np.arange(topology.n), per_node))
    ticks = []
    for position, node in enumerate(order):
        neighbours = topology.neighbours[int(node)]
        peer = int(neighbours[rng.integers(len(neighbours))])
        ticks.append(Tick(int(node), peer, (fates or {}).get(position, "committed")))
    return ticks


def simulate_async_run(rundir: Path, topology: Topology, ticks: list[Tick], *, seed: int = 0) -> SimulatedAsyncRun:
    """Play `ticks` in order and write RUNDIR/topology.json and every node's view and private logs."""
    rundir = Path(rundir)
    params, n = topology.protocol, topology.n
    rng = np.random.default_rng(seed)
    inputs = synthetic_values(n, params.dimension, params.sensitivity, seed)
    noise = rng.normal(0.0, params.sigma, size=inputs.shape)
    state = inputs + noise
    records: list[list[viewlog_pb2.Record]] = [[] for _ in range(n)]
    sequence = [0] * n
    truth = Truth(views=[[] for _ in range(n)], ticks=[0] * n)
    for tick in ticks:
        a, b = tick.initiator, tick.responder
        if a in truth.dead:
            continue
        truth.ticks[a] += 1
        fate: Fate = "lost" if b in truth.dead else tick.fate
        sequence[a] += 1
        xid, s_a = f"{a}-{sequence[a]}", sequence[a]
        position = len(truth.exchanges)
        records[a].append(_event(xid, b, s_a, "initiator", "proposed"))
        if fate == "declined":
            records[b].append(_event(xid, a, 0, "responder", "declined", reason="in another exchange"))
            records[a].append(_event(xid, b, s_a, "initiator", "declined"))
            truth.exchanges.append((xid, a, b, False, False, fate))
            continue
        if fate == "lost":
            records[a].append(_event(xid, b, s_a, "initiator", "aborted", reason="no answer: UNAVAILABLE"))
            if b in truth.dead:
                records[a].append(_sent(b, ABORT, s_a, xid, EMPTY, delivered=False, attempts=3,
                                        failure="UNAVAILABLE"))
            else:
                records[a].append(_sent(b, ABORT, s_a, xid, EMPTY, delivered=False, attempts=1,
                                        failure="FAILED_PRECONDITION: exchange is not pending here"))
                records[b].append(_refused(a, ABORT, s_a, xid, None))
            truth.exchanges.append((xid, a, b, False, False, fate))
            continue
        sequence[b] += 1
        s_b = sequence[b]
        x_a, x_b = state[a].copy(), state[b].copy()
        mean = (x_a + x_b) / 2
        records[b].append(_event(xid, a, s_b, "responder", "accepted"))
        records[b].append(_sent(a, ACCEPT, s_b, xid, x_b, delivered=False, attempts=0, failure="reply"))
        if fate == "reply_lost":
            records[a].append(_event(xid, b, s_a, "initiator", "aborted", reason="no answer: DEADLINE_EXCEEDED"))
            records[a].append(_sent(b, ABORT, s_a, xid, EMPTY, delivered=True, attempts=1))
            records[b].append(_event(xid, a, s_b, "responder", "aborted", reason="the initiator aborted"))
            truth.exchanges.append((xid, a, b, False, False, fate))
            continue
        records[a].append(_received(b, ACCEPT, s_b, xid, x_b))
        records[a].append(_event(xid, b, s_a, "initiator", "committed", value_after=mean))
        truth.views[a].append((b, position))
        state[a] = mean
        if fate == "half_applied":
            records[b].append(_event(xid, a, s_b, "responder", "aborted",
                                     reason="the initiator cannot be reached (UNAVAILABLE); its decision is unknown"))
            truth.dead.add(a)
            truth.exchanges.append((xid, a, b, True, False, fate))
            continue
        if fate == "late_commit":
            records[b].append(_event(xid, a, s_b, "responder", "aborted",
                                     reason="the initiator cannot be reached (UNAVAILABLE); its decision is unknown"))
            records[a].append(_sent(b, COMMIT, s_a, xid, x_a, delivered=False, attempts=1,
                                    failure="FAILED_PRECONDITION: exchange is not pending here"))
            records[b].append(_refused(a, COMMIT, s_a, xid, x_a))
            truth.views[b].append((a, position))
            truth.exchanges.append((xid, a, b, True, False, fate))
            continue
        if fate == "commit_lost":
            records[a].append(_sent(b, COMMIT, s_a, xid, x_a, delivered=False, attempts=3, failure="UNAVAILABLE"))
            records[a].append(_sent(b, COMMITTED, s_a, xid, x_a, delivered=False, attempts=0,
                                    failure=REPLY_FAILURE))
            records[b].append(_received(a, COMMITTED, s_a, xid, x_a))
        else:
            records[a].append(_sent(b, COMMIT, s_a, xid, x_a, delivered=True, attempts=1))
            records[b].append(_received(a, COMMIT, s_a, xid, x_a))
        records[b].append(_event(xid, a, s_b, "responder", "committed", value_after=mean))
        truth.views[b].append((a, position))
        state[b] = mean
        truth.exchanges.append((xid, a, b, True, True, fate))
    for v in range(n):
        if v in truth.dead:
            continue
        for w in topology.neighbours[v]:
            alive = w not in truth.dead
            records[v].append(_sent(w, DONE, 0, "", EMPTY, delivered=alive, attempts=1 if alive else 3,
                                    failure="" if alive else "UNAVAILABLE"))
            if alive:
                records[w].append(viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(peer=v, kind=DONE)))
    for v in range(n):
        if v not in truth.dead:
            records[v].append(viewlog_pb2.Record(final_output=viewlog_pb2.FinalOutput(
                value=to_tensor(state[v]), rounds_completed=truth.ticks[v])))
    _write(rundir, topology, records, inputs, noise)
    return SimulatedAsyncRun(rundir, topology, truth, inputs, noise, state)


def _write(rundir: Path, topology: Topology, records: list[list[viewlog_pb2.Record]], inputs: np.ndarray,
           noise: np.ndarray) -> None:
    save_topology(topology, rundir / TOPOLOGY_FILE)
    public = json.loads(topology.public_parameters_json())
    public["sampler"] = {"kind": "simulation", "effective_sensitivity": topology.protocol.sensitivity}
    for v in range(topology.n):
        header = viewlog_pb2.RunHeader(
            run_id=topology.run_id, protocol=PROTOCOL_NAME, node_id=v, topology_digest=topology.digest,
            public_parameters_json=json.dumps(public, sort_keys=True), sampler_kind="simulation", section="public")
        with ViewLogWriter(node_log_dir(rundir, v) / VIEW_LOG_NAME, header) as log:
            log.append_many(records[v])
        header.section = "private"
        with ViewLogWriter(node_log_dir(rundir, v) / PRIVATE_LOG_NAME, header) as log:
            log.append(viewlog_pb2.Record(private_input=viewlog_pb2.PrivateInput(value=to_tensor(inputs[v]))))
            log.append(viewlog_pb2.Record(noise=viewlog_pb2.NoiseDraw(
                purpose=NOISE_PURPOSE, value=to_tensor(noise[v]), step=0, mechanism="gaussian",
                scale=topology.protocol.sigma)))


def _event(xid: str, peer: int, sequence: int, role: str, phase: str, *, reason: str = "",
           value_after: np.ndarray | None = None) -> viewlog_pb2.Record:
    event = viewlog_pb2.ExchangeEvent(exchange_id=xid, peer=peer, sequence=sequence, role=role, phase=phase,
                                      reason=reason)
    if value_after is not None:
        event.value_after.CopyFrom(to_tensor(value_after))
    return viewlog_pb2.Record(exchange=event)


def _sent(peer: int, kind: str, sequence: int, xid: str, payload: np.ndarray, *, delivered: bool, attempts: int,
          failure: str = "") -> viewlog_pb2.Record:
    return viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(
        peer=peer, kind=kind, sequence=sequence, exchange_id=xid, payload=to_tensor(payload), delivered=delivered,
        attempts=attempts, failure=failure))


def _received(peer: int, kind: str, sequence: int, xid: str, payload: np.ndarray) -> viewlog_pb2.Record:
    return viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(
        peer=peer, kind=kind, sequence=sequence, exchange_id=xid, payload=to_tensor(payload)))


def _refused(peer: int, kind: str, sequence: int, xid: str, payload: np.ndarray | None) -> viewlog_pb2.Record:
    """A refused message, with its payload if it carried one."""
    refused = viewlog_pb2.Rejected(claimed_sender=peer, kind=kind, sequence=sequence, exchange_id=xid,
                                   status_code="FAILED_PRECONDITION", detail=f"exchange {xid} is not pending here")
    if payload is not None:
        refused.payload.CopyFrom(to_tensor(payload))
    return viewlog_pb2.Record(rejected=refused)
