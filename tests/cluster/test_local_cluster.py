"""Real multi-process runs on loopback: convergence, noise against theory, logs, failures."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.theory import muffliato_mse_bound
from node.codec import from_tensor
from node.viewlog import VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("accelerated", [True, False], ids=["accelerated", "plain"])
def test_noiseless_gossip_reaches_the_true_mean(make_cluster_files, accelerated):
    files = make_cluster_files(sigma=0.0, rounds=45, accelerated=accelerated, name=f"exact-{accelerated}")
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run", LaunchOptions(sampler="secure"))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    true_mean = files.values.mean(axis=0)
    for node_id, estimate in result.estimates().items():
        relative = np.linalg.norm(estimate - true_mean) / np.linalg.norm(true_mean)
        assert relative < 1e-9, f"node {node_id} is {relative:.2e} away from the mean"


def test_every_delivered_message_is_logged_identically_by_both_sides(make_cluster_files):
    files = make_cluster_files(sigma=0.3, rounds=6, name="consistency")
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=3))
    assert result.ok
    logs = {v: read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME) for v in range(files.topology.n)}
    received = {
        (record.peer, v, record.round): from_tensor(record.payload).tobytes()
        for v, log in logs.items() for record in log.of_kind("received")
    }
    sent = [(u, record) for u, log in logs.items() for record in log.of_kind("sent")]
    assert len(sent) == files.topology.protocol.rounds * 2 * len(files.topology.edges)
    for u, record in sent:
        assert record.delivered
        assert received[(u, record.peer, record.round)] == from_tensor(record.payload).tobytes()
    assert all(log.damage is None for log in logs.values())


def test_noisy_mean_squared_error_is_within_theorem_2(make_cluster_files):
    """Per-coordinate MSE (1/nD) Σ_v ||x_v^T - x̄||² over repeated runs, against 3σ²/n."""
    sigma, dimension = 0.2, 256
    errors = []
    for repeat in range(2):
        files = make_cluster_files(sigma=sigma, rounds=12, dimension=dimension, name=f"noisy-{repeat}", seed=repeat)
        result = run_cluster(files.topology_path, files.data_dir, files.root / "run", LaunchOptions(sampler="secure"))
        assert result.ok
        true_mean = files.values.mean(axis=0)
        errors += [np.mean((estimate - true_mean) ** 2) for estimate in result.estimates().values()]
    n = files.topology.n
    mse = float(np.mean(errors))
    assert mse <= muffliato_mse_bound(n, sigma)
    # The noise really is there: the error cannot beat the variance of the average noise, σ²/n.
    assert mse >= 0.5 * sigma**2 / n


def test_a_killed_node_leaves_the_others_finishing_and_every_log_readable(make_cluster_files):
    files = make_cluster_files(sigma=0.0, rounds=10, round_deadline_s=1.0, name="killed")
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=5, kill_at_round={3: 3}))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    killed = result.nodes[3]
    assert killed.killed_by_request and killed.estimate is None and killed.exit_code == -9
    assert killed.rounds_started == 3  # rounds 0..2 were sent, round 3 never started
    assert sorted(result.estimates()) == [v for v in range(8) if v != 3]
    for v in range(8):
        log = read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME)
        assert log.header is not None and log.header.node_id == v
        assert log.damage is None or log.damage.kind == "torn_tail"
        if v in files.topology.neighbours[3]:
            dropped_rounds = {d.round for d in log.of_kind("drop_out") if d.peer == 3}
            assert dropped_rounds and max(dropped_rounds) == files.topology.protocol.rounds - 1
