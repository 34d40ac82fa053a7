"""A bundle over real mutual TLS: the caller's certificate decides for each message, not the envelope. Node 4's own
certificate may bundle its round-0 value to node 0 but not one claiming neighbour 1: that message alone is refused
(PERMISSION_DENIED, logged), the genuine one delivered and logged."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from netdp.v1 import peer_pb2, peer_pb2_grpc
from node.security import channel_options
from tests.cluster.node_probe import RPC_TIMEOUT_S, gossip_chunks
from tests.cluster.test_tls_authorization import NEIGHBOUR_A, NEIGHBOUR_B, NODE, ProbedNode, cluster_identity, node

pytestmark = pytest.mark.cluster
__all__ = ["node"]  # the fixture: node 0 over mutual TLS, waiting in round 0


def test_each_bundled_message_must_come_from_an_id_the_certificate_names(node: ProbedNode):
    messages = [gossip_chunks(node.topology, sender=claims, value=node.values[claims])[0]
                for claims in (NEIGHBOUR_A, NEIGHBOUR_B)]

    async def deliver() -> peer_pb2.BundleReceipt:
        async with grpc.aio.secure_channel(node.address, cluster_identity(node, NEIGHBOUR_B),
                                           channel_options(NODE)) as channel:
            return await peer_pb2_grpc.PeerStub(channel).DeliverBundle(peer_pb2.Bundle(messages=messages),
                                                                       timeout=RPC_TIMEOUT_S)

    before = len(node.log_records())
    receipt = asyncio.run(deliver())
    assert [outcome.code for outcome in receipt.outcomes] == ["PERMISSION_DENIED", ""]
    assert f"claims {NEIGHBOUR_A}" in receipt.outcomes[0].detail
    records = node.log_records()[before:]
    assert [r.rejected.claimed_sender for r in records if r.WhichOneof("kind") == "rejected"] == [NEIGHBOUR_A]
    assert [r.received.peer for r in records if r.WhichOneof("kind") == "received"] == [NEIGHBOUR_B]
    assert node.is_healthy()
