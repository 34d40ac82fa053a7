"""Who may gossip with a node over real mutual TLS: the certificate decides, not the envelope.

One real node process (node 0 of a 5-node ring: neighbours 1 and 4, non-neighbours 2 and 3)
runs with certificates from `netdp certs` and waits in round 0 (long startup deadline)
while the test plays other peers with their real certificates. It proves that

* a message is accepted only if the TLS identity is the claimed sender *and* a neighbour:
  otherwise PERMISSION_DENIED, and a `rejected` record naming the claimed sender and the
  reason is already in node 0's view log when the client hears the status;
* a certificate of this cluster's CA that names no node (a tool's, say) speaks for nobody:
  PERMISSION_DENIED and logged, whatever sender it claims;
* a certificate from another cluster's CA, or no client certificate at all, is stopped by
  the TLS handshake (UNAVAILABLE), so nothing reaches the servicer or the view log;
* the same client path with a neighbour's own certificate and a well-formed round-0 value is
  accepted, so every refusal above is about identity, not a broken set-up;
* none of it harms the node: it keeps serving gRPC health over mTLS and its log reads back whole.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coordinator_tools import cli
from coordinator_tools.certs import CA_KEY_FILE
from coordinator_tools.cluster.launch import LaunchOptions, prepare_rundir, start_node_process
from netdp.v1 import viewlog_pb2
from node import healthcheck
from node.codec import from_tensor
from node.data import node_data_file
from node.security import CA_FILE, CERT_FILE, KEY_FILE, channel_credentials, channel_options, load_tls
from node.topology import Topology
from tests.cluster.conftest import MakeClusterFiles
from tests.cluster.node_probe import Reply, gossip, gossip_chunks, stop_processes, view_log, wait_until_serving

pytestmark = pytest.mark.cluster

NODE = 0
NEIGHBOUR_A, NEIGHBOUR_B = 1, 4
NON_NEIGHBOUR_2, NON_NEIGHBOUR_3 = 2, 3


@dataclass(frozen=True)
class ProbedNode:
    """Node 0 running with --tls-dir, and every certificate a test may present to it."""

    topology: Topology
    values: np.ndarray
    rundir: Path
    certs: Path  # this cluster's `netdp certs` output
    foreign: Path  # `netdp certs` for the same topology, run again: same node names, another CA
    process: subprocess.Popen

    @property
    def address(self) -> str:
        return self.topology.address_of(NODE)

    def tls_dir(self, node_id: int) -> Path:
        return self.certs / f"node-{node_id}"

    def is_healthy(self) -> bool:
        """Still running, and `python -m node.healthcheck` with node 0's own certificate says SERVING."""
        argv = ["--address", self.address, "--id", str(NODE), "--tls-dir", str(self.tls_dir(NODE))]
        return self.process.poll() is None and healthcheck.main(argv) == 0

    def log_records(self) -> list[viewlog_pb2.Record]:
        log = view_log(self.rundir, NODE)
        assert log.damage is None
        return log.records

    async def gossip_as(self, credentials: grpc.ChannelCredentials, claims: int) -> Reply:
        """Dial node 0 (verifying it is node 0) and send a well-formed round-0 value claiming to be `claims`."""
        chunks = gossip_chunks(self.topology, sender=claims, value=self.values[claims])
        return await gossip(self.address, chunks, credentials, channel_options(NODE))


def netdp_certs(topology_path: Path, out: Path) -> Path:
    assert cli.main(["certs", str(topology_path), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def node(make_module_cluster_files: MakeClusterFiles) -> Iterator[ProbedNode]:
    # Node 0 waits up to startup_deadline_s for its neighbours' round 0: it stays there while probed.
    files = make_module_cluster_files("ring", 5, dimension=3, startup_deadline_s=300.0, name="mtls")
    assert set(files.topology.neighbours[NODE]) == {NEIGHBOUR_A, NEIGHBOUR_B}
    certs = netdp_certs(files.topology_path, files.root / "certs")
    foreign = netdp_certs(files.topology_path, files.root / "foreign-certs")
    rundir = files.root / "run"
    prepare_rundir(files.topology_path, rundir)
    process = start_node_process(rundir, NODE, node_data_file(files.data_dir, NODE),
                                 LaunchOptions(certs_dir=certs))
    try:
        probed = ProbedNode(files.topology, files.values, rundir, certs, foreign, process)
        wait_until_serving(probed.address, NODE, probed.tls_dir(NODE))
        yield probed
    finally:
        stop_processes([process])


def cluster_identity(node: ProbedNode, node_id: int) -> grpc.ChannelCredentials:
    """Node `node_id`'s real certificate, loaded and checked the way that node itself would."""
    return channel_credentials(load_tls(node.tls_dir(node_id), expected_id=node_id))


@pytest.mark.parametrize(
    ("certificate_of", "claims", "detail"),
    [
        pytest.param(NON_NEIGHBOUR_3, NON_NEIGHBOUR_3, "node 3 is not a neighbour of node 0",
                     id="non-neighbour-as-itself"),
        pytest.param(NEIGHBOUR_A, NEIGHBOUR_B, "authenticated as node 1, claims 4",
                     id="neighbour-as-another-neighbour"),
        # The claimed sender is a neighbour, so only the identity check can refuse this one.
        pytest.param(NON_NEIGHBOUR_2, NEIGHBOUR_A, "authenticated as node 2, claims 1",
                     id="non-neighbour-as-a-neighbour"),
    ],
)
async def test_a_valid_certificate_may_only_speak_for_its_own_neighbouring_node(
    node: ProbedNode, certificate_of: int, claims: int, detail: str
):
    before = len(node.log_records())
    reply = await node.gossip_as(cluster_identity(node, certificate_of), claims)
    assert reply == Reply(grpc.StatusCode.PERMISSION_DENIED, detail)
    new = node.log_records()[before:]
    assert [record.WhichOneof("kind") for record in new] == ["rejected"]
    rejected = new[0].rejected
    assert (rejected.claimed_sender, rejected.round, rejected.status_code, rejected.detail) == (
        claims, 0, "PERMISSION_DENIED", detail)
    # A node speaking as itself, refused as a non-neighbour, delivered its value all the same: the view keeps it (the
    # audit names that flow); a certificate that speaks for another node is refused before any value is kept.
    assert rejected.HasField("payload") == (certificate_of == claims)


def unnamed_cluster_certificate(node: ProbedNode) -> grpc.ChannelCredentials:
    """Signed by this cluster's own CA, but for a tool rather than a node: CN `netdp-monitor`."""
    ca_key = serialization.load_pem_private_key((node.certs / CA_KEY_FILE).read_bytes(), password=None)
    ca_pem = (node.certs / CA_FILE).read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "netdp-monitor")]))
        .issuer_name(x509.load_pem_x509_certificate(ca_pem).subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return grpc.ssl_channel_credentials(root_certificates=ca_pem, private_key=key_pem,
                                        certificate_chain=certificate.public_bytes(serialization.Encoding.PEM))


async def test_a_cluster_certificate_that_names_no_node_speaks_for_nobody(node: ProbedNode):
    before = len(node.log_records())
    reply = await node.gossip_as(unnamed_cluster_certificate(node), claims=NEIGHBOUR_B)
    detail = "the client certificate names no node of this cluster"
    assert reply == Reply(grpc.StatusCode.PERMISSION_DENIED, detail)
    new = node.log_records()[before:]
    assert [record.WhichOneof("kind") for record in new] == ["rejected"]
    assert new[0].rejected == viewlog_pb2.Rejected(
        claimed_sender=NEIGHBOUR_B, round=0, status_code="PERMISSION_DENIED", detail=detail)


def foreign_ca_certificate(node: ProbedNode) -> grpc.ChannelCredentials:
    """Neighbour B's name, signed by another cluster's CA; the client itself trusts node 0's real CA."""
    impostor = node.foreign / f"node-{NEIGHBOUR_B}"
    return grpc.ssl_channel_credentials(root_certificates=(node.certs / CA_FILE).read_bytes(),
                                        private_key=(impostor / KEY_FILE).read_bytes(),
                                        certificate_chain=(impostor / CERT_FILE).read_bytes())


def no_client_certificate(node: ProbedNode) -> grpc.ChannelCredentials:
    """Server-authenticated TLS only: the client checks node 0 but proves nothing about itself."""
    return grpc.ssl_channel_credentials(root_certificates=(node.certs / CA_FILE).read_bytes())


@pytest.mark.parametrize("credentials", [foreign_ca_certificate, no_client_certificate])
async def test_a_peer_without_a_certificate_of_this_cluster_is_refused_at_the_handshake(
    node: ProbedNode, credentials: Callable[[ProbedNode], grpc.ChannelCredentials]
):
    before = len(node.log_records())
    # Past the handshake, this round-0 value from neighbour B would be accepted.
    reply = await node.gossip_as(credentials(node), claims=NEIGHBOUR_B)
    assert reply.code == grpc.StatusCode.UNAVAILABLE
    # gRPC's wording for a channel that never became ready: the call itself never started.
    assert reply.details.startswith("failed to connect to all addresses"), reply.details
    assert len(node.log_records()) == before
    assert node.is_healthy()


async def test_a_neighbour_with_its_own_certificate_is_accepted(node: ProbedNode):
    before = len(node.log_records())
    reply = await node.gossip_as(cluster_identity(node, NEIGHBOUR_A), claims=NEIGHBOUR_A)
    assert reply == Reply(grpc.StatusCode.OK, "")
    new = node.log_records()[before:]
    assert [record.WhichOneof("kind") for record in new] == ["received"]
    assert (new[0].received.peer, new[0].received.round) == (NEIGHBOUR_A, 0)
    np.testing.assert_array_equal(from_tensor(new[0].received.payload), node.values[NEIGHBOUR_A])


def test_the_node_still_serves_over_mtls_and_its_log_reads_back_whole(node: ProbedNode):
    assert node.is_healthy()
    log = view_log(node.rundir, NODE)
    assert log.damage is None
    assert log.header is not None and log.header.node_id == NODE
    # Only the accepted neighbour's own message ever got in, whatever the others claimed.
    assert {record.peer for record in log.of_kind("received")} <= {NEIGHBOUR_A}
