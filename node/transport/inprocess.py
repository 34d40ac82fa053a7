"""In-process transport: many virtual nodes in one event loop, same protocol code.

For fast tests and scale experiments only; the networked path (gRPC between processes) is
what a real run uses. Messages still go through Receiver.accept, so validation, the
mailboxes and the view logs behave exactly as over gRPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from netdp.v1 import peer_pb2
from node.breaks import Breaks
from node.heap import run_pace
from node.host import NodeHost, NodeOutcome, StepHook
from node.noise import GaussianSampler, NodeSamplers
from node.receiver import Receiver, Reply
from node.topology import NetworkParams, Topology
from node.transport.base import LinkError
from node.transport.bundles import Courier, accept_in_process


class InProcessLink:
    """A PeerLink that calls the peer's Receiver directly (an absent peer is unreachable)."""

    def __init__(self, sender: int, receiver: Receiver | None) -> None:
        self._sender = sender
        self._receiver = receiver

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        await self._accept(envelope, data, timeout_s, call=False)

    async def call(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool
                   ) -> tuple[peer_pb2.Envelope, bytes]:
        reply = await self._accept(envelope, data, timeout_s, call=True)
        if reply is not None:
            return reply
        assert self._receiver is not None  # `_accept` went through it
        return self._receiver.acknowledgement(envelope)

    async def ping(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        """A peer in this process answers while it runs: no message needs to go through its receiver."""
        if self._receiver is None:
            raise LinkError("UNAVAILABLE", "peer is not running")

    async def _accept(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, call: bool) -> Reply:
        if self._receiver is None:  # an absent peer never comes up, so waiting for it is pointless
            raise LinkError("UNAVAILABLE", "peer is not running")
        return await accept_in_process(self._receiver, envelope, data, self._sender, timeout_s, call=call)

    async def close(self) -> None:
        return None


NodeStepHook = Callable[[int, int], Awaitable[None]]  # (node id, local step) as the step starts


async def run_inprocess(
    topology: Topology,
    values: Sequence[Any],
    log_root: Path,
    sampler_for: Callable[[int], GaussianSampler | NodeSamplers],
    *,
    absent: Collection[int] = (),
    on_step: NodeStepHook | None = None,
    return_exceptions: bool = False,
    network: NetworkParams | None = None,
    breaks: Mapping[int, Breaks] = MappingProxyType({}),
    bundled: bool = True,
) -> dict[int, NodeOutcome | BaseException]:
    """Run every node except `absent` ones in this event loop; logs go to log_root/node-<id>.

    `sampler_for(v)` gives node v's Gaussian sampler, or all its samplers (`make_samplers`) as a
    networked node has them. With `return_exceptions`, a node whose run raises does not stop the
    others: its entry in the result is the exception (as a node process would exit on its own).
    `network`: the deadlines every node keeps, if not the published ones; `breaks`: deliberate bugs
    of some nodes (negative controls). `bundled`: the one-way messages of a turn go as bundles (`Courier`), as
    between the co-hosted ids of a node process; else each alone (the same views, message by message).
    """
    running = [v for v in range(topology.n) if v not in absent]
    hosts: dict[int, NodeHost] = {}
    courier = Courier(lambda node: _receiver_of(hosts, node)) if bundled else None

    def link_factory(sender: int) -> Callable[[int], InProcessLink]:
        return lambda peer: InProcessLink(sender, _receiver_of(hosts, peer))

    def step_hook(node: int) -> StepHook | None:
        return None if on_step is None else (lambda step: on_step(node, step))

    for v in running:
        samplers = sampler_for(v)
        gaussian, randomized_response, laplace, coins = (
            (samplers.gaussian, samplers.randomized_response, samplers.laplace, samplers.coins)
            if isinstance(samplers, NodeSamplers) else (samplers, None, None, None))
        hosts[v] = NodeHost(topology, v, values[v], gaussian, Path(log_root) / f"node-{v}", link_factory(v),
                            on_step=step_hook(v), randomized_response=randomized_response, network=network,
                            laplace=laplace, coins=coins, breaks=breaks.get(v, Breaks()), courier=courier)
    try:
        with run_pace():
            outcomes = await asyncio.gather(*(hosts[v].run() for v in running), return_exceptions=return_exceptions)
    finally:
        for host in hosts.values():
            await host.close()
    return dict(zip(running, outcomes))


def _receiver_of(hosts: Mapping[int, NodeHost], node: int) -> Receiver | None:
    host = hosts.get(node)
    return None if host is None else host.receiver
