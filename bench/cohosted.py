"""A networked synchronous Muffliato run with many node ids per process, against a virtual run of the same graph.

The same n-node hypercube runs twice: as P `netdp-node --nodes` processes of n / P ids each,
talking gRPC over loopback with mutual TLS (one certificate per process), and as a virtual
run (every id in one process, in-process transport, no gRPC). Both use the secure sampler,
σ > 0 and fsync'd view logs; rounds are timed as in bench.virtual.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.viewlogs import round_seconds
from bench.virtual import DIMENSION, SECURE, hypercube_muffliato, virtual_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files


def measure(n: int, processes: int, rounds: int) -> dict:
    """Median s/round and wall time of both runs, and drop-outs."""
    ids_per_process = -(-n // processes)
    with tempfile.TemporaryDirectory(prefix=f"netdp-bench-cohosted-{n}-") as folder:
        root = Path(folder)
        ports = free_loopback_ports(processes)
        topology = hypercube_muffliato(n, rounds, [f"127.0.0.1:{ports[v // ids_per_process]}" for v in range(n)])
        write_node_files(synthetic_values(n, DIMENSION, 1.0, 1), root / "data")
        virtual_result, virtual_wall = virtual_run(topology, root, "virtual")
        virtual, virtual_drops = round_seconds(virtual_result.rundir, n, rounds)
        write_cluster_certs(topology, root / "certs", days=1)
        start = time.perf_counter()
        result = run_cluster(root / "topology.json", root / "data", root / "networked",
                             LaunchOptions(sampler=SECURE.sampler, certs_dir=root / "certs"))
        networked_wall = time.perf_counter() - start
        if not result.ok:
            raise RuntimeError(f"the networked run failed: {[r.stderr_tail for r in result.failures][:3]}")
        networked, networked_drops = round_seconds(root / "networked", n, rounds)
    return {"ids_per_process": ids_per_process, "degree": len(topology.neighbours[0]),
            "networked_round_s_median": statistics.median(networked), "networked_run_wall_s": networked_wall,
            "networked_drop_outs": networked_drops,
            "virtual_round_s_median": statistics.median(virtual), "virtual_run_wall_s": virtual_wall,
            "virtual_drop_outs": virtual_drops}


def cases(sizes: Sizes) -> list[dict]:
    return [{"n": sizes.pick(256, 32), "processes": sizes.pick(4, 2), "rounds": sizes.pick(5, 3)}]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    return [Row(f"round, n={params['n']} as {params['processes']} processes over mTLS",
                f"{m.figures['networked_round_s_median']:.2f} s",
                f"virtual run {m.figures['virtual_round_s_median']:.2f} s",
                m.figures["networked_round_s_median"] / m.figures["virtual_round_s_median"])
            for params, m in done]
