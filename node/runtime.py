"""A networked peer: the Peer behind a gRPC server, with one channel per neighbour.

Lifecycle: start the server (health SERVING), open the channels, run the protocol, write
the estimate, linger briefly so late neighbours can still be answered, shut down
gracefully. SIGTERM/SIGINT stop the run cleanly; the logs stay readable either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node import security
from node.data import load_vector
from node.noise import SamplerKind, make_sampler
from node.peer import Peer, PeerOutcome
from node.topology import Topology
from node.transport.grpc_link import GrpcPeerLink
from node.transport.grpc_server import start_server, stop_server

LOG = logging.getLogger("netdp.node")
LINGER_S = 1.0
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
    kill_at_round: int | None = None  # fault injection: SIGKILL this process as the round starts


async def run_node(config: NodeConfig) -> PeerOutcome:
    """Run one peer to completion over gRPC."""
    topology = config.topology
    value = load_vector(config.data_path, topology.protocol.dimension)
    tls = security.load_tls(config.tls_dir, expected_id=config.node_id) if config.tls_dir else None
    peer = Peer(topology, config.node_id, value, make_sampler(config.sampler, config.simulation_seed), config.log_dir)
    server, health = await start_server(
        peer.receiver,
        config.node_id,
        topology.address_of(config.node_id),
        credentials=security.server_credentials(tls) if tls else None,
        authenticate=security.peer_identity if tls else None,
    )
    links = {
        neighbour: GrpcPeerLink(
            topology.address_of(neighbour),
            chunk_bytes=topology.network.chunk_bytes,
            credentials=security.channel_credentials(tls) if tls else None,
            options=security.channel_options(neighbour) if tls else (),
        )
        for neighbour in topology.neighbours[config.node_id]
    }
    LOG.info("node %d listening on %s, %d neighbours", config.node_id, topology.address_of(config.node_id), len(links))
    try:
        outcome = await _run_until_signalled(peer.run(links, _kill_switch(config.kill_at_round)))
        await asyncio.sleep(LINGER_S)
        return outcome
    finally:
        await asyncio.gather(*(link.close() for link in links.values()))
        await stop_server(server, health, SHUTDOWN_GRACE_S)
        peer.close()


def _kill_switch(kill_at_round: int | None) -> Callable[[int], None] | None:
    """A real SIGKILL of this process at a chosen round: a crash at a reproducible point."""
    if kill_at_round is None:
        return None

    def maybe_kill(round_index: int) -> None:
        if round_index == kill_at_round:
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_kill


async def _run_until_signalled(work) -> PeerOutcome:
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
