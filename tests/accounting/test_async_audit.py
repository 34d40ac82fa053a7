"""Auditing randomized Muffliato: the schedule rebuilt from logs, exact/paper against dense references,
hand values, half-applied exchanges, the checks, real nodes in process, and refusals."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.paper import message_share_sum
from coordinator_tools.audit.protocols.muffliato_async.accountant import account, linear_model
from coordinator_tools.audit.protocols.muffliato_async.trajectories import check_trajectories, conservation_check
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import TOPOLOGY_FILE
from coordinator_tools.dataprep.datasets import synthetic_values
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.errors import ConfigError
from node.noise import SimulationSampler
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME
from tests.accounting.reference import dense_async_geometry, dense_async_paper
from tests.accounting.simulated_async_run import (
    SIGMA,
    SimulatedAsyncRun,
    Tick,
    async_topology,
    random_ticks,
    simulate_async_run,
)
from tests.accounting.simulated_run import rewrite_log
from tests.fuzz_builders import log_bytes, log_frames

FATES = {2: "declined", 5: "lost", 8: "reply_lost", 11: "late_commit", 14: "commit_lost", 17: "half_applied"}
ALPHA, DELTA = 2.0, 1e-5


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SimulatedAsyncRun:
    topology = async_topology()
    ticks = random_ticks(topology, np.random.default_rng(3), 4, FATES)
    simulated = simulate_async_run(tmp_path_factory.mktemp("async") / "run", topology, ticks)
    fates = {fate for *_, fate in simulated.truth.exchanges}
    assert fates == {"committed", "declined", "lost", "reply_lost", "late_commit", "commit_lost", "half_applied"}
    return simulated


def truth_exchanges(run: SimulatedAsyncRun) -> list[tuple[int, int, bool, bool]]:
    return [(a, b, a_applied, b_applied) for _, a, b, a_applied, b_applied, _ in run.truth.exchanges]


def off(n: int) -> np.ndarray:
    return ~np.eye(n, dtype=bool)


def test_the_schedule_is_recovered_from_the_logs(run: SimulatedAsyncRun) -> None:
    replay = replay_run(run.rundir)
    schedule = replay.realized
    assert {(e.exchange_id, e.initiator, e.responder, e.status) for e in schedule.exchanges} == {
        (xid, a, b, run.status(xid)) for xid, a, b, *_ in run.truth.exchanges
    }
    summary = schedule.summary()
    by_fate = {fate: {xid for xid, *_, f in run.truth.exchanges if f == fate} for fate in FATES.values()}
    assert set(summary["half_applied"]) == by_fate["late_commit"] | by_fate["half_applied"]
    assert set(summary["aborted"]) == by_fate["lost"] | by_fate["reply_lost"]
    assert summary["declined"] == len(by_fate["declined"])
    assert summary["committed"] == sum(a and b for *_, a, b, _ in run.truth.exchanges)
    names = [xid for xid, *_ in run.truth.exchanges]
    for v in range(run.topology.n):
        got = {(sender, schedule.exchanges[k].exchange_id) for sender, k in schedule.received[v]}
        assert got == {(sender, names[k]) for sender, k in run.truth.views[v]}
    assert schedule.ticks == tuple(run.truth.ticks)
    half = {(f.kind, f.node) for f in replay.consistency}
    assert half == {("half_applied_exchange", a) for xid, a, *_, fate in run.truth.exchanges
                    if fate in ("late_commit", "half_applied")}
    assert replay.node_problems == ()
    # the order respects every node's local sequence numbers
    for v in range(run.topology.n):
        seen = [e.initiator_sequence if e.initiator == v else e.responder_sequence
                for e in schedule.exchanges if v in (e.initiator, e.responder) and
                (e.initiator == v or e.responder_sequence is not None)]
        assert seen == sorted(seen)


@pytest.mark.parametrize("own_noise_known", [True, False])
@pytest.mark.parametrize("method", ["rational", "float"])
def test_exact_equals_the_dense_reference(run: SimulatedAsyncRun, own_noise_known: bool, method: str) -> None:
    model = linear_model(replay_run(run.rundir).realized)
    geometry = view_geometry(model, ThreatModel(observer_knows_own_noise=own_noise_known), method=method)
    dense = dense_async_geometry(run.topology.n, truth_exchanges(run), run.truth.views,
                                 own_noise_known=own_noise_known)
    mask = off(run.topology.n)
    assert np.allclose(geometry.lower[mask], dense[mask], rtol=0, atol=1e-10)
    assert (geometry.upper[mask] >= dense[mask] - 1e-12).all()


def test_paper_equals_the_direct_sum(run: SimulatedAsyncRun) -> None:
    shares = message_share_sum(linear_model(replay_run(run.rundir).realized))
    dense = dense_async_paper(run.topology.n, truth_exchanges(run), run.truth.views)
    mask = off(run.topology.n)
    assert np.allclose(shares[mask], dense[mask], rtol=1e-13, atol=0)


def test_three_nodes_by_hand(tmp_path: Path) -> None:
    """Path 0-1-2, exchanges (0,1), (1,2), (0,1). Node 0 hears z_1, then (z_0 + z_1)/4 + z_2/2: knowing z_0
    it solves for z_2 (local DP), while Thm 1 adds (1/2)²/(3/8) = 2/3 of it. Node 2 hears (z_0 + z_1)/2 only."""
    topology = async_topology(nx.path_graph(3), ticks=2)
    simulate_async_run(tmp_path, topology, [Tick(0, 1), Tick(1, 2), Tick(0, 1)])
    schedule = replay_run(tmp_path).realized
    geometry = view_geometry(linear_model(schedule), method="rational")
    expected = {(1, 0): 1, (2, 0): 1, (0, 1): 1, (2, 1): 1, (0, 2): Fraction(1, 2), (1, 2): Fraction(1, 2)}
    assert {pair: geometry.lower[pair] for pair in expected} == {pair: float(p) for pair, p in expected.items()}
    assert geometry.reconstructable[2, 0] and not geometry.reconstructable[0, 2]
    paper = message_share_sum(linear_model(schedule))
    by_hand = {(1, 0): Fraction(7, 6), (2, 0): Fraction(2, 3), (0, 1): Fraction(3, 2), (2, 1): 1,
               (0, 2): Fraction(1, 2), (1, 2): Fraction(1, 2)}
    assert all(paper[pair] == pytest.approx(float(value), rel=1e-15) for pair, value in by_hand.items())
    losses = account(schedule, sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    assert losses.exact_rdp[2, 0] == losses.ldp_rdp == ALPHA / (2 * SIGMA**2)  # p = 1: v solves for u's noisy input
    assert losses.exact_eps[2, 0] == losses.ldp_eps
    assert losses.paper_rdp[2, 0] == pytest.approx(2 / 3 * losses.ldp_rdp, rel=1e-15)


def test_half_applied_exchange_moves_only_the_side_that_committed(tmp_path: Path) -> None:
    """Path 0-1-2: node 1 commits (1,2) and dies before its commit is delivered, node 2 aborts in doubt.
    Node 1 saw z_2; node 2 saw nothing and kept its value; later proposals to node 1 get no answer."""
    topology = async_topology(nx.path_graph(3), ticks=2)
    simulate_async_run(tmp_path, topology, [Tick(1, 2, "half_applied"), Tick(2, 1), Tick(0, 1)])
    replay = replay_run(tmp_path, with_private_logs=True)
    schedule = replay.realized
    statuses = {e.exchange_id: e.status for e in schedule.exchanges}
    assert statuses == {"1-1": "half_applied", "2-2": "aborted", "0-1": "aborted"}
    half = next(e for e in schedule.exchanges if e.exchange_id == "1-1")
    assert half.initiator_applied and not half.responder_applied
    assert {(f.kind, f.node) for f in replay.consistency} == {("half_applied_exchange", 1)}
    geometry = view_geometry(linear_model(schedule), method="rational")
    assert geometry.lower[2, 1] == 1.0 and geometry.lower[1, 2] == 0.0 and geometry.lower[1, 0] == 0.0
    assert check_trajectories(replay).ok  # node 2's output is its own noisy input: the one-sided update


def test_every_check_holds_and_the_report_names_the_exchanges(run: SimulatedAsyncRun, tmp_path: Path) -> None:
    options = AuditOptions(with_private_logs=True, attack_pairs="all", attack_runs=4000, attack_seed=1)
    report = audit_run(run.rundir, tmp_path, options)
    assert [check for check in report["checks"] if not check["ok"]] == []
    names = {check["name"] for check in report["checks"]}
    assert {"committed exchanges conserve the sum of values", "transcript reproduces the logged payloads",
            "model attack lower bound <= exact (eps)"} <= names
    assert report["protocol"] == report["run"]["protocol"] == report["replay"]["protocol"] == "muffliato-async"
    assert report["exchanges"] == replay_run(run.rundir).realized.summary()
    pairs = read_pairs(tmp_path)
    exact = pairs["exact_eps_upper"]
    assert np.all(pairs["model_attack_eps_lower"] <= exact) and np.all(exact <= pairs["ldp_eps"] * (1 + 1e-12))
    assert (tmp_path / "index.html").read_text().count("half-applied") >= 1


def test_trajectories_and_conservation_notice_a_wrong_value_after(run: SimulatedAsyncRun, tmp_path: Path) -> None:
    rundir = tmp_path / "run"
    simulated = simulate_async_run(rundir, run.topology, random_ticks(run.topology, np.random.default_rng(3), 4,
                                                                      FATES))
    xid = next(xid for xid, *_, fate in simulated.truth.exchanges if fate == "committed")
    responder = next(b for x, _, b, *_ in simulated.truth.exchanges if x == xid)

    def shift(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        event = record.exchange
        if record.WhichOneof("kind") == "exchange" and event.exchange_id == xid and event.phase == "committed":
            event.value_after.CopyFrom(to_tensor(from_tensor(event.value_after) + 1e-3))
        return record

    rewrite_log(rundir / f"node-{responder}" / VIEW_LOG_NAME, shift)
    replay = replay_run(rundir, with_private_logs=True)
    trajectories = check_trajectories(replay)
    assert not trajectories.ok and {f.kind for f in trajectories.mismatches} == {"payload_not_reproduced"}
    assert xid in trajectories.mismatches[0].detail
    assert not conservation_check(replay).ok


def test_a_log_of_an_unknown_protocol_is_refused_in_one_line(run: SimulatedAsyncRun, tmp_path: Path) -> None:
    rundir = tmp_path / "run"
    simulate_async_run(rundir, run.topology, [Tick(0, 1)])

    def rename(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "header":
            record.header.protocol = "gossip-xyz"
        return record

    rewrite_log(rundir / "node-3" / VIEW_LOG_NAME, rename)
    with pytest.raises(ConfigError, match="'gossip-xyz'") as error:
        replay_run(rundir)
    assert "\n" not in str(error.value) and "muffliato-async" in str(error.value)


def test_a_refused_commit_joins_the_responders_view(run: SimulatedAsyncRun) -> None:
    replay = replay_run(run.rundir)
    xid, a, b = next((xid, a, b) for xid, a, b, *_, fate in run.truth.exchanges if fate == "late_commit")
    assert any(key.id.exchange_id == xid for key in replay.logs[b].refused)
    schedule = replay.realized
    assert (a, next(i for i, e in enumerate(schedule.exchanges) if e.exchange_id == xid)) in schedule.received[b]
    assert [check for check in replay_checks(replay) if not check.ok] == []


async def test_real_nodes_in_process_are_audited(tmp_path: Path) -> None:
    """The node's own code writes the logs: the replay must read its exchanges the same way."""
    params = MuffliatoAsyncParams(sigma=0.3, sensitivity=1.0, alpha=2.0, dimension=2, exchanges=4, tick_rate=50.0,
                                  exchange_timeout_s=0.5)
    topology = build_topology(nx.cycle_graph(5), graph_name="ring", run_id="async-inprocess", protocol=params,
                              network=NetworkParams(round_deadline_s=0.3, startup_deadline_s=1.0))
    save_topology(topology, tmp_path / TOPOLOGY_FILE)
    await run_inprocess(topology, synthetic_values(5, 2, 1.0, seed=3), tmp_path, lambda v: SimulationSampler(100 + v))
    report = await asyncio.to_thread(audit_run, tmp_path, tmp_path / "out",
                                     AuditOptions(with_private_logs=True, attack_pairs="none"))
    assert [check for check in report["checks"] if not check["ok"]] == []
    assert report["exchanges"]["committed"] > 0
    assert report["run"]["rounds_completed"] == [4] * 5


def test_a_missing_log_is_rebuilt_from_the_peers(tmp_path: Path) -> None:
    """Every exchange committed; node 3's log is lost. A delivered commit proves the responder committed, a
    commit message proves the initiator did, and the values it averaged with are in its view."""
    topology = async_topology()
    simulated = simulate_async_run(tmp_path, topology, random_ticks(topology, np.random.default_rng(5), 3))
    (tmp_path / "node-3" / VIEW_LOG_NAME).unlink()
    replay = replay_run(tmp_path)
    assert ("missing_log", 3) in {(f.kind, f.node) for f in replay.node_problems}
    assert not [f for f in replay.consistency if f.severity == "error"]
    schedule = replay.realized
    assert {e.exchange_id: e.status for e in schedule.exchanges} == {
        xid: "committed" for xid, *_ in simulated.truth.exchanges}
    names = [xid for xid, *_ in simulated.truth.exchanges]
    assert {(s, schedule.exchanges[k].exchange_id) for s, k in schedule.received[3]} == {
        (s, names[k]) for s, k in simulated.truth.views[3]}
    geometry = view_geometry(linear_model(schedule), method="rational")
    dense = dense_async_geometry(topology.n, truth_exchanges(simulated), simulated.truth.views)
    mask = off(topology.n)
    assert np.allclose(geometry.lower[mask], dense[mask], rtol=0, atol=1e-10)


@pytest.mark.parametrize("node", [0, 1, 2])
def test_a_log_cut_anywhere_changes_no_other_view(run: SimulatedAsyncRun, tmp_path: Path, node: int) -> None:
    """Cut one node's log after each of its records (a node that crashed there, or a lost tail): the replay
    never raises, and what every other node is accounted to have seen stays what it logged."""
    rundir = tmp_path / "run"
    simulate_async_run(rundir, run.topology, random_ticks(run.topology, np.random.default_rng(3), 4, FATES))
    path = rundir / f"node-{node}" / VIEW_LOG_NAME
    frames = log_frames(path.read_bytes())
    names = [xid for xid, *_ in run.truth.exchanges]
    for keep in range(1, len(frames)):
        path.write_bytes(log_bytes(frames[:keep]))
        schedule = replay_run(rundir).realized
        for v in set(range(run.topology.n)) - {node}:
            seen = {(s, schedule.exchanges[k].exchange_id) for s, k in schedule.received[v]}
            assert seen == {(s, names[k]) for s, k in run.truth.views[v]}, (keep, v)


def test_a_reply_is_compared_but_never_reported_lost(run: SimulatedAsyncRun, tmp_path: Path) -> None:
    """An accept is a reply (attempts = 0): lost ones raise nothing (the clean run has no such finding),
    and one whose logged copy differs from what the responder sent is a payload mismatch."""
    rundir = tmp_path / "run"
    simulated = simulate_async_run(rundir, run.topology, random_ticks(run.topology, np.random.default_rng(3), 4,
                                                                      FATES))
    xid, initiator = next((xid, a) for xid, a, _, _, _, fate in simulated.truth.exchanges if fate == "committed")

    def flip(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "received" and record.received.exchange_id == xid:
            data = bytearray(record.received.payload.data)
            data[0] ^= 1
            record.received.payload.data = bytes(data)
        return record

    rewrite_log(rundir / f"node-{initiator}" / VIEW_LOG_NAME, flip)
    findings = replay_run(rundir).consistency
    assert [(f.kind, f.node) for f in findings if f.severity == "error"] == [("payload_mismatch", initiator)]
    assert f"exchange.accept of exchange {xid}" in next(f.detail for f in findings if f.kind == "payload_mismatch")
