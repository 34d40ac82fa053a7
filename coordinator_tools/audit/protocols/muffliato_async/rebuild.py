"""Rebuild a randomized Muffliato run's ExchangeSchedule from its replayed view logs.

Each exchange is seen from both ends: the initiator's events (proposed, then declined,
aborted or committed) and the responder's (declined, or accepted then committed or aborted),
with the values that crossed (the responder's accept, the initiator's commit). A side's
outcome is what its own log says; where that log is missing or damaged it is inferred from
the other side (a delivered commit proves the responder committed, a commit message proves
the initiator did), and an outcome neither log can settle is accounted as not applied and
reported. A node's view is every value that reached it (received, or refused after its
exchange closed), the values delivered to it by its senders' account, and the peer's value
of every exchange it applied (it needed that value to average).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from coordinator_tools.audit.protocols.muffliato_async.records import (
    ACCEPT,
    TERMINAL,
    VALUE_KINDS,
    parse_exchange_id,
)
from coordinator_tools.audit.protocols.muffliato_async.schedule import Exchange, ExchangeSchedule, ValueRef
from coordinator_tools.audit.records import Finding, NodeLog, carries_value
from node.mailboxes.exchange_desk import COMMIT, COMMITTED
from node.message import MessageId
from node.topology import Topology

Outcome = Literal["committed", "aborted", "declined", "open", "none", "unknown"]
Where = Literal["sent", "received", "refused"]


@dataclass
class Side:
    """One node's part in one exchange, as its own log shows it."""

    node: int
    peer: int
    sequence: int | None = None
    opened: bool = False  # proposed (initiator) or accepted (responder)
    terminal: str | None = None  # the first of declined, committed, aborted


@dataclass(frozen=True)
class LoggedMessage:
    """A record of one exchange message: who sent it to whom, and in whose log it is."""

    kind: str
    sender: int
    receiver: int
    id: MessageId
    where: Where
    record: Any


@dataclass
class Evidence:
    """Everything the logs say about one exchange id."""

    exchange_id: str
    initiator: int
    sequence: int
    sides: dict[str, Side] = field(default_factory=dict)  # by role
    messages: list[LoggedMessage] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[LoggedMessage]:
        return [message for message in self.messages if message.kind in kinds]


def rebuild_schedule(topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> ExchangeSchedule:
    """The realized schedule; every inference and contradiction is appended to `findings`."""
    evidence = _evidence(logs, findings)
    exchanges = [_resolve(item, logs, findings) for item in evidence.values()]
    ordered = _causal_order([exchange for exchange in exchanges if exchange is not None], findings)
    index = {exchange.exchange_id: i for i, exchange in enumerate(ordered)}
    received = tuple(_view(node, logs, ordered, index, findings) for node in range(topology.n))
    ticks = tuple(_ticks(node, logs.get(node), ordered) for node in range(topology.n))
    return ExchangeSchedule(topology=topology, exchanges=tuple(ordered), received=received, ticks=ticks)


# --- gathering -------------------------------------------------------------------------------


def _evidence(logs: Mapping[int, NodeLog], findings: list[Finding]) -> dict[str, Evidence]:
    """Every exchange id any log names, with both sides' events and the logged messages."""
    evidence: dict[str, Evidence] = {}

    def of(exchange_id: str) -> Evidence:
        if exchange_id not in evidence:
            initiator, sequence = parse_exchange_id(exchange_id)  # records are checked on indexing
            evidence[exchange_id] = Evidence(exchange_id, initiator, sequence)
        return evidence[exchange_id]

    for node, log in sorted(logs.items()):
        for event in log.of_kind("exchange"):
            _add_event(of(event.exchange_id), node, event, findings)
        indexes: tuple[tuple[Where, Mapping], ...] = (("sent", log.sent), ("received", log.received),
                                                       ("refused", log.refused))
        for where, records in indexes:
            for key, record in records.items():
                if key.id.exchange_id:
                    sender, receiver = (node, key.peer) if where == "sent" else (key.peer, node)
                    of(key.id.exchange_id).messages.append(LoggedMessage(key.kind, sender, receiver, key.id,
                                                                         where, record))
    return dict(sorted(evidence.items(), key=lambda item: (item[1].initiator, item[1].sequence)))


def _add_event(evidence: Evidence, node: int, event: Any, findings: list[Finding]) -> None:
    """Fold one exchange event into its side; contradictions are findings and the first record counts."""
    side = evidence.sides.setdefault(event.role, Side(node, event.peer))
    where = f"exchange {evidence.exchange_id}"
    if side.node != node or side.peer != event.peer:
        findings.append(Finding("error", "contradictory_exchange", node,
                                f"{where}: node {node} logs itself {event.role} with node {event.peer}, as does "
                                f"node {side.node} with node {side.peer}; the first counts"))
        return
    if event.sequence and side.sequence not in (None, event.sequence):
        findings.append(Finding("error", "contradictory_exchange", node,
                                f"{where}: sequence {event.sequence} after {side.sequence}; the first counts"))
    elif event.sequence:
        side.sequence = event.sequence
    if event.phase not in TERMINAL:
        side.opened = True
    elif side.terminal is None:
        if not side.opened and event.phase != "declined":
            findings.append(Finding("error", "contradictory_exchange", node,
                                    f"{where}: {event.phase} before node {node} "
                                    f"{'proposed' if event.role == 'initiator' else 'accepted'} it"))
        side.terminal = event.phase
    elif side.terminal != event.phase:
        findings.append(Finding("error", "contradictory_exchange", node,
                                f"{where}: node {node} logs {event.phase} after {side.terminal}; the first counts"))


# --- one exchange ----------------------------------------------------------------------------


def _resolve(evidence: Evidence, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Exchange | None:
    """Both sides' outcomes of one exchange, from their own logs or inferred from the other's."""
    a, where = evidence.initiator, f"exchange {evidence.exchange_id}"
    initiator, responder = evidence.sides.get("initiator"), evidence.sides.get("responder")
    b = _responder(evidence)
    if b is None:
        return None  # only a signal without a peer named it: nothing crossed
    if initiator is not None and responder is not None and initiator.peer != responder.node:
        findings.append(Finding("error", "contradictory_exchange", a,
                                f"{where}: the initiator names node {initiator.peer}, node {responder.node} "
                                "logs itself its responder; the initiator counts"))
    accepts = evidence.of_kind(ACCEPT)
    commits = evidence.of_kind(COMMIT, COMMITTED)
    sequence = responder.sequence if responder is not None and responder.sequence else None
    offered = {message.id.sequence for message in accepts}
    if sequence is None and offered:
        sequence = min(offered)
    if len(offered | ({sequence} if sequence else set())) > 1:
        findings.append(Finding("error", "contradictory_exchange", b,
                                f"{where}: the responder's sequence is logged as {sorted(offered)} and {sequence}"))
    responder_accepted = (responder is not None and responder.opened) or bool(accepts)
    delivered_commit = any(m.where == "sent" and m.record.delivered and m.record.attempts > 0 for m in commits)
    ini = _outcome(initiator, logs.get(a), committed=bool(commits) or _terminal(responder) == "committed",
                   reached=responder_accepted)
    res = _outcome(responder, logs.get(b), committed=delivered_commit, reached=ini == "committed" or bool(accepts))
    _report(evidence, a, b, ini, res, responder_accepted, logs, findings)
    declined = "declined" in (ini, res)
    return Exchange(evidence.exchange_id, a, b, evidence.sequence, sequence,
                    initiator_applied=ini == "committed", responder_applied=res == "committed", declined=declined)


def _responder(evidence: Evidence) -> int | None:
    """The responder: as the initiator names it, or the node that logged itself so, or a message's other end."""
    initiator, responder = evidence.sides.get("initiator"), evidence.sides.get("responder")
    if initiator is not None:
        return initiator.peer
    if responder is not None:
        return responder.node
    ends = {message.receiver if message.sender == evidence.initiator else message.sender
            for message in evidence.messages}
    return min(ends) if ends else None


def _terminal(side: Side | None) -> str | None:
    return None if side is None else side.terminal


def _outcome(side: Side | None, log: NodeLog | None, *, committed: bool, reached: bool) -> Outcome:
    """A side's outcome: its own terminal event, else what the other side's records prove.

    "open": its log stops inside the exchange; "none": the exchange never reached it;
    "unknown": it may have committed, but no log says so. A damaged log may have lost the
    decision, so the other side's proof counts for it too.
    """
    if side is not None and (side.terminal or log.intact):
        return side.terminal or "open"  # type: ignore[return-value]
    if side is None and log is not None and log.finished:
        return "none"
    if committed:
        return "committed"
    return "open" if side is not None else "unknown" if reached else "none"


def _report(evidence: Evidence, a: int, b: int, ini: Outcome, res: Outcome, responder_accepted: bool,
            logs: Mapping[int, NodeLog], findings: list[Finding]) -> None:
    """Findings about one exchange: half-applied, undecided, contradictory, or missing its value."""
    where = f"exchange {evidence.exchange_id}"

    def found(severity: str, kind: str, node: int, detail: str) -> None:
        findings.append(Finding(severity, kind, node, f"{where}: {detail}"))  # type: ignore[arg-type]

    if (ini == "committed") != (res == "committed") and "unknown" not in (ini, res):
        done, other = (a, b) if ini == "committed" else (b, a)
        found("warning", "half_applied_exchange", done,
              f"node {done} committed, node {other} {res if done == a else ini}: only node {done}'s value changed")
    if ini == "unknown" and responder_accepted:
        found("error", "ambiguous_exchange", a, f"node {b} accepted, node {a}'s log cannot tell whether it "
              "committed; accounted as aborted")
    if res == "unknown" and ini == "committed":
        found("error", "ambiguous_exchange", b, f"node {a} committed, node {b}'s log cannot tell whether it "
              "committed; accounted as aborted")
    for node, outcome in ((a, ini), (b, res)):
        log = logs.get(node)
        if outcome == "open" and log is not None and log.finished:
            found("error", "open_exchange", node, f"node {node}'s complete log never decides it")
    if ini == "none" and (evidence.sides or evidence.messages):
        found("error", "contradictory_exchange", a, f"node {a}'s complete log never proposed it")
    if res in ("none", "declined") and (ini == "committed" or evidence.of_kind(ACCEPT)):
        found("error", "contradictory_exchange", b, f"node {a} got an accept that node {b}'s log never sent")
    if ini == "declined" and responder_accepted:
        found("error", "contradictory_exchange", a, f"node {a} logs it declined, node {b} accepted it")
    for node, peer, outcome, kinds in ((a, b, ini, (ACCEPT,)), (b, a, res, (COMMIT, COMMITTED))):
        if outcome == "committed" and node in logs and _has_side(evidence, node) and not any(
            m.receiver == node and m.where != "sent" for m in evidence.of_kind(*kinds)
        ):
            found("error", "missing_exchange_value", node, f"node {node} committed without logging node {peer}'s value")


def _has_side(evidence: Evidence, node: int) -> bool:
    return any(side.node == node for side in evidence.sides.values())


# --- order and views -------------------------------------------------------------------------


def _causal_order(exchanges: list[Exchange], findings: list[Finding]) -> list[Exchange]:
    """A topological order of the exchanges along every node's local sequence numbers."""
    chains: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, exchange in enumerate(exchanges):
        chains[exchange.initiator].append((exchange.initiator_sequence, i))
        if exchange.responder_sequence is not None:
            chains[exchange.responder].append((exchange.responder_sequence, i))
    following: dict[int, list[int]] = defaultdict(list)
    waiting = [0] * len(exchanges)
    for node, chain in sorted(chains.items()):
        chain.sort()
        for (sequence, earlier), (next_sequence, later) in zip(chain, chain[1:]):
            if sequence == next_sequence:
                findings.append(Finding("error", "duplicate_sequence", node,
                                        f"node {node} used sequence {sequence} for exchanges "
                                        f"{exchanges[earlier].exchange_id} and {exchanges[later].exchange_id}"))
            following[earlier].append(later)
            waiting[later] += 1

    def key(i: int) -> tuple[int, int, int]:  # ties broken by the initiator's sequence: deterministic
        return exchanges[i].initiator_sequence, exchanges[i].initiator, i

    ready = [key(i) for i, count in enumerate(waiting) if not count]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        *_, i = heapq.heappop(ready)
        order.append(i)
        for later in following[i]:
            waiting[later] -= 1
            if not waiting[later]:
                heapq.heappush(ready, key(later))
    if len(order) < len(exchanges):
        stuck = sorted(set(range(len(exchanges))) - set(order), key=key)
        findings.append(Finding("error", "exchange_order_cycle", None,
                                f"the sequence numbers of exchanges {[exchanges[i].exchange_id for i in stuck]} "
                                "admit no order; they are accounted by initiator sequence"))
        order += stuck
    return [exchanges[i] for i in order]


def _view(node: int, logs: Mapping[int, NodeLog], ordered: list[Exchange], index: Mapping[str, int],
          findings: list[Finding]) -> tuple[ValueRef, ...]:
    """Every value that reached `node`, as (sender, exchange index), in log order first."""
    seen: dict[tuple[int, str], None] = {}
    log = logs.get(node)
    own = log.values_in_view() if log is not None else {}
    for key in own:
        if key.kind in VALUE_KINDS:
            seen.setdefault((key.peer, key.id.exchange_id), None)
    added = 0
    for sender, sender_log in sorted(logs.items()):
        for key, sent in sender_log.sent.items():
            delivered = sent.delivered and sent.attempts > 0 and carries_value(sent.payload)
            if key.peer == node and delivered and key.seen_from(sender) not in own:
                added += (sender, key.id.exchange_id) not in seen
                seen.setdefault((sender, key.id.exchange_id), None)
    for exchange in ordered:
        if node in (exchange.initiator, exchange.responder) and exchange.applied(node):
            seen.setdefault((exchange.other(node), exchange.exchange_id), None)
    if added:
        findings.append(Finding("info", "inferred_received", node,
                                f"{added} values delivered to node {node} are missing from its log and are added "
                                "to its view from the senders' records"))
    view = []
    for sender, exchange_id in seen:
        exchange = ordered[index[exchange_id]]
        if sender in (exchange.initiator, exchange.responder):
            view.append((sender, index[exchange_id]))
        else:
            findings.append(Finding("error", "contradictory_exchange", node,
                                    f"exchange {exchange_id}: node {node} holds a value from node {sender}, which "
                                    "is not part of it; it is left out"))
    return tuple(view)


def _ticks(node: int, log: NodeLog | None, ordered: list[Exchange]) -> int:
    """The ticks of the node's clock: its output's count, else the exchanges it is known to have begun."""
    if log is not None and log.final_output is not None:
        return int(log.final_output.rounds_completed)
    return sum(exchange.initiator == node for exchange in ordered)
