"""Rebuild a synchronous Muffliato run's Transcript from its replayed view logs.

The Transcript comes from the nodes' own records: a round a node's log shows complete (each
neighbour's value received or dropped) gives its used set. Where a log is damaged or
missing, the rounds its neighbours prove it completed are inferred from their records, and
every such inference is a finding, never made silently. A node's view is every value that
reached it: received, refused after its round closed, or delivered to it by a sender's
account although its own log lost the record (never under-state what an observer saw).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator_tools.audit.protocols.muffliato.transcript import (
    Message,
    Transcript,
    planned_transcript,
)
from coordinator_tools.audit.records import Finding, NodeLog, Severity
from netdp.v1 import viewlog_pb2
from node.message import GOSSIP, MessageId, kind_of
from node.topology import Topology

ROUND_RECORDS = ("sent", "received", "rejected", "drop_out")


@dataclass
class RoundLog:
    """One node's gossip records by (peer, round); dicts keep log order."""

    node: int
    intact: bool
    sent: dict[Message, viewlog_pb2.MessageSent] = field(default_factory=dict)
    received: dict[Message, viewlog_pb2.MessageReceived] = field(default_factory=dict)
    refused: dict[Message, viewlog_pb2.Rejected] = field(default_factory=dict)
    # Whether the node mixed the peer's round value in (received) or dropped it; first record wins.
    decisions: dict[Message, bool] = field(default_factory=dict)
    final_output: viewlog_pb2.FinalOutput | None = None


def round_log(log: NodeLog, findings: list[Finding]) -> RoundLog:
    """Index a replayed log by (peer, round); a second decision on one value is a finding."""
    rounds = RoundLog(log.node, log.intact, final_output=log.final_output)
    rounds.sent = {(key.peer, key.id.round): record for key, record in log.sent.items()}
    rounds.received = {(key.peer, key.id.round): record for key, record in log.received.items()}
    rounds.refused = {(key.peer, key.id.round): record for key, record in log.refused.items()}
    for kind, entry in log.records:
        if kind not in ("received", "drop_out"):
            continue
        key = (entry.peer, entry.round)
        if key in rounds.decisions:
            findings.append(Finding("error", "contradictory_records", log.node,
                                    f"{kind} of peer {entry.peer}'s round {entry.round} after that value was "
                                    "already received or dropped; the first record counts"))
        else:
            rounds.decisions[key] = kind == "received"
    return rounds


def round_record_problem(name: str, rounds: int, kind: str, entry: Any) -> str | None:
    """Why a round record cannot belong to a synchronous round protocol of `rounds` rounds, or None."""
    if kind not in ROUND_RECORDS:
        return None
    if kind != "drop_out":
        message_kind = kind_of(entry)
        if message_kind != GOSSIP:
            return f"message kind {message_kind!r} is not part of {name}"
        extra = MessageId.of(entry).outside("round")
        if extra:
            return f"it sets {', '.join(extra)}, which a round's value does not use"
    return f"round {entry.round} is past the last round {rounds - 1}" if entry.round >= rounds else None


def rebuild_transcript(topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding], *,
                       rounds_per_step: int = 1) -> Transcript:
    """The realized transcript; rounds a node provably completed but did not log are inferred.

    Round t runs on the graph of step t // rounds_per_step.
    """
    rounds = topology.protocol.rounds
    plan = planned_transcript(topology, rounds_per_step=rounds_per_step)
    views = {node: round_log(log, findings) for node, log in logs.items()}
    own = {node: _logged_rounds(view, plan, rounds) for node, view in views.items()}
    proven = _proven_rounds(topology, views)
    used: list[tuple[frozenset[int], ...]] = []
    inferred: dict[int, tuple[int, ...]] = {}
    for node in range(topology.n):
        logged = own.get(node, [])
        missing = range(len(logged), proven[node])
        if missing:
            inferred[node] = tuple(missing)
            view = views.get(node)
            severity: Severity = "error" if view is not None and view.intact else "info"
            findings.append(Finding(severity, "inferred_rounds", node,
                                    f"node {node} provably completed {proven[node]} rounds but its log shows "
                                    f"{len(logged)}; rounds {missing.start}..{missing.stop - 1} are rebuilt "
                                    "from its neighbours' sent records"))
        used.append(tuple(logged) + tuple(_infer_round(node, t, plan, views, proven, findings) for t in missing))
    delivered: dict[int, list[Message]] = {node: [] for node in range(topology.n)}
    for sender, sender_view in views.items():
        for (receiver, t), sent in sender_view.sent.items():
            if sent.delivered:
                delivered[receiver].append((sender, t))
    received = tuple(_received_messages(node, views.get(node), delivered[node], findings) for node in range(topology.n))
    return Transcript(topology=topology, rounds=rounds, accelerated=plan.accelerated, used=tuple(used),
                      received=received, inferred=inferred, rounds_per_step=rounds_per_step)


def _logged_rounds(view: RoundLog, plan: Transcript, rounds: int) -> list[frozenset[int]]:
    """Used sets of the rounds a log shows complete: every neighbour of the round received or dropped."""
    used: list[frozenset[int]] = []
    for t in range(rounds):
        decided = [(peer, view.decisions.get((peer, t))) for peer in plan.neighbours(view.node, t)]
        if any(decision is None for _, decision in decided):
            break
        used.append(frozenset(peer for peer, decision in decided if decision))
    return used


def _proven_rounds(topology: Topology, views: Mapping[int, RoundLog]) -> list[int]:
    """For each node, how many rounds some log proves it completed (x^t was sent or output).

    Nobody receives x^T, so a node's last round is proven only by its own final output; when
    its log lost that, the round is left out, which changes no view.
    """
    proven = [0] * topology.n
    for node, view in views.items():
        if view.final_output is not None:
            proven[node] = max(proven[node], int(view.final_output.rounds_completed))
        for _, t in view.sent:
            proven[node] = max(proven[node], t)
        for sender, t in [*view.received, *view.refused]:
            proven[sender] = max(proven[sender], t)
    return [min(count, topology.protocol.rounds) for count in proven]


def _infer_round(
    node: int, t: int, plan: Transcript, views: Mapping[int, RoundLog], proven: list[int], findings: list[Finding]
) -> frozenset[int]:
    """Whom `node` used in round t, from its own partial records and then from its peers' sent records."""
    own = views[node].decisions if node in views else {}
    used: set[int] = set()
    for peer in plan.neighbours(node, t):
        peer_view = views.get(peer)
        if (peer, t) in own:
            decided = own[(peer, t)]
        elif peer_view is not None and (node, t) in peer_view.sent:
            decided = peer_view.sent[(node, t)].delivered
        elif peer_view is not None and peer_view.intact and proven[peer] < t:
            decided = False  # the peer never computed x^t
        else:
            decided = False
            findings.append(Finding("error", "ambiguous_round", node,
                                    f"cannot tell whether node {node} used node {peer}'s round-{t} value; "
                                    "accounted as dropped"))
        if decided:
            used.add(peer)
    return frozenset(used)


def _received_messages(
    node: int, view: RoundLog | None, delivered: list[Message], findings: list[Finding]
) -> tuple[Message, ...]:
    """The node's view: received records in log order, refused values, then delivered messages its log lacks."""
    logged = [] if view is None else [*view.received, *(m for m in view.refused if m not in view.received)]
    known = set(logged)
    added = sorted((message for message in delivered if message not in known), key=lambda m: (m[1], m[0]))
    if added:
        findings.append(Finding("info", "inferred_received", node,
                                f"{len(added)} messages delivered to node {node} are missing from its log and "
                                "are added to its view from the senders' records"))
    return tuple(logged) + tuple(added)
