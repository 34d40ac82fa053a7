"""Benchmark: randomized Muffliato exchanges per second on n node processes vs a bare-gRPC call floor.

Measured in one run on loopback, back to back on the same topology (the demo's hypercube,
σ = 0): first a muffliato-async run of n node processes whose Poisson clocks tick fast
enough that every node is always in an exchange or about to start one, for --duration
seconds each. Its rate is the exchanges committed (the initiators' `committed` records in
the view logs) over the wall time from the first proposal to the last commit. Then the same
clock, choice of peer and payload size in bare gRPC (bench/raw_call.py: one unary call
with raw bytes each way per tick), counted the same way. The ratio is what netdp's commit
rule costs over the floor: two calls instead of one, fsync'd records on both sides, and a
node in an exchange declining every other proposal. The faster the clocks, the larger the
share of declined proposals: netdp's committed rate peaks at a few tens of ticks per second
per node, while the floor keeps rising with the clock until the machine's cores are full.

Usage: .venv/bin/python bench/bench_exchanges.py [--n 16] [--duration 20] [--tick-rate 1000] [--dimension 16]
Writes bench/results/exchanges.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.topology import NetworkParams, Topology, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

RESULTS = Path(__file__).resolve().parent / "results"
GRAPH = "hypercube"  # what `netdp demo` runs on


def async_topology(n: int, duration_s: float, tick_rate: float, dimension: int) -> Topology:
    """A muffliato-async topology on fresh loopback ports; σ = 0, since noise is drawn once and costs nothing here."""
    return build_topology(
        generate(GRAPH, n=n), graph_name=GRAPH, run_id="bench-exchanges",
        protocol=MuffliatoAsyncParams(sigma=0.0, sensitivity=1.0, alpha=2.0, dimension=dimension,
                                      duration_s=duration_s, tick_rate=tick_rate),
        addresses=[f"127.0.0.1:{p}" for p in free_loopback_ports(n)],
        network=NetworkParams(round_deadline_s=10.0, startup_deadline_s=120.0),
    )


def exchange_figures(rundir: Path, n: int) -> dict[str, float]:
    """Initiators' outcomes from the view logs, and their rate over first proposal .. last commit."""
    outcomes: Counter[str] = Counter()
    first_proposal, last_commit = float("inf"), 0.0
    for v in range(n):
        for record in read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME).records:
            if record.WhichOneof("kind") != "exchange" or record.exchange.role != "initiator":
                continue
            outcomes[record.exchange.phase] += 1
            if record.exchange.phase == "proposed":
                first_proposal = min(first_proposal, record.logged_unix)
            elif record.exchange.phase == "committed":
                last_commit = max(last_commit, record.logged_unix)
    seconds = last_commit - first_proposal
    return {
        "proposed": outcomes["proposed"], "committed": outcomes["committed"],
        "declined": outcomes["declined"], "aborted": outcomes["aborted"],
        "seconds": seconds, "proposed_per_s": outcomes["proposed"] / seconds,
        "committed_per_s": outcomes["committed"] / seconds,
    }


def raw_call_figures(topology_path: Path, n: int, out_dir: Path, timeout_s: float) -> dict[str, float]:
    """Calls of the bare-gRPC floor, one process per node, over first call .. last reply."""
    script = Path(__file__).resolve().parent / "raw_call.py"
    outputs = [out_dir / f"raw-call-{v}.json" for v in range(n)]
    processes = [subprocess.Popen([sys.executable, str(script), str(topology_path), str(v), str(out)])
                 for v, out in enumerate(outputs)]
    if any(p.wait(timeout=timeout_s) for p in processes):
        sys.exit("a raw call process failed")
    figures = [json.loads(out.read_text()) for out in outputs]
    calls = sum(f["calls"] for f in figures)
    seconds = max(f["last_reply_unix"] for f in figures) - min(f["first_call_unix"] for f in figures)
    return {"calls": calls, "seconds": seconds, "calls_per_s": calls / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds each node keeps ticking")
    parser.add_argument("--tick-rate", type=float, default=1000.0, help="ticks per second of each node's clock")
    parser.add_argument("--dimension", type=int, default=16)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="netdp-bench-exchanges-"))
    save_topology(async_topology(args.n, args.duration, args.tick_rate, args.dimension), root / "topology.json")
    write_node_files(synthetic_values(args.n, args.dimension, 1.0, 0), root / "data")
    result = run_cluster(root / "topology.json", root / "data", root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=0))
    if not result.ok:
        sys.exit(f"the netdp run failed: {[(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]}")
    netdp = exchange_figures(root / "run", args.n)

    raw_topology = async_topology(args.n, args.duration, args.tick_rate, args.dimension)
    save_topology(raw_topology, root / "raw-topology.json")
    raw = raw_call_figures(root / "raw-topology.json", args.n, root, timeout_s=3 * args.duration + 120.0)

    figures = {
        "n": args.n, "graph": GRAPH, "degree": len(raw_topology.neighbours[0]), "dimension": args.dimension,
        "duration_s": args.duration, "tick_rate": args.tick_rate,
        "netdp": netdp, "raw_call": raw,
        "exchanges_over_raw_calls_ratio": netdp["committed_per_s"] / raw["calls_per_s"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "exchanges.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
