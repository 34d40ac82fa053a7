"""A networked node: the NodeHost behind a gRPC server, with one long-lived channel per peer.

Lifecycle: start the server (health SERVING), run the protocol (channels open on first
use), write the estimate, shut down gracefully once the protocol says it is done (each
protocol ends only when its neighbours no longer need it). SIGTERM/SIGINT stop the run
cleanly; the logs stay readable either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from node import security
from node.host import NodeHost, NodeOutcome, StepHook
from node.noise import SamplerKind, make_samplers
from node.protocols.registry import protocol_spec
from node.topology import Topology
from node.transport.grpc_link import GrpcPeerLink
from node.transport.faults import LostAnswers
from node.transport.grpc_server import start_server, stop_server

LOG = logging.getLogger("netdp.node")
SHUTDOWN_GRACE_S = 2.0


@dataclass(frozen=True)
class NodeConfig:
    """Everything `netdp-node` needs to run one peer."""

    topology: Topology
    node_id: int
    data_path: Path
    log_dir: Path
    sampler: SamplerKind = "secure"
    simulation_seed: int | None = None
    tls_dir: Path | None = None  # None means plain text (explicitly insecure)
    kill_at_step: int | None = None  # fault injection: SIGKILL this process as this local step starts
    lost_reply_fraction: float = 0.0  # fault injection: this share of the replies to calls is lost
    lost_ack_fraction: float = 0.0  # fault injection: this share of the acknowledgements of deliveries is lost


async def run_node(config: NodeConfig) -> NodeOutcome:
    """Run one node to completion over gRPC."""
    topology = config.topology
    private_data = protocol_spec(topology.protocol.name).load(config.data_path, topology.protocol)
    tls = security.load_tls(config.tls_dir, expected_id=config.node_id) if config.tls_dir else None

    def link_for(peer: int) -> GrpcPeerLink:
        return GrpcPeerLink(
            topology.address_of(peer),
            chunk_bytes=topology.network.chunk_bytes,
            credentials=security.channel_credentials(tls) if tls else None,
            options=security.channel_options(peer) if tls else (),
        )

    samplers = make_samplers(config.sampler, config.simulation_seed)  # its Gaussian stream is make_sampler's
    host = NodeHost(topology, config.node_id, private_data, samplers.gaussian, config.log_dir, link_for,
                    on_step=_kill_switch(config.kill_at_step), randomized_response=samplers.randomized_response)
    server, health = await start_server(
        host.receiver,
        config.node_id,
        topology.address_of(config.node_id),
        credentials=security.server_credentials(tls) if tls else None,
        authenticate=security.peer_identity if tls else None,
        chunk_bytes=topology.network.chunk_bytes,
        faults=_lost_answers(config),
    )
    LOG.info("node %d listening on %s, %d neighbours", config.node_id, topology.address_of(config.node_id),
             len(topology.neighbours[config.node_id]))
    try:
        return await _run_until_signalled(host.run())
    finally:
        await host.close()
        await stop_server(server, health, SHUTDOWN_GRACE_S)


def _kill_switch(kill_at_step: int | None) -> StepHook | None:
    """A real SIGKILL of this process as a chosen local step starts: a crash at a reproducible point."""
    if kill_at_step is None:
        return None

    async def maybe_kill(step: int) -> None:
        if step == kill_at_step:
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_kill


def _lost_answers(config: NodeConfig) -> LostAnswers | None:
    """Lose shares of the answers at random: a network that drops answers after the message was handled."""
    faults = LostAnswers(replies=config.lost_reply_fraction, acknowledgements=config.lost_ack_fraction)
    return faults if faults.active else None


async def _run_until_signalled(work) -> NodeOutcome:
    """Await `work`, cancelling it on SIGTERM or SIGINT."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await task
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
