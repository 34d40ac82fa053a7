"""Replay a run directory: read every node's view log, check it, rebuild what really happened.

Protocol-neutral. No single log is trusted. Each log is checked on its own (framing, a
header that binds it to the published topology, records that fit the topology and the
protocol) and against the others by MessageId: a delivered value must appear, bit-identical,
in the receiver's log (received, or refused with its payload), and a received one in the
sender's. Replies, whose arrival their sender cannot observe (attempts = 0), are compared
when the receiver logged them and never reported as lost. Signals without a value (`done`,
`abort`) need no record at the receiver. A value refused under an id whose value the node
took already, with another payload (its digest differs), is an equivocation: the second
value reached the node, but no transcript can name it. The protocol's auditor (found by the
header in the registry) then rebuilds the realized transcript; where a log is damaged or
missing it infers from the other logs and reports every inference as a finding.

The private logs (inputs and noise) are read only on request (test and experiment mode);
with them, the auditor recomputes every node's values and compares them with the logged
payloads, which shows the transcript is what really ran.

Structure-only copies of the view logs (`payloads`) replay the same way, payload bytes aside:
the cross-check then matches messages by MessageId, fate and payload shape, and the options
that compare payloads are refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from coordinator_tools.audit.payloads import (
    cross_check_note,
    payloads_stripped,
    refuse_payload_options,
    stripping_problem,
)
from coordinator_tools.audit.protocols import auditor_for, auditor_named
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.records import (
    Finding,
    MessageKey,
    NodeLog,
    PrivateSection,
    Severity,
    carries_value,
    reader_findings,
)
from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from netdp.v1 import viewlog_pb2
from node.codec import digest, from_tensor
from node.errors import ConfigError, LogFormatError
from node.noise import SamplerKind
from node.topology import Topology, load_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log

Section = Literal["public", "private"]
# Records that name the node at the other end in `peer`: always, or when the sender is known.
PEER_RECORDS = frozenset({"drop_out", "exchange"})
OPTIONAL_PEER_RECORDS = frozenset({"sent", "received", "token"})


def replay_run(rundir: Path, *, with_private_logs: bool = False, data_dir: Path | None = None) -> Replay:
    """Read, check and replay a run directory (`data_dir`, the nodes' data folder, is only kept for the checks).

    Raises ConfigError when RUNDIR holds no valid topology, a log names a protocol no auditor
    reads, or its view logs mix structure-only and full ones (or are structure-only and private
    logs or data are asked for), and LogFormatError when no node's view log is usable; every
    lesser problem becomes a finding.
    """
    rundir = Path(rundir)
    if not (rundir / TOPOLOGY_FILE).is_file():
        raise ConfigError(f"{rundir} has no {TOPOLOGY_FILE}: not a run directory written by 'netdp run'")
    topology = load_topology(rundir / TOPOLOGY_FILE)
    auditor = auditor_named(topology.protocol.name)
    problems: list[Finding] = []
    logs: dict[int, NodeLog] = {}
    for node in range(topology.n):
        contents = _read_section(rundir, node, "public", topology, problems)
        if contents is not None:
            logs[node] = _index_log(node, contents, topology, auditor, problems)
    problems.extend(_stray_directories(rundir, topology))
    if not logs:
        raise LogFormatError(f"{rundir}: no usable view log (expected node-<id>/{VIEW_LOG_NAME} for this topology)")
    stripped = payloads_stripped(rundir, logs)
    if stripped:
        refuse_payload_options(with_private_logs=with_private_logs, data_dir=data_dir)
    consistency = [cross_check_note()] if stripped else []
    consistency += cross_check(logs)
    realized = auditor.rebuild(topology, logs, consistency)
    private = _read_private(rundir, topology, auditor, problems) if with_private_logs else None
    return Replay(rundir, topology, auditor, logs, realized, tuple(problems), tuple(consistency), private,
                  None if data_dir is None else Path(data_dir), stripped)


def read_private_logs(rundir: Path) -> tuple[PrivateSection, tuple[Finding, ...]]:
    """Only the private section of a run (every node's input and noise draws) and what was wrong with it.

    For experiments that need the draws but not the replay: the view logs are not read.
    """
    topology = load_topology(Path(rundir) / TOPOLOGY_FILE)
    problems: list[Finding] = []
    private = _read_private(Path(rundir), topology, auditor_named(topology.protocol.name), problems)
    return private, tuple(problems)


def read_canary_signs(rundir: Path, topology: Topology) -> tuple[dict[int, viewlog_pb2.CanaryCoins], list[Finding]]:
    """Every node's canary signs (an audit run), from its private log; what kept a node's signs out, as findings.

    Only the canary record of each private log is used: the audit knows which way every canary
    points, as the one-run audit's referee must, and reads no input or noise draw for it.
    """
    signs: dict[int, viewlog_pb2.CanaryCoins] = {}
    problems: list[Finding] = []
    for node in range(topology.n):
        contents = _read_section(Path(rundir), node, "private", topology, problems)
        if contents is None:
            continue
        records = contents.of_kind("canaries")
        if len(records) != 1:
            problems.append(Finding("error", "canary_signs", node,
                                    f"its private log holds {len(records)} canary records, expected one"))
            continue
        signs[node] = records[0]
    return signs, problems


# --- reading one log -------------------------------------------------------------------------


def _read_section(
    rundir: Path, node: int, section: Section, topology: Topology, problems: list[Finding]
) -> LogContents | None:
    """A node's log of one section if it belongs to this run; otherwise None and a finding."""
    path = node_log_dir(rundir, node) / (VIEW_LOG_NAME if section == "public" else PRIVATE_LOG_NAME)
    if not path.exists():
        problems.append(Finding("error", "missing_log", node, f"{path} does not exist"))
        return None
    try:
        contents = read_log(path)
    except LogFormatError as exc:
        problems.append(Finding("error", "unreadable_log", node, str(exc)))
        return None
    problems.extend(reader_findings(contents, node, "audited"))
    if contents.header is None:
        return None
    auditor_for(contents.header)  # a protocol nobody audits is an error, not a finding
    mismatches = _header_mismatches(contents.header, node, section, topology)
    problems.extend(Finding(severity, "header_mismatch", node, f"{path}: {text}") for severity, text in mismatches)
    if any(severity == "error" for severity, _ in mismatches):
        problems.append(Finding("error", "foreign_log", node, f"{path} is not this run's log and is left out"))
        return None
    return contents


def _header_mismatches(
    header: viewlog_pb2.RunHeader, node: int, section: Section, topology: Topology
) -> list[tuple[Severity, str]]:
    """How a header disagrees with the run; errors mean the log belongs to something else."""
    expected = {
        "section": section,
        "node_id": node,
        "run_id": topology.run_id,
        "protocol": topology.protocol.name,
        "topology_digest": topology.digest,
    }
    found: list[tuple[Severity, str]] = [
        ("error", f"header {name} is {getattr(header, name)!r}, expected {value!r}")
        for name, value in expected.items()
        if getattr(header, name) != value
    ]
    if header.sampler_kind not in get_args(SamplerKind):
        found.append(("warning", f"unknown sampler kind {header.sampler_kind!r}"))
    published = json.loads(topology.public_parameters_json())
    try:
        logged = json.loads(header.public_parameters_json)
    except json.JSONDecodeError:
        logged = None
    if not isinstance(logged, dict):
        found.append(("error", "header public parameters are not a JSON object"))
    elif {key: logged.get(key) for key in published} != published:
        found.append(("warning", "header public parameters differ from the topology's"))
    return found


def _index_log(
    node: int, contents: LogContents, topology: Topology, auditor: ProtocolAuditor, problems: list[Finding]
) -> NodeLog:
    """Index one log's records by MessageKey; records the topology or the protocol rule out become findings."""
    log = NodeLog(node, contents.header, intact=contents.damage is None,
                  logged_span=(contents.records[0].logged_unix, contents.records[-1].logged_unix))
    peers = auditor.peers(topology, node)
    anonymous = auditor.sender_anonymous(topology)

    def odd(kind: str, detail: str, severity: Severity = "error") -> None:
        problems.append(Finding(severity, kind, node, detail))

    for record in contents.records[1:]:
        kind = record.WhichOneof("kind")
        entry = getattr(record, kind)
        if kind == "header" or kind not in auditor.public_records:
            odd("unexpected_record", f"a {kind} record in the public view log")
            continue
        problem = stripping_problem(kind, entry, log.header.payloads_stripped)
        if problem is not None:
            odd("stripping_mismatch", f"{kind} record: {problem}; it is left out")
            continue
        if kind == "rejected":
            log.rejected += 1
            log.records.append((kind, entry))
            problem = _refusal_problem(log, entry, topology, auditor, anonymous)
            if problem is not None:
                odd(*problem)
            continue
        if kind in ("sent", "received") and not entry.HasField("peer") and not (kind == "received" and anonymous):
            odd("anonymous_record", f"a {kind} record without its peer; it is left out")
            continue
        named = kind in PEER_RECORDS or kind in OPTIONAL_PEER_RECORDS and entry.HasField("peer")
        peer = entry.peer if named else None
        if peer is not None and peer not in peers:
            odd("outside_topology", f"{kind} record names node {peer}, not a neighbour of node {node}; it is left out")
            continue
        problem = auditor.record_problem(topology, node, kind, entry)
        if problem is not None:
            odd("outside_protocol", f"{kind} record: {problem}; it is left out")
            continue
        if kind in ("sent", "received"):
            index = log.sent if kind == "sent" else log.received
            key = MessageKey.of(entry, peer)
            if key in index and not _repeated(kind, index[key], entry):
                odd("duplicate_record", f"{kind} record of {_describe(key, node, kind)} logged twice; the first counts")
                continue
            index[key] = entry
        elif kind == "final_output":
            if log.final_output is not None:
                odd("duplicate_record", "final output logged twice; the first counts")
                continue
            log.final_output = entry
        log.records.append((kind, entry))
    return log


def _repeated(kind: str, earlier: Any, later: Any) -> bool:
    """The same message logged again, which adds nothing: a failed delivery sent again (a ring's successor that
    could not take the token yet: the later try counts), or an answer without a value given again (an
    initiator's `exchange.pending`, asked twice)."""
    if kind == "sent":
        return not earlier.delivered and earlier.payload == later.payload
    return not carries_value(later.payload) and earlier == later


def _refusal_problem(log: NodeLog, entry: viewlog_pb2.Rejected, topology: Topology, auditor: ProtocolAuditor,
                     anonymous: bool) -> tuple[str, str, Severity] | None:
    """Index a refused message whose value reached the node into its view; (kind, detail, severity) if it cannot be.

    In a sender-anonymous view a refusal names no sender (-1): its value is keyed like an anonymous receive.
    """
    if not carries_value(entry.payload):
        return None
    sender = int(entry.claimed_sender)
    peer = None if anonymous and sender == -1 else sender
    if peer is not None and peer not in auditor.peers(topology, log.node):
        log.unaccounted.append(entry)
        return ("refused_from_stranger", f"a refused value claims node {sender}, not a neighbour; no model of the "
                "run accounts for it", "warning")
    problem = auditor.record_problem(topology, log.node, "rejected", entry)
    if problem is not None:
        log.unaccounted.append(entry)
        return ("outside_protocol", f"refused value from node {sender}: {problem}; no model of the run accounts for it",
                "warning")
    key = MessageKey.of(entry, peer)
    taken = log.received.get(key) or log.refused.get(key)
    if taken is not None and _digest_of(taken) != _digest_of(entry):
        log.unaccounted.append(entry)
        return ("equivocation", f"{key.describe(peer, log.node)} came again with another payload and was refused: "
                "two values under one id, of which only the first is accounted", "error")
    log.refused.setdefault(key, entry)
    return None


def _digest_of(record: viewlog_pb2.MessageReceived | viewlog_pb2.Rejected) -> bytes:
    """SHA-256 of a logged payload as it arrived (a refusal may keep only its start, and the digest of all of it)."""
    if isinstance(record, viewlog_pb2.Rejected) and record.payload_sha256:
        return record.payload_sha256
    return digest(record.payload.data)


def _describe(key: MessageKey, node: int, kind: str) -> str:
    return key.describe(node, key.peer) if kind == "sent" else key.describe(key.peer, node)


def _stray_directories(rundir: Path, topology: Topology) -> list[Finding]:
    """Node directories the topology does not know (a sign of mixed-up runs)."""
    known = {node_log_dir(rundir, node).name for node in range(topology.n)}
    return [
        Finding("warning", "unknown_node_directory", None, f"{path} is not a node of this topology")
        for path in sorted(rundir.glob("node-*"))
        if path.is_dir() and path.name not in known
    ]


# --- between logs ----------------------------------------------------------------------------


def cross_check(logs: Mapping[int, NodeLog]) -> list[Finding]:
    """Compare each sent value with the receiver's log, and each value in a view with the sender's."""
    findings: list[Finding] = []
    unverifiable: dict[int, int] = {}
    for sender, sender_log in logs.items():
        for key, sent in sender_log.sent.items():
            if not carries_value(sent.payload):
                continue
            receiver = key.peer
            receiver_log = logs.get(receiver)
            there = key.seen_from(sender)
            got = receiver_log.received.get(there) if receiver_log else None
            if got is None and receiver_log is not None:  # a sender-anonymous receive is keyed without its sender
                got = receiver_log.received.get(replace(there, peer=None))
            refused = receiver_log.refused.get(there) if receiver_log else None
            what = key.describe(sender, receiver)
            reply = sent.attempts == 0  # its sender cannot observe its arrival
            for record, how in ((got, "received"), (refused, "refused")):
                if record is not None and record.payload != sent.payload:
                    findings.append(Finding("error", "payload_mismatch", receiver,
                                            f"{what}: {how} payload differs from the sent one"))
            if got is not None and not sent.delivered and not reply:
                findings.append(Finding("warning", "unacknowledged_delivery", sender,
                                        f"{what} was logged by the receiver although the sender saw "
                                        f"'{sent.failure}'"))
            elif got is None and refused is None and sent.delivered and not reply:
                if receiver_log is not None and receiver_log.intact:
                    findings.append(Finding("error", "delivered_not_received", receiver,
                                            f"{what} is marked delivered but is not in the receiver's intact log"))
                else:
                    unverifiable[receiver] = unverifiable.get(receiver, 0) + 1
    for receiver, receiver_log in logs.items():
        for key in receiver_log.values_in_view():
            if key.peer is None:  # sender-anonymous: some node's log must have sent it here
                if not any(key.seen_from(receiver) in sender_log.sent for sender_log in logs.values()):
                    findings.append(Finding("warning", "received_never_sent", receiver,
                                            f"node {receiver} logged {key.describe(None, receiver)} sender-"
                                            "anonymously, and no log sent it there"))
                continue
            sender = key.peer
            sender_log = logs.get(sender)
            if sender_log is not None and key.seen_from(receiver) in sender_log.sent:
                continue
            if sender_log is not None and sender_log.finished:
                findings.append(Finding("error", "received_never_sent", receiver,
                                        f"node {receiver} logged {key.describe(sender, receiver)}, which the "
                                        "sender's complete log never sent"))
            else:
                unverifiable[sender] = unverifiable.get(sender, 0) + 1
    findings.extend(
        Finding("info", "unverifiable_messages", node,
                f"{count} messages to or from node {node} cannot be cross-checked: its log is missing, "
                "damaged or ends before the message was logged")
        for node, count in sorted(unverifiable.items())
    )
    return findings


# --- private section -------------------------------------------------------------------------


def _read_private(rundir: Path, topology: Topology, auditor: ProtocolAuditor,
                  problems: list[Finding]) -> PrivateSection:
    """Inputs and noise draws of every node whose private log is usable and what the protocol draws."""
    inputs: dict[int, np.ndarray] = {}
    draws: dict[int, tuple[viewlog_pb2.NoiseDraw, ...]] = {}
    for node in range(topology.n):
        contents = _read_section(rundir, node, "private", topology, problems)
        if contents is None:
            continue
        values = contents.of_kind("private_input")
        noise = tuple(contents.of_kind("noise"))
        problem = auditor.inputs_problem(len(values), noise) or auditor.private_problem(noise)
        if problem is not None:
            problems.append(Finding("error", "incomplete_private_log", node, f"private log holds {problem}"))
            continue
        stacked = np.array([from_tensor(value.value) for value in values]).reshape(
            len(values), topology.protocol.vector_length)  # a walk may never visit a node: no input at all
        inputs[node] = stacked if auditor.input_every_step else stacked[0]
        draws[node] = noise
    return PrivateSection(inputs, draws)
