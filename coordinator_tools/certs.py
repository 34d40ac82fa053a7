"""`netdp certs`: a cluster CA and one mutual-TLS certificate per node process of a topology.

The node ids that share an address in the topology are hosted by one process: they get one
certificate naming all of them, by the process's lowest id and its runs of consecutive ids
(see node/security.py for the identity scheme). Layout written
under --out:

    DIR/ca.pem, DIR/ca.key            the cluster CA; ca.key stays with the operator
    DIR/node-<id>/ca.pem              what the process hosting <id> mounts (read-only) as its --tls-dir
    DIR/node-<id>/node.pem            (the same files for every id of one process)
    DIR/node-<id>/node.key            mode 0600

Keys are ECDSA P-256, which every gRPC TLS stack accepts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coordinator_tools.compose import node_folder, service_name
from node.errors import ConfigError
from node.idset import describe_nodes
from node.security import CA_FILE, CERT_FILE, KEY_FILE, node_name, process_names
from node.topology import Topology, hosted_ids, load_topology

CA_KEY_FILE = "ca.key"
CLOCK_SKEW = dt.timedelta(minutes=5)
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1", "::1")
UNSPECIFIED_IPS = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))
# grpcio 1.85.1 fails every handshake whose client presents a certificate of about 8.4 KB (DER) or more.
MAX_CERTIFICATE_BYTES = 8192


@dataclass(frozen=True)
class Issued:
    """A private key and the certificate for it."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def make_ca(label: str, days: int) -> Issued:
    """A self-signed CA that may sign node certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "netdp"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"netdp cluster CA {label}"),
    ])
    certificate = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, certificate)


def issue_node_certificate(ca: Issued, node_ids: Sequence[int], hosts: list[str], days: int) -> Issued:
    """A server+client certificate for a process hosting `node_ids`: SANs `process_names(node_ids)`, then `hosts`.

    Its CN is `netdp-node-<id>` for one id, a description for several (identity is read from the SANs only).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    common_name = (node_name(node_ids[0]) if len(node_ids) == 1
                   else f"netdp node process, {len(node_ids)} ids from {min(node_ids)}")
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "netdp"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])
    certificate = (
        _builder(subject, ca.certificate.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(_general_names([*process_names(node_ids), *hosts])),
                       critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(key, certificate)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    """Fields every certificate here shares: validity from a little before now, serial, key id."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """ECDSA keys sign: TLS handshakes always, certificates and CRLs only for the CA."""
    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=signs_certificates, crl_sign=signs_certificates,
        content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )


def _general_names(hosts: list[str]) -> list[x509.GeneralName]:
    """DNS or IP entries, each once, in order."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def node_hosts(topology: Topology, node_ids: Sequence[int]) -> list[str]:
    """Names a tool may dial the process hosting `node_ids` by: its compose service, its topology host, loopback."""
    host = topology.address_of(node_ids[0]).rpartition(":")[0].strip("[]")
    try:
        listed = [] if ipaddress.ip_address(host) in UNSPECIFIED_IPS else [host]
    except ValueError:
        listed = [host]
    return [service_name(node_ids), *listed, *LOOPBACK_NAMES, *LOOPBACK_IPS]


def write_cluster_certs(topology: Topology, out: Path, days: int, force: bool = False) -> int:
    """Make the CA and every node's TLS directory under `out`; return how many processes got a certificate.

    Refuses to replace a CA unless `force`, and, before writing anything, a certificate too large for a handshake.
    """
    if (out / CA_KEY_FILE).exists() and not force:
        raise ConfigError(
            f"{out / CA_KEY_FILE} exists; pass --force to replace this cluster's CA and all node certificates"
        )
    ca = make_ca(topology.run_id, days)
    processes = hosted_ids(topology)
    issued_for = {node_ids: issue_node_certificate(ca, node_ids, node_hosts(topology, node_ids), days)
                  for node_ids in processes}
    for node_ids, issued in issued_for.items():
        size = len(issued.certificate.public_bytes(serialization.Encoding.DER))
        if size > MAX_CERTIFICATE_BYTES:
            raise ConfigError(f"the certificate of {describe_nodes(node_ids)} would take {size} bytes, more than "
                              f"gRPC's TLS handshake carries ({MAX_CERTIFICATE_BYTES}); publish fewer ids per "
                              "address, or runs of consecutive ids")
    ca_pem = ca.certificate.public_bytes(serialization.Encoding.PEM)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / CA_FILE, ca_pem, 0o644)
    _write(out / CA_KEY_FILE, _key_pem(ca.key), 0o600)
    for node_ids, issued in issued_for.items():
        cert_pem, key_pem = issued.certificate.public_bytes(serialization.Encoding.PEM), _key_pem(issued.key)
        for node_id in node_ids:
            directory = out / node_folder(node_id)
            directory.mkdir(exist_ok=True)
            _write(directory / CA_FILE, ca_pem, 0o644)
            _write(directory / CERT_FILE, cert_pem, 0o644)
            _write(directory / KEY_FILE, key_pem, 0o600)
    return len(processes)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write with `mode` from the start, so a key is never readable by others, even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(data)


def _run(args: argparse.Namespace) -> int:
    if args.days < 1:
        raise ConfigError(f"--days must be at least 1, got {args.days}")
    topology = load_topology(args.topology)
    processes = write_cluster_certs(topology, args.out, args.days, args.force)
    print(f"wrote a cluster CA and {processes} node process certificates for {topology.n} node ids to {args.out}")
    print(f"mount {args.out}/node-<id>/ into the process hosting node <id> as --tls-dir; "
          f"keep {args.out / CA_KEY_FILE} private")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="make a cluster CA and one mutual-TLS certificate per node process",
        description="Make a cluster CA and, for every node process of TOPOLOGY (the node ids sharing an "
        "address), a certificate naming its ids (subjectAltName netdp-node-<lowest id>, then netdp-nodes-<a>-<b> "
        "per run of consecutive ids) signed by that CA. "
        "Nodes accept only peers whose certificate this CA signed, and only messages from an id it names.",
    )
    parser.add_argument("topology", type=Path, metavar="TOPOLOGY", help="published topology file (JSON)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="output directory: ca.pem, ca.key (keep private) and node-<id>/{ca.pem,node.pem,node.key}")
    parser.add_argument("--days", type=int, default=365, metavar="N",
                        help="validity of every certificate in days (default 365)")
    parser.add_argument("--force", action="store_true", help="replace an existing CA and node certificates in DIR")
    parser.set_defaults(handler=_run)
