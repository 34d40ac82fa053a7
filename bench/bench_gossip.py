"""Benchmark: median gossip round latency with 16 node processes vs two raw gRPC floors.

Measured in one run on loopback: n-1 of the n nodes are started first and wait in round 0
for the last one; meanwhile a client measures unary health-check round trips to each of
them (the raw ping-pong). Then the last node starts, the run completes, and round
latencies are read from the view-log timestamps. Finally the same topology runs the same
barrier exchange in bare gRPC (bench/raw_exchange.py: raw bytes, no validation, no log),
which is what a round costs with n processes sharing this machine's cores before netdp
does anything.

With --source DIR the netdp part (topology, launcher, node processes, log reader) runs from
another source tree, e.g. a worktree of an older commit: this script runs itself again with
--netdp-only, DIR (and DIR/proto, where the generated stubs live) first on PYTHONPATH and DIR
as working directory, since `python -m node.cli` puts the working directory first on the
import path. --netdp-only prints that part's raw figures as JSON instead of the comparison;
bench_refactor.py uses it to compare two trees.

Usage: .venv/bin/python bench/bench_gossip.py [--n 16] [--rounds 30] [--dimension 16] [--pings 200]
       [--source DIR] [--netdp-only]
Writes bench/results/gossip.json (not with --netdp-only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import node
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, prepare_rundir, start_node_process
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.datasets import node_data_file, synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.topology import MuffliatoParams, NetworkParams, Topology, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

RESULTS = Path(__file__).resolve().parent / "results"


async def ping_pong_ms(addresses: list[str], pings: int) -> list[float]:
    """Unary health-check round trips (ms) on one long-lived channel per node, after warm-up."""
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


def round_latencies_ms(rundir: Path, n: int) -> list[float]:
    """Per node, time between completing consecutive rounds (last sent record of each round)."""
    latencies: list[float] = []
    for v in range(n):
        log = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME)
        done: dict[int, float] = {}
        for record in log.records:
            if record.WhichOneof("kind") == "sent":
                done[record.sent.round] = max(done.get(record.sent.round, 0.0), record.logged_unix)
        rounds = sorted(done)
        latencies += [(done[b] - done[a]) * 1000 for a, b in zip(rounds[1:], rounds[2:])]
    return latencies


def raw_round_latencies_ms(topology_path: Path, n: int, rounds: int, out_dir: Path) -> list[float]:
    """Round latencies of the bare-gRPC barrier exchange, one process per node."""
    script = Path(__file__).resolve().parent / "raw_exchange.py"
    outputs = [out_dir / f"raw-{v}.json" for v in range(n)]
    processes = [subprocess.Popen([sys.executable, str(script), str(topology_path), str(v), str(rounds), str(out)])
                 for v, out in enumerate(outputs)]
    if any(p.wait(timeout=600) for p in processes):
        sys.exit("a raw exchange process failed")
    latencies: list[float] = []
    for out in outputs:
        done = json.loads(out.read_text())
        latencies += [(b - a) * 1000 for a, b in zip(done[1:], done[2:])]
    return latencies


def bench_topology(n: int, rounds: int, dimension: int) -> Topology:
    """Synchronous Muffliato on the n-node hypercube, on fresh loopback ports."""
    return build_topology(
        generate("hypercube", n=n), graph_name="hypercube", run_id="bench-gossip",
        protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=rounds, dimension=dimension),
        addresses=[f"127.0.0.1:{p}" for p in free_loopback_ports(n)],
        network=NetworkParams(round_deadline_s=10.0, startup_deadline_s=120.0),
    )


def netdp_figures(n: int, rounds: int, dimension: int, pings: int) -> dict[str, object]:
    """Run the netdp cluster; ping-pong and round latencies (ms), and the tree the code came from."""
    root = Path(tempfile.mkdtemp(prefix="netdp-bench-"))
    topology = bench_topology(n, rounds, dimension)
    save_topology(topology, root / "topology.json")
    write_node_files(synthetic_values(n, dimension, 1.0, 0), root / "data")
    rundir = root / "run"
    prepare_rundir(root / "topology.json", rundir)
    options = LaunchOptions(sampler="simulation", simulation_seed=0)

    def start(v: int) -> subprocess.Popen:
        return start_node_process(rundir, v, node_data_file(root / "data", v), options)

    early = [start(v) for v in range(n - 1)]
    ping_ms = asyncio.run(ping_pong_ms([topology.address_of(v) for v in range(n - 1)], pings))
    last = start(n - 1)
    codes = [p.wait(timeout=600) for p in [*early, last]]
    if any(codes):
        sys.exit(f"a node failed: exit codes {codes}")
    return {"source": str(Path(node.__file__).resolve().parent.parent), "degree": len(topology.neighbours[0]),
            "ping_ms": ping_ms, "round_ms": round_latencies_ms(rundir, n)}


def netdp_figures_from(source: Path, n: int, rounds: int, dimension: int, pings: int) -> dict[str, object]:
    """netdp_figures with the code of another source tree, in a child process that imports from it."""
    source = source.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(source / "proto")])}
    command = [sys.executable, str(Path(__file__).resolve()), "--netdp-only", "--n", str(n), "--rounds", str(rounds),
               "--dimension", str(dimension), "--pings", str(pings)]
    child = subprocess.run(command, cwd=source, env=env, stdout=subprocess.PIPE, check=True, timeout=900)
    figures = json.loads(child.stdout)
    if Path(figures["source"]) != source:
        sys.exit(f"the nodes ran the code of {figures['source']}, not of {source}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dimension", type=int, default=16)
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--source", type=Path, default=None,
                        help="source tree whose netdp to run (default: the one this script imports)")
    parser.add_argument("--netdp-only", action="store_true",
                        help="only run the netdp cluster and print its latencies as JSON")
    args = parser.parse_args()

    if args.source is None:
        netdp = netdp_figures(args.n, args.rounds, args.dimension, args.pings)
    else:
        netdp = netdp_figures_from(args.source, args.n, args.rounds, args.dimension, args.pings)
    if args.netdp_only:
        print(json.dumps(netdp))
        return
    root = Path(tempfile.mkdtemp(prefix="netdp-bench-raw-"))
    save_topology(bench_topology(args.n, args.rounds, args.dimension), root / "raw-topology.json")
    raw_rounds = raw_round_latencies_ms(root / "raw-topology.json", args.n, args.rounds, root)

    ping_median = statistics.median(netdp["ping_ms"])
    round_median = statistics.median(netdp["round_ms"])
    raw_median = statistics.median(raw_rounds)
    result = {
        "n": args.n, "rounds": args.rounds, "dimension": args.dimension,
        "degree": netdp["degree"], "source": netdp["source"],
        "ping_pong_median_ms": ping_median,
        "gossip_round_median_ms": round_median,
        "raw_exchange_round_median_ms": raw_median,
        "round_over_ping_ratio": round_median / ping_median,
        "round_over_raw_exchange_ratio": round_median / raw_median,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gossip.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
