"""Synchronous gossip rounds on node processes vs the same barrier exchange in bare gRPC.

n − 1 of the n nodes start first and wait in round 0 for the last one; meanwhile a client
measures unary health-check round trips to each of them (the raw ping-pong). Then the last
node starts, the run completes, and round latencies are read from the view logs. Finally
bench.raw_grpc runs the same barrier exchange on the same graph with the same payload: what
a round costs with n processes sharing this machine's cores before netdp does anything; and
once more with `--durable`, each message appended and fsync'd by its receiver before it is
acknowledged: the floor of any exchange that keeps what it received (the durability floor).
With a small n and a large D the same comparison is a payload throughput. The same round of
secure-neighbourhood and DECOR (masks or pairwise noise drawn and logged privately every round,
after a key agreement) is timed against the same floors: what their extra private records cost.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import node
from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.loopback import (
    loopback_topology,
    new_root,
    ping_pong_ms,
    raw_floor,
    staged_run,
)
from bench.viewlogs import round_latencies_ms
from node.protocols.decor import DecorParams
from node.protocols.muffliato import MuffliatoParams
from node.protocols.params import NoisyVectorParams
from node.protocols.secure_neighbourhood import SecureNeighbourhoodParams
from node.topology import Topology

GRAPH = "hypercube"
# The synchronous gossip protocols timed round by round: each one's Params with rounds and D left to fill in.
ROUND_PROTOCOLS: dict[str, type[NoisyVectorParams]] = {
    "muffliato": MuffliatoParams, "secure-neighbourhood": SecureNeighbourhoodParams, "decor": DecorParams}


def gossip_topology(n: int, rounds: int, dimension: int, protocol: str = "muffliato") -> Topology:
    """Synchronous `protocol` (accelerated Muffliato by default) on the n-node hypercube."""
    params = ROUND_PROTOCOLS[protocol](sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=rounds, dimension=dimension)
    return loopback_topology(GRAPH, n, params, "bench-gossip")


def netdp_round_ms(n: int, rounds: int, dimension: int, pings: int, protocol: str = "muffliato") -> dict:
    """Run the netdp cluster: ping-pong and round latencies (ms), and the source tree the code came from."""
    topology = gossip_topology(n, rounds, dimension, protocol)
    early = list(range(n - 1))
    rundir, ping_ms = staged_run(topology, new_root("gossip"), early,
                                 lambda: ping_pong_ms([topology.address_of(v) for v in early], pings))
    return {"source": str(Path(node.__file__).resolve().parent.parent), "degree": len(topology.neighbours[0]),
            "ping_ms": ping_ms, "round_ms": round_latencies_ms(rundir, n)}


def measure(n: int, rounds: int, dimension: int, pings: int, protocol: str = "muffliato") -> dict:
    """Median round latency of netdp, of the raw ping-pong and of the bare-gRPC exchange, in one run."""
    netdp = netdp_round_ms(n, rounds, dimension, pings, protocol)
    raw_ms, durable_ms = (
        exchange_round_ms(raw_floor("exchange", gossip_topology(n, rounds, dimension), new_root(f"gossip-{name}"),
                                    str(rounds), *extra))
        for name, extra in (("raw", ()), ("durable", ("--durable",))))
    return {"degree": netdp["degree"], "rounds_measured": len(netdp["round_ms"]),
            "round_median_ms": statistics.median(netdp["round_ms"]),
            "raw_exchange_round_median_ms": statistics.median(raw_ms),
            "durable_exchange_round_median_ms": statistics.median(durable_ms),
            "ping_pong_median_ms": statistics.median(netdp["ping_ms"]) if pings else None}


def exchange_round_ms(done: list[list[float]]) -> list[float]:
    """Round times (ms) of a raw barrier exchange from each node's round completion times, the first left out."""
    return [(b - a) * 1000 for times in done for a, b in itertools.pairwise(times[1:])]


def latency_cases(sizes: Sizes) -> list[dict]:
    """Muffliato's round with the ping-pong floor too; then the protocols that draw private records every round."""
    base = {"n": sizes.pick(16, 4), "rounds": sizes.pick(30, 8), "dimension": 16}
    return [{**base, "pings": sizes.pick(200, 20)},
            *({**base, "pings": 0, "protocol": protocol} for protocol in ("secure-neighbourhood", "decor"))]


def latency_rows(cases: list[tuple[dict, Measured]]) -> list[Row]:
    rows = []
    for params, measured in cases:
        f = measured.figures
        protocol = params.get("protocol", "muffliato")
        size = f"n={params['n']} processes, D={params['dimension']}"
        what = f"round latency, {size}" if protocol == "muffliato" else f"{protocol} round latency, {size}"
        rows.append(Row(what, f"{f['round_median_ms']:.1f} ms",
                        f"bare-gRPC exchange {f['raw_exchange_round_median_ms']:.1f} ms",
                        f["round_median_ms"] / f["raw_exchange_round_median_ms"],
                        "≤ 2×" if protocol == "muffliato" else ""))
        rows.append(Row(what, f"{f['round_median_ms']:.1f} ms",
                        f"durability floor {f['durable_exchange_round_median_ms']:.1f} ms",
                        f["round_median_ms"] / f["durable_exchange_round_median_ms"], ""))
        if f["ping_pong_median_ms"] is not None:
            rows.append(Row(what, f"{f['round_median_ms']:.1f} ms", f"gRPC ping-pong {f['ping_pong_median_ms']:.2f} ms",
                            f["round_median_ms"] / f["ping_pong_median_ms"], "≤ 3×"))
    return rows


def throughput_cases(sizes: Sizes) -> list[dict]:
    return [{"n": 2, "rounds": sizes.pick(10, 5), "dimension": dimension, "pings": 0}
            for dimension in sizes.pick((100_000, 1_000_000), (10_000, 100_000))]


def throughput_rows(cases: list[tuple[dict, Measured]]) -> list[Row]:
    """Payload MB/s of a round (every node sends D float64 to each neighbour) and the ratio raw / netdp time."""
    rows = []
    for params, measured in cases:
        f = measured.figures
        megabytes = params["n"] * f["degree"] * 8 * params["dimension"] / 1e6
        rows.append(Row(f"payload throughput, D={params['dimension']:.0e}, {params['n']} processes".replace("+0", ""),
                        f"{megabytes / f['round_median_ms'] * 1000:.0f} MB/s",
                        f"raw gRPC bytes {megabytes / f['raw_exchange_round_median_ms'] * 1000:.0f} MB/s",
                        f["raw_exchange_round_median_ms"] / f["round_median_ms"],
                        "≥ 0.5× at D=1e6"))
        rows.append(Row(f"payload throughput, D={params['dimension']:.0e}, {params['n']} processes".replace("+0", ""),
                        f"{megabytes / f['round_median_ms'] * 1000:.0f} MB/s",
                        f"durability floor {megabytes / f['durable_exchange_round_median_ms'] * 1000:.0f} MB/s",
                        f["durable_exchange_round_median_ms"] / f["round_median_ms"],
                        "≥ 0.7× at D=1e6"))
    return rows
