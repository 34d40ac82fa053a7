"""Pairwise secrets without a network: both ends agree, nobody else does, one key per neighbour per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from coordinator_tools import api
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.journal import Journal
from node.message import GOSSIP, Message, MessageId, to_wire
from node.pairwise_secrets import (
    KEY_SHARE,
    SECRET_PURPOSE,
    KeyShares,
    PairwiseSecret,
    decode_key,
    edge_secret,
    edge_sign,
    encode_key,
    key_pair,
    key_share_messages,
    log_secrets,
    public_bytes,
    shared_normals,
)
from node.protocols.secure_neighbourhood import co_neighbours
from node.receiver import KindRule, Receiver
from node.refusal import Refusal
from node.topology import Topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

RUN = "run-1"


def secret(own: int, peer: int, keys: dict[int, X25519PrivateKey], run_id: str = RUN) -> bytes:
    """`own`'s secret with `peer`, from `own`'s private key and `peer`'s public key."""
    return edge_secret(keys[own], own, peer, public_bytes(keys[peer]), run_id)


@pytest.fixture
def keys() -> dict[int, X25519PrivateKey]:
    return {v: key_pair("secure", RUN, v) for v in range(3)}


def test_both_ends_derive_the_same_draws_and_they_cancel(keys: dict[int, X25519PrivateKey]) -> None:
    at_0, at_1 = secret(0, 1, keys), secret(1, 0, keys)
    assert at_0 == at_1
    draws = [edge_sign(v, w) * shared_normals(s, step=3, purpose="decor", size=1000)
             for v, w, s in ((0, 1, at_0), (1, 0, at_1))]
    assert np.array_equal(draws[0], -draws[1]) and np.all(draws[0] + draws[1] == 0.0)
    assert abs(np.mean(draws[0])) < 0.15 and 0.85 < np.std(draws[0]) < 1.15  # standard normals


def test_a_third_party_cannot_derive_the_secret(keys: dict[int, X25519PrivateKey]) -> None:
    edge = secret(0, 1, keys)
    # Node 2 holds both public keys and its own private key: what it can compute is its own edges' secrets.
    assert edge not in {secret(2, 0, keys), secret(2, 1, keys)}
    assert not np.array_equal(shared_normals(edge, step=0, purpose="decor", size=8),
                              shared_normals(secret(2, 0, keys), step=0, purpose="decor", size=8))


def test_a_secret_is_bound_to_the_run_and_every_draw_to_its_step_and_purpose(keys: dict[int, X25519PrivateKey]) -> None:
    assert secret(0, 1, keys) != secret(0, 1, keys, run_id="run-2")
    edge = secret(0, 1, keys)
    draws = {(step, purpose): shared_normals(edge, step=step, purpose=purpose, size=4).tobytes()
             for step in (0, 1) for purpose in ("decor", "other")}
    assert len(set(draws.values())) == 4


def test_secure_keys_are_fresh_and_simulation_keys_reproducible() -> None:
    assert public_bytes(key_pair("secure", RUN, 0)) != public_bytes(key_pair("secure", RUN, 0))
    assert public_bytes(key_pair("simulation", RUN, 0)) == public_bytes(key_pair("simulation", RUN, 0))
    assert public_bytes(key_pair("simulation", RUN, 0)) != public_bytes(key_pair("simulation", RUN, 1))


@pytest.mark.parametrize("dimension", [1, 5, 6, 64])
def test_a_public_key_travels_in_payloads_of_any_dimension(keys: dict[int, X25519PrivateKey], dimension: int) -> None:
    public = public_bytes(keys[0])
    chunks = encode_key(public, dimension)
    assert all(chunk.shape == (dimension,) for chunk in chunks)
    assert decode_key(chunks) == public


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id=RUN, node_id=1))
    yield journal
    journal.close()


async def test_a_neighbour_agrees_once_a_copy_is_harmless_and_another_key_refused(
        journal: Journal, tmp_path: Path) -> None:
    shares = KeyShares(journal, dimension=4)
    first = key_share_messages(key_pair("secure", RUN, 0), 4)
    for message in first:
        await shares.handle(0, message)
    await shares.handle(0, first[0])  # a retried copy: acknowledged, no second record
    restarted = key_share_messages(key_pair("secure", RUN, 0), 4)  # a restarted node 0, a new key pair
    with pytest.raises(Refusal) as refused:
        await shares.handle(0, restarted[0])
    assert refused.value.code == "FAILED_PRECONDITION"  # never ALREADY_EXISTS: its sender must not read it as taken
    held = await shares.wait_for((0,), timeout_s=0.1)
    assert held[0] == decode_key([m.payload for m in first])
    assert len(read_log(tmp_path / VIEW_LOG_NAME).of_kind("received")) == len(first)


async def test_a_missing_key_is_not_waited_for_past_the_timeout(journal: Journal) -> None:
    shares = KeyShares(journal, dimension=4)
    assert await shares.wait_for((0, 2), timeout_s=0.05) == {}


async def test_secrets_go_to_the_private_log_only(journal: Journal, tmp_path: Path,
                                                  keys: dict[int, X25519PrivateKey]) -> None:
    agreed = PairwiseSecret(0, secret(1, 0, keys))
    log_secrets(journal, {0: agreed}, "secure")
    journal.close()
    private = read_log(tmp_path / PRIVATE_LOG_NAME).of_kind("noise")
    assert [(d.purpose, d.step) for d in private] == [(SECRET_PURPOSE, 0)]
    assert bytes(from_tensor(private[0].value).astype(np.uint8)) == agreed.secret
    assert agreed.secret not in (tmp_path / VIEW_LOG_NAME).read_bytes()


# --- co-neighbours: nodes that share a neighbour agree directly (secure-neighbourhood's masks) ---------------

def path_topology() -> Topology:
    """0 - 1 - 2: nodes 0 and 2 share neighbour 1 and are not neighbours."""
    return api.topology(nx.path_graph(3), protocol="secure-neighbourhood", sigma=1.0, rounds=1, dimension=4,
                        alpha=2.0, run_id=RUN)


def test_co_neighbours_share_a_neighbour() -> None:
    assert [co_neighbours(path_topology(), v) for v in range(3)] == [(2,), (), (0,)]
    ring = api.topology("ring", 4, protocol="secure-neighbourhood", sigma=1.0, rounds=1, dimension=1, alpha=2.0)
    assert [co_neighbours(ring, v) for v in range(4)] == [(2,), (3,), (0,), (1,)]


def test_co_neighbours_derive_the_same_draws_and_the_neighbour_between_them_cannot() -> None:
    keys = {v: key_pair("secure", RUN, v) for v in range(3)}
    at_0, at_2 = secret(0, 2, keys), secret(2, 0, keys)
    assert at_0 == at_2
    masks = [edge_sign(v, w) * shared_normals(s, step=0, purpose="mask|1", size=64)
             for v, w, s in ((0, 2, at_0), (2, 0, at_2))]
    assert np.all(masks[0] + masks[1] == 0.0)
    # Node 1 holds both public keys and its own private key: nothing it can compute is the pair's secret.
    assert at_0 not in {secret(1, 0, keys), secret(1, 2, keys)}


async def deliver(receiver: Receiver, topology: Topology, sender: int, message: Message) -> None:
    """Hand `message` from `sender` to node 0's receiver as an authenticated transport would."""
    envelope, data = to_wire(message, run_id=topology.run_id, protocol=topology.protocol_name, sender=sender,
                             receiver=0)
    await receiver.accept(envelope, data, sender)


async def test_a_co_neighbour_key_share_is_taken_and_its_other_kinds_and_a_replayed_key_refused(
        journal: Journal, tmp_path: Path) -> None:
    topology = path_topology()
    receiver = Receiver(topology, 0, journal)
    shares = KeyShares(journal, dimension=4)
    peers = frozenset(co_neighbours(topology, 0))  # as `PairwiseAgreement(context, peers)` registers the kind
    receiver.add_rule(KEY_SHARE, KindRule(shares.handle, "sequence", True, senders=peers))
    receiver.add_rule(GOSSIP, KindRule(shares.handle, "round", True))
    first = key_share_messages(key_pair("secure", RUN, 2), 4)
    for message in first:
        await deliver(receiver, topology, 2, message)
    assert (await shares.wait_for((2,), timeout_s=0.1))[2] == decode_key([m.payload for m in first])
    with pytest.raises(Refusal) as replayed:  # another key from the same co-neighbour: a restart, or a replay
        await deliver(receiver, topology, 2, key_share_messages(key_pair("secure", RUN, 2), 4)[0])
    assert replayed.value.code == "FAILED_PRECONDITION"
    with pytest.raises(Refusal, match="node 2 is not a neighbour of node 0"):  # only key shares may come from it
        await deliver(receiver, topology, 2, Message(GOSSIP, MessageId(round=0), np.zeros(4)))
    with pytest.raises(Refusal, match="node 1 may not send key-share messages to node 0"):  # a neighbour, no peer
        await deliver(receiver, topology, 1, first[0])
    journal.close()
    assert [r.peer for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("received")] == [2] * len(first)
    assert [r.claimed_sender for r in read_log(tmp_path / VIEW_LOG_NAME).of_kind("rejected")] == [2, 2, 1]
