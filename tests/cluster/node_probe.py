"""Probing one real node process from a test: wait until it serves, hand it gossip, read its view log.

Shared by the cluster tests that play a hostile or impersonating peer against a node started
with `start_node_process`, in plain text or over mutual TLS.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt

from coordinator_tools.cluster.launch import node_log_dir
from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.codec import pack
from node.healthcheck import is_serving, open_channel
from node.topology import Topology
from node.viewlog import VIEW_LOG_NAME, LogContents, read_log

RPC_TIMEOUT_S = 5.0
STOP_GRACE_S = 10.0


def wait_until_serving(address: str, node_id: int, tls_dir: Path | None, timeout_s: float = 30.0) -> None:
    """Poll the node's gRPC health service the way `node.healthcheck` does until it says SERVING.

    A fresh channel per attempt, so a node that is still starting is not hidden behind gRPC's
    reconnect back-off.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with open_channel(address, node_id, tls_dir) as channel:
            if is_serving(channel, timeout_s=1.0):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {node_id} at {address} is not SERVING after {timeout_s} s")
        time.sleep(0.1)


def gossip_chunks(topology: Topology, *, sender: int, value: npt.ArrayLike, run_id: str | None = None,
                  protocol: str | None = None, round_index: int = 0, shape: Sequence[int] | None = None,
                  extra: bytes = b"") -> list[peer_pb2.Chunk]:
    """One Gossip stream (a single chunk) claiming `sender`; every envelope field can be falsified."""
    data, packed_shape = pack(np.asarray(value, dtype=np.float64))
    envelope = peer_pb2.Envelope(
        run_id=topology.run_id if run_id is None else run_id,
        protocol=topology.protocol.name if protocol is None else protocol,
        sender=sender,
        round=round_index,
        shape=packed_shape if shape is None else shape,
    )
    return [peer_pb2.Chunk(envelope=envelope, data=data + extra)]


@dataclass(frozen=True)
class Reply:
    """How the node answered one Gossip call."""

    code: grpc.StatusCode
    details: str


async def gossip(address: str, chunks: list[peer_pb2.Chunk], credentials: grpc.ChannelCredentials | None = None,
                 options: Sequence[tuple[str, str]] = ()) -> Reply:
    """Send one Gossip stream on a fresh channel (plain text without `credentials`); never raises on a status."""
    if credentials is None:
        channel = grpc.aio.insecure_channel(address, options=options)
    else:
        channel = grpc.aio.secure_channel(address, credentials, options=options)
    async with channel:
        try:
            await peer_pb2_grpc.PeerStub(channel).Gossip(iter(chunks), timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            return Reply(exc.code(), exc.details() or "")
    return Reply(grpc.StatusCode.OK, "")


def view_log(rundir: Path, node_id: int) -> LogContents:
    """Everything readable so far from a node's public view log."""
    return read_log(node_log_dir(rundir, node_id) / VIEW_LOG_NAME)


def stop_processes(processes: Iterable[subprocess.Popen]) -> None:
    """SIGTERM whatever still runs (a node stops cleanly on it), SIGKILL what has not exited after a grace period."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
