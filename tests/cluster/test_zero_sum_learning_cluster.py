"""Zero-sum learning (zero-sum-gd) on real node processes over gRPC: shares that cancel, D-SGD's mean, a clean audit.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.codec import from_tensor
from node.learning import clipped_gradient
from node.message import GOSSIP, kind_of
from node.protocols.zero_sum_gd import ZeroSumGDParams
from node.topology import NetworkParams, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.test_gd_cluster import unit_rows

pytestmark = pytest.mark.cluster
N, D, STEPS, ETA = 4, 3, 3, 1.0


def test_four_processes_learn_with_zero_sum_shares_and_the_audit_recomputes_every_value(tmp_path: Path) -> None:
    params = ZeroSumGDParams(sigma=1e-4, sensitivity=2.0, alpha=2.0, dimension=D, task="logistic", steps=STEPS,
                             learning_rate=ETA, clip=1.0, adjacency="dataset")
    topology = build_topology(generate("ring", n=N), graph_name="ring", run_id="zero-sum-gd-cluster", protocol=params,
                              addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
                              network=NetworkParams(round_deadline_s=3.0, startup_deadline_s=30.0))
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(2)
    (tmp_path / "data").mkdir()
    shards = []
    for v in range(N):
        x = unit_rows(rng, 10, D)
        shards.append((x, np.where(x[:, 0] >= 0, 1.0, -1.0)))
        np.savez(tmp_path / "data" / f"node-{v}.npz", x=shards[v][0], y=shards[v][1])
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=4))
    outputs = result.estimates()
    assert len(outputs) == N
    gradients = np.zeros(D)
    for v in range(N):
        node = result.rundir / f"node-{v}"
        logged = [from_tensor(g.value) for g in read_log(node / PRIVATE_LOG_NAME).of_kind("private_input")]
        assert len(logged) == STEPS
        gradients += np.sum(logged, axis=0)[:D]
        sent = [record for record in read_log(node / VIEW_LOG_NAME).of_kind("sent") if kind_of(record) == GOSSIP]
        assert len(sent) == 2 * STEPS
        for step in range(STEPS):  # each neighbour gets its own value: the model plus its own share
            first, second = (from_tensor(record.payload) for record in sent if record.round == step)
            assert np.min(np.abs(first - second)) > 0
    mean = np.mean([outputs[v][:D] for v in range(N)], axis=0)
    np.testing.assert_allclose(N * mean, -ETA * gradients, rtol=0, atol=1e-12)  # the shares cancel in the sum
    np.testing.assert_allclose(mean, noiseless_mean(topology.weight_row, shards), rtol=0, atol=1e-3)
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    failed = [check["name"] for check in report["checks"] if not check["ok"]]  # type: ignore[index]
    assert not failed, failed
    exact = pair_matrix(read_pairs(tmp_path / "audit", ["source", "observer", "exact_eps_upper"]), "exact_eps_upper",
                        N)
    assert np.all(np.isfinite(exact[~np.eye(N, dtype=bool)]))


def noiseless_mean(weight_row: Callable[[int], dict[int, float]],
                   shards: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The nodes' mean model after T steps of the same D-SGD without noise (full batch, the ring's Metropolis W)."""
    rows = [weight_row(v) for v in range(N)]
    models = np.zeros((N, D))
    for _ in range(STEPS):
        half = np.array([models[v] - ETA * clipped_gradient("logistic", models[v], *shards[v], clip=1.0).value
                         for v in range(N)])
        models = np.array([sum(weight * half[w] for w, weight in rows[v].items()) for v in range(N)])
    result: np.ndarray = models.mean(axis=0)
    return result
