"""Personalized CD (AISTATS 2018) on real processes over gRPC: the demo's 40-agent synthetic task.

Two runs of the same task and topology, one process per agent on loopback (seeded simulation
samplers): non-private CD, which lowers objective (2) and beats purely local models on held-out
accuracy; and private CD at ε̄ = 5, δ̄ = e^-5, during which one agent is SIGKILLed as its third
update starts. The other agents finish all their updates; private CD sits between local models
and non-private CD; the audit finds every logged spend within its agent's budget (the killed
agent's two included); and the killed agent, started again on its log folder, is refused.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.command import AuditOptions, audit_run
from coordinator_tools.audit.protocols.personalized_cd.simulate import accuracies, local_model, simulate_cd
from coordinator_tools.audit.protocols.personalized_cd.utility import agent_problems
from coordinator_tools.cluster.demo_protocols import DEMO_PROTOCOLS, loopback_addresses
from coordinator_tools.cluster.launch import LaunchOptions, node_command, node_log_dir, run_cluster
from coordinator_tools.datasets import node_data_file
from coordinator_tools.personalized_task import load_test_sets, task_topology, write_task
from node.codec import from_tensor
from node.personalized import objective
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, Topology, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
DEMO = DEMO_PROTOCOLS["personalized-cd"]
KILLED, KILLED_AT = 5, 2
ARGS = argparse.Namespace(graph=None, n=DEMO.nodes, dimension=None, sensitivity=None, epsilon=None, alpha=2.0,
                          data_seed=None)
NETWORK = NetworkParams(round_deadline_s=5.0, startup_deadline_s=90.0)


def cluster(root: Path, params: PersonalizedCDParams, kill: dict[int, int]) -> Topology:
    task = DEMO.task(ARGS)
    topology = task_topology(task, params, run_id=root.name, addresses=loopback_addresses(task.info.n),
                             network=NETWORK)
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    options = LaunchOptions(sampler="simulation", simulation_seed=11, kill_at_round=kill)
    result = run_cluster(root / "topology.json", root / "data", root / "run", options)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    assert not result.timed_out
    return topology


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("private")
    return root, cluster(root, DEMO.params(ARGS), {KILLED: KILLED_AT})


@pytest.fixture(scope="module")
def non_private(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("non_private")
    params = PersonalizedCDParams.model_validate({**DEMO.params(ARGS).model_dump(), "epsilon": None, "delta": 0.0})
    return root, cluster(root, params, {})


def final_models(topology: Topology, rundir: Path) -> dict[int, np.ndarray]:
    models = {}
    for v in range(topology.n):
        outputs = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME).of_kind("final_output")
        if outputs:
            models[v] = from_tensor(outputs[0].value)
    return models


def test_non_private_cd_lowers_objective_2_and_beats_purely_local_models(non_private) -> None:
    root, topology = non_private
    models = final_models(topology, root / "run")
    assert sorted(models) == list(range(topology.n))
    problems = agent_problems(topology, root / "data")
    tests = load_test_sets(root / "data", topology.protocol.dimension)
    stacked = np.array([models[v] for v in range(topology.n)])
    # Q falls slowly at this mu (9.44 at the zeros, 9.27 after 5 updates each in a simulation): the run must have
    # gone further down than two simulated updates per agent take it
    two_updates = simulate_cd(problems, 2, None, np.random.default_rng(0))
    assert objective(problems, topology, stacked) < objective(problems, topology, two_updates) < objective(
        problems, topology, np.zeros_like(stacked))
    local = np.array([local_model(problem) for problem in problems])
    assert accuracies(stacked, tests, "logistic").mean() > accuracies(local, tests, "logistic").mean() + 0.02


def test_private_cd_sits_between_and_no_agent_overspends_though_one_died(private) -> None:
    root, topology = private
    report = audit_run(root / "run", root / "audit", AuditOptions(data=root / "data", attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    agents = report["personalized"]["agents"]
    assert [agent["updates"] for agent in agents] == [KILLED_AT if v == KILLED else 5 for v in range(topology.n)]
    assert all(agent["within_budget"] and agent["theorem1"] <= 5.0 * (1 + 1e-9) for agent in agents)
    utility = report["utility"]
    assert KILLED not in utility["agents_scored"] and len(utility["agents_scored"]) == topology.n - 1
    assert utility["local"] < utility["private"] < utility["non_private"], utility


def test_a_killed_agent_started_again_on_its_log_is_refused_and_its_spends_stay(private) -> None:
    root, _ = private
    log = node_log_dir(root / "run", KILLED) / VIEW_LOG_NAME
    before = read_log(log).of_kind("budget")
    options = LaunchOptions(sampler="simulation", simulation_seed=11)
    restart = subprocess.run(node_command(root / "run", KILLED, node_data_file(root / "data", KILLED), options),
                             capture_output=True, text=True, timeout=60, check=False)
    assert restart.returncode == 2 and "already exists" in restart.stderr
    assert read_log(log).of_kind("budget") == before and len(before) == KILLED_AT
