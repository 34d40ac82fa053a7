"""A hostile client against a real node process: every bad message is refused, logged, harmless."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess

import grpc
import numpy as np
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, prepare_rundir, start_node_process
from netdp.v1 import peer_pb2
from node.data import node_data_file
from tests.cluster.node_probe import gossip, gossip_chunks, stop_processes, view_log, wait_until_serving

pytestmark = pytest.mark.cluster


def test_bad_messages_get_clear_statuses_and_the_run_still_completes(make_cluster_files):
    files = make_cluster_files(sigma=0.0, rounds=30, dimension=3, name="hostile")
    topology = files.topology
    rundir = files.root / "run"
    prepare_rundir(files.topology_path, rundir)
    options = LaunchOptions(sampler="secure")
    address = topology.address_of(0)
    neighbour, stranger = topology.neighbours[0][0], 7
    assert stranger not in topology.neighbours[0]
    # With σ = 0 a neighbour's round-0 value is its (clipped) input, so the client can send a genuine one.
    genuine = files.values[neighbour]

    message = functools.partial(gossip_chunks, topology, sender=neighbour, value=genuine)

    cases = [
        ("wrong run id", message(run_id="someone-else"), grpc.StatusCode.FAILED_PRECONDITION),
        ("wrong protocol", message(protocol="token-ring"), grpc.StatusCode.FAILED_PRECONDITION),
        ("unknown sender", message(sender=99), grpc.StatusCode.PERMISSION_DENIED),
        ("not a neighbour", message(sender=stranger), grpc.StatusCode.PERMISSION_DENIED),
        ("wrong shape", message(value=np.zeros(5)), grpc.StatusCode.INVALID_ARGUMENT),
        ("short payload", message(shape=[4]), grpc.StatusCode.INVALID_ARGUMENT),
        ("NaN", message(value=[np.nan, 0.0, 0.0]), grpc.StatusCode.INVALID_ARGUMENT),
        ("infinity", message(value=[0.0, np.inf, 0.0]), grpc.StatusCode.INVALID_ARGUMENT),
        ("far-future round", message(round_index=5), grpc.StatusCode.OUT_OF_RANGE),
        ("oversized payload", message(extra=bytes(1 << 20)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("no envelope", [peer_pb2.Chunk(data=b"\x00" * 24)], grpc.StatusCode.INVALID_ARGUMENT),
        ("genuine value", message(), grpc.StatusCode.OK),
        ("duplicate round", message(value=[0.5, 0.5, 0.5]), grpc.StatusCode.ALREADY_EXISTS),
    ]

    def start(v: int) -> subprocess.Popen:
        return start_node_process(rundir, v, node_data_file(files.data_dir, v), options)

    first = start(0)
    others: list[subprocess.Popen] = []
    try:
        wait_until_serving(address, 0, tls_dir=None)
        statuses = {name: asyncio.run(gossip(address, chunks)).code for name, chunks, _ in cases}
        assert statuses == {name: expected for name, _, expected in cases}
        others = [start(v) for v in range(1, topology.n)]
        exit_codes = [p.wait(timeout=120) for p in [first, *others]]
    finally:
        stop_processes([first, *others])
    assert exit_codes == [0] * topology.n

    true_mean = files.values.mean(axis=0)
    for v in range(topology.n):
        estimate = np.asarray(json.loads((node_log_dir(rundir, v) / "estimate.json").read_text())["value"])
        assert np.linalg.norm(estimate - true_mean) / np.linalg.norm(true_mean) < 1e-9

    log = view_log(rundir, 0)
    assert log.damage is None
    refused = [case for case in cases if case[2] != grpc.StatusCode.OK]
    rejected = log.of_kind("rejected")
    assert [r.status_code for r in rejected[: len(refused)]] == [expected.name for _, _, expected in refused]
    round0_from_neighbour = [r for r in log.of_kind("received") if r.peer == neighbour and r.round == 0]
    assert len(round0_from_neighbour) == 1
    assert not [r for r in log.of_kind("received") if r.peer not in topology.neighbours[0]]
