"""Which view-log records a randomized Muffliato node can write, and what they name.

The message kinds and the commit rule are the node's (`node.mailboxes.exchange_desk`,
`node.protocols.muffliato_async`). An exchange id is "<initiator>-<initiator's sequence>";
a record that contradicts it (a commit from the responder, an initiator event in another
node's log, a value of the wrong size) cannot belong to the run and is left out.
"""

from __future__ import annotations

import re
from typing import Any

from coordinator_tools.audit.records import carries_value, payload_bytes
from netdp.v1 import viewlog_pb2
from node.mailboxes.exchange_desk import (
    ABORT,
    ABORTED,
    ACCEPT,
    COMMIT,
    COMMITTED,
    DECLINE,
    PENDING,
    PROPOSE,
    STATUS,
)
from node.message import MessageId, kind_of
from node.protocols.muffliato_async import DONE
from node.topology import Topology

EXCHANGE_ID = re.compile(r"^(\d+)-(\d+)$")
SENT_BY_INITIATOR = frozenset({PROPOSE, COMMIT, ABORT, COMMITTED, ABORTED, PENDING})
SENT_BY_RESPONDER = frozenset({ACCEPT, DECLINE, STATUS})
# Kinds that carry a value, and whose value it is: the sender's just before the exchange.
VALUE_KINDS = frozenset({ACCEPT, COMMIT, COMMITTED})
# Kinds whose id carries the initiator's sequence number (a status answer carries its exchange's id).
INITIATOR_SEQUENCED = frozenset({PROPOSE, COMMIT, ABORT, COMMITTED, ABORTED, PENDING})
PHASES = {"initiator": frozenset({"proposed", "declined", "committed", "aborted"}),
          "responder": frozenset({"accepted", "declined", "committed", "aborted"})}
TERMINAL = frozenset({"declined", "committed", "aborted"})


def parse_exchange_id(exchange_id: str) -> tuple[int, int] | None:
    """(initiator, initiator's sequence) of a well-formed exchange id, else None."""
    match = EXCHANGE_ID.match(exchange_id)
    return (int(match.group(1)), int(match.group(2))) if match else None


def record_problem(topology: Topology, node: int, kind: str, entry: Any) -> str | None:
    """Why a record of `node`'s view log cannot belong to a randomized Muffliato run, or None."""
    if kind == "exchange":
        return _event_problem(node, entry)
    if kind in ("sent", "received", "rejected"):
        peer = entry.claimed_sender if kind == "rejected" else entry.peer
        sender, receiver = (node, peer) if kind == "sent" else (peer, node)
        return _message_problem(topology, sender, receiver, entry)
    return None


def _message_problem(topology: Topology, sender: int, receiver: int, entry: Any) -> str | None:
    kind, message_id = kind_of(entry), MessageId.of(entry)
    valued = carries_value(entry.payload)
    if kind == DONE:
        extra = message_id.outside("none")
        if extra or valued:
            return f"a {DONE} message carries no id and no value"
        return None
    if kind not in SENT_BY_INITIATOR | SENT_BY_RESPONDER:
        return f"message kind {kind!r} is not part of muffliato-async"
    extra = message_id.outside("exchange")
    if extra:
        return f"it sets {', '.join(extra)}, which an exchange message does not use"
    parsed = parse_exchange_id(message_id.exchange_id)
    if parsed is None:
        return f"exchange id {message_id.exchange_id!r} is not '<initiator>-<sequence>'"
    initiator, sequence = parsed
    if initiator != (sender if kind in SENT_BY_INITIATOR else receiver):
        return f"a {kind} from node {sender} to node {receiver} cannot be part of exchange {message_id.exchange_id}"
    if kind in INITIATOR_SEQUENCED and message_id.sequence != sequence:
        return f"a {kind} of exchange {message_id.exchange_id} carries sequence {message_id.sequence}"
    if kind == ACCEPT and message_id.sequence < 1:
        return "an accept without the responder's sequence number"
    if valued and kind not in VALUE_KINDS:
        return f"a {kind} carries a value"
    if valued and payload_bytes(entry.payload) != 8 * topology.protocol.vector_length:
        return f"a {kind} value of {payload_bytes(entry.payload) // 8} numbers, not {topology.protocol.vector_length}"
    return None


def _event_problem(node: int, event: viewlog_pb2.ExchangeEvent) -> str | None:
    if event.phase not in PHASES.get(event.role, ()):
        return f"phase {event.phase!r} of role {event.role!r} is not part of an exchange"
    parsed = parse_exchange_id(event.exchange_id)
    if parsed is None:
        return f"exchange id {event.exchange_id!r} is not '<initiator>-<sequence>'"
    initiator, sequence = parsed
    if event.role == "initiator" and (initiator != node or event.sequence != sequence):
        return f"node {node} cannot be the initiator of exchange {event.exchange_id} at sequence {event.sequence}"
    if event.role == "responder" and initiator != event.peer:
        return f"exchange {event.exchange_id} was not initiated by node {event.peer}"
    if event.role == "responder" and event.phase != "declined" and event.sequence < 1:
        return f"a responder's {event.phase} without its sequence number"
    if event.phase == "committed" and not carries_value(event.value_after):
        return "a committed exchange without the value after it"
    return None
