"""Ports of local clusters: free loopback ports for new topologies, and a check that a topology's are free."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable

from node.errors import ConfigError


def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel hands out on 127.0.0.1 right now (released again for the nodes to bind)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def check_ports_free(addresses: Iterable[str]) -> None:
    """Raise ConfigError naming the first address whose port is taken on this machine (or whose host is not one of
    its addresses), so a local run fails before any node starts rather than when a node cannot listen."""
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM,
                                                                  flags=socket.AI_PASSIVE)[0]
        except (socket.gaierror, ValueError):
            raise ConfigError(f"{address}: cannot resolve its host on this machine") from None
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed run's TIME_WAIT is no obstacle
            try:
                probe.bind(sockaddr)
            except OSError as error:
                reason = ("is in use: stop what holds it, or publish another port" if error.errno == errno.EADDRINUSE
                          else f"cannot be listened on ({error.strerror}): is its host an address of this machine?")
                raise ConfigError(f"{address}: port {port} {reason}") from None
