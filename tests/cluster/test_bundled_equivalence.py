"""Bundled deliveries are invisible to the audit: one seed, a run bundled and a run message by message, and every
view-log record of every node compares equal (only the times a record was logged or a log started differ). Both
within one process (the ids of a virtual run) and across processes (4 OS processes of 4 ids each over gRPC,
DeliverBundle calls against one Deliver call per message)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.host import ESTIMATE_FILE
from node.noise import make_samplers
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, hosted_ids, load_topology, save_topology
from node.transport import bundles
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME, read_log
from tests.cluster.counting_node import counts_file
from tests.cluster.node_probe import stop_processes

REPO = Path(__file__).resolve().parents[2]

NODES, ROUNDS = 16, 3


def untimed(record: viewlog_pb2.Record) -> bytes:
    """The record's bytes without the moments it was logged (and, for the header, the log started)."""
    copy = viewlog_pb2.Record()
    copy.CopyFrom(record)
    copy.ClearField("logged_unix")
    if copy.WhichOneof("kind") == "header":
        copy.header.ClearField("started_unix")
    return copy.SerializeToString(deterministic=True)


def view_records(root: Path, node: int) -> list[bytes]:
    contents = read_log(root / f"node-{node}" / VIEW_LOG_NAME)
    assert contents.damage is None
    return [untimed(record) for record in contents.records]


def test_a_bundled_run_logs_exactly_what_an_unbundled_run_logs(make_cluster_files, tmp_path, monkeypatch):
    files = make_cluster_files("hypercube", NODES, sigma=0.5, rounds=ROUNDS, dimension=4, round_deadline_s=60.0,
                               name="bundles")
    sizes: list[int] = []
    accept_bundle = bundles.accept_bundle

    async def counted(items):
        sizes.append(len(items))
        return await accept_bundle(items)

    monkeypatch.setattr(bundles, "accept_bundle", counted)
    outcomes = {}
    for bundled in (True, False):
        outcomes[bundled] = asyncio.run(run_inprocess(
            files.topology, files.values, tmp_path / str(bundled), lambda v: make_samplers("simulation", 100 + v),
            bundled=bundled))
    messages = NODES * len(files.topology.neighbours[0]) * ROUNDS
    assert sum(sizes) == messages and len(sizes) < messages / 4  # the bundled run: every message, in bundles
    for node in range(NODES):
        bundled, alone = view_records(tmp_path / "True", node), view_records(tmp_path / "False", node)
        # Messages of one round arrive in another order from run to run: the same records, compared as a multiset.
        assert sorted(bundled) == sorted(alone), node
        kinds = [record.WhichOneof("kind") for record in read_log(tmp_path / "True" / f"node-{node}" /
                                                                    VIEW_LOG_NAME).records]
        degree = len(files.topology.neighbours[node])
        assert kinds.count("received") == kinds.count("sent") == ROUNDS * degree  # every message, none dropped
        assert "drop_out" not in kinds and "rejected" not in kinds
        assert (outcomes[True][node].estimate == outcomes[False][node].estimate).all()


PROCESSES, IDS_PER_PROCESS = 4, 4


def run_processes(topology_path: Path, data_dir: Path, rundir: Path, *, bundled: bool) -> dict[int, np.ndarray]:
    """Every process of the topology as its own OS process over loopback gRPC (plain text), one seed per id; their
    estimates. A bundled run must have sent its cross-process messages in DeliverBundle calls (counted)."""
    topology = load_topology(topology_path)
    firsts = [ids[0] for ids in hosted_ids(topology)]
    processes = [subprocess.Popen([sys.executable, "-m", "tests.cluster.counting_node", str(topology_path),
                                   str(data_dir), str(rundir), str(first), "bundled" if bundled else "alone"],
                                  cwd=REPO) for first in firsts]
    try:
        assert [process.wait(timeout=120) for process in processes] == [0] * len(processes)
    finally:
        stop_processes(processes)
    taken = [json.loads(counts_file(rundir, first).read_text()) for first in firsts]
    if bundled:  # every process took bundles, of several messages each on average
        assert all(count["bundles"] > 0 for count in taken)
        assert sum(count["messages"] for count in taken) > 2 * sum(count["bundles"] for count in taken)
    else:
        assert all(count["bundles"] == 0 for count in taken)
    return {v: np.asarray(json.loads((rundir / f"node-{v}" / ESTIMATE_FILE).read_text())["value"])
            for v in range(topology.n)}


def test_bundles_across_processes_log_exactly_what_single_calls_log(tmp_path):
    n = PROCESSES * IDS_PER_PROCESS
    ports = free_loopback_ports(PROCESSES)
    topology = build_topology(
        generate("hypercube", n=n), graph_name="hypercube", run_id="test-cross-bundles",
        protocol=MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=ROUNDS, dimension=4),
        addresses=[f"127.0.0.1:{ports[v // IDS_PER_PROCESS]}" for v in range(n)],
        network=NetworkParams(round_deadline_s=20.0, startup_deadline_s=60.0),
    )
    save_topology(topology, tmp_path / "topology.json")
    write_node_files(synthetic_values(n, 4, 1.0, seed=3), tmp_path / "data")
    estimates = {bundled: run_processes(tmp_path / "topology.json", tmp_path / "data", tmp_path / str(bundled),
                                        bundled=bundled) for bundled in (True, False)}
    for node in range(n):
        bundled, alone = view_records(tmp_path / "True", node), view_records(tmp_path / "False", node)
        assert sorted(bundled) == sorted(alone), node
        kinds = [record.WhichOneof("kind") for record in read_log(tmp_path / "True" / f"node-{node}" /
                                                                    VIEW_LOG_NAME).records]
        assert kinds.count("received") == kinds.count("sent") == ROUNDS * len(topology.neighbours[node])
        assert "drop_out" not in kinds and "rejected" not in kinds
        np.testing.assert_array_equal(estimates[True][node], estimates[False][node])
