"""The floors netdp is compared with: the same traffic in bare gRPC, one process per node.

Same topology, payload size and (for calls) Poisson clock and choice of peer as the netdp
run, but nothing of netdp on the path: raw bytes in unary calls (no protobuf, no lock, no
validation, no view log, no noise, no mixing). Message size limits are lifted, as netdp
lifts them by streaming chunks.

* exchange: each round a node sends its bytes to every neighbour and waits until it holds
  every neighbour's bytes of that round (a synchronous gossip round's barrier). Writes the
  wall-clock time each round completed.
* call: on each tick of its clock a node sends its bytes to a neighbour and waits for the
  neighbour's bytes in the reply (a randomized gossip exchange's request/reply). It ticks for
  the topology's `duration_s`, then keeps serving until every neighbour is done. Writes
  {"calls", "first_call_unix", "last_reply_unix"}.

With `--durable` either mode is the durability floor: what durability requires and nothing
more. Each message is appended to a file of its receiver and fsync'd before it is answered (a
request by the server before its reply, a reply by the caller before its next call), as a
netdp node logs a message durably before acknowledging it.

Usage (one process per node): python -m bench.raw_grpc exchange|call TOPOLOGY ID OUT.json [ROUNDS] [--durable]
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import numpy as np

from node.protocols.muffliato_async import activation
from node.topology import Topology, load_topology

SERVICE = "bench.Raw"
HEADER = struct.Struct("<QI")  # round, sender
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
# How long a node that is done waits for its slowest neighbour to be done too.
WIND_DOWN_TIMEOUT_S = 120.0

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]


class Peer:
    """One node's server and channels: answers with its payload, counts rounds' arrivals and done neighbours."""

    def __init__(self, topology: Topology, node_id: int, journal: Path | None = None) -> None:
        """`journal`: the file each message this node receives is appended to and fsync'd in (the durable floor)."""
        self.topology = topology
        self.node_id = node_id
        self.neighbours = topology.neighbours[node_id]
        self.payload = bytes(8 * topology.protocol.dimension)
        self.arrived: dict[int, set[int]] = defaultdict(set)
        self.changed = asyncio.Condition()
        self.waiting = len(self.neighbours)
        self.server = grpc.aio.server(options=UNLIMITED)
        self.channels: dict[int, grpc.aio.Channel] = {}
        self.journal = None if journal is None else os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def persist(self, message: bytes) -> None:
        """Append and fsync `message` in a worker thread, as a node does with a record (nothing without a journal)."""
        if self.journal is not None:
            await asyncio.to_thread(append_synced, self.journal, message)

    async def start(self) -> None:
        handlers: dict[str, Handler] = {"Exchange": self.exchange, "Call": self.call, "Done": self.done}
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {name: grpc.unary_unary_rpc_method_handler(h) for name, h in handlers.items()}),))
        self.server.add_insecure_port(self.topology.address_of(self.node_id))
        await self.server.start()
        self.channels = {v: grpc.aio.insecure_channel(self.topology.address_of(v), options=UNLIMITED)
                         for v in self.neighbours}

    def method(self, neighbour: int, name: str) -> grpc.aio.UnaryUnaryMultiCallable:
        return self.channels[neighbour].unary_unary(f"/{SERVICE}/{name}")

    async def exchange(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        round_index, sender = HEADER.unpack_from(request)
        await self.persist(request)
        async with self.changed:
            self.arrived[round_index].add(sender)
            self.changed.notify_all()
        return b""

    async def all_arrived(self, round_index: int) -> None:
        """Wait until every neighbour's bytes of the round are in, and forget them."""
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.arrived[round_index]) >= len(self.neighbours))
            del self.arrived[round_index]

    async def call(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self.persist(request)
        return self.payload

    async def done(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async with self.changed:
            self.waiting -= 1
            self.changed.notify_all()
        return b""

    async def wind_down(self) -> None:
        """Tell every neighbour we are done, wait until they all are, and close."""
        await asyncio.gather(*(self.method(v, "Done")(b"", timeout=WIND_DOWN_TIMEOUT_S, wait_for_ready=True)
                               for v in self.neighbours))
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.waiting == 0), WIND_DOWN_TIMEOUT_S)
        for channel in self.channels.values():
            await channel.close()
        await self.server.stop(1.0)
        if self.journal is not None:
            os.close(self.journal)


def append_synced(fd: int, data: bytes) -> None:
    """One append of `data` and one fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


async def barrier_rounds(peer: Peer, rounds: int) -> list[float]:
    """Exchange for `rounds` rounds; the wall-clock time each round completed."""
    completed: list[float] = []
    for round_index in range(rounds):
        message = HEADER.pack(round_index, peer.node_id) + peer.payload
        await asyncio.gather(*(peer.method(v, "Exchange")(message, timeout=60, wait_for_ready=True)
                               for v in peer.neighbours))
        await peer.all_arrived(round_index)
        completed.append(time.time())
    return completed


async def clocked_calls(peer: Peer) -> dict[str, float]:
    """One call per tick of the topology's Poisson clock, for its duration; the call count and time span."""
    params = peer.topology.protocol
    neighbours, weights = activation(peer.topology, peer.node_id)
    await asyncio.gather(*(channel.channel_ready() for channel in peer.channels.values()))
    rng = np.random.default_rng()
    calls, first_call, last_reply = 0, 0.0, 0.0
    stop_at = time.monotonic() + params.duration_s
    while time.monotonic() < stop_at:
        await asyncio.sleep(rng.exponential(1.0 / params.tick_rate))
        target = int(rng.choice(neighbours, p=weights))
        first_call = first_call or time.time()
        reply = await peer.method(target, "Call")(peer.payload, timeout=params.exchange_timeout_s)
        await peer.persist(reply)
        last_reply = time.time()
        calls += 1
    return {"calls": calls, "first_call_unix": first_call, "last_reply_unix": last_reply}


async def run(mode: str, topology_path: Path, node_id: int, rounds: int, journal: Path | None) -> object:
    """Start the peer, run the mode's traffic, wind down; the mode's figures (`journal`: the durable floor's file)."""
    peer = Peer(load_topology(topology_path), node_id, journal)
    await peer.start()
    figures = await (barrier_rounds(peer, rounds) if mode == "exchange" else clocked_calls(peer))
    await peer.wind_down()
    return figures


if __name__ == "__main__":
    mode_arg, topology_file, node, out, *rest = sys.argv[1:]
    rounds_arg = [arg for arg in rest if arg != "--durable"]
    durable = Path(f"{out}.journal") if "--durable" in rest else None
    result = asyncio.run(run(mode_arg, Path(topology_file), int(node), int(rounds_arg[0]) if rounds_arg else 0,
                             durable))
    Path(out).write_text(json.dumps(result) + "\n")
