"""Secure-neighbourhood learning (secure-neighbourhood-gd) on real node processes over gRPC: co-neighbours agree
their secrets on the wire, the masks cancel in every neighbourhood sum of the real logs, the models learn, and the
run audits clean with the exact column counted by hand; with a node killed mid-run, the masks it no longer
matches stay in the survivors' models and the audit reproduces every payload all the same.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

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
from node.pairwise_secrets import SECRET_PURPOSE, edge_sign
from node.protocols.secure_neighbourhood import MASK_PURPOSE, mask_step
from node.protocols.secure_neighbourhood_gd import SecureNeighbourhoodGDParams
from node.topology import NetworkParams, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.test_gd_cluster import unit_rows

pytestmark = pytest.mark.cluster
N, D, STEPS, SIGMA = 4, 3, 4, 0.05


def test_four_processes_learn_through_masked_sums_and_the_audit_recomputes_every_value(tmp_path: Path) -> None:
    params = SecureNeighbourhoodGDParams(sigma=SIGMA, sensitivity=2.0, alpha=2.0, dimension=D, task="logistic",
                                         steps=STEPS, learning_rate=1.0, clip=1.0, adjacency="dataset")
    topology = build_topology(generate("ring", n=N), graph_name="ring", run_id="sn-gd-cluster", protocol=params,
                              addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
                              network=NetworkParams(round_deadline_s=3.0, startup_deadline_s=30.0))
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(2)
    (tmp_path / "data").mkdir()
    data = []
    for v in range(N):
        x = unit_rows(rng, 10, D)
        data.append((x, np.where(x[:, 0] >= 0, 1.0, -1.0)))
        np.savez(tmp_path / "data" / f"node-{v}.npz", x=x, y=data[-1][1])
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="secure"))
    estimates = result.estimates()
    assert len(estimates) == N

    masks: dict[tuple[int, int], np.ndarray] = {}
    for v in range(N):
        node = result.rundir / f"node-{v}"
        draws = read_log(node / PRIVATE_LOG_NAME).of_kind("noise")
        secrets = [d for d in draws if d.purpose == SECRET_PURPOSE]
        assert [int(d.step) for d in secrets] == [(v + 2) % N]  # the ring's one co-neighbour, no neighbour
        assert bytes(from_tensor(secrets[0].value).astype(np.uint8)) not in (node / VIEW_LOG_NAME).read_bytes()
        masks.update({(v, int(d.step)): from_tensor(d.value) for d in draws if d.purpose == MASK_PURPOSE})
    for r in range(STEPS):  # one gossip round per step: in each receiver's sum the two senders' masks cancel
        for v in range(N):
            j, k = sorted(topology.neighbours[v])
            mine = edge_sign(j, k) * masks[j, mask_step(r, v, k, N)]
            theirs = edge_sign(k, j) * masks[k, mask_step(r, v, j, N)]
            largest = float(np.max(np.abs(mine)))
            assert largest > 0.1 * params.sigma_mask and np.max(np.abs(mine + theirs)) <= 1e-12 * largest

    # The run converges: every node's model separates the pooled training data better than chance, well.
    x = np.vstack([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    for model in estimates.values():
        assert float(np.mean(np.sign(x @ model[:D]) == y)) >= 0.85

    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    failed = [check["name"] for check in report["checks"] if not check["ok"]]  # type: ignore[index]
    assert not failed, failed
    # By hand on the ring, every mask given to the observer: a neighbour's T step models reach v, the opposite
    # node's first T - 1 (through a neighbour's mixed model one round later); RDP = α (Δ/σ)² q / 2.
    exact = pair_matrix(read_pairs(tmp_path / "audit", ["source", "observer", "exact_rdp_upper"]), "exact_rdp_upper", N)
    unit = params.alpha * (params.sensitivity / SIGMA) ** 2 / 2
    for v in range(N):
        for u in range(N):
            if u != v:
                steps = STEPS if u in topology.neighbours[v] else STEPS - 1
                assert exact[u, v] == pytest.approx(unit * steps, rel=1e-9)


def test_a_killed_node_leaves_its_masks_in_the_survivors_models_and_the_audit_reproduces_them(tmp_path: Path) -> None:
    """Node 1 killed as round 2 starts: node 3 still adds their shared masks to what it sends nodes 0 and 2, which
    stay in their models. The audit's replay puts them there too, so every later payload is reproduced."""
    params = SecureNeighbourhoodGDParams(sigma=SIGMA, sensitivity=2.0, alpha=2.0, dimension=D, task="logistic",
                                         steps=STEPS, learning_rate=1.0, clip=1.0, adjacency="dataset")
    topology = build_topology(generate("ring", n=N), graph_name="ring", run_id="sn-gd-killed", protocol=params,
                              addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
                              network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=30.0))
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(5)
    (tmp_path / "data").mkdir()
    for v in range(N):
        x = unit_rows(rng, 10, D)
        np.savez(tmp_path / "data" / f"node-{v}.npz", x=x, y=np.where(x[:, 0] >= 0, 1.0, -1.0))
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="secure", kill_at_round={1: 2}))
    assert result.nodes[1].killed_by_request and sorted(result.estimates()) == [0, 2, 3]
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    checks = {check["name"]: check for check in report["checks"]}  # type: ignore[index]
    assert all(check["ok"] for check in checks.values()), checks
    replayed = [check["detail"] for check in checks.values() if "logged payloads" in check["detail"]]
    assert replayed and int(replayed[0].split()[0]) > 0
    # What the audit replays: node 0's model after round 2 holds node 3's mask with node 1, whole.
    draws = read_log(result.rundir / "node-3" / PRIVATE_LOG_NAME).of_kind("noise")
    left_in = [from_tensor(d.value) for d in draws if d.purpose == MASK_PURPOSE and int(d.step) in (
        mask_step(2, 0, 1, N), mask_step(3, 0, 1, N))]
    assert len(left_in) == 2 and min(float(np.max(np.abs(m))) for m in left_in) > 0.1 * params.sigma_mask
