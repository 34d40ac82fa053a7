"""Hold every packet of one netfilter queue for a fixed time, then let it go: a slow link.

The kernels we test on (and CI's) are built without the netem qdisc, so `tc ... netem delay`
is not available. This script does the same job through NFQUEUE, which they do have: an
iptables rule in a container's network namespace sends the packets for one peer address to
queue N, and this process, started in that namespace (`nsenter -t PID -n`), accepts each of
them DELAY_MS after it was queued, in order. Packets leave late but unchanged; everything
else on the interface is untouched. Only the standard library is used (netlink by hand), so
the host's interpreter runs it without anything installed.

Usage: python3 link_delay.py --queue N --delay-ms D
Prints "ready" once bound to the queue; runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
NFGEN_HEADER = struct.Struct("!BBH")  # family, version, resource id (the queue number)
ATTRIBUTE = struct.Struct("=HH")  # length, type
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS = 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLA_TYPE_MASK = 0x3FFF
RECEIVE_BYTES = 1 << 16


def _align(length: int) -> int:
    return (length + 3) & ~3


def _attribute(kind: int, payload: bytes) -> bytes:
    body = ATTRIBUTE.pack(ATTRIBUTE.size + len(payload), kind) + payload
    return body + b"\0" * (_align(len(body)) - len(body))


def _message(kind: int, queue: int, attributes: bytes, flags: int, sequence: int) -> bytes:
    body = NFGEN_HEADER.pack(socket.AF_UNSPEC, 0, queue) + attributes
    header = NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, sequence, 0)
    return header + body


def _messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload after the netlink header) of every message in one datagram."""
    offset = 0
    while offset + NLMSG_HEADER.size <= len(data):
        length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
        if length < NLMSG_HEADER.size:
            return
        yield kind, data[offset + NLMSG_HEADER.size : offset + length]
        offset += _align(length)


def _packet_id(payload: bytes) -> int | None:
    """The id of a queued packet, from its NFQA_PACKET_HDR attribute."""
    offset = NFGEN_HEADER.size
    while offset + ATTRIBUTE.size <= len(payload):
        length, kind = ATTRIBUTE.unpack_from(payload, offset)
        if length < ATTRIBUTE.size:
            return None
        if kind & NLA_TYPE_MASK == NFQA_PACKET_HDR:
            return struct.unpack_from("!I", payload, offset + ATTRIBUTE.size)[0]
        offset += _align(length)
    return None


def _configure(sock: socket.socket, queue: int, attributes: bytes, sequence: int) -> None:
    """Send one config request and raise OSError if the kernel refuses it."""
    sock.send(_message(NFQNL_MSG_CONFIG, queue, attributes, NLM_F_REQUEST | NLM_F_ACK, sequence))
    for kind, payload in _messages(sock.recv(RECEIVE_BYTES)):
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", payload)
            if error:
                raise OSError(-error, f"nfqueue config: {os.strerror(-error)}")


def bind(queue: int) -> socket.socket:
    """A netlink socket bound to netfilter queue `queue`, sending packet metadata only."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    bind_command = struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET)
    _configure(sock, queue, _attribute(NFQA_CFG_CMD, bind_command), 1)
    _configure(sock, queue, _attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)), 2)
    return sock


def delay_forever(sock: socket.socket, queue: int, delay_s: float) -> None:
    """Accept every queued packet delay_s after it arrived, in arrival order."""
    held: deque[tuple[float, int]] = deque()
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([sock], [], [], timeout)
        if readable:
            arrived = time.monotonic()
            for kind, payload in _messages(sock.recv(RECEIVE_BYTES)):
                packet = _packet_id(payload) if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET else None
                if packet is not None:
                    held.append((arrived + delay_s, packet))
        while held and held[0][0] <= time.monotonic():
            _, packet = held.popleft()
            verdict = _attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet))
            sock.send(_message(NFQNL_MSG_VERDICT, queue, verdict, NLM_F_REQUEST, 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True, help="netfilter queue number")
    parser.add_argument("--delay-ms", type=float, required=True, help="how long each packet is held")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sock = bind(args.queue)
    print("ready", flush=True)
    try:
        delay_forever(sock, args.queue, args.delay_ms / 1000.0)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
