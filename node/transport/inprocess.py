"""In-process transport: many virtual nodes in one event loop, same protocol code.

For fast tests and scale experiments only; the networked path (gRPC between processes) is
what a real run uses. Messages still go through Receiver.accept, so validation, the
mailboxes and the view logs behave exactly as over gRPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import numpy as np

from netdp.v1 import peer_pb2
from node.host import NodeHost, NodeOutcome
from node.noise import GaussianSampler
from node.receiver import Receiver
from node.refusal import Refusal
from node.topology import Topology
from node.transport.base import LinkError


class InProcessLink:
    """A PeerLink that calls the peer's Receiver directly (an absent peer is unreachable)."""

    def __init__(self, sender: int, receiver: Receiver | None) -> None:
        self._sender = sender
        self._receiver = receiver

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        await self._accept(envelope, data, timeout_s)

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        reply = await self._accept(envelope, data, timeout_s)
        return reply or self._receiver.acknowledgement(envelope)

    async def _accept(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float):
        if self._receiver is None:  # an absent peer never comes up, so waiting for it is pointless
            raise LinkError("UNAVAILABLE", "peer is not running")
        try:
            return await asyncio.wait_for(self._receiver.accept(envelope, data, self._sender), timeout_s)
        except Refusal as refusal:
            raise LinkError(refusal.code, refusal.detail) from None
        except TimeoutError:
            raise LinkError("DEADLINE_EXCEEDED", "peer did not answer in time") from None

    async def close(self) -> None:
        return None


async def run_inprocess(
    topology: Topology,
    values: Sequence[np.ndarray],
    log_root: Path,
    sampler_for: Callable[[int], GaussianSampler],
    *,
    absent: Collection[int] = (),
) -> dict[int, NodeOutcome]:
    """Run every node except `absent` ones in this event loop; logs go to log_root/node-<id>."""
    running = [v for v in range(topology.n) if v not in absent]
    hosts: dict[int, NodeHost] = {}

    def link_factory(sender: int) -> Callable[[int], InProcessLink]:
        return lambda peer: InProcessLink(sender, _receiver_of(hosts, peer))

    for v in running:
        hosts[v] = NodeHost(topology, v, values[v], sampler_for(v), Path(log_root) / f"node-{v}", link_factory(v))
    try:
        outcomes = await asyncio.gather(*(hosts[v].run() for v in running))
    finally:
        for host in hosts.values():
            await host.close()
    return {outcome.node_id: outcome for outcome in outcomes}


def _receiver_of(hosts: Mapping[int, NodeHost], node: int) -> Receiver | None:
    host = hosts.get(node)
    return None if host is None else host.receiver
