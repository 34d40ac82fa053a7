"""Virtual synchronous Muffliato runs (`netdp run --virtual`) on hypercubes of growing n: time and memory.

Every node runs in one process over the in-process transport, with the same protocol code,
validation and fsync'd view logs as a networked run (secure sampler, σ > 0, so each node
draws its noise as in use). A round's time is the gap between the moments the last node
logged its values of consecutive rounds: every node delivering x^t to each neighbour, each
delivery validated and durably logged by its receiver, and the mix. Memory per node is the
process's peak resident size during the run beyond what it held before, over n. Deadlines
are far beyond a round, so no node should drop out; the shared log-handle pool
(node/logfiles.py) reports how often it had to reopen a log.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.figures import Row, Sizes
from bench.isolate import Measured, peak_rss_mib
from bench.viewlogs import round_seconds
from coordinator_tools.cluster.launch import ClusterResult, LaunchOptions
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.logfiles import shared_pool
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, Topology, save_topology

DIMENSION, SIGMA = 16, 0.5
SECURE = LaunchOptions(sampler="secure")


def hypercube_muffliato(n: int, rounds: int, addresses: list[str]) -> Topology:
    """Accelerated Muffliato on the n-node hypercube, deadlines far beyond a round."""
    return build_topology(generate("hypercube", n=n), graph_name="hypercube", run_id=f"bench-virtual-{n}",
                          protocol=MuffliatoParams(sigma=SIGMA, sensitivity=1.0, alpha=2.0, rounds=rounds,
                                                   accelerated=True, dimension=DIMENSION),
                          addresses=addresses, network=NetworkParams(round_deadline_s=600.0, startup_deadline_s=600.0))


def virtual_run(topology: Topology, root: Path, name: str, options: LaunchOptions = SECURE
                ) -> tuple[ClusterResult, float]:
    """Run the topology (inputs from root/data, written by the caller) virtually into root/name; result, wall s."""
    save_topology(topology, root / "topology.json")
    start = time.perf_counter()
    result = run_virtual(root / "topology.json", root / "data", root / name, options)
    wall = time.perf_counter() - start
    if not result.ok:
        raise RuntimeError(f"the virtual run failed: {[r.stderr_tail for r in result.failures][:3]}")
    return result, wall


def measure(n: int, rounds: int) -> dict:
    """One virtual run of n nodes in this process: seconds per round, wall time, memory, drop-outs."""
    with tempfile.TemporaryDirectory(prefix=f"netdp-bench-virtual-{n}-") as folder:
        root = Path(folder)
        topology = hypercube_muffliato(n, rounds, [f"127.0.0.1:{20000 + v}" for v in range(n)])
        write_node_files(synthetic_values(n, DIMENSION, 1.0, 1), root / "data")
        before = peak_rss_mib()
        result, wall = virtual_run(topology, root, "run")
        peak = peak_rss_mib()
        per_round, drop_outs = round_seconds(result.rundir, n, rounds)
    return {"degree": len(topology.neighbours[0]), "messages_per_round": n * len(topology.neighbours[0]),
            "round_s_median": statistics.median(per_round), "round_s_each": per_round, "run_wall_s": wall,
            "rss_before_run_mib": before, "peak_rss_mib": peak, "kib_per_node": (peak - before) * 1024 / n,
            "drop_outs": drop_outs, "log_pool_capacity": shared_pool().capacity, "log_opens": shared_pool().opened}


def cases(sizes: Sizes) -> list[dict]:
    return [{"n": n, "rounds": sizes.pick(5, 3)} for n in sizes.virtual_n]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    """Per n: s/round and memory per node; the ratio is s per message against the smallest n (1 = linear)."""
    smallest = min(done, key=lambda case: case[0]["n"])[1].figures
    per_message = smallest["round_s_median"] / smallest["messages_per_round"]
    table = []
    for params, m in done:
        f = m.figures
        table.append(Row(f"virtual round, n={params['n']} hypercube, D={DIMENSION}", f"{f['round_s_median']:.2f} s",
                         f"s per message vs n={min(p['n'] for p, _ in done)}",
                         f["round_s_median"] / f["messages_per_round"] / per_message, "≤ 1 s at n=2048"))
        table.append(Row(f"virtual memory per node, n={params['n']}", f"{f['kib_per_node']:.0f} KiB",
                         f"peak RSS {f['peak_rss_mib']:.0f} MiB, run {f['run_wall_s']:.0f} s, "
                         f"{f['drop_outs']} drop-outs", None, "≤ 1024 KiB"))
    return table
