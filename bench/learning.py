"""What Muffliato-GD costs over its gossip on node processes, and what its exact audit costs.

* Step time: n node processes on the hypercube run Muffliato-GD (logistic loss on `netdp data
  split`'s separable problem, the node's whole share every step, σ = 1, K plain gossip rounds
  per step), then synchronous Muffliato runs the same S·K rounds on the same graph and dimension
  (bench.gossip's topology). Repetitions alternate the order so that a drift of the shared
  machine's load weighs on both. A step's time is, per node, from finishing round tK to
  finishing round (t+1)K, from the view logs, the first step left out.
* Audit time: the Muffliato-GD accountant (the realized schedule unrolled, every pair's
  matrix-factorization sensitivity, the paper columns, the conversions) on a planned run, on
  random d-regular graphs, T steps, K = 1; one process per n.
"""

from __future__ import annotations

import statistics
import time

import networkx as nx
import numpy as np

from bench.figures import Row, Sizes
from bench.gossip import GRAPH, gossip_topology
from bench.isolate import Measured
from bench.loopback import loopback_topology, new_root, whole_run
from bench.viewlogs import round_latencies_ms
from coordinator_tools.audit.protocols.muffliato.transcript import (
    Transcript,
    planned_transcript,
)
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account
from coordinator_tools.audit.run_audit import DEFAULT_DELTA
from coordinator_tools.dataprep.learning_data import SourceOptions, split_dataset, write_split
from coordinator_tools.topology.build import build_topology
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import Topology

DATASET_SIZE = 1000  # 800 training examples: 50 per node at n = 16
AUDIT_GRAPH_SEED = 1


def learning_params(steps: int, gossip_rounds: int, dimension: int) -> MuffliatoGDParams:
    """Logistic Muffliato-GD with a whole dataset's sensitivity 2C, a noise draw every step."""
    return MuffliatoGDParams(sigma=1.0, sensitivity=2.0, alpha=2.0, dimension=dimension, task="logistic",
                             steps=steps, gossip_rounds=gossip_rounds, learning_rate=1.0, clip=1.0,
                             adjacency="dataset")


def step_ms(topology: Topology, round_ms: list[float], rounds_per_step: int) -> list[float]:
    """Sums of K consecutive round latencies from round tK on, per node: the steps t ≥ 1."""
    rounds = topology.protocol.rounds
    per_node = np.array(round_ms).reshape(topology.n, rounds - 2)[:, rounds_per_step - 1:]
    whole = per_node.shape[1] // rounds_per_step * rounds_per_step
    return per_node[:, :whole].reshape(topology.n, -1, rounds_per_step).sum(axis=2).ravel().tolist()


def step_times(n: int, steps: int, gossip_rounds: int, dimension: int, repetitions: int) -> dict:
    """Median ms per step of Muffliato-GD and of its gossip alone, repetitions interleaved."""
    root = new_root("learning")
    rounds = steps * gossip_rounds
    planned = loopback_topology(GRAPH, n, learning_params(steps, gossip_rounds, dimension), "bench-learning")
    shares, test, info, _ = split_dataset("separable", planned, seed=0, partition="iid", skew=None,
                                          options=SourceOptions(size=DATASET_SIZE))
    write_split(root / "learning-data", shares, test, info)
    runs: dict[str, list[list[float]]] = {"learning": [], "gossip": []}
    for repetition in range(repetitions):
        for label in ("learning", "gossip") if repetition % 2 == 0 else ("gossip", "learning"):
            folder = root / f"{label}-{repetition}"
            folder.mkdir()
            if label == "learning":  # fresh ports every run
                topology = loopback_topology(GRAPH, n, planned.protocol, "bench-learning")
                rundir = whole_run(topology, folder, root / "learning-data")
            else:
                topology = gossip_topology(n, rounds, dimension)
                rundir = whole_run(topology, folder)
            runs[label].append(step_ms(topology, round_latencies_ms(rundir, n), gossip_rounds))
    every = {label: [ms for run in label_runs for ms in run] for label, label_runs in runs.items()}
    return {"steps_measured": len(every["learning"]),
            "learning_median_ms_per_step": statistics.median(every["learning"]),
            "gossip_median_ms_per_step": statistics.median(every["gossip"]),
            "learning_run_medians_ms": [statistics.median(run) for run in runs["learning"]],
            "gossip_run_medians_ms": [statistics.median(run) for run in runs["gossip"]]}


def planned_learning_run(n: int, degree: int, steps: int) -> Transcript:
    """A planned Muffliato-GD run, K = 1, on a connected random `degree`-regular graph."""
    graph = nx.random_regular_graph(degree, n, seed=AUDIT_GRAPH_SEED)
    if not nx.is_connected(graph):
        raise RuntimeError(f"the random {degree}-regular graph on {n} nodes is not connected: choose another seed")
    topology = build_topology(graph, graph_name=f"random_{degree}_regular", run_id="bench-learning-audit",
                              protocol=learning_params(steps, 1, 1))
    return planned_transcript(topology, accelerated=False, rounds_per_step=1)


def audit_time(n: int, degree: int, steps: int) -> dict:
    """Seconds of the exact accounting of every pair of a planned run, at its published σ, Δ, α."""
    run = planned_learning_run(n, degree, steps)
    params = run.topology.protocol
    start = time.perf_counter()
    losses = account(run, sigma=params.sigma, sensitivity=params.sensitivity, alpha=params.alpha, delta=DEFAULT_DELTA)
    return {"seconds": time.perf_counter() - start, "ill_conditioned_pairs": int(np.sum(losses.ill_conditioned))}


def step_cases(sizes: Sizes) -> list[dict]:
    return [{"n": sizes.pick(16, 4), "steps": sizes.pick(40, 5), "gossip_rounds": 1, "dimension": 16,
             "repetitions": sizes.pick(3, 1)}]


def step_rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    return [Row(f"Muffliato-GD step, n={params['n']} processes, D={params['dimension']}",
                f"{m.figures['learning_median_ms_per_step']:.1f} ms",
                f"its gossip alone {m.figures['gossip_median_ms_per_step']:.1f} ms",
                m.figures["learning_median_ms_per_step"] / m.figures["gossip_median_ms_per_step"])
            for params, m in done]


def audit_cases(sizes: Sizes) -> list[dict]:
    return [{"n": n, "degree": 6, "steps": sizes.pick(20, 5)} for n in sizes.pick((64, 256), (16, 32))]


def audit_rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    """Seconds and peak memory per n; the ratio is the time over the smallest n's."""
    smallest_params, smallest = min(done, key=lambda case: case[0]["n"])
    return [Row(f"Muffliato-GD exact audit, random {params['degree']}-regular n={params['n']}, T={params['steps']}",
                f"{m.figures['seconds']:.1f} s, peak {m.peak_rss_mib:.0f} MiB",
                f"n={smallest_params['n']} {smallest.figures['seconds']:.1f} s",
                m.figures["seconds"] / smallest.figures["seconds"])
            for params, m in done]
