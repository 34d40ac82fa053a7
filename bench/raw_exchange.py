"""The floor a gossip round cannot beat: the same barrier exchange in bare gRPC.

One process per node, same topology and payload size as a netdp run, but nothing of
netdp on the path: raw bytes in a unary call (no protobuf, no validation, no view log,
no noise, no mixing). Each round a node sends its bytes to every neighbour and waits
until it holds every neighbour's bytes for that round. bench_gossip.py starts these
processes and compares their round latency with netdp's.

Usage (one process per node): python bench/raw_exchange.py TOPOLOGY ID ROUNDS OUT.json
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import time
from collections import defaultdict
from pathlib import Path

import grpc

from node.topology import load_topology
from node.transport.grpc_server import bind_address

METHOD = "/bench.Raw/Exchange"
HEADER = struct.Struct("<QI")  # round, sender


class RawInbox:
    """Bytes received per round, and a condition to wait for a full neighbourhood."""

    def __init__(self) -> None:
        self.by_round: dict[int, set[int]] = defaultdict(set)
        self.changed = asyncio.Condition()

    async def handle(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        round_index, sender = HEADER.unpack_from(request)
        async with self.changed:
            self.by_round[round_index].add(sender)
            self.changed.notify_all()
        return b""

    async def wait_for(self, round_index: int, count: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.by_round[round_index]) >= count)
            del self.by_round[round_index]


async def run(topology_path: Path, node_id: int, rounds: int) -> list[float]:
    """Exchange for `rounds` rounds; return the wall-clock time each round completed."""
    topology = load_topology(topology_path)
    neighbours = topology.neighbours[node_id]
    inbox = RawInbox()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "bench.Raw", {"Exchange": grpc.unary_unary_rpc_method_handler(inbox.handle)}),))
    server.add_insecure_port(bind_address(topology.address_of(node_id)))
    await server.start()
    channels = [grpc.aio.insecure_channel(topology.address_of(peer)) for peer in neighbours]
    calls = [channel.unary_unary(METHOD) for channel in channels]
    payload = bytes(8 * topology.protocol.dimension)
    completed: list[float] = []
    for round_index in range(rounds):
        message = HEADER.pack(round_index, node_id) + payload
        await asyncio.gather(*(call(message, timeout=60, wait_for_ready=True) for call in calls))
        await inbox.wait_for(round_index, len(neighbours))
        completed.append(time.time())
    await asyncio.sleep(0.5)  # let slower neighbours finish their last round against this server
    for channel in channels:
        await channel.close()
    await server.stop(1.0)
    return completed


if __name__ == "__main__":
    topology_file, node, rounds_arg, out = sys.argv[1:5]
    times = asyncio.run(run(Path(topology_file), int(node), int(rounds_arg)))
    Path(out).write_text(json.dumps(times) + "\n")
