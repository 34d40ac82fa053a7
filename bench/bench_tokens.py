"""Benchmark: token hops per second along an n-process ring vs raw gRPC request/reply to the same processes.

Measured in one run on loopback. A ring-sum topology (n nodes, K cycles, σ > 0, so the noisy
hops draw as they would in use) is started without node 0, the token's origin: nodes 1..n−1
come up and wait for the token, and meanwhile a client measures unary health-check round trips
to each of them on one long-lived channel (the raw request/reply floor, bench_gossip's
ping-pong). Then node 0 starts and the token goes K times round the ring, then the result
once. A hop's time is the gap between consecutive `received` custody records of the sum token
(each written by the next holder once it holds the token durably), from the view-log
timestamps: one hop is a contribution (and a noise draw where the rule puts one), a durable
log record on each side and one custody delivery, the token's whole hand-over. Reports the
median ms per hop and per raw round trip, both as rates per second, and their ratio.

A token is sequential (one holder at a time), so the ring's rate is bounded by one request/reply
at a time however many cores the machine has: the raw floor is the right comparison.

Usage: .venv/bin/python bench/bench_tokens.py [--n 16] [--cycles 20] [--dimension 16] [--pings 200]
Writes bench/results/tokens.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_gossip import ping_pong_ms

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, prepare_rundir, start_node_process
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.datasets import node_data_file, synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.mailboxes.token_slot import RECEIVED
from node.protocols.ring_sum import RingSumParams
from node.protocols.token_sum import SUM_TOKEN_ID
from node.topology import NetworkParams, Topology, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

RESULTS = Path(__file__).resolve().parent / "results"
SIGMA, SENSITIVITY = 0.1, 1.0


def ring_topology(n: int, cycles: int, dimension: int) -> Topology:
    """Ring summation on the n-node ring, on fresh loopback ports, with deadlines no hop comes near."""
    return build_topology(
        generate("ring", n=n), graph_name="ring", run_id="bench-tokens",
        protocol=RingSumParams(sigma=SIGMA, sensitivity=SENSITIVITY, alpha=2.0, dimension=dimension, cycles=cycles),
        addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(n)],
        network=NetworkParams(round_deadline_s=10.0, startup_deadline_s=120.0),
    )


def hop_times_ms(rundir: Path, n: int) -> list[float]:
    """Gaps between consecutive hops of the sum token, from the next holders' `received` custody records."""
    taken: dict[int, float] = {}
    for v in range(n):
        for record in read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME).records:
            if record.WhichOneof("kind") == "token" and record.token.token_id == SUM_TOKEN_ID \
                    and record.token.phase == RECEIVED:
                taken[record.token.hop] = record.logged_unix
    hops = sorted(taken)
    if hops != list(range(1, len(hops) + 1)):
        sys.exit(f"the sum token's hops are not one chain from 1: {hops[:10]}...")
    return [(taken[b] - taken[a]) * 1000 for a, b in zip(hops, hops[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=16, help="node processes on the ring")
    parser.add_argument("--cycles", type=int, default=20, help="times the token goes round (K)")
    parser.add_argument("--dimension", type=int, default=16, help="length of the token vector")
    parser.add_argument("--pings", type=int, default=200, help="raw round trips per node")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="netdp-bench-tokens-"))
    topology = ring_topology(args.n, args.cycles, args.dimension)
    save_topology(topology, root / "topology.json")
    write_node_files(synthetic_values(args.n, args.dimension, SENSITIVITY, 0), root / "data")
    rundir = root / "run"
    prepare_rundir(root / "topology.json", rundir)
    options = LaunchOptions(sampler="simulation", simulation_seed=0)

    def start(v: int) -> subprocess.Popen:
        return start_node_process(rundir, v, node_data_file(root / "data", v), options)

    waiting = [start(v) for v in range(1, args.n)]
    ping_ms = asyncio.run(ping_pong_ms([topology.address_of(v) for v in range(1, args.n)], args.pings))
    origin = start(0)
    codes = [process.wait(timeout=900) for process in [origin, *waiting]]
    if any(codes):
        sys.exit(f"a node failed: exit codes {codes} (logs in {rundir})")

    hop_ms = hop_times_ms(rundir, args.n)
    hop_median, ping_median = statistics.median(hop_ms), statistics.median(ping_ms)
    result = {
        "n": args.n, "cycles": args.cycles, "dimension": args.dimension, "hops_measured": len(hop_ms),
        "median_ms_per_hop": hop_median, "median_ms_per_raw_round_trip": ping_median,
        "hops_per_s": 1000 / hop_median, "raw_round_trips_per_s": 1000 / ping_median,
        "hops_over_raw_rate": ping_median / hop_median,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tokens.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
