"""Token hops per second along a ring of node processes vs raw request/reply to the same processes.

A ring-sum run (K cycles, σ > 0, so noisy hops draw as in use) starts without node 0, the
token's origin: nodes 1..n−1 come up and wait, and meanwhile a client measures unary
health-check round trips to each of them (the raw request/reply floor). Then node 0 starts
and the token goes K times round the ring. A hop's time is the gap between consecutive
`received` custody records of the sum token: a contribution (and a noise draw where the rule
puts one), a durable record on each side and one custody delivery. A token has one holder at a
time, so the ring is bounded by one request/reply at a time whatever the cores: the raw round
trip is the right floor; the durability floor adds what a hop must cost at least to be kept:
one append and fsync of the token's bytes, timed on the same disk in the same run.
"""

from __future__ import annotations

import statistics

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.loopback import append_fsync_ms, loopback_topology, new_root, ping_pong_ms, staged_run
from bench.viewlogs import token_hop_ms
from node.protocols.ring_sum import RingSumParams


def measure(n: int, cycles: int, dimension: int, pings: int) -> dict:
    """Median ms per hop and per raw round trip, in one run."""
    topology = loopback_topology("ring", n, RingSumParams(sigma=0.1, sensitivity=1.0, alpha=2.0, dimension=dimension,
                                                          cycles=cycles), "bench-tokens")
    waiting = list(range(1, n))
    rundir, ping_ms = staged_run(topology, new_root("tokens"), waiting,
                                 lambda: ping_pong_ms([topology.address_of(v) for v in waiting], pings))
    hop_ms = token_hop_ms(rundir, n)
    fsync_ms = append_fsync_ms(8 * dimension, pings, rundir)
    return {"hops_measured": len(hop_ms), "hop_median_ms": statistics.median(hop_ms),
            "raw_round_trip_median_ms": statistics.median(ping_ms),
            "append_fsync_median_ms": statistics.median(fsync_ms),
            "durable_round_trip_median_ms": statistics.median(ping_ms) + statistics.median(fsync_ms)}


def cases(sizes: Sizes) -> list[dict]:
    return [{"n": sizes.pick(16, 4), "cycles": sizes.pick(20, 3), "dimension": 16, "pings": sizes.pick(200, 20)}]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    return [Row(f"token hops/s, ring of n={params['n']} processes", f"{1000 / m.figures['hop_median_ms']:.0f}/s",
                f"{floor} {1000 / m.figures[f'{name}_round_trip_median_ms']:.0f}/s",
                m.figures[f"{name}_round_trip_median_ms"] / m.figures["hop_median_ms"], target)
            for params, m in done
            for name, floor, target in (("raw", "raw request/reply", ""), ("durable", "durability floor", "≥ 0.5×"))]
