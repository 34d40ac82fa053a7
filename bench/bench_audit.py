"""Benchmark: the auditor's accountants at the papers' scale, against straightforward dense code.

Measured in one run, each product against the dense reference of the tests
(`tests/accounting/reference.py`: dense W_t products, one message or one observer at a time):
* exact losses (certified float interval: Krylov bases, modular ranks) on hypercubes and
  Erdos-Renyi graphs of 256, 1024 and 2048 nodes, T = T_stop: seconds, peak memory, interval
  widths, unresolved observers; against the dense pseudo-inverse up to --dense-max nodes;
* paper column (Muffliato Thm 1) on the 2048-node hypercube, T = 19;
* exact losses of randomized gossip (one simulated schedule) on a 64-node Erdos-Renyi graph.
Seconds are wall clock without tracing. Peak memory of a product compared with its dense
version is a second, traced run (tracemalloc sees numpy's buffers); for the exact losses at
scale it is the process's peak resident size after the step (steps run in increasing n).

Usage: .venv/bin/python bench/bench_audit.py [--paper-n 2048] [--paper-rounds 19]
       [--exact-n 256 1024 2048] [--dense-max 256] [--async-n 64] [--async-ticks 10]
Writes bench/results/audit.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the dense references live with the tests

from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.protocols.muffliato.accountant import transcript_geometry
from coordinator_tools.audit.protocols.muffliato.paper import message_sum
from coordinator_tools.audit.protocols.muffliato.transcript import (
    Transcript,
    planned_transcript,
)
from coordinator_tools.audit.protocols.muffliato_async.accountant import linear_model
from coordinator_tools.audit.protocols.muffliato_async.simulate import (
    simulated_schedule,
)
from coordinator_tools.theory import muffliato_t_stop, worst_case_spread
from coordinator_tools.topology import generators
from coordinator_tools.topology.build import build_topology
from node.protocols.muffliato_async import MuffliatoAsyncParams
from tests.accounting.reference import (
    dense_async_geometry,
    dense_geometry,
    dense_paper_sum,
    topology_from_graph,
)

RESULTS = ROOT / "bench" / "results"
MIB = 1024.0 * 1024.0


def timed(work: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def peak_mib(work: Callable[[], object]) -> float:
    tracemalloc.start()
    work()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / MIB


def compare(name: str, product: Callable[[], np.ndarray], dense: Callable[[], np.ndarray]) -> dict[str, object]:
    """Time both, trace the product's memory, and check they agree off the diagonal."""
    product_s, ours = timed(product)
    dense_s, theirs = timed(dense)
    off = ~np.eye(ours.shape[0], dtype=bool)
    figures = {
        "seconds": round(product_s, 3),
        "peak_mib": round(peak_mib(product), 1),
        "dense_seconds": round(dense_s, 3),
        "speedup_vs_dense": round(dense_s / product_s, 2),
        "max_abs_difference": float(np.max(np.abs(ours[off] - theirs[off]))),
    }
    print(f"{name}: {figures['seconds']} s, peak {figures['peak_mib']} MiB; dense {figures['dense_seconds']} s "
          f"-> {figures['speedup_vs_dense']}x faster; max |difference| {figures['max_abs_difference']:.1e}", flush=True)
    return figures


def exact_figures(graph_name: str, transcript: Transcript, dense_max: int) -> dict[str, object]:
    """Time the exact geometry, its peak resident memory, widths, and the dense reference when small."""
    seconds, geometry = timed(lambda: transcript_geometry(transcript, method="float"))
    off = ~np.eye(transcript.n, dtype=bool)
    width = (geometry.upper - geometry.lower)[off]
    figures: dict[str, object] = {
        "n": transcript.n, "rounds": transcript.rounds, "method": geometry.method,
        "seconds": round(seconds, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "width_max": float(width.max()), "width_mean": float(width.mean()),
        "unresolved_observers": len(geometry.unresolved),
        "ill_conditioned_pairs": int(geometry.ill_conditioned.sum()),
        "reconstructable_pairs": int(geometry.reconstructable.sum()),
    }  # fmt: skip
    if transcript.n <= dense_max:
        dense_s, dense = timed(lambda: dense_geometry(transcript))
        figures.update(dense_seconds=round(dense_s, 3), speedup_vs_dense=round(dense_s / seconds, 2),
                       max_abs_difference_vs_dense=float(np.max(np.abs(geometry.lower[off] - dense[off]))))
    print(f"exact losses, {graph_name} n={transcript.n}, T={transcript.rounds}: "
          + ", ".join(f"{key} {value}" for key, value in figures.items() if key not in ("n", "rounds")), flush=True)
    return figures


def transcript_for(graph_name: str, n: int, rounds: int | None) -> Transcript:
    """A planned accelerated run; rounds None means T_stop at sigma = 1, sensitivity 1."""
    graph = generators.hypercube(n) if graph_name == "hypercube" else generators.erdos_renyi(n, seed=1)
    topology = topology_from_graph(graph, rounds=rounds or 1, accelerated=True)
    if rounds is None:
        rounds = muffliato_t_stop(n, topology.spectral_gap, 1.0, worst_case_spread(1.0), True)
    return planned_transcript(topology, rounds=rounds, accelerated=True)


def async_topology(n: int, ticks: int):
    """A randomized Muffliato topology on an Erdos-Renyi graph, `ticks` ticks per node."""
    params = MuffliatoAsyncParams(sigma=1.0, sensitivity=1.0, alpha=2.0, dimension=1, exchanges=ticks)
    return build_topology(generators.erdos_renyi(n, seed=1), graph_name="erdos_renyi", run_id="bench",
                          protocol=params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper-n", type=int, default=2048, help="hypercube size for the paper column")
    parser.add_argument("--paper-rounds", type=int, default=19, help="rounds T for the paper column")
    parser.add_argument("--exact-n", type=int, nargs="+", default=[256, 1024, 2048],
                        help="graph sizes for the exact losses (increasing)")
    parser.add_argument("--dense-max", type=int, default=256, help="largest n compared with the dense reference")
    parser.add_argument("--async-n", type=int, default=64, help="graph size for randomized gossip")
    parser.add_argument("--async-ticks", type=int, default=10, help="ticks per node of randomized gossip")
    options = parser.parse_args()

    results: dict[str, object] = {}
    for n in sorted(options.exact_n):  # first, so each step's peak resident size is its own
        for graph_name in ("hypercube", "erdos_renyi"):
            results[f"exact_{graph_name}_{n}"] = exact_figures(graph_name, transcript_for(graph_name, n, None),
                                                                      options.dense_max)
    paper = transcript_for("hypercube", options.paper_n, options.paper_rounds)
    results["paper_hypercube"] = {
        "n": paper.n, "rounds": paper.rounds,
        **compare(f"paper column, hypercube n={paper.n}, T={paper.rounds}",
                  lambda: message_sum(paper), lambda: dense_paper_sum(paper)),
    }  # fmt: skip
    schedule = simulated_schedule(async_topology(options.async_n, options.async_ticks), np.random.default_rng(0))
    exchanges = [(e.initiator, e.responder, True, True) for e in schedule.exchanges]
    views = [list(view) for view in schedule.received]
    results["exact_async_erdos_renyi"] = {
        "n": schedule.n, "exchanges": len(exchanges),
        **compare(f"exact losses, randomized gossip, erdos_renyi n={schedule.n}, {len(exchanges)} exchanges",
                  lambda: view_geometry(linear_model(schedule), method="float").lower,
                  lambda: dense_async_geometry(schedule.n, exchanges, views)),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "audit.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS / 'audit.json'}")


if __name__ == "__main__":
    main()
