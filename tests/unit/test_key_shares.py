"""The key shares that open a DECOR or secure-neighbourhood run: checked as a public key's chunks, then set aside."""

from __future__ import annotations

from coordinator_tools import api
from coordinator_tools.audit.protocols.decor import AUDITOR as DECOR
from coordinator_tools.audit.protocols.decor_gd import AUDITOR as DECOR_GD
from coordinator_tools.audit.protocols.key_shares import KeySharesAside, key_share_problem, round_values_only
from coordinator_tools.audit.protocols.secure_neighbourhood import AUDITOR as SECURE_NEIGHBOURHOOD
from coordinator_tools.audit.records import MessageKey, NodeLog
from netdp.v1 import viewlog_pb2
from node.message import GOSSIP
from node.pairwise_secrets import KEY_SHARE, key_chunks


def test_a_key_share_is_one_of_the_published_chunks_numbered_from_one() -> None:
    chunks = key_chunks(3)
    assert chunks == 2  # a public key's six 48-bit elements in vectors of three
    for sequence in (1, chunks):
        assert key_share_problem(3, viewlog_pb2.MessageSent(kind=KEY_SHARE, sequence=sequence)) is None
    for entry in (viewlog_pb2.MessageSent(kind=KEY_SHARE, sequence=0),
                  viewlog_pb2.MessageSent(kind=KEY_SHARE, sequence=chunks + 1),
                  viewlog_pb2.MessageSent(kind=KEY_SHARE, sequence=1, round=2)):
        assert key_share_problem(3, entry) == "a key share is one of 2 chunks numbered from 1"


def test_the_rounds_are_read_without_the_key_shares() -> None:
    share = viewlog_pb2.MessageSent(peer=1, kind=KEY_SHARE, sequence=1)
    value = viewlog_pb2.MessageSent(peer=1, kind=GOSSIP, round=0)
    received = viewlog_pb2.MessageReceived(peer=1, kind=KEY_SHARE, sequence=2)
    drop = viewlog_pb2.DropOut()
    log = NodeLog(0, viewlog_pb2.RunHeader(), True,
                  records=[("sent", share), ("sent", value), ("received", received), ("drop_out", drop)],
                  sent={MessageKey.of(share, 1): share, MessageKey.of(value, 1): value},
                  received={MessageKey.of(received, 1): received})
    rounds = round_values_only(log)
    assert rounds.records == [("sent", value), ("drop_out", drop)]
    assert list(rounds.sent.values()) == [value] and rounds.received == {}


def test_every_protocol_that_agrees_secrets_checks_its_key_shares_through_one_helper() -> None:
    bad = viewlog_pb2.MessageSent(peer=1, kind=KEY_SHARE, sequence=3)
    for auditor in (DECOR, DECOR_GD, SECURE_NEIGHBOURHOOD):
        assert isinstance(auditor, KeySharesAside)
        learning = {"steps": 2, "sensitivity": 1.0} if auditor is DECOR_GD else {}
        topology = api.topology("ring", 4, protocol=auditor.name, dimension=3, run_id="key-shares", **learning)
        assert auditor.record_problem(topology, 0, "sent", bad) == "a key share is one of 2 chunks numbered from 1"
