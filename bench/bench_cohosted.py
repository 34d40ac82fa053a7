"""Benchmark: a networked synchronous Muffliato run with many node ids per process, against a virtual run.

The same n-node hypercube runs twice in one benchmark run: as P `netdp-node --nodes` processes
of n / P ids each, talking gRPC over loopback with mutual TLS (one certificate per process),
and as a virtual run (every id in one process, in-process transport, no gRPC). Both use the
secure sampler, σ > 0 and fsync'd view logs. A round's time is the gap between the moments
the last node logged its sent values of consecutive rounds (view-log timestamps, as in
bench_virtual.py). Reports seconds per round (median), wall time of the whole run, drop-outs
(deadlines far beyond a round: 0 expected) and the networked / virtual ratio.

Usage: flock /tmp/netdp-cluster.lock .venv/bin/python bench/bench_cohosted.py [--n 256] [--processes 4] [--rounds 5]
Writes bench/results/cohosted.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench_virtual import round_ends

from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.topology import MuffliatoParams, NetworkParams, save_topology

RESULTS = Path(__file__).resolve().parent / "results"
DIMENSION, SIGMA = 16, 0.5


def measure(runner, root: Path, name: str, n: int, rounds: int, options: LaunchOptions) -> dict:
    """One run of the topology in `root`; its seconds per round and wall time."""
    start = time.perf_counter()
    result = runner(root / "topology.json", root / "data", root / name, options)
    wall = time.perf_counter() - start
    assert result.ok, [r.stderr_tail for r in result.failures][:3]
    ends, drop_outs = round_ends(root / name, n, rounds)
    per_round = [b - a for a, b in itertools.pairwise(ends)]
    return {"round_s_median": statistics.median(per_round), "round_s_each": per_round, "run_wall_s": wall,
            "drop_outs": drop_outs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, processes = args.n, args.processes
    ids_per_process = -(-n // processes)
    with tempfile.TemporaryDirectory(prefix=f"bench-cohosted-{n}-") as folder:
        root = Path(folder)
        ports = free_loopback_ports(processes)
        topology = build_topology(
            generate("hypercube", n=n), graph_name="hypercube", run_id=f"bench-cohosted-{n}",
            protocol=MuffliatoParams(sigma=SIGMA, sensitivity=1.0, alpha=2.0, rounds=args.rounds, accelerated=True,
                                     dimension=DIMENSION),
            addresses=[f"127.0.0.1:{ports[v // ids_per_process]}" for v in range(n)],
            network=NetworkParams(round_deadline_s=600.0, startup_deadline_s=600.0),
        )
        save_topology(topology, root / "topology.json")
        write_node_files(synthetic_values(n, DIMENSION, 1.0, 1), root / "data")
        write_cluster_certs(topology, root / "certs", days=1)
        networked = measure(run_cluster, root, "networked", n, args.rounds,
                            LaunchOptions(sampler="secure", certs_dir=root / "certs"))
        virtual = measure(run_virtual, root, "virtual", n, args.rounds, LaunchOptions(sampler="secure"))
    ratio = networked["round_s_median"] / virtual["round_s_median"]
    print(f"n={n} as {processes} processes x {ids_per_process} ids over mTLS: "
          f"{networked['round_s_median']:.2f} s/round (median), run {networked['run_wall_s']:.1f} s, "
          f"drop-outs {networked['drop_outs']}")
    print(f"n={n} virtual (one process, no gRPC): {virtual['round_s_median']:.2f} s/round (median), "
          f"run {virtual['run_wall_s']:.1f} s; networked / virtual = {ratio:.2f}")
    RESULTS.mkdir(exist_ok=True)
    document = {"benchmark": "cohosted", "n": n, "processes": processes, "ids_per_process": ids_per_process,
                "degree": len(topology.neighbours[0]), "rounds": args.rounds, "dimension": DIMENSION,
                "sigma": SIGMA, "sampler": "secure", "tls": True,
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "networked": networked, "virtual": virtual, "networked_over_virtual": ratio}
    (RESULTS / "cohosted.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
