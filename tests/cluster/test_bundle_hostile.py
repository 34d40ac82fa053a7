"""A hostile client sending DeliverBundle calls to a real node process: a bundle of too many messages is refused
whole, one larger than a gRPC message is refused before it is read, and one bad message among good ones is refused
alone (logged with a bounded record) while the good ones are delivered, logged and acknowledged."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, prepare_rundir, start_node_process
from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.data import node_data_file
from node.message import MAX_FIELD_CHARS
from node.transport.grpc_link import MAX_BUNDLE_MESSAGES
from tests.cluster.node_probe import RPC_TIMEOUT_S, gossip_chunks, stop_processes, view_log, wait_until_serving

pytestmark = pytest.mark.cluster

# A refusal record keeps a bounded prefix and a digest of an oversized field, and at most the protocol's dimension
# of a payload: far below this, whatever the refused message carried.
MAX_REFUSAL_RECORD_BYTES = 2048


async def deliver_bundle(address: str, messages: list[peer_pb2.Chunk]) -> peer_pb2.BundleReceipt | grpc.StatusCode:
    """One DeliverBundle call on a fresh plain-text channel: its receipt, or the status it failed with."""
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            return await peer_pb2_grpc.PeerStub(channel).DeliverBundle(peer_pb2.Bundle(messages=messages),
                                                                       timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            return exc.code()


def test_hostile_bundles_are_refused_and_logged_with_bounded_records(make_cluster_files):
    files = make_cluster_files(sigma=0.0, rounds=5, dimension=3, name="hostile-bundles")
    topology = files.topology
    rundir = files.root / "run"
    prepare_rundir(files.topology_path, rundir)
    address = topology.address_of(0)
    first, second = topology.neighbours[0][:2]

    def genuine(sender: int) -> peer_pb2.Chunk:
        chunk, = gossip_chunks(topology, sender=sender, value=files.values[sender])
        chunk.envelope.receiver = 0
        return chunk

    bad = genuine(first)
    bad.envelope.kind = "k" * 100_000  # far beyond the published maximum length of a kind
    node = start_node_process(rundir, 0, node_data_file(files.data_dir, 0), LaunchOptions(sampler="secure"))
    try:
        wait_until_serving(address, 0, tls_dir=None)
        before = view_log(rundir, 0).records
        too_many = asyncio.run(deliver_bundle(address, [genuine(first)] * (MAX_BUNDLE_MESSAGES + 1)))
        after_too_many = view_log(rundir, 0).records
        oversized = asyncio.run(deliver_bundle(address, [peer_pb2.Chunk(envelope=genuine(first).envelope,
                                                                        data=bytes(3 << 20))] * 2))
        mixed = asyncio.run(deliver_bundle(address, [genuine(first), bad, genuine(second)]))
        again = asyncio.run(deliver_bundle(address, [genuine(second)]))
    finally:
        stop_processes([node])

    assert too_many == grpc.StatusCode.RESOURCE_EXHAUSTED
    refused_whole = [r for r in after_too_many[len(before):] if r.WhichOneof("kind") == "rejected"]
    assert len(refused_whole) == 1  # one record for the bundle, not one per message
    assert refused_whole[0].ByteSize() < MAX_REFUSAL_RECORD_BYTES
    assert oversized == grpc.StatusCode.RESOURCE_EXHAUSTED  # larger than a gRPC message: never read
    assert isinstance(mixed, peer_pb2.BundleReceipt)
    assert [outcome.code for outcome in mixed.outcomes] == ["", "INVALID_ARGUMENT", ""]
    assert f"at most {MAX_FIELD_CHARS['kind']}" in mixed.outcomes[1].detail
    assert isinstance(again, peer_pb2.BundleReceipt)
    assert [outcome.code for outcome in again.outcomes] == ["ALREADY_EXISTS"]  # a duplicate is idempotent

    log = view_log(rundir, 0)
    assert log.damage is None
    received = [(r.peer, r.round) for r in log.of_kind("received")]
    assert sorted(received) == sorted([(first, 0), (second, 0)])
    rejected = log.of_kind("rejected")
    codes = [r.status_code for r in rejected]
    assert codes == ["RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "ALREADY_EXISTS"]
    bounded = next(record for record in log.records if record.WhichOneof("kind") == "rejected"
                   and record.rejected.status_code == "INVALID_ARGUMENT")
    assert bounded.ByteSize() < MAX_REFUSAL_RECORD_BYTES
