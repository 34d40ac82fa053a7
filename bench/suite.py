"""The benchmarks of the suite, and how one is run: each case isolated, then its rows derived.

A case that fails is recorded with its error and the suite goes on, so a long run keeps what
it measured; the document is rewritten after every benchmark for the same reason.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import audit, bundles, cohosted, correlated, exchanges, gossip, learning, tokens, utility, virtual
from bench.figures import Row, Sizes
from bench.isolate import Measured, run_case
from bench.report import machine, table, write

Cases = Callable[[Sizes], list[dict]]
Rows = Callable[[list[tuple[dict, Measured]]], list[Row]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    summary: str
    target: str  # module:function measuring one case in a child process
    cases: Cases
    rows: Rows
    timeout_s: float = 1800.0


BENCHMARKS = [
    Benchmark("gossip", "synchronous round latency (16 processes) vs bare-gRPC exchange and ping-pong",
              "bench.gossip:measure", gossip.latency_cases, gossip.latency_rows),
    Benchmark("throughput", "payload throughput D=1e5, 1e6 (2 processes) vs raw gRPC bytes",
              "bench.gossip:measure", gossip.throughput_cases, gossip.throughput_rows),
    Benchmark("exchanges", "randomized gossip: committed exchanges/s (16 processes) vs raw request/reply",
              "bench.exchanges:measure", exchanges.cases, exchanges.rows),
    Benchmark("tokens", "ring-sum token hops/s (16 processes) vs raw request/reply",
              "bench.tokens:measure", tokens.cases, tokens.rows),
    Benchmark("virtual", "`netdp run --virtual` hypercubes: s/round, peak memory, memory per node",
              "bench.virtual:measure", virtual.cases, virtual.rows, timeout_s=3600.0),
    Benchmark("bundles", "virtual hypercube round, bundled deliveries vs message by message, back to back",
              "bench.bundles:measure", bundles.cases, bundles.rows, timeout_s=3600.0),
    Benchmark("cohosted", "many node ids per gRPC process over mTLS vs a virtual run of the same graph",
              "bench.cohosted:measure", cohosted.cases, cohosted.rows),
    Benchmark("audit", "auditor: exact and paper columns, seconds and memory, speed-up over dense code",
              "bench.audit:measure", audit.cases, audit.rows, timeout_s=3600.0),
    Benchmark("decor-audit", "DECOR's whole audit vs Muffliato's, hypercube n=64, 256, T=20: seconds, peak memory",
              "bench.correlated:measure", correlated.cases, correlated.rows, timeout_s=3600.0),
    Benchmark("utility", "measured MSE vs Muffliato Thm 2's bound and central DP at the same mean loss",
              "bench.utility:measure", utility.cases, utility.rows, timeout_s=3600.0),
    Benchmark("learning", "Muffliato-GD step vs its gossip alone (16 processes)",
              "bench.learning:step_times", learning.step_cases, learning.step_rows),
    Benchmark("learning-audit", "Muffliato-GD exact audit time and memory, n=64, 256",
              "bench.learning:audit_time", learning.audit_cases, learning.audit_rows),
]


def run_benchmark(benchmark: Benchmark, sizes: Sizes) -> tuple[dict, list[Row]]:
    """Every case of one benchmark, each in its own process; its JSON part and its table rows."""
    done: list[tuple[dict, Measured]] = []
    cases: list[dict] = []
    for params in benchmark.cases(sizes):
        print(f"[{benchmark.name}] {params}", file=sys.stderr, flush=True)
        try:
            measured = run_case(benchmark.target, params, timeout_s=benchmark.timeout_s)
        except RuntimeError as error:
            print(f"[{benchmark.name}] failed: {error}", file=sys.stderr, flush=True)
            cases.append({"parameters": params, "error": str(error)})
            continue
        done.append((params, measured))
        cases.append({"parameters": params, **dataclasses.asdict(measured)})
    rows = benchmark.rows(done) if done else []
    return {"summary": benchmark.summary, "cases": cases, "ratios": [dataclasses.asdict(row) for row in rows]}, rows


def run_suite(names: list[str], sizes: Sizes, out: Path) -> str:
    """Run the named benchmarks, write the document to `out` as it grows; the table."""
    document: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
                      "sizes": dataclasses.asdict(sizes), "benchmarks": {}}
    rows: dict[str, list[Row]] = {}
    for benchmark in BENCHMARKS:
        if benchmark.name in names:
            document["benchmarks"][benchmark.name], rows[benchmark.name] = run_benchmark(benchmark, sizes)
            document["table"] = table(rows)
            write(document, out)
    return document["table"]
