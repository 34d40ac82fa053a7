"""Auditing a protocol whose nodes first agree pairwise secrets (`node.pairwise_secrets`): the key shares.

A run of DECOR (averaging or learning) or secure-neighbourhood gossip opens with each node's public
key, sent in a published number of chunks. Those records are no round values: the view-log check
accepts a key share only as one of those chunks (`key_share_problem`), and the rebuild sets them
aside (`rounds_only`) before reading the rounds as the protocol's base auditor does. A node's
private log also holds its secrets and shared draws, which the payload or trajectory check reads;
the private-log check sees its own draws only (`KeySharesAside.private_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.realized import RunT
from coordinator_tools.audit.records import Finding, NodeLog
from netdp.v1 import viewlog_pb2
from node.message import GOSSIP, MessageId, kind_of
from node.pairwise_secrets import KEY_SHARE, key_chunks
from node.topology import Topology

EXCHANGED = ("sent", "received", "rejected")  # the record kinds that carry a message


def key_share_problem(vector_length: int, entry: Any) -> str | None:
    """Why a key-share record is not one of a public key's chunks for vectors of this length, or None."""
    chunks = key_chunks(vector_length)
    identifier = MessageId.of(entry)
    if identifier.outside("sequence") or not 1 <= identifier.sequence <= chunks:
        return f"a key share is one of {chunks} chunks numbered from 1"
    return None


def round_values_only(log: NodeLog) -> NodeLog:
    """The log without its key-share records."""
    def gossip(entry: Any) -> bool:
        return kind_of(entry) == GOSSIP

    records = [(kind, entry) for kind, entry in log.records if kind not in EXCHANGED or gossip(entry)]
    return replace(log, records=records,
                   sent={key: record for key, record in log.sent.items() if key.kind == GOSSIP},
                   received={key: record for key, record in log.received.items() if key.kind == GOSSIP},
                   refused={key: record for key, record in log.refused.items() if key.kind == GOSSIP})


def rounds_only(logs: Mapping[int, NodeLog]) -> dict[int, NodeLog]:
    """Every node's log without its key-share records."""
    return {node: round_values_only(log) for node, log in logs.items()}


class KeySharesAside(ProtocolAuditor[RunT]):
    """Put before a round protocol's auditor: its key shares checked and set aside, its own draws checked as the
    base auditor's (`noise_purpose`: the purpose a node logs its own draws under)."""

    noise_purpose: ClassVar[str]

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        if kind in EXCHANGED and kind_of(entry) == KEY_SHARE:
            return key_share_problem(topology.published.vector_length, entry)
        return super().record_problem(topology, node, kind, entry)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """Its own draws as the base auditor's; the secrets and shared draws are checked from the payloads."""
        return super().private_problem(tuple(draw for draw in draws if draw.purpose == self.noise_purpose))

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> RunT:
        """The base auditor's transcript of the rounds, the key shares set aside."""
        return super().rebuild(topology, rounds_only(logs), findings)

    def utility(self, replay: Replay[RunT], data_dir: Path) -> dict[str, object]:
        """The base auditor's utility block, read from the rounds with the key shares set aside."""
        return super().utility(replace(replay, logs=rounds_only(replay.logs)), data_dir)
