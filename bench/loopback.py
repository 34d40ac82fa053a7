"""Clusters of node processes on loopback for the benchmarks: topologies, staged starts, the raw floors.

A staged start lets a benchmark measure something (raw round trips) while most nodes are up
and waiting for the last ones, which no node can finish without.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import BaseModel

from bench.raw_grpc import append_synced
from coordinator_tools.cluster.launch import (
    LaunchOptions,
    prepare_rundir,
    run_cluster,
    start_node_process,
)
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.dataprep.datasets import (
    synthetic_values,
    write_node_files,
)
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.data import node_data_file
from node.topology import NetworkParams, Topology, save_topology

SIMULATION = LaunchOptions(sampler="simulation", simulation_seed=0)
T = TypeVar("T")


def loopback_topology(graph: str, n: int, protocol: BaseModel, run_id: str) -> Topology:
    """`protocol` on the n-node `graph`, on fresh loopback ports, with deadlines no step comes near."""
    return build_topology(generate(graph, n=n), graph_name=graph, run_id=run_id, protocol=protocol,
                          addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(n)],
                          network=NetworkParams(round_deadline_s=10.0, startup_deadline_s=120.0))


def new_root(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"netdp-bench-{name}-"))


def write_inputs(topology: Topology, root: Path) -> tuple[Path, Path]:
    """The topology file and synthetic inputs (radius Δ/2, so clipping never bites) of a run in root."""
    save_topology(topology, root / "topology.json")
    write_node_files(synthetic_values(topology.n, topology.protocol.dimension, topology.protocol.sensitivity, 0),
                     root / "data")
    return root / "topology.json", root / "data"


def staged_run(topology: Topology, root: Path, first: list[int], meanwhile: Callable[[], T],
               timeout_s: float = 900.0) -> tuple[Path, T]:
    """Start the nodes `first`, call `meanwhile`, start the others, wait for all; the run folder and its result."""
    topology_file, data = write_inputs(topology, root)
    rundir = root / "run"
    prepare_rundir(topology_file, rundir)

    def start(v: int) -> subprocess.Popen:
        return start_node_process(rundir, v, node_data_file(data, v), SIMULATION)

    early = [start(v) for v in first]
    result = meanwhile()
    late = [start(v) for v in range(topology.n) if v not in first]
    codes = [process.wait(timeout=timeout_s) for process in [*early, *late]]
    if any(codes):
        raise RuntimeError(f"a node failed: exit codes {codes} (logs in {rundir})")
    return rundir, result


def whole_run(topology: Topology, root: Path, data: Path | None = None) -> Path:
    """Run every node at once, on `data` or else on synthetic inputs; the run folder."""
    if data is None:
        topology_file, data = write_inputs(topology, root)
    else:
        topology_file = root / "topology.json"
        save_topology(topology, topology_file)
    result = run_cluster(topology_file, data, root / "run", SIMULATION)
    if not result.ok:
        raise RuntimeError(f"a node failed: {[(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]}")
    return result.rundir


def ping_pong_ms(addresses: list[str], pings: int) -> list[float]:
    """Unary health-check round trips (ms) on one long-lived channel per node, after a warm-up call."""

    async def measure() -> list[float]:
        latencies: list[float] = []
        for address in addresses:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest(service="")
                await stub.Check(request, timeout=30, wait_for_ready=True)
                for _ in range(pings):
                    start = time.perf_counter()
                    await stub.Check(request, timeout=5)
                    latencies.append((time.perf_counter() - start) * 1000)
        return latencies

    return asyncio.run(measure())


def append_fsync_ms(size: int, count: int, folder: Path) -> list[float]:
    """Times (ms) of `count` appends of `size` bytes to one file in `folder`, each followed by an fsync."""
    data = bytes(size)
    fd = os.open(folder / "fsync-floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            append_synced(fd, data)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
    return times


def raw_floor(mode: str, topology: Topology, root: Path, *extra: str, timeout_s: float = 600.0) -> list:
    """Run bench.raw_grpc `mode` on the topology (ports of its own), one process per node; each node's figures."""
    save_topology(topology, root / "raw-topology.json")
    outputs = [root / f"raw-{mode}-{v}.json" for v in range(topology.n)]
    processes = [subprocess.Popen([sys.executable, "-m", "bench.raw_grpc", mode, str(root / "raw-topology.json"),
                                   str(v), str(out), *extra]) for v, out in enumerate(outputs)]
    if any(process.wait(timeout=timeout_s) for process in processes):
        raise RuntimeError(f"a raw {mode} process failed")
    return [json.loads(out.read_text()) for out in outputs]
