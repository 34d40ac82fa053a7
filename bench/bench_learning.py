"""Benchmark: what Muffliato-GD costs over its gossip, on real processes, and what its exact audit costs.

1. Step time, in one run on loopback: n node processes on the hypercube run Muffliato-GD (logistic
   loss on `netdp data split`'s separable problem, the node's whole share every step, σ = 1, K plain
   gossip rounds per step), then synchronous Muffliato runs the same S·K rounds on the same graph and
   dimension (bench_gossip's topology: accelerated, which costs one more axpy per round). Repetitions
   alternate the order (GD first, then gossip first, ...) so that a drift of the shared machine's load
   weighs on both. A step's time is, per node, from finishing round tK to finishing round (t+1)K (one
   gradient, its noise, its private-log records and K rounds; for the gossip run K rounds), from the
   view-log timestamps, the first step left out as bench_gossip leaves out its first round. Reports the
   median ms per step of each, over every step of every repetition, and the ratio GD / gossip.
2. Audit time of the exact column: the Muffliato-GD accountant (`account`: the realized schedule
   unrolled, every pair's matrix-factorization sensitivity, the paper columns, the conversions) on a
   planned run, one process, no cluster, on random d-regular graphs of each --audit-n, T steps, K = 1.
   Reports seconds and peak memory (a second, traced run) per n, and the time ratio largest n / smallest.

Run it on an otherwise idle machine: the cluster part times real processes.

Usage: .venv/bin/python bench/bench_learning.py [--n 16] [--steps 40]
       [--gossip-rounds 1] [--dimension 16] [--repetitions 3] [--audit-n 64 256] [--audit-steps 20] [--degree 6]
Writes bench/results/learning.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

import networkx as nx
import numpy as np
from bench_audit import peak_mib, timed
from bench_gossip import bench_topology, round_latencies_ms

from coordinator_tools.audit.command import DEFAULT_DELTA
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.datasets import synthetic_values, write_node_files
from coordinator_tools.learning_data import SourceOptions, split_dataset, write_split
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import Topology, save_topology

RESULTS = Path(__file__).resolve().parent / "results"
GRAPH = "hypercube"  # bench_gossip's graph
DATASET_SIZE = 1000  # 800 training examples: 50 per node at n = 16
AUDIT_GRAPH_SEED = 1


def learning_params(steps: int, gossip_rounds: int, dimension: int) -> MuffliatoGDParams:
    """Logistic Muffliato-GD with a whole dataset's sensitivity 2C, a noise draw every step."""
    return MuffliatoGDParams(sigma=1.0, sensitivity=2.0, alpha=2.0, dimension=dimension, task="logistic",
                             steps=steps, gossip_rounds=gossip_rounds, learning_rate=1.0, clip=1.0,
                             adjacency="dataset")


def learning_topology(gossip: Topology, steps: int, gossip_rounds: int) -> Topology:
    """Muffliato-GD on the gossip run's graph, ports and network deadlines, with S·K of its rounds."""
    return build_topology(generate(GRAPH, n=gossip.n), graph_name=GRAPH, run_id="bench-learning",
                          protocol=learning_params(steps, gossip_rounds, gossip.protocol.dimension),
                          addresses=[gossip.address_of(v) for v in range(gossip.n)], network=gossip.network)


def step_latencies_ms(rundir: Path, topology: Topology, rounds_per_step: int) -> list[float]:
    """Per node, the ms from finishing round tK to finishing round (t+1)K, for t ≥ 1.

    bench_gossip's round latencies are, node after node, the rounds 1→2, 2→3, … of each; K of them
    in a row, from round tK on, make step t.
    """
    rounds = topology.protocol.rounds
    latencies = np.array(round_latencies_ms(rundir, topology.n)).reshape(topology.n, rounds - 2)
    per_node = latencies[:, rounds_per_step - 1:]
    whole = per_node.shape[1] // rounds_per_step * rounds_per_step
    return per_node[:, :whole].reshape(topology.n, -1, rounds_per_step).sum(axis=2).ravel().tolist()


def cluster_steps_ms(topology: Topology, data_dir: Path, root: Path, rounds_per_step: int) -> list[float]:
    """Run the topology's cluster in root and return its step latencies."""
    save_topology(topology, root / "topology.json")
    options = LaunchOptions(sampler="simulation", simulation_seed=0)
    result = run_cluster(root / "topology.json", data_dir, root / "run", options)
    if not result.ok:
        sys.exit(f"{topology.protocol.name}: a node failed: {[(r.node_id, r.exit_code) for r in result.failures]}")
    return step_latencies_ms(result.rundir, topology, rounds_per_step)


def step_figures(n: int, steps: int, gossip_rounds: int, dimension: int, repetitions: int) -> dict[str, object]:
    """Median ms per step of Muffliato-GD and of its gossip alone, repetitions interleaved, and their ratio."""
    root = Path(tempfile.mkdtemp(prefix="netdp-bench-learning-"))
    planned = learning_topology(bench_topology(n, steps * gossip_rounds, dimension), steps, gossip_rounds)
    shares, test, info, _ = split_dataset("separable", planned, seed=0, partition="iid", skew=None,
                                          options=SourceOptions(size=DATASET_SIZE))
    write_split(root / "learning-data", shares, test, info)
    write_node_files(synthetic_values(n, dimension, 1.0, 0), root / "gossip-data")
    runs: dict[str, list[list[float]]] = {"learning": [], "gossip": []}
    for repetition in range(repetitions):
        for label in ("learning", "gossip") if repetition % 2 == 0 else ("gossip", "learning"):
            gossip = bench_topology(n, steps * gossip_rounds, dimension)  # fresh ports every run
            topology = learning_topology(gossip, steps, gossip_rounds) if label == "learning" else gossip
            runs[label].append(cluster_steps_ms(topology, root / f"{label}-data", root / f"{label}-{repetition}",
                                                gossip_rounds))
            print(f"repetition {repetition + 1}, {label}: median {statistics.median(runs[label][-1]):.1f} ms per step",
                  flush=True)
    medians = {label: statistics.median([ms for run in label_runs for ms in run]) for label, label_runs in runs.items()}
    return {
        "n": n, "graph": GRAPH, "steps": steps, "gossip_rounds": gossip_rounds, "dimension": dimension,
        "repetitions": repetitions, "steps_measured": sum(len(run) for run in runs["learning"]),
        "learning_median_ms_per_step": medians["learning"],
        "gossip_median_ms_per_step": medians["gossip"],
        "learning_over_gossip_ratio": medians["learning"] / medians["gossip"],
        "learning_run_medians_ms": [statistics.median(run) for run in runs["learning"]],
        "gossip_run_medians_ms": [statistics.median(run) for run in runs["gossip"]],
    }


def planned_learning_run(n: int, degree: int, steps: int) -> Transcript:
    """A planned Muffliato-GD run, K = 1, on a connected random `degree`-regular graph."""
    graph = nx.random_regular_graph(degree, n, seed=AUDIT_GRAPH_SEED)
    if not nx.is_connected(graph):
        sys.exit(f"the random {degree}-regular graph on {n} nodes is not connected: choose another seed")
    topology = build_topology(graph, graph_name=f"random_{degree}_regular", run_id="bench-learning-audit",
                              protocol=learning_params(steps, 1, 1))
    return planned_transcript(topology, accelerated=False, rounds_per_step=1)


def account_planned(run: Transcript) -> PairwiseLosses:
    """Every column of every pair of the planned run, at its published σ, Δ and α (the audit's default δ)."""
    params = run.topology.protocol
    return account(run, sigma=params.sigma, sensitivity=params.sensitivity, alpha=params.alpha, delta=DEFAULT_DELTA)


def audit_figures(sizes: list[int], degree: int, steps: int) -> dict[str, object]:
    """Seconds and peak memory of the exact accounting of a planned run at each size, and the time ratio."""
    figures: dict[str, object] = {"graph": f"random {degree}-regular", "steps": steps, "gossip_rounds": 1}
    seconds = {}
    for n in sizes:
        accounted = partial(account_planned, planned_learning_run(n, degree, steps))
        seconds[n], losses = timed(accounted)
        figures[f"n={n}"] = {"seconds": round(seconds[n], 3), "peak_mib": round(peak_mib(accounted), 1),
                             "ill_conditioned_pairs": int(np.sum(losses.ill_conditioned))}
        print(f"audit, n={n}: {seconds[n]:.2f} s", flush=True)
    figures[f"seconds_ratio_{max(sizes)}_over_{min(sizes)}"] = seconds[max(sizes)] / seconds[min(sizes)]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=16, help="node processes of the step-time runs")
    parser.add_argument("--steps", type=int, default=40, help="gradient steps S of the step-time runs")
    parser.add_argument("--gossip-rounds", type=int, default=1, help="gossip rounds K per step")
    parser.add_argument("--dimension", type=int, default=16, help="model length (and gossip vector length)")
    parser.add_argument("--repetitions", type=int, default=3, help="runs of each, interleaved")
    parser.add_argument("--audit-n", type=int, nargs="+", default=[64, 256], help="graph sizes for the audit")
    parser.add_argument("--audit-steps", type=int, default=20, help="steps T of the audited run")
    parser.add_argument("--degree", type=int, default=6, help="degree of the audit's random regular graphs")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3: the first step is not measured")

    result = {
        "step_time": step_figures(args.n, args.steps, args.gossip_rounds, args.dimension, args.repetitions),
        "audit": audit_figures(args.audit_n, args.degree, args.audit_steps),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
