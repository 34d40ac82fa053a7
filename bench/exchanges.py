"""Randomized Muffliato: committed exchanges per second on node processes vs bare-gRPC request/reply.

Back to back on the same graph (the demo's hypercube, σ = 0: noise is drawn once and costs
nothing here): a muffliato-async run whose Poisson clocks tick fast enough that every node is
always in an exchange or about to start one, then the same clock, choice of peer and payload
in bare gRPC (one unary call each way per tick), each for `duration` seconds. netdp's rate is
the initiators' committed exchanges over first proposal .. last commit. The ratio is what the
commit rule costs over the floor: two calls instead of one, fsync'd records on both sides, and
a node in an exchange declining every other proposal (the faster the clocks, the more declines:
netdp's committed rate peaks at a few tens of ticks per second per node, while the floor keeps
rising with the clock until the cores are full). The durability floor is the same bare-gRPC
traffic with each request and each reply appended and fsync'd by its receiver.
"""

from __future__ import annotations

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.loopback import loopback_topology, new_root, raw_floor, whole_run
from bench.viewlogs import initiated_exchanges
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.topology import Topology

GRAPH = "hypercube"  # what `netdp demo` runs on


def async_topology(n: int, duration: float, tick_rate: float, dimension: int) -> Topology:
    return loopback_topology(GRAPH, n, MuffliatoAsyncParams(sigma=0.0, sensitivity=1.0, alpha=2.0, dimension=dimension,
                                                            duration_s=duration, tick_rate=tick_rate),
                             "bench-exchanges")


def measure(n: int, duration: float, tick_rate: float, dimension: int) -> dict:
    """netdp's committed exchanges/s and the floor's calls/s, in one run."""
    rundir = whole_run(async_topology(n, duration, tick_rate, dimension), new_root("exchanges"))
    outcomes, seconds = initiated_exchanges(rundir, n)
    floors = {}
    for name, extra in (("raw", ()), ("durable", ("--durable",))):
        done = raw_floor("call", async_topology(n, duration, tick_rate, dimension), new_root(f"exchanges-{name}"),
                         *extra, timeout_s=3 * duration + 120.0)
        calls, span = sum(f["calls"] for f in done), calls_span_s(done)
        floors |= {f"{name}_calls": calls, f"{name}_seconds": span, f"{name}_calls_per_s": calls / span}
    return {"outcomes": dict(outcomes), "seconds": seconds, "committed_per_s": outcomes["committed"] / seconds,
            **floors}


def calls_span_s(done: list[dict]) -> float:
    """First call to last reply over every node of a raw call run."""
    return max(f["last_reply_unix"] for f in done) - min(f["first_call_unix"] for f in done)


def cases(sizes: Sizes) -> list[dict]:
    return [{"n": sizes.pick(16, 4), "duration": sizes.pick(20.0, 3.0), "tick_rate": 1000.0, "dimension": 16}]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    return [Row(f"committed exchanges/s, n={params['n']} processes, {params['tick_rate']:.0f} ticks/s per node",
                f"{m.figures['committed_per_s']:.0f}/s", f"{floor} {m.figures[f'{name}_calls_per_s']:.0f}/s",
                m.figures["committed_per_s"] / m.figures[f"{name}_calls_per_s"], target)
            for params, m in done
            for name, floor, target in (("raw", "raw request/reply", ""), ("durable", "durability floor", "≥ 0.5×"))]
