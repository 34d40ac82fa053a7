"""Free loopback ports for local clusters."""

from __future__ import annotations

import socket


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
