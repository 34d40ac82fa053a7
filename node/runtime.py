"""A networked node process: the NodeHost of every node id it hosts behind one gRPC server.

One process hosts the ids the published topology lists at one address (often just one).
Each id keeps its own data, samplers, view log and estimate, exactly as a process of its
own would. Incoming messages are routed to the id their envelope names; outgoing ones go
over one long-lived channel per peer process, or straight to the receiver of an id hosted
here (`InProcessLink`: the same validation and logs, no network; one-way messages to them go in
bundles, `node.transport.bundles`).

Lifecycle: start the server (health SERVING), run every hosted id's protocol (channels
open on first use), write the estimates, shut down gracefully once every id is done (each
protocol ends only when its neighbours no longer need it). SIGTERM/SIGINT stop the run
cleanly; the logs stay readable either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import security
from node.agent_budget import BudgetRequest, own_parameters
from node.breaks import Breaks
from node.errors import ConfigError
from node.heap import run_pace
from node.host import NodeHost, NodeOutcome, StepHook
from node.idset import describe_nodes, format_ids
from node.noise import SamplerKind, make_samplers
from node.protocols.registry import protocol_spec
from node.topology import NetworkParams, Topology, hosted_ids
from node.transport.base import PeerLink
from node.transport.bundles import Courier
from node.transport.faults import LostAnswers
from node.transport.grpc_link import PeerChannels
from node.transport.grpc_server import start_server, stop_server
from node.transport.inprocess import InProcessLink

LOG = logging.getLogger("netdp.node")
SHUTDOWN_GRACE_S = 2.0
# About this many node ids share one event loop as fast as one id has it to itself.
NODES_PER_DEADLINE = 64


@dataclass(frozen=True)
class NodeConfig:
    """Everything `netdp-node` needs to run the node ids of one process."""

    topology: Topology
    node_ids: tuple[int, ...]
    data_paths: Mapping[int, Path]  # per hosted id: its private data file
    log_dirs: Mapping[int, Path]  # per hosted id: where its view.log, private.log and estimate.json go
    sampler: SamplerKind = "secure"
    simulation_seeds: Mapping[int, int] = field(default_factory=dict)  # per hosted id; absent: unseeded
    tls_dir: Path | None = None  # None means plain text (explicitly insecure)
    kill_at_step: int | None = None  # fault injection: SIGKILL this process as a hosted id starts this local step
    lost_reply_fraction: float = 0.0  # fault injection: this share of the replies to calls is lost
    lost_ack_fraction: float = 0.0  # fault injection: this share of the acknowledgements of deliveries is lost
    clock_speedup: float = 1.0  # fault injection: every hosted id's Poisson clock ticks this many times faster
    resume: bool = False  # rejoin the run logged in each hosted id's log folder, if any (personalized CD)
    budget: BudgetRequest | None = None  # every hosted agent's own budget, at most its published one
    breaks: Breaks = Breaks()  # negative controls: deliberate bugs of every hosted id (node.breaks)
    bundled: bool = True  # one-way messages to another process go in bundles (else each in its own call)


def check_hosted_ids(topology: Topology, node_ids: Iterable[int]) -> tuple[int, ...]:
    """The ids, once they are exactly the ids the topology publishes at one address; ConfigError otherwise."""
    wanted = tuple(sorted(set(node_ids)))
    if not wanted:
        raise ConfigError("no node ids to host")
    strangers = [v for v in wanted if not 0 <= v < topology.n]
    if strangers:
        raise ConfigError(f"{describe_nodes(strangers)} not in the topology (n = {topology.n})")
    process = next(ids for ids in hosted_ids(topology) if wanted[0] in ids)
    if wanted != process:
        raise ConfigError(f"the topology publishes {describe_nodes(process)} at {topology.address_of(wanted[0])} and "
                          f"one process hosts all the ids of its address: run it with --nodes {format_ids(process)}")
    return wanted


def shared_loop_network(network: NetworkParams, ids_on_loop: int) -> NetworkParams:
    """The deadlines stretched by ids_on_loop / NODES_PER_DEADLINE (at least 1).

    Ids that share one event loop wait for their turn on it, so a live neighbour must not be
    dropped as slow because its turn had not come. Headers still record the published deadlines.
    """
    stretch = max(1.0, ids_on_loop / NODES_PER_DEADLINE)
    if stretch == 1.0:
        return network
    return network.model_copy(update={"round_deadline_s": network.round_deadline_s * stretch,
                                      "startup_deadline_s": network.startup_deadline_s * stretch})


async def run_process(config: NodeConfig) -> list[NodeOutcome]:
    """Run every hosted node id to completion over gRPC; one outcome per id, in id order."""
    topology = config.topology
    node_ids = check_hosted_ids(topology, config.node_ids)
    load = protocol_spec(topology.protocol_name).load
    for v in node_ids:  # every id's budget checked before any id logs anything
        own_parameters(topology.protocol, v, config.budget)
    private_data = {v: load(config.data_paths[v], topology.protocol) for v in node_ids}
    tls = security.load_tls(config.tls_dir, expected_id=node_ids) if config.tls_dir else None
    channels = _peer_channels(topology, tls, bundled=config.bundled)
    hosts: dict[int, NodeHost] = {}
    courier = Courier(lambda peer: hosts[peer].receiver if peer in hosts else None)

    def link_for(sender: int) -> Callable[[int], PeerLink]:
        def link(peer: int) -> PeerLink:
            host = hosts.get(peer)
            return channels.link(peer) if host is None else InProcessLink(sender, host.receiver)
        return link

    network = shared_loop_network(topology.network, len(node_ids))
    kill = _kill_switch(config.kill_at_step)
    for v in node_ids:
        samplers = make_samplers(config.sampler, config.simulation_seeds.get(v))
        hosts[v] = NodeHost(topology, v, private_data[v], samplers.gaussian, config.log_dirs[v], link_for(v),
                            on_step=kill, randomized_response=samplers.randomized_response,
                            laplace=samplers.laplace, network=network, clock_speedup=config.clock_speedup,
                            resume=config.resume, budget=config.budget, coins=samplers.coins,
                            breaks=config.breaks, courier=courier)
    address = topology.address_of(node_ids[0])
    try:
        server, health = await start_server(
            {v: host.receiver for v, host in hosts.items()},
            address,
            credentials=security.server_credentials(tls) if tls else None,
            authenticate=security.peer_identity if tls else None,
            chunk_bytes=topology.network.chunk_bytes,
            faults=_lost_answers(config),
        )
    except BaseException:
        await _close(hosts.values(), channels)
        raise
    LOG.info("%s listening on %s", describe_nodes(node_ids), address)
    try:
        with run_pace():
            return await _run_until_signalled(_run_all([host.run() for host in hosts.values()]))
    finally:
        # The server stops accepting (and lets the calls in flight finish) before any view log closes.
        await stop_server(server, health, SHUTDOWN_GRACE_S)
        await _close(hosts.values(), channels)


def _peer_channels(topology: Topology, tls: security.TlsFiles | None, *, bundled: bool) -> PeerChannels:
    """Channels to the peer processes; with TLS, each verifies the lowest id published at its address."""
    if tls is None:
        return PeerChannels(topology.address_of, chunk_bytes=topology.network.chunk_bytes, bundled=bundled)
    first_id = {topology.address_of(ids[0]): ids[0] for ids in hosted_ids(topology)}
    return PeerChannels(topology.address_of, chunk_bytes=topology.network.chunk_bytes, bundled=bundled,
                        credentials=security.channel_credentials(tls),
                        options_for=lambda peer: security.channel_options(first_id[topology.address_of(peer)]))


async def _close(hosts: Iterable[NodeHost], channels: PeerChannels) -> None:
    for host in hosts:
        await host.close()
    await channels.close()


async def _run_all(runs: list[Coroutine[Any, Any, NodeOutcome]]) -> list[NodeOutcome]:
    """Every run to its end; the first that fails stops the others and is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(run) for run in runs]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


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


async def _run_until_signalled(work: Awaitable[list[NodeOutcome]]) -> list[NodeOutcome]:
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
