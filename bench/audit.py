"""The auditor at the papers' scale against straightforward dense code, one column and size per process.

Each case times one product of the auditor and, where affordable, the dense reference of the
tests (`tests/accounting/reference.py`: dense W_t products, one message or one observer at a
time), and checks that they agree:
* exact losses (certified float interval: Krylov bases, modular ranks) on hypercubes and
  Erdős–Rényi graphs at T = T_stop: seconds, interval widths, unresolved observers;
* the paper column (Muffliato Thm 1) on hypercubes at T = T_stop;
* exact losses of randomized gossip (one simulated schedule) on an Erdős–Rényi graph.
Seconds are wall clock without tracing; the paper and randomized columns' memory is a second,
traced run (tracemalloc sees numpy's buffers), the exact column's the case process's peak.
"""

from __future__ import annotations

import importlib
import sys
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType

import numpy as np

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.report import ROOT
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
from node.topology import Topology

GRAPHS = ("hypercube", "erdos_renyi")
ASYNC_TICKS = 10
MIB = 1024.0 * 1024.0


def references() -> ModuleType:
    """The dense references, which live with the tests (the repository root goes on the import path)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("tests.accounting.reference")


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
        "width_max": float(width.max()), "width_mean": float(width.mean()),
        "unresolved_observers": len(geometry.unresolved),
        "ill_conditioned_pairs": int(geometry.ill_conditioned.sum()),
        "reconstructable_pairs": int(geometry.reconstructable.sum()),
    }  # fmt: skip
    if transcript.n <= dense_max:
        dense_s, dense = timed(lambda: references().dense_geometry(transcript))
        figures.update(dense_seconds=round(dense_s, 3), speedup_vs_dense=round(dense_s / seconds, 2),
                       max_abs_difference_vs_dense=float(np.max(np.abs(geometry.lower[off] - dense[off]))))
    print(f"exact losses, {graph_name} n={transcript.n}, T={transcript.rounds}: "
          + ", ".join(f"{key} {value}" for key, value in figures.items() if key not in ("n", "rounds")), flush=True)
    return figures


def transcript_for(graph_name: str, n: int, rounds: int | None) -> Transcript:
    """A planned accelerated run; rounds None means T_stop at sigma = 1, sensitivity 1."""
    graph = generators.hypercube(n) if graph_name == "hypercube" else generators.erdos_renyi(n, seed=1)
    topology = references().topology_from_graph(graph, rounds=rounds or 1, accelerated=True)
    if rounds is None:
        rounds = muffliato_t_stop(n, topology.spectral_gap, 1.0, worst_case_spread(1.0), True)
    return planned_transcript(topology, rounds=rounds, accelerated=True)


def async_topology(n: int, ticks: int) -> Topology:
    """A randomized Muffliato topology on an Erdős–Rényi graph, `ticks` ticks per node."""
    params = MuffliatoAsyncParams(sigma=1.0, sensitivity=1.0, alpha=2.0, dimension=1, exchanges=ticks)
    return build_topology(generators.erdos_renyi(n, seed=1), graph_name="erdos_renyi", run_id="bench",
                          protocol=params)




def measure(column: str, graph: str, n: int, dense_max: int) -> dict:
    """One column on one graph at T = T_stop (randomized gossip: ASYNC_TICKS ticks per node), with its dense check."""
    if column == "async":
        schedule = simulated_schedule(async_topology(n, ASYNC_TICKS), np.random.default_rng(0))
        exchanges = [(e.initiator, e.responder, True, True) for e in schedule.exchanges]
        views = [list(view) for view in schedule.received]
        return {"n": n, "rounds": ASYNC_TICKS, "exchanges": len(exchanges),
                **compare(f"exact losses, randomized gossip, {graph} n={n}, {len(exchanges)} exchanges",
                          lambda: view_geometry(linear_model(schedule), method="float").lower,
                          lambda: references().dense_async_geometry(n, exchanges, views))}
    transcript = transcript_for(graph, n, None)
    if column == "exact":
        return exact_figures(graph, transcript, dense_max)
    return {"n": transcript.n, "rounds": transcript.rounds,
            **compare(f"paper column, {graph} n={n}, T={transcript.rounds}",
                      lambda: message_sum(transcript), lambda: references().dense_paper_sum(transcript))}


def cases(sizes: Sizes) -> list[dict]:
    dense_max = min(sizes.audit_n)
    exact = [{"column": "exact", "graph": graph, "n": n, "dense_max": dense_max}
             for n in sizes.audit_n for graph in GRAPHS]
    paper = [{"column": "paper", "graph": "hypercube", "n": n, "dense_max": max(sizes.audit_n)} for n in sizes.audit_n]
    randomized = [{"column": "async", "graph": "erdos_renyi", "n": sizes.pick(64, 16), "dense_max": 0}]
    return exact + paper + randomized


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    """Seconds and memory of each column, and its speed-up over the dense code where that ran."""
    table = []
    for params, m in done:
        f = m.figures
        dense = f"dense {f['dense_seconds']:.1f} s" if "dense_seconds" in f else "dense: not run at this n"
        column = "exact column, randomized gossip" if params["column"] == "async" else f"{params['column']} column"
        length = f"{f['exchanges']} exchanges" if params["column"] == "async" else f"T={f['rounds']}"
        target = "≤ 600 s at n=2048" if params["column"] == "exact" else ""
        table.append(Row(f"{column}, {params['graph']} n={params['n']}, {length}",
                         f"{f['seconds']:.1f} s, peak {m.peak_rss_mib:.0f} MiB", dense,
                         f.get("speedup_vs_dense"), target))
    return table
