"""One gRPC server hosting several node ids: routing by receiver, the certificate check, the per-id neighbour check.

An 8-node ring is published as two processes of four ids (0..3 and 4..7, one address each).
The server under test hosts ids 4..7 as `netdp-node --nodes 4-7` would (a NodeHost per id,
round 0 open) behind one real gRPC server, over real mutual TLS with the certificates
`netdp certs` issues for that topology; the tests play process 0..3 with its own certificate.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.host import NodeHost
from node.idset import format_ids, parse_ids
from node.noise import make_samplers
from node.protocols.muffliato import MuffliatoParams
from node.runtime import check_hosted_ids
from node.security import channel_credentials, channel_options, load_tls, peer_identity, server_credentials
from node.topology import NetworkParams, Topology, hosted_ids
from node.transport.grpc_server import start_server, stop_server
from node.viewlog import VIEW_LOG_NAME, read_log
from tests.cluster.node_probe import Reply, gossip, gossip_chunks

HOSTED = (4, 5, 6, 7)
DIMENSION = 2


def cohosted_ring() -> Topology:
    first, second = (f"127.0.0.1:{port}" for port in free_loopback_ports(2))
    return build_topology(
        generate("ring", n=8), graph_name="ring", run_id="cohosted",
        protocol=MuffliatoParams(sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=3, dimension=DIMENSION),
        addresses=[first] * 4 + [second] * 4,
        network=NetworkParams(round_deadline_s=60.0, startup_deadline_s=60.0),
    )


class HostedProcess:
    """Ids 4..7 behind one server, and what a test needs to talk to them and read their logs."""

    def __init__(self, topology: Topology, root: Path, certs: Path) -> None:
        self.topology = topology
        self.root = root
        self.certs = certs

    async def send(self, *, sender: int, receiver: int | None, tls_of: int | None = 0) -> Reply:
        """A well-formed round-0 value claiming `sender`, for `receiver`, over mTLS as node `tls_of`'s process."""
        chunks = gossip_chunks(self.topology, sender=sender, value=np.full(DIMENSION, 0.25))
        if receiver is not None:
            chunks[0].envelope.receiver = receiver
        credentials = channel_credentials(load_tls(self.certs / f"node-{tls_of}"))
        return await gossip(self.topology.address_of(HOSTED[0]), chunks, credentials, channel_options(HOSTED[0]))

    def records(self, node_id: int) -> list[viewlog_pb2.Record]:
        return read_log(self.root / f"node-{node_id}" / VIEW_LOG_NAME).records


@asynccontextmanager
async def hosted_process(tmp_path: Path) -> AsyncIterator[HostedProcess]:
    topology = cohosted_ring()
    assert hosted_ids(topology) == [(0, 1, 2, 3), HOSTED]
    write_cluster_certs(topology, tmp_path / "certs", days=1)
    tls = load_tls(tmp_path / "certs" / f"node-{HOSTED[0]}", expected_id=HOSTED)

    def unreachable(peer: int):
        raise AssertionError("the hosted ids only receive in these tests")

    hosts = {v: NodeHost(topology, v, np.zeros(DIMENSION), make_samplers("simulation", v).gaussian,
                         tmp_path / f"node-{v}", unreachable) for v in HOSTED}
    server, health = await start_server({v: host.receiver for v, host in hosts.items()},
                                        topology.address_of(HOSTED[0]), credentials=server_credentials(tls),
                                        authenticate=peer_identity, chunk_bytes=topology.network.chunk_bytes)
    try:
        yield HostedProcess(topology, tmp_path, tmp_path / "certs")
    finally:
        await stop_server(server, health, 0.5)
        for host in hosts.values():
            await host.close()


def only_record(process: HostedProcess, node_id: int, before: int) -> viewlog_pb2.Record:
    new = process.records(node_id)[before:]
    assert len(new) == 1, new
    return new[0]


async def test_each_message_goes_to_the_hosted_id_its_envelope_names(tmp_path: Path):
    async with hosted_process(tmp_path) as process:
        before = {v: len(process.records(v)) for v in HOSTED}
        assert await process.send(sender=3, receiver=4) == Reply(grpc.StatusCode.OK, "")
        assert await process.send(sender=4, receiver=5, tls_of=4) == Reply(grpc.StatusCode.OK, "")
        received = only_record(process, 4, before[4]).received
        assert (received.peer, received.round) == (3, 0)
        assert only_record(process, 5, before[5]).received.peer == 4
        assert all(len(process.records(v)) == before[v] for v in (6, 7))


async def test_a_message_for_an_id_not_hosted_here_is_refused_and_logged_by_the_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    async with hosted_process(tmp_path) as process:
        before = {v: len(process.records(v)) for v in HOSTED}
        with caplog.at_level(logging.WARNING, logger="netdp.node"):
            reply = await process.send(sender=3, receiver=2)
        assert reply == Reply(grpc.StatusCode.NOT_FOUND, "node 2 is not hosted here (this server hosts nodes 4-7)")
        assert "node 2 is not hosted here" in caplog.text
        # An envelope that names no receiver cannot be routed when the server hosts several ids.
        reply = await process.send(sender=3, receiver=None)
        assert reply == Reply(grpc.StatusCode.INVALID_ARGUMENT,
                              "the envelope names no receiver, and this server hosts nodes 4-7")
        assert all(len(process.records(v)) == before[v] for v in HOSTED)


async def test_a_process_certified_for_ids_0_to_3_cannot_send_as_another_id(tmp_path: Path):
    async with hosted_process(tmp_path) as process:
        before = len(process.records(4))
        # 5 is a neighbour of 4, so only the certificate check can refuse this.
        reply = await process.send(sender=5, receiver=4)
        detail = "authenticated as nodes 0-3, claims 5"
        assert reply == Reply(grpc.StatusCode.PERMISSION_DENIED, detail)
        assert only_record(process, 4, before).rejected == viewlog_pb2.Rejected(
            claimed_sender=5, round=0, status_code="PERMISSION_DENIED", detail=detail)


@pytest.mark.parametrize(("sender", "receiver"), [(0, 4), (3, 5)])
async def test_an_id_the_certificate_names_must_still_be_a_neighbour_of_the_receiving_id(
    tmp_path: Path, sender: int, receiver: int
):
    async with hosted_process(tmp_path) as process:
        before = len(process.records(receiver))
        reply = await process.send(sender=sender, receiver=receiver)
        detail = f"node {sender} is not a neighbour of node {receiver}"
        assert reply == Reply(grpc.StatusCode.PERMISSION_DENIED, detail)
        assert only_record(process, receiver, before).rejected.detail == detail


def test_id_sets_read_and_write_as_ranges():
    assert parse_ids("0-3,8, 10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert format_ids((11, 0, 1, 2, 3, 8, 10)) == "0-3,8,10-11"
    for bad in ("", "3-1", "a", "1-"):
        with pytest.raises(ConfigError):
            parse_ids(bad)


def test_a_process_must_host_exactly_the_ids_published_at_its_address():
    topology = cohosted_ring()
    assert check_hosted_ids(topology, [7, 5, 6, 4]) == HOSTED
    with pytest.raises(ConfigError, match="run it with --nodes 4-7"):
        check_hosted_ids(topology, [4, 5])
    with pytest.raises(ConfigError, match="run it with --nodes 0-3"):
        check_hosted_ids(topology, [3, 4])
    with pytest.raises(ConfigError, match="node 9 not in the topology"):
        check_hosted_ids(topology, [9])
