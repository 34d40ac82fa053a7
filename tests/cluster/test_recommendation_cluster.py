"""The recommendation task on real processes over gRPC: 12 users of the shipped synthetic ratings.

One process per agent on loopback, mutual TLS, seeded simulation samplers: private personalized CD
(least squares on p = 3 ALS features, 4-NN graph, ε̄ = 5, 5 updates each). Every agent finishes,
the audit finds every spend within budget and reports the per-user test RMSE of the run and of
non-private CD below that of purely local models.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.demo_protocols import loopback_addresses
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.dataprep.personalized_task import task_topology, write_task
from coordinator_tools.dataprep.ratings import SHIPPED_RATINGS, read_ratings
from coordinator_tools.dataprep.recommendation_task import make_task
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, save_topology

pytestmark = pytest.mark.cluster
USERS, NEIGHBOURS, FEATURES, UPDATES = 12, 4, 3, 5


def test_twelve_users_learn_their_ratings_over_the_network_and_beat_purely_local_models(tmp_path: Path) -> None:
    task = make_task(read_ratings(SHIPPED_RATINGS), "shipped", features=FEATURES, seed=0, users=USERS,
                     neighbours=NEIGHBOURS)
    params = PersonalizedCDParams(dimension=FEATURES, task="least_squares", mu=0.3, lipschitz=1.0,
                                  smoothness=task.info.smoothness, max_examples=max(task.info.train_sizes),
                                  updates=UPDATES, epsilon=5.0, delta=math.exp(-5), tick_rate=5.0)
    topology = task_topology(task, params, run_id="recommendation", addresses=loopback_addresses(USERS),
                             network=NetworkParams(round_deadline_s=5.0, startup_deadline_s=60.0))
    save_topology(topology, tmp_path / "topology.json")
    write_task(task, tmp_path / "data")
    write_cluster_certs(topology, tmp_path / "certs", days=1)
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=5, certs_dir=tmp_path / "certs"))
    assert result.ok and not result.timed_out, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    report = audit_run(tmp_path / "run", tmp_path / "audit", AuditOptions(data=tmp_path / "data"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    assert [agent["updates"] for agent in report["personalized"]["agents"]] == [UPDATES] * USERS
    utility = report["utility"]
    assert utility["metric"] == "rmse"
    assert max(utility["private"], utility["non_private"]) < utility["local"] - 0.05, utility
