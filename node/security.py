"""Mutual TLS between node processes: credentials, and the node ids a peer proved it speaks for.

Identity scheme
---------------
Every cluster has its own CA (`netdp certs` makes it). The CA signs one certificate per
node process: its subjectAltName carries the DNS name ``netdp-node-<id>`` of every node id
the process hosts (one id for a process per node, say 0..255 for a process hosting those),
plus the compose service names, the topology host and loopback, for tools that dial by
address. A process hosting one id also has CN ``netdp-node-<id>``. Both sides of every
connection present a certificate and verify the other's chain against the cluster CA only,
so a certificate issued by any other CA, or no certificate at all, is refused during the
TLS handshake, before any RPC runs.

* A server learns who is calling from the verified client certificate: `peer_identity`
  reads the ids out of its ``netdp-node-<id>`` names. The servicer then checks that the
  claimed sender is one of them, and the receiving id's Receiver that it is a neighbour
  in the published topology.
* A client checks that it reached the process it meant to: `channel_options(peer_id)`
  makes gRPC verify the server certificate against ``netdp-node-<peer_id>`` instead of
  the dialled host, so certificates need not list IP addresses and a process cannot
  impersonate another even if an address is redirected.

Files of one process (a directory, mounted read-only into its container): ``ca.pem`` (the
cluster CA certificate), ``node.pem`` (its certificate) and ``node.key`` (its private
key, mode 0600). The CA's private key never leaves the operator.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from node.errors import ConfigError
from node.idset import describe_nodes

CA_FILE = "ca.pem"
CERT_FILE = "node.pem"
KEY_FILE = "node.key"
NODE_NAME_PREFIX = "netdp-node-"
_NODE_NAME = re.compile(rf"^{re.escape(NODE_NAME_PREFIX)}(0|[1-9][0-9]*)$")
SAN_PROPERTY = "x509_subject_alternative_name"  # gRPC's auth-context key for the peer certificate's SAN entries
IDENTITY_CACHE = 256  # distinct client certificates remembered: one per peer process of a cluster


def node_name(node_id: int) -> str:
    """The TLS name of a node id: a subjectAltName of its process's certificate, the name clients verify."""
    return f"{NODE_NAME_PREFIX}{node_id}"


def node_id_from_name(name: str) -> int | None:
    """Invert `node_name`; None for any other name."""
    match = _NODE_NAME.match(name)
    return int(match.group(1)) if match else None


def node_ids_named(names: Iterable[str]) -> frozenset[int]:
    """The node ids among certificate names (other names, such as hosts, name no node)."""
    return frozenset(node_id for node_id in map(node_id_from_name, names) if node_id is not None)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM contents of one process's TLS directory, and the node ids its certificate names."""

    directory: Path
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    node_ids: frozenset[int]


def load_tls(directory: Path, expected_id: int | Collection[int] | None = None) -> TlsFiles:
    """Read and check a process's TLS directory, so a wrong file fails at start-up, not at the handshake.

    Raises ConfigError if a file is missing, unreadable or not PEM, if the certificate is not
    signed by the CA or the key is not its key, or if it names no node, or not every id of
    `expected_id` (one id, or the ids the process hosts).
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
    node_ids = _named_ids(cert)
    if not node_ids:
        raise ConfigError(
            f"{directory / CERT_FILE}: names no node (no subjectAltName {NODE_NAME_PREFIX}<id>); "
            "make node certificates with `netdp certs`"
        )
    expected = {expected_id} if isinstance(expected_id, int) else set(expected_id or ())
    if not expected <= node_ids:
        raise ConfigError(f"{directory / CERT_FILE}: certificate is for {describe_nodes(node_ids)}, "
                          f"not {describe_nodes(expected - node_ids)}")
    return TlsFiles(directory, contents[CA_FILE], contents[CERT_FILE], contents[KEY_FILE], node_ids)


def _named_ids(cert: x509.Certificate) -> frozenset[int]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    return node_ids_named(names.get_values_for_type(x509.DNSName))


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
    """Server side: present the process certificate and require a client certificate from the cluster CA."""
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
    )


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    """Client side: trust only the cluster CA and present the process certificate."""
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )


def channel_options(peer_id: int) -> list[tuple[str, str]]:
    """Channel options that make the client accept only a certificate naming `peer_id`, whatever address it dials."""
    return [("grpc.ssl_target_name_override", node_name(peer_id))]


def peer_identity(context: grpc.aio.ServicerContext) -> frozenset[int] | None:
    """The node ids the caller's client certificate names; None on plain-text peers or certificates naming none.

    The chain was already verified against the cluster CA by the handshake, so its names can be trusted.
    """
    auth = context.auth_context()
    if auth.get("transport_security_type") != [b"ssl"]:
        return None
    return _identity(tuple(auth.get(SAN_PROPERTY, ())))


@lru_cache(maxsize=IDENTITY_CACHE)
def _identity(names: tuple[bytes, ...]) -> frozenset[int] | None:
    """Node ids of a certificate's names, remembered: a process certified for 256 ids is asked on every message."""
    return node_ids_named(name.decode("utf-8", errors="replace") for name in names) or None
