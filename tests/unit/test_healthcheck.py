"""`python -m node.healthcheck` against a real grpc.aio health service over mTLS on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node import healthcheck
from node.protocols.muffliato import MuffliatoParams
from node.security import load_tls, server_credentials
from node.topology import Topology


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def topology(request: pytest.FixtureRequest, tmp_path: Path) -> Topology:
    """A 3-node ring, one id per address, or all three at one address (parametrized `cohosted`)."""
    port = free_port()
    addresses = [f"127.0.0.1:{port}"] * 3 if getattr(request, "param", None) == "cohosted" else [
        f"127.0.0.1:{free_port()}" for _ in range(3)]
    topology = build_topology(
        generate("ring", n=3),
        graph_name="ring",
        run_id="health-test",
        protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=3, dimension=2),
        addresses=addresses,
    )
    write_cluster_certs(topology, tmp_path / "certs", days=1)
    return topology


@pytest.fixture
async def health(topology: Topology, tmp_path: Path) -> AsyncIterator[HealthServicer]:
    """The health service of node 0's process, mTLS, SERVING."""
    server = grpc.aio.server()
    servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_secure_port(topology.address_of(0), server_credentials(load_tls(tmp_path / "certs" / "node-0")))
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        yield servicer
    finally:
        await server.stop(grace=None)


async def check(topology: Topology, node_id: int, *security: str) -> int:
    argv = ["--address", topology.address_of(node_id), "--id", str(node_id), *security]
    return await asyncio.to_thread(healthcheck.main, argv)


async def test_serving_node_is_healthy(health, topology, tmp_path):
    assert await check(topology, 0, "--tls-dir", str(tmp_path / "certs" / "node-0")) == 0


async def test_not_serving_node_is_unhealthy(health, topology, tmp_path, capsys):
    await health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert await check(topology, 0, "--tls-dir", str(tmp_path / "certs" / "node-0")) == 1
    assert "NOT SERVING" in capsys.readouterr().out


async def test_a_server_that_is_not_the_named_node_is_unhealthy(health, topology, tmp_path):
    argv = ["--address", topology.address_of(0), "--id", "1", "--tls-dir", str(tmp_path / "certs" / "node-1")]
    assert await asyncio.to_thread(healthcheck.main, argv) == 1


async def test_a_node_that_is_not_listening_is_unhealthy(health, topology, tmp_path):
    assert await check(topology, 1, "--tls-dir", str(tmp_path / "certs" / "node-1")) == 1


async def test_plain_text_probe_of_a_tls_node_is_unhealthy(health, topology):
    assert await check(topology, 0, "--insecure") == 1


async def test_missing_certificates_are_unhealthy_never_exit_code_2(health, topology, tmp_path, capsys):
    assert await check(topology, 0, "--tls-dir", str(tmp_path / "nowhere")) == 1
    assert "cannot read TLS file" in capsys.readouterr().err


@pytest.mark.parametrize("topology", ["cohosted"], indirect=True)
async def test_a_process_hosting_several_ids_is_healthy_for_its_lowest_id(health, topology, tmp_path):
    """Its certificate is named by its lowest id (the others by a range), the name compose probes and peers verify."""
    address = topology.address_of(0)
    for node_id in range(3):
        argv = ["--address", address, "--id", "0", "--tls-dir", str(tmp_path / "certs" / f"node-{node_id}")]
        assert await asyncio.to_thread(healthcheck.main, argv) == 0
    assert await check(topology, 1, "--tls-dir", str(tmp_path / "certs" / "node-1")) == 1
