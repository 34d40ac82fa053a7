"""Benchmark: virtual synchronous Muffliato runs (`netdp run --virtual`) on hypercubes of growing n.

Every node of the topology runs in one process over the in-process transport, with the same
protocol code, validation and fsync'd view logs as a networked run (secure sampler, σ > 0, so
each node draws its noise as in use). Each n runs in a fresh child process, so that its peak
RSS is its own. A round's time is the gap between the moments the last node logged its sent
values of consecutive rounds (view-log timestamps): one round is every node delivering x^t to
each neighbour, each delivery validated and durably logged by its receiver, and the mix.
Reports the median and mean seconds per round, the whole run's wall time (setup, data and
estimates included), peak RSS, drop-outs (deadlines are set far beyond a round, so 0 expected)
and how often the shared log-handle pool (node/logfiles.py) had to reopen a log.

Usage: flock /tmp/netdp-cluster.lock .venv/bin/python bench/bench_virtual.py [--n 256 1024 2048] [--rounds 5]
Writes bench/results/virtual.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.logfiles import shared_pool
from node.topology import MuffliatoParams, NetworkParams, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

RESULTS = Path(__file__).resolve().parent / "results"
DIMENSION, SIGMA = 16, 0.5


def round_ends(rundir: Path, n: int, rounds: int) -> tuple[list[float], int]:
    """Per round, when the last node logged its sent values; and the number of drop-outs logged."""
    last = [0.0] * rounds
    drop_outs = 0
    for v in range(n):
        log = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME)
        for record in log.records:
            if record.WhichOneof("kind") == "sent" and not record.sent.kind:
                last[record.sent.round] = max(last[record.sent.round], record.logged_unix)
        drop_outs += len(log.of_kind("drop_out"))
    return last, drop_outs


def child(n: int, rounds: int) -> dict:
    """One virtual run of n nodes in this process; its figures."""
    with tempfile.TemporaryDirectory(prefix=f"bench-virtual-{n}-") as folder:
        root = Path(folder)
        topology = build_topology(
            generate("hypercube", n=n), graph_name="hypercube", run_id=f"bench-virtual-{n}",
            protocol=MuffliatoParams(sigma=SIGMA, sensitivity=1.0, alpha=2.0, rounds=rounds, accelerated=True,
                                     dimension=DIMENSION),
            addresses=[f"127.0.0.1:{20000 + v}" for v in range(n)],
            network=NetworkParams(round_deadline_s=600.0, startup_deadline_s=600.0),
        )
        save_topology(topology, root / "topology.json")
        write_node_files(synthetic_values(n, DIMENSION, 1.0, 1), root / "data")
        start = time.perf_counter()
        result = run_virtual(root / "topology.json", root / "data", root / "run", LaunchOptions(sampler="secure"))
        wall = time.perf_counter() - start
        assert result.ok, [r.stderr_tail for r in result.failures][:3]
        ends, drop_outs = round_ends(root / "run", n, rounds)
    per_round = [b - a for a, b in itertools.pairwise(ends)]
    return {
        "n": n,
        "degree": len(topology.neighbours[0]),
        "rounds": rounds,
        "round_s_median": statistics.median(per_round),
        "round_s_mean": statistics.fmean(per_round),
        "round_s_each": per_round,
        "messages_per_round": n * len(topology.neighbours[0]),
        "run_wall_s": wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "drop_outs": drop_outs,
        "log_pool_capacity": shared_pool().capacity,
        "log_opens": shared_pool().opened,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rounds)))
        return
    runs = []
    for n in args.n:
        done = subprocess.run([sys.executable, __file__, "--child", str(n), "--rounds", str(args.rounds)],
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        figures = runs[-1]
        print(f"n={n:5d}  degree {figures['degree']:2d}  {figures['round_s_median']:.2f} s/round (median)  "
              f"run {figures['run_wall_s']:.1f} s  peak RSS {figures['peak_rss_mib']:.0f} MiB  "
              f"drop-outs {figures['drop_outs']}")
        RESULTS.mkdir(exist_ok=True)  # written after every n: a long run keeps what it measured so far
        document = {"benchmark": "virtual", "dimension": DIMENSION, "sigma": SIGMA, "sampler": "secure",
                    "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                    "runs": runs}
        (RESULTS / "virtual.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
