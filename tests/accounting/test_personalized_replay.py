"""Personalized CD replayed from its private logs, on small virtual runs (`netdp run --virtual`'s entry).

Every broadcast model is update (6) of the agent's logged gradient, draw, previous broadcast and the
neighbour broadcasts its `step_inputs` names; a draw, a payload or a noise scale changed in a log is
found and named by agent and update. The launcher counts a personalized-CD agent's updates as its steps.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coordinator_tools.audit.protocols.personalized_cd.replay_check import check_updates
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.audit.trajectories import TrajectoryCheck
from coordinator_tools.cluster.command import _steps_per_node
from coordinator_tools.cluster.launch import LaunchOptions, logged_rounds, node_log_dir
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.protocols.personalized_cd import MODEL, PersonalizedCDParams
from node.topology import NetworkParams, load_topology, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.accounting.simulated_run import rewrite_log

N, P, UPDATES = 12, 3, 4
AGENT, STEP = 5, 2  # where the logs are tampered with
REPLAY_CHECK = "transcript reproduces the logged payloads"


def small_run(root: Path, epsilon: float | None) -> Path:
    """A 12-agent virtual run of the synthetic task (seeded samplers) in root/run, its data in root/data."""
    task = generate_task(N, P, seed=3)
    params = PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=UPDATES,
                                  epsilon=epsilon, tick_rate=100.0)
    topology = task_topology(task, params, run_id=root.name,
                             network=NetworkParams(round_deadline_s=5.0, startup_deadline_s=10.0))
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    result = run_virtual(root / "topology.json", root / "data", root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=7))
    assert result.ok and not result.timed_out, [(r.node_id, r.stderr_tail) for r in result.failures]
    return root


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_run(tmp_path_factory.mktemp("private"), epsilon=4.0)


@pytest.fixture(scope="module")
def non_private(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_run(tmp_path_factory.mktemp("non_private"), epsilon=None)


def replayed(root: Path, *, data: bool = True) -> TrajectoryCheck:
    return check_updates(replay_run(root / "run", with_private_logs=True, data_dir=root / "data" if data else None))


def tampered_copy(root: Path, tmp_path: Path) -> Path:
    """The run and its data copied, so that a test may change the logs."""
    shutil.copytree(root, tmp_path / "copy")
    return tmp_path / "copy"


@pytest.mark.parametrize("run", ["private", "non_private"])
def test_every_broadcast_and_gradient_is_recomputed_from_the_logs(run: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(run)
    replay = replay_run(root / "run", with_private_logs=True, data_dir=root / "data")
    used = [ref for log in replay.logs.values() for record in log.of_kind("step_inputs") for ref in record.inputs]
    assert len(used) > N * UPDATES  # the updates did use their neighbours' broadcasts
    check = check_updates(replay)
    assert check.ok, check.mismatches[:3]
    broadcasts = sum(len(log.sent) for log in replay.logs.values())
    assert broadcasts == UPDATES * sum(len(peers) for peers in replay.topology.neighbours)
    assert check.compared == broadcasts + N * UPDATES  # every sent model and every logged gradient
    assert check.max_relative_deviation < 1e-12
    lines = {line.name: line for line in replay_checks(replay)}
    assert lines[REPLAY_CHECK].ok and lines[REPLAY_CHECK].detail.startswith(f"{check.compared} logged payloads")


def test_without_the_data_no_update_is_recomputed(private: Path) -> None:
    check = replayed(private, data=False)
    assert not check.ok and check.compared == 0 and "audit with --data" in check.mismatches[0].detail


def test_a_changed_laplace_draw_fails_the_check_at_that_agent_and_update(private: Path, tmp_path: Path) -> None:
    root = tampered_copy(private, tmp_path)

    def shift(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "noise" and record.noise.step == STEP:
            record.noise.value.CopyFrom(to_tensor(from_tensor(record.noise.value) + 0.5))
        return record

    rewrite_log(node_log_dir(root / "run", AGENT) / PRIVATE_LOG_NAME, shift)
    check = replayed(root)
    assert not check.ok and {finding.node for finding in check.mismatches} == {AGENT}
    assert all(f"node {AGENT}'s update {STEP}'s broadcast #{STEP + 1}" in finding.detail
               for finding in check.mismatches)  # the next update starts from the logged broadcast: no cascade
    line = {line.name: line for line in replay_checks(replay_run(root / "run", with_private_logs=True,
                                                                 data_dir=root / "data"))}[REPLAY_CHECK]
    assert not line.ok and f"not reproduced, first: node {AGENT}'s update {STEP}" in line.detail


def test_a_changed_broadcast_fails_the_check_at_that_agent_and_update(private: Path, tmp_path: Path) -> None:
    root = tampered_copy(private, tmp_path)

    def shift(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "sent" and record.sent.kind == MODEL and record.sent.sequence == STEP + 1:
            record.sent.payload.CopyFrom(to_tensor(from_tensor(record.sent.payload) * 1.001))
        return record

    rewrite_log(node_log_dir(root / "run", AGENT) / VIEW_LOG_NAME, shift)
    check = replayed(root)
    assert not check.ok and {finding.node for finding in check.mismatches} == {AGENT}
    assert f"node {AGENT}'s update {STEP}'s broadcast #{STEP + 1}" in check.mismatches[0].detail
    # the update after it starts from the changed model, so it is not what the agent broadcast either
    assert any(f"update {STEP + 1}'s broadcast" in finding.detail for finding in check.mismatches)


def test_an_update_that_names_a_broadcast_its_view_never_received_is_unexplained(private: Path,
                                                                                 tmp_path: Path) -> None:
    root = tampered_copy(private, tmp_path)
    log = node_log_dir(root / "run", AGENT) / VIEW_LOG_NAME
    step, used = [(record.step, record.inputs[0]) for record in read_log(log).of_kind("step_inputs")
                  if record.inputs][0]  # the first update that used a neighbour's broadcast

    def forget(record: viewlog_pb2.Record) -> viewlog_pb2.Record | None:
        received = record.received if record.WhichOneof("kind") == "received" else None
        return None if received and (received.peer, received.sequence) == (used.peer, used.sequence) else record

    rewrite_log(log, forget)
    check = replayed(root)
    assert {(finding.kind, finding.node) for finding in check.mismatches} == {("unexplained_payload", AGENT)}
    assert check.mismatches[0].detail == (f"node {AGENT}'s update {step} used node {used.peer}'s model "
                                          f"#{used.sequence} to node {AGENT}, which its view log did not receive")


def test_a_draw_narrower_than_its_logged_spend_is_found(private: Path, tmp_path: Path) -> None:
    root = tampered_copy(private, tmp_path)

    def narrow(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "noise" and record.noise.step == STEP:
            record.noise.scale /= 2.0
        return record

    rewrite_log(node_log_dir(root / "run", AGENT) / PRIVATE_LOG_NAME, narrow)
    check = replayed(root)
    assert [(finding.kind, finding.node) for finding in check.mismatches] == [("noise_below_spend", AGENT)]
    assert f"node {AGENT}'s update {STEP} drew Laplace noise" in check.mismatches[0].detail


@pytest.mark.parametrize("run", ["private", "non_private"])
def test_the_launcher_counts_every_update_as_a_step(run: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(run)
    assert [logged_rounds(node_log_dir(root / "run", v)) for v in range(N)] == [(UPDATES, True)] * N
    assert _steps_per_node(load_topology(root / "run" / "topology.json").protocol) == UPDATES  # the bar's total
