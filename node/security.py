"""Mutual TLS between nodes: credentials, and the node id a peer proved it holds.

Identity scheme
---------------
Every cluster has its own CA (`netdp certs` makes it). The CA signs one certificate per
node whose subject CN is ``netdp-node-<id>`` and whose subjectAltName carries the same
DNS name (plus the compose service name ``node-<id>``, the topology host and loopback,
for tools that dial by address). Both sides of every connection present a certificate
and verify the other's chain against the cluster CA only, so a certificate issued by
any other CA, or no certificate at all, is refused during the TLS handshake, before
any RPC runs.

* A server learns who is calling from the verified client certificate:
  `peer_identity` reads the id out of its CN. The servicer then checks that this id is
  the claimed sender and a neighbour in the published topology.
* A client checks that it reached the node it meant to: `channel_options(peer_id)`
  makes gRPC verify the server certificate against ``netdp-node-<peer_id>`` instead of
  the dialled host, so certificates need not list IP addresses and a node cannot
  impersonate another even if an address is redirected.

Files of one node (a directory, mounted read-only into its container): ``ca.pem`` (the
cluster CA certificate), ``node.pem`` (its certificate) and ``node.key`` (its private
key, mode 0600). The CA's private key never leaves the operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from node.errors import ConfigError

CA_FILE = "ca.pem"
CERT_FILE = "node.pem"
KEY_FILE = "node.key"
NODE_NAME_PREFIX = "netdp-node-"
_NODE_NAME = re.compile(rf"^{re.escape(NODE_NAME_PREFIX)}(0|[1-9][0-9]*)$")


def node_name(node_id: int) -> str:
    """The TLS name of a node: its certificate's CN and the name clients verify."""
    return f"{NODE_NAME_PREFIX}{node_id}"


def node_id_from_name(name: str) -> int | None:
    """Invert `node_name`; None for any other name."""
    match = _NODE_NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class TlsFiles:
    """The PEM contents of one node's TLS directory, and the node id its certificate names."""

    directory: Path
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    node_id: int


def load_tls(directory: Path, expected_id: int | None = None) -> TlsFiles:
    """Read and check a node's TLS directory, so a wrong file fails at start-up, not at the handshake.

    Raises ConfigError if a file is missing, unreadable or not PEM, if the certificate is not
    signed by the CA or the key is not its key, or if it names no node or another node than
    `expected_id`.
    """
    directory = Path(directory)
    contents = {name: _read(directory / name) for name in (CA_FILE, CERT_FILE, KEY_FILE)}
    ca = _certificate(directory / CA_FILE, contents[CA_FILE])
    cert = _certificate(directory / CERT_FILE, contents[CERT_FILE])
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise ConfigError(
            f"{directory / CERT_FILE}: not signed by the CA in {CA_FILE}; both must come from one `netdp certs` run"
        ) from None
    try:
        key = serialization.load_pem_private_key(contents[KEY_FILE], password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{directory / KEY_FILE}: not an unencrypted PEM private key") from None
    if key.public_key() != cert.public_key():
        raise ConfigError(f"{directory / KEY_FILE}: this key does not belong to {CERT_FILE}")
    common_names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    node_id = node_id_from_name(str(common_names[0].value)) if len(common_names) == 1 else None
    if node_id is None:
        raise ConfigError(
            f"{directory / CERT_FILE}: subject is not CN={NODE_NAME_PREFIX}<id>; "
            "make node certificates with `netdp certs`"
        )
    if expected_id is not None and node_id != expected_id:
        raise ConfigError(f"{directory / CERT_FILE}: certificate is for node {node_id}, not node {expected_id}")
    return TlsFiles(directory, contents[CA_FILE], contents[CERT_FILE], contents[KEY_FILE], node_id)


def _certificate(path: Path, pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise ConfigError(f"{path}: not a PEM certificate") from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read TLS file ({exc.strerror}); make one with `netdp certs`") from None


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """Server side: present the node certificate and require a client certificate from the cluster CA."""
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
    )


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    """Client side: trust only the cluster CA and present the node certificate."""
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )


def channel_options(peer_id: int) -> list[tuple[str, str]]:
    """Channel options that make the client accept only node `peer_id`'s certificate, whatever address it dials."""
    return [("grpc.ssl_target_name_override", node_name(peer_id))]


def peer_identity(context: grpc.aio.ServicerContext) -> int | None:
    """The node id proved by the caller's client certificate; None on plain-text or foreign-named peers.

    The chain was already verified against the cluster CA by the handshake, so the CN can be trusted.
    """
    auth = context.auth_context()
    if auth.get("transport_security_type") != [b"ssl"]:
        return None
    common_names = auth.get("x509_common_name", [])
    if len(common_names) != 1:
        return None
    return node_id_from_name(common_names[0].decode("utf-8", errors="replace"))
