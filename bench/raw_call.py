"""The floor a pairwise exchange cannot beat: one bare-gRPC request/reply with a random neighbour.

One process per node, same topology, Poisson clock, choice of peer and payload size as a
randomized Muffliato run, but nothing of netdp on the path: raw bytes in one unary call
each way (no protobuf, no lock, no validation, no view log, no commit message). On each
tick a node sends its bytes to a neighbour and waits for the neighbour's bytes in the
reply. Like netdp's nodes it starts ticking once its neighbours answer, ticks for the
topology's `duration_s`, then keeps serving until every neighbour has said it is done.
bench_exchanges.py starts these processes and compares their call rate with netdp's
committed exchanges.

Usage (one process per node): python bench/raw_call.py TOPOLOGY ID OUT.json
Writes {"calls", "first_call_unix", "last_reply_unix"} to OUT.json.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import grpc
import numpy as np

from node.protocols.muffliato_async import activation
from node.topology import load_topology
from node.transport.grpc_server import bind_address

SERVICE = "bench.RawCall"
# How long a node that has made its ticks waits for its slowest neighbour to finish too.
WIND_DOWN_TIMEOUT_S = 120.0


class RawPeer:
    """The server side: answer every call with our bytes, and count neighbours that are done."""

    def __init__(self, payload: bytes, neighbours: int) -> None:
        self._payload = payload
        self._waiting = neighbours
        self.all_done = asyncio.Event()

    async def exchange(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return self._payload

    async def done(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self._waiting -= 1
        if self._waiting == 0:
            self.all_done.set()
        return b""


async def run(topology_path: Path, node_id: int) -> dict[str, float]:
    """Tick for the topology's duration, one call per tick; return the call count and its time span."""
    topology = load_topology(topology_path)
    params = topology.protocol
    neighbours, weights = activation(topology, node_id)
    payload = bytes(8 * params.dimension)
    peer = RawPeer(payload, len(neighbours))
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Exchange": grpc.unary_unary_rpc_method_handler(peer.exchange),
        "Done": grpc.unary_unary_rpc_method_handler(peer.done),
    }),))
    server.add_insecure_port(bind_address(topology.address_of(node_id)))
    await server.start()
    channels = {v: grpc.aio.insecure_channel(topology.address_of(v)) for v in neighbours}
    exchange = {v: channel.unary_unary(f"/{SERVICE}/Exchange") for v, channel in channels.items()}
    await asyncio.gather(*(channel.channel_ready() for channel in channels.values()))

    rng = np.random.default_rng()
    calls, first_call, last_reply = 0, 0.0, 0.0
    stop_at = time.monotonic() + params.duration_s
    while time.monotonic() < stop_at:
        await asyncio.sleep(rng.exponential(1.0 / params.tick_rate))
        target = int(rng.choice(neighbours, p=weights))
        if not calls:
            first_call = time.time()
        await exchange[target](payload, timeout=params.exchange_timeout_s)
        last_reply = time.time()
        calls += 1

    await asyncio.gather(*(channel.unary_unary(f"/{SERVICE}/Done")(b"", timeout=WIND_DOWN_TIMEOUT_S,
                                                                    wait_for_ready=True)
                           for channel in channels.values()))
    await asyncio.wait_for(peer.all_done.wait(), WIND_DOWN_TIMEOUT_S)
    for channel in channels.values():
        await channel.close()
    await server.stop(1.0)
    return {"calls": calls, "first_call_unix": first_call, "last_reply_unix": last_reply}


if __name__ == "__main__":
    topology_file, node, out = sys.argv[1:4]
    figures = asyncio.run(run(Path(topology_file), int(node)))
    Path(out).write_text(json.dumps(figures) + "\n")
