"""Networked runs with several node ids per process: 16 nodes as 4 `netdp-node --nodes` processes of 4 ids.

The processes talk gRPC over loopback with mutual TLS (one certificate per process from
`netdp certs`, naming its 4 ids). Synchronous Muffliato runs to completion, RUNDIR has the
layout of a run with one process per node, and `netdp audit` passes every check on it. Each
id keeps its own noise: with the same master seed, the estimates are those of a virtual run
(every id in one process, no gRPC). And 1024 nodes as 2 processes of 512 ids connect over
mutual TLS (their certificates name ranges of ids, small enough for the handshake).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.launch import RUN_SUMMARY_FILE, STDERR_FILE, LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.host import ESTIMATE_FILE
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, Topology, hosted_ids, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster

PROCESSES, IDS_PER_PROCESS = 4, 4
SEED = 5


def cohosted_cluster(folder: Path, processes: int, ids_per_process: int, rounds: int, dimension: int,
                     startup_deadline_s: float) -> Topology:
    """A hypercube of `processes` × `ids_per_process` ids on loopback, with its data and certificates in `folder`."""
    n = processes * ids_per_process
    ports = free_loopback_ports(processes)
    topology = build_topology(
        generate("hypercube", n=n), graph_name="hypercube", run_id=f"test-cohosted-{n}",
        protocol=MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=rounds, dimension=dimension),
        addresses=[f"127.0.0.1:{ports[v // ids_per_process]}" for v in range(n)],
        network=NetworkParams(round_deadline_s=5.0, startup_deadline_s=startup_deadline_s),
    )
    assert [len(ids) for ids in hosted_ids(topology)] == [ids_per_process] * processes
    save_topology(topology, folder / "topology.json")
    write_node_files(synthetic_values(n, dimension, 1.0, seed=3), folder / "data")
    write_cluster_certs(topology, folder / "certs", days=1)
    return topology


def test_four_processes_of_four_ids_run_muffliato_over_mtls_and_pass_the_audit(tmp_path: Path):
    n = PROCESSES * IDS_PER_PROCESS
    topology = cohosted_cluster(tmp_path, PROCESSES, IDS_PER_PROCESS, rounds=8, dimension=3, startup_deadline_s=30.0)
    options = LaunchOptions(sampler="simulation", simulation_seed=SEED, certs_dir=tmp_path / "certs")

    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run", options)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    assert all(r.rounds_started == topology.protocol.rounds for r in result.nodes)
    # One process per address (its stderr in the folder of its lowest id), one folder of logs per id.
    assert sorted(p.parent.name for p in result.rundir.glob(f"node-*/{STDERR_FILE}")) == \
        sorted(f"node-{v}" for v in range(0, n, IDS_PER_PROCESS))
    for v in range(n):
        folder = node_log_dir(result.rundir, v)
        assert {VIEW_LOG_NAME, PRIVATE_LOG_NAME, ESTIMATE_FILE} <= {p.name for p in folder.iterdir()}
    assert len(json.loads((result.rundir / RUN_SUMMARY_FILE).read_text())["nodes"]) == n

    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(attack_pairs="none", with_private_logs=True))
    assert report["checks"] and all(check["ok"] for check in report["checks"]), report["checks"]

    virtual = run_virtual(tmp_path / "topology.json", tmp_path / "data", tmp_path / "virtual",
                          LaunchOptions(sampler="simulation", simulation_seed=SEED))
    assert virtual.ok
    for v, estimate in result.estimates().items():
        np.testing.assert_allclose(estimate, virtual.estimates()[v], rtol=0, atol=1e-12)


def test_two_processes_of_512_ids_connect_over_mtls(tmp_path: Path):
    topology = cohosted_cluster(tmp_path, 2, 512, rounds=1, dimension=1, startup_deadline_s=60.0)
    options = LaunchOptions(sampler="simulation", simulation_seed=SEED, certs_dir=tmp_path / "certs")
    result = run_cluster(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run", options)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    assert len(result.nodes) == topology.n and all(r.rounds_started == 1 for r in result.nodes)
    # Node 0 heard from its neighbour 512 in the other process, over the handshake of two 512-id certificates.
    received = read_log(node_log_dir(result.rundir, 0) / VIEW_LOG_NAME).records
    assert 512 in {record.received.peer for record in received if record.HasField("received")}
