"""Each token's history from the custody records: who held every hop, and who handed it to whom.

Both sides log a hand-over (`records`): the taker `received` hop h from a peer (or `kept` it:
a walk drew its holder again), the giver `forwarded` hop h before each try and
`acknowledged` it once the taker had it; both also log the message. A hop's holder comes
from the taker's custody record, else from its own message record, else from the giver's
acknowledged forward (the taker's log missing or damaged), else from the giver of the next
hop. Everything that breaks the one chain 0 → 1 → … → last is a finding:

* `missing_hop`: no log shows who took a hop that a later one proves was taken, or an intact
  log that took it (by the other records) has no custody record of it;
* `duplicate_hop`: two custody records of taking the same hop (two nodes, or one twice), or
  an acknowledged forward to another node than the hop's holder, whose log is lost;
* `unmatched_forward`: an acknowledged forward whose receiver's intact log never took it;
* `unmatched_receive`: a hop taken from a peer whose intact log never forwarded it there;
* `broken_chain`: a hop taken from a node that did not hold the hop before (kept by one that
  did not hold it);
* `wrong_predecessor`, `wrong_holder` (ring): a hop taken from another node than the
  taker's ring predecessor, or held by another node than the ring's;
* `token_lost`: the history stops before the token's last hop.
An inference from the other side of a damaged or missing log is an `inferred_hop` note.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from coordinator_tools.audit.protocols.token_sum.records import TokenRules, TokenSpec
from coordinator_tools.audit.records import Finding, NodeLog, Severity
from node.mailboxes.token_slot import ACKNOWLEDGED, FORWARDED, KEPT, RECEIVED

CHAIN_FINDINGS = frozenset({"missing_hop", "duplicate_hop", "unmatched_forward", "unmatched_receive",
                            "broken_chain", "wrong_predecessor", "wrong_holder", "token_lost"})
How = Literal["originated", "received", "kept", "inferred"]
Report = Callable[[Severity, str, int | None, str], None]  # (severity, kind, node, detail) -> a finding
Intact = Callable[[int], bool]  # whether a node's log is there and intact


@dataclass(frozen=True)
class Hop:
    """Who held one hop of a token, from whom it came (None: originated or kept there), and how we know."""

    holder: int
    sender: int | None
    how: How


@dataclass(frozen=True)
class TokenHistory:
    """One token's hops, from 0 up to the last one any log shows taken; None where no log tells the holder."""

    token_id: str
    planned: int  # hops of a whole run
    hops: tuple[Hop | None, ...]

    @property
    def holders(self) -> list[int | None]:
        return [None if hop is None else hop.holder for hop in self.hops]

    def to_json(self) -> dict[str, object]:
        return {"token_id": self.token_id, "planned_hops": self.planned, "hops_taken": len(self.hops),
                "holders": self.holders, "inferred_hops": [h for h, hop in enumerate(self.hops)
                                                           if hop is not None and hop.how == "inferred"]}


@dataclass
class Evidence:
    """What every log says about one token, hop by hop."""

    takes: dict[int, list[tuple[int, int | None, str]]] = field(default_factory=lambda: defaultdict(list))
    messages: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))  # (giver, taker)
    forwarded: dict[int, set[tuple[int, int]]] = field(default_factory=lambda: defaultdict(set))
    acknowledged: dict[int, set[tuple[int, int]]] = field(default_factory=lambda: defaultdict(set))

    @property
    def last(self) -> int:
        """The newest hop any record names."""
        return max([0, *self.takes, *self.messages, *self.acknowledged])


def token_histories(rules: TokenRules, n: int, logs: Mapping[int, NodeLog],
                    findings: list[Finding]) -> dict[str, TokenHistory]:
    """Every token's history (a result token only once the sum token has one); findings appended."""
    histories: dict[str, TokenHistory] = {}
    for token_id, spec in rules.tokens.items():
        evidence = _evidence(token_id, spec, logs)
        if histories and evidence.last == 0:
            continue  # a result token that never left its originator: the sum's history says why
        histories[token_id] = _history(token_id, spec, evidence, rules, n, logs, findings)
    return histories


def _evidence(token_id: str, spec: TokenSpec, logs: Mapping[int, NodeLog]) -> Evidence:
    evidence = Evidence()
    for node, log in sorted(logs.items()):
        for event in log.of_kind("token"):
            if event.token_id != token_id:
                continue
            peer = event.peer if event.HasField("peer") else None
            if event.phase in (RECEIVED, KEPT):
                evidence.takes[event.hop].append((node, node if event.phase == KEPT else peer, event.phase))
            elif event.phase == FORWARDED:
                evidence.forwarded[event.hop].add((node, peer))
            elif event.phase == ACKNOWLEDGED:
                evidence.acknowledged[event.hop].add((node, peer))
        for key in log.received:
            if key.kind == spec.kind and key.id.token_id == token_id:
                evidence.messages[key.id.hop].append((key.peer, node))
        for key, sent in log.sent.items():
            if key.kind == spec.kind and key.id.token_id == token_id and sent.delivered:
                evidence.acknowledged[key.id.hop].add((node, key.peer))
    return evidence


def _history(token_id: str, spec: TokenSpec, evidence: Evidence, rules: TokenRules, n: int,
             logs: Mapping[int, NodeLog], findings: list[Finding]) -> TokenHistory:
    """The hops of one token, checked hop by hop against the one before."""

    def found(severity: Severity, kind: str, node: int | None, detail: str) -> None:
        findings.append(Finding(severity, kind, node, f"token {token_id}: {detail}"))

    def intact(node: int) -> bool:
        return node in logs and logs[node].intact

    hops: list[Hop | None] = [Hop(spec.origin, None, "originated")]
    for h in range(1, evidence.last + 1):
        hop = _taker(h, evidence, intact, found)
        previous = hops[h - 1].holder if hops[h - 1] is not None else None
        if hop is not None:
            _check_hand_over(h, hop, previous, evidence, intact, found)
        if rules.ring and hop is not None:
            _check_ring(h, hop, spec, n, found)
        hops.append(hop)
    for h in range(1, len(hops) - 1):  # a hop no log shows taken: its holder gave the next one away
        if hops[h] is None:
            hops[h] = _missing(h, hops[h + 1], spec, rules.ring, n, intact, found)
    if len(hops) < spec.hops:
        last = hops[-1]
        holder = "no node" if last is None else f"node {last.holder}"
        found("error", "token_lost", None if last is None else last.holder,
              f"its history stops at hop {len(hops) - 1} of {spec.hops - 1}: {holder} held it last and no log "
              "shows it passed on")
    return TokenHistory(token_id, spec.hops, tuple(hops))


def _taker(h: int, evidence: Evidence, intact: Intact, found: Report) -> Hop | None:
    """Hop h's holder from the custody records, else the message records, else an acknowledged forward."""
    takes = evidence.takes.get(h, [])
    if len(takes) > 1:
        who = ", ".join(f"node {node} ({phase}{'' if peer in (None, node) else f' from node {peer}'})"
                        for node, peer, phase in takes)
        found("error", "duplicate_hop", takes[1][0], f"hop {h} was taken {len(takes)} times: {who}; the first counts")
    if takes:
        node, peer, phase = takes[0]
        if phase == RECEIVED and peer is None:  # a sender-anonymous receive: the giver's forward names the taker
            peer = _anonymous_giver(h, node, evidence)
        return Hop(node, None if phase == KEPT else peer, "kept" if phase == KEPT else "received")
    messages = evidence.messages.get(h, [])
    if messages:
        giver, taker = messages[0]
        found("error", "missing_hop", taker, f"node {taker} logged hop {h}'s value from node {giver} but no custody "
                                             "record of taking it")
        return Hop(taker, giver, "received")
    acknowledged = sorted(evidence.acknowledged.get(h, ()))
    if acknowledged:
        giver, taker = acknowledged[0]
        if intact(taker):
            found("error", "unmatched_forward", taker, f"node {giver}'s forward of hop {h} to node {taker} was "
                                                        f"acknowledged, but node {taker}'s intact log never took it")
        else:
            found("info", "inferred_hop", taker, f"node {taker}'s log is missing or damaged: hop {h} is accounted "
                                                 f"at node {taker}, as node {giver}'s acknowledged forward says")
        return Hop(taker, giver, "inferred")
    return None


def _anonymous_giver(h: int, taker: int, evidence: Evidence) -> int | None:
    """The one node whose forward of hop h names `taker` (a sender-anonymous receive logs no giver), if one."""
    givers = {giver for giver, to in evidence.forwarded.get(h, set()) | evidence.acknowledged.get(h, set())
              if to == taker}
    return givers.pop() if len(givers) == 1 else None


def _check_hand_over(h: int, hop: Hop, previous: int | None, evidence: Evidence, intact: Intact,
                      found: Report) -> None:
    """The giver of hop h held hop h − 1 and logged the forward; no other taker was acknowledged."""
    giver = hop.holder if hop.how == "kept" else hop.sender
    if previous is not None and giver != previous:
        how = "kept" if hop.how == "kept" else f"took from node {giver}"
        found("error", "broken_chain", hop.holder,
              f"node {hop.holder} {how} hop {h}, but hop {h - 1} was held by node {previous}")
    if hop.how == "received" and intact(giver) and (giver, hop.holder) not in evidence.forwarded.get(h, ()):
        found("error", "unmatched_receive", giver,
              f"node {hop.holder} took hop {h} from node {giver}, whose intact log never forwarded it there")
    takers = {node for node, _, _ in evidence.takes.get(h, ())}  # a second taker is a duplicate_hop already
    for other_giver, taker in sorted(evidence.acknowledged.get(h, ())):
        if taker != hop.holder and taker not in takers:
            kind = "unmatched_forward" if intact(taker) else "duplicate_hop"
            found("error", kind, taker, f"node {other_giver}'s forward of hop {h} to node {taker} was acknowledged, "
                                        f"but node {hop.holder} holds hop {h}")


def _check_ring(h: int, hop: Hop, spec: TokenSpec, n: int, found: Report) -> None:
    """On the ring, hop h is node (origin + h) mod n's, and it comes from that node's predecessor."""
    expected = (spec.origin + h) % n
    if hop.holder != expected:
        found("error", "wrong_holder", hop.holder, f"hop {h} is node {expected}'s on the ring, node {hop.holder} "
                                                   "holds it")
    if hop.sender is not None and hop.sender != (hop.holder - 1) % n:
        found("error", "wrong_predecessor", hop.holder, f"node {hop.holder} took hop {h} from node {hop.sender}, "
                                                        f"not from its ring predecessor {(hop.holder - 1) % n}")


def _missing(h: int, following: Hop | None, spec: TokenSpec, ring: bool, n: int, intact: Intact,
             found: Report) -> Hop | None:
    """A hop nobody logged taking: its holder gave the next one away (or, on a ring, is the ring's node)."""
    holder = None if following is None else following.holder if following.how == "kept" else following.sender
    why = f"which passed hop {h + 1} on"
    if holder is None and ring:
        holder, why = (spec.origin + h) % n, "the ring's"
    if holder is None:
        found("error", "missing_hop", None, f"no log shows who held hop {h}; its contribution is left out of the "
                                            "accounting (its holder's losses are not accounted)")
        return None
    severity: Severity = "error" if intact(holder) else "info"
    found(severity, "missing_hop" if intact(holder) else "inferred_hop", holder,
          f"no log shows node {holder} taking hop {h}; it is accounted at node {holder}, {why}")
    return Hop(holder, None, "inferred")
