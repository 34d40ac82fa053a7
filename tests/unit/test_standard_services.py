"""The standard endpoints a generic gRPC client expects: health by service name, reflection v1 and v1alpha."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.journal import Journal
from node.protocols.muffliato import MuffliatoParams
from node.receiver import Receiver
from node.security import load_tls, server_credentials
from node.transport.grpc_server import PEER_SERVICE, REFLECTION_V1_SERVICE, listen, start_server, stop_server

TOPOLOGY = build_topology(generate("ring", n=3), graph_name="ring", run_id="services",
                          protocol=MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=2, dimension=1))


def health_status(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5.0).status


def listed_services(address: str, reflection_service: str) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        info = channel.stream_stream(
            f"/{reflection_service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        (answer,) = list(info(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5.0))
    return [service.name for service in answer.list_services_response.service]


@pytest.mark.parametrize("reflection_service", ["grpc.reflection.v1alpha.ServerReflection", REFLECTION_V1_SERVICE])
async def test_health_answers_for_the_peer_service_and_reflection_lists_it(tmp_path, reflection_service):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="services", node_id=0))
    address = f"127.0.0.1:{free_loopback_ports(1)[0]}"
    server, health = await start_server({0: Receiver(TOPOLOGY, 0, journal)}, address, credentials=None,
                                        authenticate=None, chunk_bytes=TOPOLOGY.network.chunk_bytes)
    try:
        for service in ("", PEER_SERVICE):
            assert await asyncio.to_thread(health_status, address, service) == health_pb2.HealthCheckResponse.SERVING
        services = await asyncio.to_thread(listed_services, address, reflection_service)
        assert PEER_SERVICE in services and reflection_service in services
    finally:
        await stop_server(server, health, 0)
        journal.close()


async def test_a_node_listens_only_on_the_host_its_published_address_names(tmp_path):
    """Published at 127.0.0.1, it is not reachable at another address of this machine (127.0.0.2); a plain-text
    node published at a host that is not this machine's is refused with one line, and so is a port in use."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="services", node_id=0))
    port = free_loopback_ports(1)[0]
    receivers = {0: Receiver(TOPOLOGY, 0, journal)}
    server, health = await start_server(receivers, f"127.0.0.1:{port}", credentials=None, authenticate=None,
                                        chunk_bytes=TOPOLOGY.network.chunk_bytes)
    try:
        assert connects("127.0.0.1", port) and not connects("127.0.0.2", port)
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}: its port is in use"):
            await start_server(receivers, f"127.0.0.1:{port}", credentials=None, authenticate=None,
                               chunk_bytes=TOPOLOGY.network.chunk_bytes)
        with pytest.raises(ConfigError, match="not an address of this machine"):
            await start_server(receivers, f"192.0.2.1:{port}", credentials=None, authenticate=None,
                               chunk_bytes=TOPOLOGY.network.chunk_bytes)
    finally:
        await stop_server(server, health, 0)
        journal.close()


def connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2.0).close()
    except OSError:
        return False
    return True


async def test_a_tls_node_published_at_another_machines_address_listens_on_every_interface(tmp_path):
    """A container behind a port mapping publishes its machine's address: with mutual TLS (every caller presents a
    cluster certificate) the node listens on every interface at the published port, and says so."""
    write_cluster_certs(TOPOLOGY, tmp_path / "certs", days=1)
    credentials = server_credentials(load_tls(tmp_path / "certs" / "node-0", expected_id=0))
    server = grpc.aio.server()
    port = free_loopback_ports(1)[0]
    try:
        assert listen(server, f"127.0.0.1:{port}", credentials) == f"127.0.0.1:{port}"
        other = free_loopback_ports(1)[0]
        assert listen(server, f"192.0.2.1:{other}", credentials) == f"[::]:{other}"
    finally:
        await server.stop(0)
