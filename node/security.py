"""Mutual TLS between node processes: credentials, and the node ids a peer proved it speaks for.

Identity scheme
---------------
Every cluster has its own CA (`netdp certs` makes it). The published topology says which
node ids live at each address; the ids of one address are one node process, and the CA
signs one certificate per process naming them (`process_names`): the DNS name
``netdp-node-<lowest id>``, the process's name, then ``netdp-nodes-<a>-<b>`` for each run
of consecutive ids a..b it hosts (a lone id is written ``netdp-node-<id>``). So the
certificate of a process hosting ids 0..511 names ``netdp-node-0`` and ``netdp-nodes-0-511``:
its size does not grow with the number of ids (one name per id would pass 8.4 KB past about
500 ids, and grpcio 1.85 then fails every handshake where the client presents it). A process
hosting one id has exactly ``netdp-node-<id>``, and CN ``netdp-node-<id>`` too. Its
subjectAltName also holds the compose service name, the topology host and loopback, for
tools that dial by address. Both sides of every connection present a certificate and verify
the other's chain against the cluster CA only, so a certificate issued by any other CA, or
no certificate at all, is refused during the TLS handshake, before any RPC runs.

* A server learns who is calling from the verified client certificate: `peer_identity`
  reads the ids its names stand for (the union of its ``netdp-node-<id>`` and
  ``netdp-nodes-<a>-<b>`` names; any other name, a backwards range included, names no id).
  The servicer then checks that the claimed sender is one of them, and the receiving id's
  Receiver that it is a neighbour in the published topology.
* A client checks that it reached the process it meant to: it dials one channel per peer
  address, and `channel_options(process_id)`, given the lowest id the topology publishes at
  that address, makes gRPC verify the server certificate against ``netdp-node-<process_id>``
  instead of the dialled host, so certificates need not list IP addresses and a process
  cannot impersonate another even if an address is redirected.

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
from node.idset import IdRanges, describe_nodes, id_runs

CA_FILE = "ca.pem"
CERT_FILE = "node.pem"
KEY_FILE = "node.key"
NODE_NAME_PREFIX = "netdp-node-"
RANGE_NAME_PREFIX = "netdp-nodes-"
_ID = "(0|[1-9][0-9]*)"  # decimal, no leading zero: one spelling per id
_NODE_NAME = re.compile(rf"^{re.escape(NODE_NAME_PREFIX)}{_ID}$")
_RANGE_NAME = re.compile(rf"^{re.escape(RANGE_NAME_PREFIX)}{_ID}-{_ID}$")
SAN_PROPERTY = "x509_subject_alternative_name"  # gRPC's auth-context key for the peer certificate's SAN entries
IDENTITY_CACHE = 256  # distinct client certificates remembered: one per peer process of a cluster


def node_name(node_id: int) -> str:
    """`netdp-node-<id>`: a process's name, by its lowest id, that clients verify (and how a lone id is written)."""
    return f"{NODE_NAME_PREFIX}{node_id}"


def node_id_from_name(name: str) -> int | None:
    """Invert `node_name`; None for any other name."""
    match = _NODE_NAME.match(name)
    return int(match.group(1)) if match else None


def process_names(node_ids: Collection[int]) -> list[str]:
    """The TLS names of the process hosting `node_ids`: its name `netdp-node-<lowest id>`, then its id runs.

    Runs (`netdp-nodes-<a>-<b>`) keep a certificate small however many ids it names; one id keeps only its name.
    """
    runs = id_runs(node_ids)
    names = [node_name(first) if first == last else f"{RANGE_NAME_PREFIX}{first}-{last}" for first, last in runs]
    return list(dict.fromkeys([node_name(runs[0][0]), *names]))


def node_ids_from_name(name: str) -> range:
    """The ids one certificate name stands for: empty for other names (hosts) and backwards ranges."""
    node_id = node_id_from_name(name)
    if node_id is not None:
        return range(node_id, node_id + 1)
    match = _RANGE_NAME.match(name)
    return range(int(match.group(1)), int(match.group(2)) + 1) if match else range(0)


def node_ids_named(names: Iterable[str]) -> IdRanges:
    """The node ids certificate names stand for, together: read as ranges, never listed id by id."""
    return IdRanges((ids.start, ids.stop - 1) for ids in map(node_ids_from_name, names) if ids)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM contents of one process's TLS directory, and the node ids its certificate names."""

    directory: Path
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    node_ids: IdRanges


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
            f"{directory / CERT_FILE}: names no node (no subjectAltName {NODE_NAME_PREFIX}<id> "
            f"or {RANGE_NAME_PREFIX}<a>-<b>); "
            "make node certificates with `netdp certs`"
        )
    expected = {expected_id} if isinstance(expected_id, int) else set(expected_id or ())
    missing = {node_id for node_id in expected if node_id not in node_ids}
    if missing:
        raise ConfigError(f"{directory / CERT_FILE}: certificate is for {describe_nodes(node_ids)}, "
                          f"not {describe_nodes(missing)}")
    return TlsFiles(directory, contents[CA_FILE], contents[CERT_FILE], contents[KEY_FILE], node_ids)


def _named_ids(cert: x509.Certificate) -> IdRanges:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return IdRanges(())
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


def channel_options(process_id: int) -> list[tuple[str, str]]:
    """Channel options that make the client accept only the certificate of the process named `process_id`.

    `process_id` is the lowest id the topology publishes at the dialled address, whatever that address is.
    """
    return [("grpc.ssl_target_name_override", node_name(process_id))]


def peer_identity(context: grpc.aio.ServicerContext) -> IdRanges | None:
    """The node ids the caller's client certificate names; None on plain-text peers or certificates naming none.

    The chain was already verified against the cluster CA by the handshake, so its names can be trusted.
    """
    auth = context.auth_context()
    if auth.get("transport_security_type") != [b"ssl"]:
        return None
    return _identity(tuple(auth.get(SAN_PROPERTY, ())))


@lru_cache(maxsize=IDENTITY_CACHE)
def _identity(names: tuple[bytes, ...]) -> IdRanges | None:
    """Node ids of a certificate's names, remembered: a process certified for 512 ids is asked on every message."""
    return node_ids_named(name.decode("utf-8", errors="replace") for name in names) or None
