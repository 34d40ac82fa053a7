"""`netdp certs` and node/security.py: certificate contents, file modes, and real mTLS handshakes.

The handshake tests stand up a throwaway grpc.aio server on loopback with one raw-bytes
method that answers the caller's `peer_identity`, and count how often it ran: a refused
peer must be stopped by TLS before any handler runs.
"""

from __future__ import annotations

import ipaddress
import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import networkx as nx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from coordinator_tools.certs import CA_KEY_FILE, write_cluster_certs
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import peer_pb2, viewlog_pb2
from node.errors import ConfigError
from node.idset import format_ids
from node.journal import Journal
from node.protocols.muffliato import MuffliatoParams
from node.receiver import Receiver
from node.refusal import Refusal
from node.security import (
    _identity,
    channel_credentials,
    channel_options,
    load_tls,
    node_id_from_name,
    node_ids_from_name,
    peer_identity,
    process_names,
    server_credentials,
)
from node.topology import Topology
from node.transport.routing import HostedReceivers
from node.viewlog import VIEW_LOG_NAME, read_log

ADDRESSES = ["127.0.0.1:7000", "alpha.example.org:7001", "10.1.2.3:7002"]
WHO_AM_I = "/netdp.test.Identity/WhoAmI"
RPC_TIMEOUT_S = 5.0


def make_topology(run_id: str, n: int = 3, **addressing: object) -> Topology:
    return build_topology(
        generate("ring", n=n),
        graph_name="ring",
        run_id=run_id,
        protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=3, dimension=2),
        **(addressing or {"addresses": ADDRESSES}),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs") / "cluster"
    write_cluster_certs(make_topology("cluster-a"), out, days=30)
    return out


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates with the same node names, signed by another CA."""
    out = tmp_path_factory.mktemp("certs") / "foreign"
    write_cluster_certs(make_topology("cluster-b"), out, days=30)
    return out


def certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_layout_modes_and_chain(cluster: Path):
    ca = certificate(cluster / "ca.pem")
    assert stat.S_IMODE((cluster / CA_KEY_FILE).stat().st_mode) == 0o600
    for node_id in range(3):
        folder = cluster / f"node-{node_id}"
        assert sorted(p.name for p in folder.iterdir()) == ["ca.pem", "node.key", "node.pem"]
        assert stat.S_IMODE((folder / "node.key").stat().st_mode) == 0o600
        assert (folder / "ca.pem").read_bytes() == (cluster / "ca.pem").read_bytes()
        cert = certificate(folder / "node.pem")
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"netdp-node-{node_id}"
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_sans_cover_tls_name_compose_service_topology_host_and_loopback(cluster: Path):
    def sans(node_id: int) -> tuple[list[str], list[str]]:
        extension = certificate(cluster / f"node-{node_id}" / "node.pem").extensions
        names = extension.get_extension_for_class(x509.SubjectAlternativeName).value
        return names.get_values_for_type(x509.DNSName), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]

    dns, ips = sans(1)
    assert dns == ["netdp-node-1", "node-1", "alpha.example.org", "localhost"]
    assert ips == ["127.0.0.1", "::1"]
    dns, ips = sans(2)
    assert dns == ["netdp-node-2", "node-2", "localhost"]
    assert ips == ["10.1.2.3", "127.0.0.1", "::1"]
    assert all(ipaddress.ip_address(ip) for ip in ips)


@pytest.fixture(scope="module")
def cohosted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates of an 8-node ring published as 2 processes of 4 ids (127.0.0.1:7100 and :7101)."""
    out = tmp_path_factory.mktemp("certs") / "cohosted"
    topology = make_topology("cohosted", n=8, host="127.0.0.1", base_port=7100, ids_per_process=4)
    assert write_cluster_certs(topology, out, days=30) == 2
    return out


def dns_names(cert: x509.Certificate) -> list[str]:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


def test_a_process_hosting_several_ids_has_one_certificate_naming_them_as_a_range(cohosted: Path):
    pems = {v: (cohosted / f"node-{v}" / "node.pem").read_bytes() for v in range(8)}
    assert len({pems[v] for v in range(4)}) == 1 and len({pems[v] for v in range(4, 8)}) == 1
    assert pems[0] != pems[4]
    # The process's name (its lowest id, which peers verify), its run of ids, then its compose
    # service (`netdp compose`), not the names its ids' services would have alone.
    assert dns_names(certificate(cohosted / "node-2" / "node.pem")) == \
        ["netdp-node-0", "netdp-nodes-0-3", "nodes-0-3", "localhost"]
    assert load_tls(cohosted / "node-2", expected_id=(0, 1, 2, 3)).node_ids == {0, 1, 2, 3}
    with pytest.raises(ConfigError, match="certificate is for nodes 4-7, not node 3"):
        load_tls(cohosted / "node-4", expected_id=(3, 4))


def test_refuses_to_replace_an_existing_ca(cluster: Path):
    with pytest.raises(ConfigError, match="--force"):
        write_cluster_certs(make_topology("cluster-a"), cluster, days=30)


def test_load_tls_reads_the_node_id(cluster: Path):
    assert load_tls(cluster / "node-2").node_ids == {2}
    assert load_tls(cluster / "node-2", expected_id=2).node_ids == {2}


def assemble(folder: Path, ca: Path, cert: Path, key: Path | None) -> Path:
    """A TLS folder mixed from other folders' files (key None: leave it out)."""
    folder.mkdir()
    (folder / "ca.pem").write_bytes(ca.read_bytes())
    (folder / "node.pem").write_bytes(cert.read_bytes())
    if key is not None:
        (folder / "node.key").write_bytes(key.read_bytes())
    return folder


def test_load_tls_errors_name_the_problem(cluster: Path, foreign: Path, tmp_path: Path):
    node0, node1 = cluster / "node-0", cluster / "node-1"
    with pytest.raises(ConfigError, match="not node 1"):
        load_tls(node0, expected_id=1)
    with pytest.raises(ConfigError, match=r"node\.key: cannot read"):
        load_tls(assemble(tmp_path / "no-key", node0 / "ca.pem", node0 / "node.pem", None))
    with pytest.raises(ConfigError, match="does not belong"):
        load_tls(assemble(tmp_path / "mixed", node0 / "ca.pem", node0 / "node.pem", node1 / "node.key"))
    with pytest.raises(ConfigError, match="not signed by the CA"):
        load_tls(assemble(tmp_path / "foreign", node0 / "ca.pem", foreign / "node-0" / "node.pem",
                          foreign / "node-0" / "node.key"))
    with pytest.raises(ConfigError, match=r"node\.pem: not a PEM certificate"):
        load_tls(assemble(tmp_path / "garbage", node0 / "ca.pem", node0 / "node.key", node0 / "node.key"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [("netdp-node-0", 0), ("netdp-node-17", 17), ("netdp-node-017", None), ("netdp-node-", None),
     ("netdp-node-1x", None), ("node-1", None), ("netdp-node--1", None)],
)
def test_node_id_from_name(name: str, expected: int | None):
    assert node_id_from_name(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("netdp-node-7", {7}), ("netdp-nodes-4-7", {4, 5, 6, 7}), ("netdp-nodes-5-5", {5}),
     ("netdp-nodes-7-4", set()), ("netdp-nodes-04-7", set()), ("netdp-nodes-4-07", set()), ("netdp-nodes-4", set()),
     ("netdp-nodes-4-", set()), ("netdp-nodes--4-7", set()), ("netdp-nodes-4-7-9", set()), ("netdp-nodes-4-x", set()),
     ("netdp-node-4-7", set()), ("nodes-4-7", set())],
)
def test_node_ids_from_name_reads_ids_and_ranges_and_ignores_malformed_names(name: str, expected: set[int]):
    assert set(node_ids_from_name(name)) == expected


def test_identity_is_the_union_of_every_name_and_none_without_one():
    assert _identity((b"netdp-node-9", b"netdp-nodes-0-3", b"netdp-nodes-2-5", b"netdp-nodes-8-6", b"localhost")) \
        == frozenset({0, 1, 2, 3, 4, 5, 9})
    assert _identity((b"netdp-nodes-8-6", b"nodes-6-8")) is None


def test_process_names_are_its_lowest_id_then_its_runs():
    assert process_names([3]) == ["netdp-node-3"]
    assert process_names([5, 4, 9, 7, 6]) == ["netdp-node-4", "netdp-nodes-4-7", "netdp-node-9"]
    assert process_names([2, 0]) == ["netdp-node-0", "netdp-node-2"]


@pytest.mark.parametrize("many", [512, 2048])
async def test_a_process_of_many_ids_has_a_small_certificate_naming_every_id(tmp_path: Path, many: int):
    # Ids 0..many-1 at one address, 4 more at another.
    n, out = many + 4, tmp_path / "certs"
    write_cluster_certs(make_topology("many", n=n, addresses=[f"127.0.0.1:{7200 + (v >= many)}" for v in range(n)]),
                        out, days=1)
    cert = certificate(out / "node-1" / "node.pem")
    assert len(cert.public_bytes(serialization.Encoding.DER)) < 4096
    assert dns_names(cert)[:2] == ["netdp-node-0", f"netdp-nodes-0-{many - 1}"]
    assert load_tls(out / "node-0", expected_id=range(many)).node_ids == set(range(many))
    assert _identity(tuple(name.encode() for name in dns_names(cert))) == set(range(many))
    # Over a real handshake, where one name per id failed past about 500 ids: the client proves all its ids.
    async with identity_server(server_credentials(load_tls(out / f"node-{many}"))) as server:
        client = channel_credentials(load_tls(out / "node-0"))
        assert await ask(server.port, client, expect_peer=many) == f"0-{many - 1}".encode()


def test_refuses_a_process_whose_certificate_would_be_too_large_for_a_handshake(tmp_path: Path):
    # 1200 ids on two addresses, alternating: each process hosts 600 ids, no two consecutive.
    topology = make_topology("scattered", n=1200, addresses=[f"127.0.0.1:{7300 + v % 2}" for v in range(1200)])
    with pytest.raises(ConfigError, match=r"nodes 0,2,4.* would take \d+ bytes.*fewer ids per address"):
        write_cluster_certs(topology, tmp_path / "certs", days=1)
    assert not (tmp_path / "certs").exists()


@dataclass
class IdentityServer:
    """A loopback grpc.aio server whose one method answers the caller's TLS identity."""

    port: int
    calls: int = 0


@asynccontextmanager
async def identity_server(credentials: grpc.ServerCredentials | None) -> AsyncIterator[IdentityServer]:
    server = grpc.aio.server()
    state = IdentityServer(port=0)

    async def who_am_i(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        state.calls += 1
        identity = peer_identity(context)
        return b"None" if identity is None else format_ids(identity).encode()

    service, method = WHO_AM_I.strip("/").split("/")
    handlers = {method: grpc.unary_unary_rpc_method_handler(who_am_i)}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    if credentials is None:
        state.port = server.add_insecure_port("127.0.0.1:0")
    else:
        state.port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    try:
        yield state
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def tls_server(cluster: Path) -> AsyncIterator[IdentityServer]:
    async with identity_server(server_credentials(load_tls(cluster / "node-0"))) as served:
        yield served


@pytest.fixture
async def plain_server() -> AsyncIterator[IdentityServer]:
    async with identity_server(None) as served:
        yield served


def client_credentials(trusted_ca: Path, identity: Path) -> grpc.ChannelCredentials:
    """Trust `trusted_ca`, present the certificate in folder `identity` (unchecked, so it may be foreign)."""
    return grpc.ssl_channel_credentials(
        root_certificates=trusted_ca.read_bytes(),
        private_key=(identity / "node.key").read_bytes(),
        certificate_chain=(identity / "node.pem").read_bytes(),
    )


async def ask(port: int, credentials: grpc.ChannelCredentials | None, expect_peer: int = 0) -> bytes:
    address = f"127.0.0.1:{port}"
    if credentials is None:
        channel = grpc.aio.insecure_channel(address)
    else:
        channel = grpc.aio.secure_channel(address, credentials, channel_options(expect_peer))
    async with channel:
        return await channel.unary_unary(WHO_AM_I)(b"", timeout=RPC_TIMEOUT_S)


async def test_cluster_certificates_authenticate_both_sides(tls_server: IdentityServer, cluster: Path):
    assert await ask(tls_server.port, channel_credentials(load_tls(cluster / "node-1"))) == b"1"
    assert await ask(tls_server.port, channel_credentials(load_tls(cluster / "node-2"))) == b"2"
    assert tls_server.calls == 2


async def test_server_refuses_a_client_certificate_of_another_ca(
    tls_server: IdentityServer, cluster: Path, foreign: Path
):
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await ask(tls_server.port, client_credentials(cluster / "ca.pem", foreign / "node-1"))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert tls_server.calls == 0


async def test_client_refuses_a_server_certificate_of_another_ca(foreign: Path, cluster: Path):
    async with identity_server(server_credentials(load_tls(foreign / "node-0"))) as impostor:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ask(impostor.port, channel_credentials(load_tls(cluster / "node-1")))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert impostor.calls == 0


async def test_client_refuses_a_server_that_is_not_the_expected_node(tls_server: IdentityServer, cluster: Path):
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await ask(tls_server.port, channel_credentials(load_tls(cluster / "node-1")), expect_peer=2)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert tls_server.calls == 0


async def test_plain_text_client_cannot_reach_a_tls_server(tls_server: IdentityServer):
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await ask(tls_server.port, None)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert tls_server.calls == 0


async def test_a_process_certificate_proves_every_id_it_names_and_no_other(cohosted: Path):
    async with identity_server(server_credentials(load_tls(cohosted / "node-4"))) as server:
        assert await ask(server.port, channel_credentials(load_tls(cohosted / "node-0")), expect_peer=4) == b"0-3"
        # A client that expects node 0 there finds a process certified for 4..7 only.
        with pytest.raises(grpc.aio.AioRpcError):
            await ask(server.port, channel_credentials(load_tls(cohosted / "node-0")), expect_peer=0)
    assert server.calls == 1


async def test_plain_text_peer_has_no_identity(plain_server: IdentityServer):
    assert await ask(plain_server.port, None) == b"None"


async def test_a_certificate_naming_the_whole_32_bit_range_is_read_and_refused_in_milliseconds(tmp_path):
    """The names are read as ranges, never listed id by id; a range beyond the topology's n is refused whole."""
    started = time.perf_counter()
    ids = _identity((b"netdp-nodes-0-4294967295", b"netdp-node-7"))
    assert ids is not None and len(ids) == 2**32 and 4294967295 in ids and 2**32 not in ids
    topology = build_topology(nx.cycle_graph(4), graph_name="ring", run_id="range-test",
                              protocol=MuffliatoParams(sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=1))
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="range-test", node_id=0))
    hosted = HostedReceivers({0: Receiver(topology, 0, journal)}, authenticated=True)
    envelope = peer_pb2.Envelope(run_id="range-test", protocol="muffliato", sender=1, shape=[1])
    with pytest.raises(Refusal) as refused:
        await hosted.admit(envelope, ids)
    elapsed = time.perf_counter() - started
    journal.close()
    assert refused.value.code == "PERMISSION_DENIED" and "beyond this topology's 4 nodes" in refused.value.detail
    assert elapsed < 0.05, elapsed
    assert [r.status_code for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("rejected")] == [
        "PERMISSION_DENIED"]
