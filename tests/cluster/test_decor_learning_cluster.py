"""DECOR learning (decor-gd) on real node processes over gRPC: secrets agreed on the wire, the run audits clean.

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
from node.protocols.decor import PAIRWISE_PURPOSE, pairwise_step
from node.protocols.decor_gd import DecorGDParams
from node.topology import NetworkParams, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.test_gd_cluster import unit_rows

pytestmark = pytest.mark.cluster
N, D, STEPS = 4, 3, 3


def test_four_processes_learn_with_cancelling_noise_and_the_audit_recomputes_every_model(tmp_path: Path) -> None:
    params = DecorGDParams(sigma=0.3, sigma_cor_ratio=3.0, sensitivity=2.0, alpha=2.0, dimension=D, task="logistic",
                           steps=STEPS, learning_rate=1.0, clip=1.0, adjacency="dataset")
    topology = build_topology(generate("ring", n=N), graph_name="ring", run_id="decor-gd-cluster", protocol=params,
                              addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
                              network=NetworkParams(round_deadline_s=3.0, startup_deadline_s=30.0))
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(2)
    (tmp_path / "data").mkdir()
    for v in range(N):
        x = unit_rows(rng, 10, D)
        np.savez(tmp_path / "data" / f"node-{v}.npz", x=x, y=np.where(x[:, 0] >= 0, 1.0, -1.0))
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=4))
    assert len(result.estimates()) == N
    for step in range(STEPS):  # every edge's draw enters at both ends with opposite signs: the terms cancel
        total, largest = np.zeros(D), 0.0
        for v in range(N):
            node = result.rundir / f"node-{v}"
            logged = {int(d.step): from_tensor(d.value) for d in read_log(node / PRIVATE_LOG_NAME).of_kind("noise")
                      if d.purpose == PAIRWISE_PURPOSE}
            secrets = [d for d in read_log(node / PRIVATE_LOG_NAME).of_kind("noise") if d.purpose == SECRET_PURPOSE]
            assert len(secrets) == 2 and bytes(from_tensor(secrets[0].value).astype(np.uint8)) not in (
                node / VIEW_LOG_NAME).read_bytes()
            for w in topology.neighbours[v]:
                term = edge_sign(v, w) * logged[pairwise_step(step, w, N)]
                total, largest = total + term, max(largest, float(np.max(np.abs(term))))
        assert largest > 0.3 and np.max(np.abs(total)) <= 1e-12 * largest
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    failed = [check["name"] for check in report["checks"] if not check["ok"]]  # type: ignore[index]
    assert not failed, failed
    columns = read_pairs(tmp_path / "audit", ["source", "observer", "exact_eps_upper", "ldp_eps"])
    exact, ldp = pair_matrix(columns, "exact_eps_upper", N), pair_matrix(columns, "ldp_eps", N)
    off = ~np.eye(N, dtype=bool)
    assert np.all(exact[off] > 0) and np.all(exact[off] < ldp[off])  # each step's pairwise noise hides u's state
