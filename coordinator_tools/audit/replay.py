"""Replay a run directory: read every node's view log, check it, rebuild what really happened.

No single log is trusted. Each log is checked on its own (framing, a header that binds it
to the published topology) and against the others (a delivered message must appear,
bit-identical, in the receiver's log, and a received one in the sender's). The realized
Transcript comes from the nodes' own records; where a log is damaged or missing, the rounds
that its neighbours prove it completed are inferred from their records, and every such
inference is reported as a finding, never made silently.

The private logs (inputs and noise) are read only on request (test and experiment mode);
with them, `check_trajectories` recomputes every node's values from the transcript and
compares them with the logged payloads, which shows the transcript is what really ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from coordinator_tools.audit.transcript import Transcript
from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.errors import ConfigError, LogFormatError
from node.mixing import accelerated_step
from node.noise import SamplerKind
from node.peer import NOISE_PURPOSE
from node.protocols.muffliato import PROTOCOL_NAME
from node.topology import Topology, load_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log

Severity = Literal["error", "warning", "info"]
Section = Literal["public", "private"]
MessageKey = tuple[int, int]  # (peer, round)

# Recomputed values match logged ones to this relative precision (summation order differs).
TRAJECTORY_RTOL = 1e-9


@dataclass(frozen=True)
class Finding:
    """One thing the replay noticed; `kind` is a stable tag, `detail` says it in words."""

    severity: Severity
    kind: str
    node: int | None
    detail: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class NodeView:
    """One node's usable view log, indexed by (peer, round); dicts keep log order."""

    node: int
    header: viewlog_pb2.RunHeader
    intact: bool  # False when the log stops being readable before its end
    sent: dict[MessageKey, viewlog_pb2.MessageSent] = field(default_factory=dict)
    received: dict[MessageKey, viewlog_pb2.MessageReceived] = field(default_factory=dict)
    # Whether the node mixed the peer's round value in (received) or dropped it; first record wins.
    decisions: dict[MessageKey, bool] = field(default_factory=dict)
    rejected: int = 0
    final_output: viewlog_pb2.FinalOutput | None = None

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


@dataclass(frozen=True)
class PrivateSection:
    """Each node's clipped input x_v and initial noise eta_v (x_v^0 = x_v + eta_v)."""

    inputs: dict[int, np.ndarray]
    noise: dict[int, np.ndarray]


@dataclass(frozen=True)
class Replay:
    """Everything the auditor learned from a run directory."""

    rundir: Path
    topology: Topology
    transcript: Transcript
    views: Mapping[int, NodeView]
    node_problems: tuple[Finding, ...]  # about one node's log: missing, damaged, foreign, odd records
    consistency: tuple[Finding, ...]  # between logs, and inferences made to fill gaps
    inferred_rounds: Mapping[int, tuple[int, ...]]  # node -> rounds rebuilt from its peers' records
    private: PrivateSection | None = None

    @property
    def sampler_kinds(self) -> dict[int, str]:
        return {node: view.sampler_kind for node, view in self.views.items()}

    @property
    def final_outputs(self) -> dict[int, np.ndarray]:
        return {node: from_tensor(view.final_output.value) for node, view in self.views.items() if view.final_output}

    @property
    def effective_sensitivity(self) -> float:
        """The largest sensitivity any node's sampler asks for, and never below the published one."""
        declared = [view.effective_sensitivity for view in self.views.values()]
        return max([self.topology.protocol.sensitivity, *(s for s in declared if s is not None)])

    def to_json(self) -> dict[str, object]:
        """The replay's findings for the report (payloads and private values stay out)."""
        return {
            "rundir": str(self.rundir),
            "nodes": [self._node_json(node) for node in range(self.topology.n)],
            "node_problems": [finding.to_json() for finding in self.node_problems],
            "consistency": [finding.to_json() for finding in self.consistency],
            "private_logs_read": self.private is not None,
        }

    def _node_json(self, node: int) -> dict[str, object]:
        view = self.views.get(node)
        return {
            "node": node,
            "log": "unusable" if view is None else "intact" if view.intact else "damaged",
            "rounds_completed": self.transcript.completed_rounds(node),
            "inferred_rounds": list(self.inferred_rounds.get(node, ())),
            "rejected_messages": None if view is None else view.rejected,
            "sampler_kind": None if view is None else view.sampler_kind,
        }


def replay_run(rundir: Path, *, with_private_logs: bool = False) -> Replay:
    """Read, check and replay a run directory.

    Raises ConfigError when RUNDIR holds no valid topology and LogFormatError when no node's
    view log is usable; every lesser problem becomes a finding.
    """
    rundir = Path(rundir)
    if not (rundir / TOPOLOGY_FILE).is_file():
        raise ConfigError(f"{rundir} has no {TOPOLOGY_FILE}: not a run directory written by 'netdp run'")
    topology = load_topology(rundir / TOPOLOGY_FILE)
    problems: list[Finding] = []
    views: dict[int, NodeView] = {}
    for node in range(topology.n):
        contents = _read_section(rundir, node, "public", topology, problems)
        if contents is not None:
            views[node] = _index_view(node, contents, topology, problems)
    problems.extend(_stray_directories(rundir, topology))
    if not views:
        raise LogFormatError(f"{rundir}: no usable view log (expected node-<id>/{VIEW_LOG_NAME} for this topology)")
    consistency = _cross_check(views)
    transcript, inferred = _rebuild_transcript(topology, views, consistency)
    private = _read_private(rundir, topology, problems) if with_private_logs else None
    return Replay(rundir, topology, transcript, views, tuple(problems), tuple(consistency), inferred, private)


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
    if contents.damage is not None:
        damage = contents.damage
        # A torn tail is the unacknowledged write of a killed node: nothing it held was used.
        severity: Severity = "warning" if damage.kind == "torn_tail" else "error"
        problems.append(
            Finding(severity, damage.kind, node, f"{path} at byte {damage.offset}: {damage.detail}; "
                    f"the {len(contents.records)} records before it are audited")
        )
    if contents.header is None:
        return None
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
        "protocol": PROTOCOL_NAME,
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


def _index_view(node: int, contents: LogContents, topology: Topology, problems: list[Finding]) -> NodeView:
    """Index one log's records; records that contradict the protocol become findings."""
    view = NodeView(node, contents.header, intact=contents.damage is None)
    neighbours = set(topology.neighbours[node])
    rounds = topology.protocol.rounds

    def odd(kind: str, detail: str) -> None:
        problems.append(Finding("error", kind, node, detail))

    for record in contents.records[1:]:
        kind = record.WhichOneof("kind")
        entry = getattr(record, kind)
        if kind in ("sent", "received", "drop_out") and (entry.peer not in neighbours or entry.round >= rounds):
            odd("outside_topology", f"{kind} record names peer {entry.peer}, round {entry.round}: "
                f"not a neighbour or past round {rounds - 1}; it is left out")
            continue
        if kind == "sent":
            if (entry.peer, entry.round) in view.sent:
                odd("duplicate_record", f"sent to {entry.peer} for round {entry.round} logged twice")
            view.sent[(entry.peer, entry.round)] = entry
        elif kind in ("received", "drop_out"):
            key = (entry.peer, entry.round)
            if key in view.decisions:
                odd("contradictory_records", f"{kind} of peer {entry.peer}'s round {entry.round} "
                    "after that value was already received or dropped; the first record counts")
            else:
                view.decisions[key] = kind == "received"
            if kind == "received":
                view.received.setdefault(key, entry)
        elif kind == "rejected":
            view.rejected += 1
        elif kind == "final_output":
            if view.final_output is not None:
                odd("duplicate_record", "final output logged twice; the first counts")
            else:
                view.final_output = entry
        else:
            odd("unexpected_record", f"a {kind} record in the public view log")
    return view


def _stray_directories(rundir: Path, topology: Topology) -> list[Finding]:
    """Node directories the topology does not know (a sign of mixed-up runs)."""
    known = {node_log_dir(rundir, node).name for node in range(topology.n)}
    return [
        Finding("warning", "unknown_node_directory", None, f"{path} is not a node of this topology")
        for path in sorted(rundir.glob("node-*"))
        if path.is_dir() and path.name not in known
    ]


# --- between logs ----------------------------------------------------------------------------


def _cross_check(views: Mapping[int, NodeView]) -> list[Finding]:
    """Compare each sent record with the receiver's log, and each received one with the sender's."""
    findings: list[Finding] = []
    unverifiable: dict[int, int] = {}
    for sender, sender_view in views.items():
        for (receiver, round_index), sent in sender_view.sent.items():
            receiver_view = views.get(receiver)
            got = receiver_view.received.get((sender, round_index)) if receiver_view else None
            what = f"node {sender}'s round-{round_index} value to node {receiver}"
            if got is not None:
                if got.payload != sent.payload:
                    findings.append(Finding("error", "payload_mismatch", receiver,
                                            f"{what}: received payload differs from the sent one"))
                if not sent.delivered:
                    findings.append(Finding("warning", "unacknowledged_delivery", sender,
                                            f"{what} was logged by the receiver although the sender saw "
                                            f"'{sent.failure}'"))
            elif sent.delivered:
                if receiver_view is not None and receiver_view.intact:
                    findings.append(Finding("error", "delivered_not_received", receiver,
                                            f"{what} is marked delivered but is not in the receiver's intact log"))
                else:
                    unverifiable[receiver] = unverifiable.get(receiver, 0) + 1
    for receiver, receiver_view in views.items():
        for (sender, round_index), got in receiver_view.received.items():
            sender_view = views.get(sender)
            if sender_view is not None and (receiver, round_index) in sender_view.sent:
                continue
            if sender_view is not None and sender_view.finished:
                findings.append(Finding("error", "received_never_sent", receiver,
                                        f"node {receiver} logged node {sender}'s round-{round_index} value, "
                                        "which the sender's complete log never sent"))
            else:
                unverifiable[sender] = unverifiable.get(sender, 0) + 1
    findings.extend(
        Finding("info", "unverifiable_messages", node,
                f"{count} messages to or from node {node} cannot be cross-checked: its log is missing, "
                "damaged or ends before the message was logged")
        for node, count in sorted(unverifiable.items())
    )
    return findings


def _rebuild_transcript(
    topology: Topology, views: Mapping[int, NodeView], findings: list[Finding]
) -> tuple[Transcript, dict[int, tuple[int, ...]]]:
    """The realized transcript; rounds a node provably completed but did not log are inferred."""
    rounds = topology.protocol.rounds
    own = {node: _logged_rounds(view, topology.neighbours[node], rounds) for node, view in views.items()}
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
        used.append(tuple(logged) + tuple(_infer_round(node, t, topology, views, proven, findings) for t in missing))
    delivered: dict[int, list[tuple[int, int]]] = {node: [] for node in range(topology.n)}
    for sender, sender_view in views.items():
        for (receiver, t), sent in sender_view.sent.items():
            if sent.delivered:
                delivered[receiver].append((sender, t))
    received = tuple(_received_messages(node, views.get(node), delivered[node], findings) for node in range(topology.n))
    transcript = Transcript(
        topology=topology,
        rounds=rounds,
        accelerated=topology.protocol.accelerated,
        used=tuple(used),
        received=received,
    )
    return transcript, inferred


def _logged_rounds(view: NodeView, neighbours: Iterable[int], rounds: int) -> list[frozenset[int]]:
    """Used sets of the rounds a log shows complete: every neighbour received or dropped."""
    used: list[frozenset[int]] = []
    for t in range(rounds):
        decided = [(peer, view.decisions.get((peer, t))) for peer in neighbours]
        if any(decision is None for _, decision in decided):
            break
        used.append(frozenset(peer for peer, decision in decided if decision))
    return used


def _proven_rounds(topology: Topology, views: Mapping[int, NodeView]) -> list[int]:
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
        for sender, t in view.received:
            proven[sender] = max(proven[sender], t)
    return [min(count, topology.protocol.rounds) for count in proven]


def _infer_round(
    node: int, t: int, topology: Topology, views: Mapping[int, NodeView], proven: list[int], findings: list[Finding]
) -> frozenset[int]:
    """Whom `node` used in round t, from its own partial records and then from its peers' sent records."""
    own = views[node].decisions if node in views else {}
    used: set[int] = set()
    for peer in topology.neighbours[node]:
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
    node: int, view: NodeView | None, delivered: list[tuple[int, int]], findings: list[Finding]
) -> tuple[tuple[int, int], ...]:
    """The node's view: its received records in log order, then delivered messages its log lacks.

    A message a sender saw delivered was in the receiver's view even if the receiver's log
    lost it, so it is added (never under-state what an observer saw).
    """
    logged = list(view.received) if view is not None else []
    known = set(logged)
    added = sorted((message for message in delivered if message not in known), key=lambda m: (m[1], m[0]))
    if added:
        findings.append(Finding("info", "inferred_received", node,
                                f"{len(added)} messages delivered to node {node} are missing from its log and "
                                "are added to its view from the senders' records"))
    return tuple(logged) + tuple(added)


# --- private section and recomputation -------------------------------------------------------


def _read_private(rundir: Path, topology: Topology, problems: list[Finding]) -> PrivateSection:
    """Inputs and initial noise of every node whose private log is usable."""
    inputs: dict[int, np.ndarray] = {}
    noise: dict[int, np.ndarray] = {}
    for node in range(topology.n):
        contents = _read_section(rundir, node, "private", topology, problems)
        if contents is None:
            continue
        values = contents.of_kind("private_input")
        draws = [draw for draw in contents.of_kind("noise") if draw.purpose == NOISE_PURPOSE]
        if len(values) != 1 or len(draws) != 1:
            problems.append(Finding("error", "incomplete_private_log", node,
                                    f"private log holds {len(values)} inputs and {len(draws)} "
                                    f"'{NOISE_PURPOSE}' noise draws, expected one of each"))
            continue
        inputs[node] = from_tensor(values[0].value)
        noise[node] = from_tensor(draws[0].value)
    return PrivateSection(inputs, noise)


def recompute_trajectories(transcript: Transcript, initial: Mapping[int, np.ndarray]) -> dict[int, list[np.ndarray]]:
    """Values x_v^0..x_v^{T_v} of every node in `initial`, from x^0 and the transcript's realized rows.

    A node left out of `initial` (it never ran) must be mixed by no one. The rows are the
    transcript's `realized_row`, the very rows the accountants assume, so agreement with the
    logged payloads checks the accountants' model of the run, not just the nodes.
    """
    values = {node: [np.asarray(initial[node], dtype=np.float64)] for node in initial}
    for t in range(transcript.rounds):
        following = {}
        for node, trajectory in values.items():
            if transcript.completed_rounds(node) <= t:
                continue
            row = transcript.realized_row(node, t)
            try:
                mixed = sum(weight * values[peer][t] for peer, weight in row.items())
            except (KeyError, IndexError):
                raise ValueError(f"node {node} used a round-{t} value the transcript cannot produce") from None
            plain = t == 0 or not transcript.accelerated
            following[node] = mixed if plain else accelerated_step(trajectory[t - 1], mixed, transcript.omega)
        for node, value in following.items():
            values[node].append(value)
    return values


@dataclass(frozen=True)
class TrajectoryCheck:
    """How well the recomputed values reproduce every logged payload."""

    compared: int
    max_relative_deviation: float
    mismatches: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return self.compared > 0 and not self.mismatches


def check_trajectories(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every node's values from its private input and noise and compare with the logs."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    private, transcript = replay.private, replay.transcript
    senders = {w for messages in transcript.received for w, _ in messages}
    needed = {v for v in range(transcript.n) if transcript.completed_rounds(v) > 0} | senders
    missing = sorted(needed - set(private.inputs))
    if missing:
        finding = Finding("error", "missing_private_input", missing[0], f"no usable private log for nodes {missing}")
        return TrajectoryCheck(0, float("nan"), (finding,))
    initial = {node: private.inputs[node] + private.noise[node] for node in private.inputs}
    values = recompute_trajectories(transcript, initial)
    scale = max(float(np.max(np.abs(x))) for x in initial.values()) or 1.0
    mismatches: list[Finding] = []
    worst = 0.0
    compared = 0
    for node, view in replay.views.items():
        logged = [(node, t, sent.payload, "sent") for (_, t), sent in view.sent.items()]
        logged += [(sender, t, got.payload, "received") for (sender, t), got in view.received.items()]
        if view.final_output is not None:
            logged.append((node, int(view.final_output.rounds_completed), view.final_output.value, "final_output"))
        for owner, t, tensor, kind in logged:
            if t >= len(values[owner]):
                mismatches.append(Finding("error", "unexplained_payload", node,
                                          f"{kind} record holds x_{owner}^{t}, which the transcript never computes"))
                continue
            deviation = float(np.max(np.abs(from_tensor(tensor) - values[owner][t]), initial=0.0)) / scale
            worst = max(worst, deviation)
            compared += 1
            if deviation > rtol:
                mismatches.append(Finding("error", "payload_not_reproduced", node,
                                          f"{kind} record of x_{owner}^{t} is off by {deviation:.3g} (relative)"))
    return TrajectoryCheck(compared, worst, tuple(mismatches))
