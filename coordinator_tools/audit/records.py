"""What the replay knows about a run's logs: findings, indexed view logs, private sections.

Protocol-neutral. A message is named by its `MessageKey`: the peer at the other end, its
kind and its `MessageId` (round, sequence + exchange id, token id + hop), so one index
serves rounds, pairwise exchanges and token walks. `replay` builds these; each protocol's
auditor reads them to rebuild what really happened.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.message import MessageId, kind_of
from node.viewlog import LogContents

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One thing the replay noticed; `kind` is a stable tag, `detail` says it in words."""

    severity: Severity
    kind: str
    node: int | None
    detail: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class MessageKey:
    """A message as one log names it: the peer at the other end (None: sender-anonymous), kind, id."""

    peer: int | None
    kind: str
    id: MessageId

    @classmethod
    def of(cls, record: Any, peer: int | None) -> MessageKey:
        """The key of a sent, received or rejected record whose other end is `peer`."""
        return cls(peer, kind_of(record), MessageId.of(record))

    def seen_from(self, node: int) -> MessageKey:
        """The same message as the log at the other end names it (its peer is `node`)."""
        return replace(self, peer=node)

    def describe(self, sender: int | None, receiver: int | None) -> str:
        """The message in words, for findings."""
        where = self.id
        if self.kind == "gossip":
            what = f"round-{where.round} value"
        elif where.exchange_id:
            what = f"{self.kind} of exchange {where.exchange_id}"
        elif where.token_id:
            what = f"{self.kind} of token {where.token_id} at hop {where.hop}"
        else:
            what = f"{self.kind} #{where.sequence}"
        return f"node {'?' if sender is None else sender}'s {what} to node {receiver}"


def reader_findings(contents: LogContents, node: int | None, use: str) -> list[Finding]:
    """What the log reader reported of one file, as findings, so a damaged log is never read silently.

    A torn tail is the unacknowledged write of a killed node (nothing it held was used): a warning;
    other damage is an error. Records of a kind a newer writer added are skipped: a warning. `use`
    says what happens to the readable prefix ("audited", "shown").
    """
    findings = [Finding("warning", "unknown_record_kind", node, f"{contents.path} at byte {offset}: {detail}")
                for offset, detail in contents.unknown]
    damage = contents.damage
    if damage is not None:
        severity: Severity = "warning" if damage.kind == "torn_tail" else "error"
        findings.insert(0, Finding(severity, damage.kind, node, f"{contents.path} at byte {damage.offset}: "
                                   f"{damage.detail}; the {len(contents.records)} records before it are {use}"))
    return findings


def payload_bytes(tensor: viewlog_pb2.Tensor) -> int:
    """How many bytes a logged payload held: its data, or the count a structure-only copy kept in its place."""
    return len(tensor.data) + tensor.stripped_bytes


def carries_value(tensor: viewlog_pb2.Tensor) -> bool:
    """Whether a logged payload holds a value (signals such as `done` or `abort` carry none), stripped or not."""
    return payload_bytes(tensor) > 0


@dataclass
class NodeLog:
    """One node's usable view log, indexed by MessageKey; dicts keep log order, the first record wins."""

    node: int
    header: viewlog_pb2.RunHeader
    intact: bool  # False when the log stops being readable before its end
    records: list[tuple[str, Any]] = field(default_factory=list)  # (kind, entry) of every accepted record
    sent: dict[MessageKey, viewlog_pb2.MessageSent] = field(default_factory=dict)
    received: dict[MessageKey, viewlog_pb2.MessageReceived] = field(default_factory=dict)
    # Refused messages whose value reached the node: they belong to its view like received ones.
    refused: dict[MessageKey, viewlog_pb2.Rejected] = field(default_factory=dict)
    # Values that reached the node in messages the protocol has no place for (another kind, a stranger's): in its
    # view all the same, and in no model of the run, so no column accounts for them.
    unaccounted: list[viewlog_pb2.Rejected] = field(default_factory=list)
    rejected: int = 0
    final_output: viewlog_pb2.FinalOutput | None = None
    logged_span: tuple[float, float] = (0.0, 0.0)  # when its first and last readable records were written (unix s)

    @property
    def sampler_kind(self) -> str:
        return self.header.sampler_kind

    @property
    def effective_sensitivity(self) -> float | None:
        """The sensitivity this node's sampler asks the accountant to use (its grid included), if stated."""
        sampler = json.loads(self.header.public_parameters_json).get("sampler")
        value = sampler.get("effective_sensitivity") if isinstance(sampler, dict) else None
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def finished(self) -> bool:
        """The node logged its output from an intact log, so every message it sent is logged."""
        return self.intact and self.final_output is not None

    def of_kind(self, kind: str) -> list[Any]:
        """The accepted records of one kind ('drop_out', 'exchange', ...), in log order."""
        return [entry for record_kind, entry in self.records if record_kind == kind]

    def values_in_view(self) -> dict[MessageKey, viewlog_pb2.Tensor]:
        """Every value that reached the node, received or refused, by key (received first)."""
        values = {key: record.payload for key, record in self.received.items() if carries_value(record.payload)}
        for key, record in self.refused.items():
            values.setdefault(key, record.payload)
        return values


@dataclass(frozen=True)
class PrivateSection:
    """Each node's clipped input (one row per step for learning protocols) and its noise draws, from the usable
    private logs."""

    inputs: dict[int, np.ndarray]
    draws: dict[int, tuple[viewlog_pb2.NoiseDraw, ...]]

    def draw(self, node: int, purpose: str) -> np.ndarray:
        """The node's one draw for `purpose` (auditors check there is exactly one before asking)."""
        (draw,) = [d for d in self.draws[node] if d.purpose == purpose]
        return from_tensor(draw.value)


def single_draw_problem(draws: tuple[viewlog_pb2.NoiseDraw, ...], purpose: str) -> str | None:
    """Why a private log does not hold exactly one Gaussian draw for `purpose`, or None."""
    matching = [draw for draw in draws if draw.purpose == purpose]
    if len(matching) != 1:
        return f"{len(matching)} '{purpose}' noise draws, expected one"
    if matching[0].mechanism not in ("", "gaussian"):
        return f"the '{purpose}' draw is {matching[0].mechanism!r}, expected gaussian"
    return None
