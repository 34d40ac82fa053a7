"""`python -m node.healthcheck`: exit 0 iff a node's standard gRPC health service says SERVING.

It never exits 2, which docker reserves; every failure is 1 (unhealthy) with a message.

Container health checks run it next to the node. It dials the node's published address
and, with TLS, presents the node's own certificate and verifies the server is that node,
so a healthy answer also proves the node's mTLS set-up works. It takes the address on the
command line rather than loading the topology, to start fast on a busy host.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from node.errors import NetdpError
from node.security import channel_credentials, channel_options, load_tls


def is_serving(channel: grpc.Channel, timeout_s: float, service: str = "") -> bool:
    """Ask the health service once; any RPC failure counts as not serving."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.RpcError:
        return False
    serving: bool = reply.status == health_pb2.HealthCheckResponse.SERVING
    return serving


def open_channel(address: str, node_id: int, tls_dir: Path | None) -> grpc.Channel:
    """A blocking channel to the process named `node_id` (its lowest id): mTLS checking that, or plain text."""
    if tls_dir is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, channel_credentials(load_tls(tls_dir)), options=channel_options(node_id))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m node.healthcheck",
        description="Exit 0 if the node at ADDRESS reports SERVING on the standard gRPC health service, "
        "1 otherwise.",
    )
    parser.add_argument("--address", required=True, help="host:port the node listens on (its topology address)")
    parser.add_argument("--id", type=int, required=True,
                        help="the node expected to answer, checked with --tls-dir: with several ids at ADDRESS, "
                        "the lowest (the name their process is verified by)")
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument("--tls-dir", type=Path, help="a TLS directory of this cluster (ca.pem, node.pem, node.key)")
    security.add_argument("--insecure", action="store_true", help="the node runs in plain-text mode")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with open_channel(args.address, args.id, args.tls_dir) as channel:
            serving = is_serving(channel, args.timeout)
    except NetdpError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    print("SERVING" if serving else "NOT SERVING")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
