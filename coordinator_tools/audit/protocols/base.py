"""What every protocol's auditor provides, and the replay it is handed.

The replay (`replay.replay_run`) is protocol-neutral (read, verify, cross-check by MessageId);
everything that depends on what the messages mean lives behind `ProtocolAuditor`: which records
are valid, how the realized transcript is rebuilt, how it is accounted and checked, and how a run
is planned. Adding a protocol is one subclass in its own module, listed in the registry
(`coordinator_tools.audit.protocols`). The replay's result, a `Replay`, holds the auditor that
rebuilt it and is what the auditor's checks read, so the two types are defined here together.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.realized import RunT
from coordinator_tools.audit.records import Finding, NodeLog, PrivateSection
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.errors import ConfigError
from node.topology import Topology


def run_header(topology: Topology) -> dict[str, object]:
    """The keys that open every report's `run` object: which run of which published topology was accounted."""
    return {"protocol": topology.protocol.name, "run_id": topology.run_id, "topology_digest": topology.digest,
            "graph": topology.graph, "n": topology.n}


class OnTopology:
    """What every run (realized, planned or simulated) reads off its published `topology` attribute."""

    topology: Topology

    @property
    def protocol(self) -> str:
        """The protocol's name, as the topology publishes it."""
        return self.topology.protocol.name

    @property
    def n(self) -> int:
        return self.topology.n


class ProtocolAuditor(ABC, Generic[RunT]):
    """The audit of one protocol: record rules, transcript rebuild, accounting, checks, planning (`RunT`: its run)."""

    name: ClassVar[str]
    public_records: ClassVar[frozenset[str]]  # record kinds its nodes write to view.log
    # Learning protocols log a private input (the step's clipped gradient) at every noisy step and
    # token walks at every visit (stacked as rows); the averaging ones log their one input once.
    input_every_step: ClassVar[bool] = False
    # Whether `account` and `plan` account a coalition's joint view soundly (threat_model.collusion; `collusion`).
    joint_views: ClassVar[bool] = False
    # Whether `account` and `plan` account an external eavesdropper's view (threat_model.eavesdropper) through `views`.
    eavesdropper_views: ClassVar[bool] = False
    # Whether the nodes average one noisy input each (Muffliato): their outputs estimate the inputs' mean, and
    # every view is linear combinations of the noisy inputs (`averaging_utility`, `combinations`).
    averaging: ClassVar[bool] = False
    # The names of its own checks that compare payloads of the view logs: not run on structure-only copies.
    payload_checks: ClassVar[tuple[str, ...]] = ()

    def supports(self, header: viewlog_pb2.RunHeader) -> bool:
        """Whether this auditor reads logs with this header."""
        return header.protocol == self.name

    def sender_anonymous(self, topology: Topology) -> bool:
        """Whether the run's receivers log messages without their sender (matched to the sender's log by id)."""
        return False

    def peers(self, topology: Topology, node: int) -> frozenset[int]:
        """The nodes `node`'s view log may name: its neighbours, or more for a protocol whose nodes also talk to
        others (secure-neighbourhood's key agreement between nodes that share a neighbour)."""
        return frozenset(topology.neighbours[node])

    @abstractmethod
    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        """Why a record in `node`'s view log cannot belong to this protocol (it is left out), or None."""

    @abstractmethod
    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """Why a node's noise draws are not what this protocol draws, or None."""

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """Why a private log's count of inputs does not fit its draws (one, or one per noisy step), or None."""
        expected = len(draws) if self.input_every_step else 1
        return f"{inputs} inputs, expected {expected}" if inputs != expected else None

    @abstractmethod
    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> RunT:
        """The realized transcript; inferences and inconsistencies are appended to `findings`."""

    @abstractmethod
    def account(self, run: RunT, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        """Every column for every pair of `run` (this protocol's realized run)."""

    @abstractmethod
    def checks(self, replay: Replay[RunT]) -> list[Check]:
        """The protocol's own checks of a replay (with private logs: the payloads recomputed)."""

    @abstractmethod
    def report_extras(self, replay: Replay[RunT], losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        """Top-level report keys this protocol adds to an audit."""

    def utility(self, replay: Replay[RunT], data_dir: Path) -> dict[str, object]:
        """The report's `utility` block from the run's data folder; only learning protocols have one."""
        raise ConfigError(f"--data gives a learning run's data for its utility block; {self.name} learns nothing")

    @abstractmethod
    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        """Account a run of `topology` before it happens."""

    def input_bound(self, topology: Topology) -> float | None:
        """The l2 norm the data coordinates of every logged private input stay within if the node clipped it
        (half the sensitivity for an input, C for a step gradient); None: no such bound is checkable."""
        return topology.protocol.sensitivity / 2.0

    def canary_model(self, run: RunT, planted: PlantedCanaries) -> CanaryModel | None:
        """The run's canary coordinates as the model's rows, each named as its receiver logs it (`empirical`), once
        the nodes' canary records are read (`planted`: a protocol whose rows depend on what only they say, such as a
        personalized-CD agent's m_i, reads it there); None: this protocol's canaries are not audited."""
        return None


def gradient_bound(topology: Topology) -> float | None:
    """A learning protocol's `input_bound`: the mean of clipped example gradients stays within C, unless the
    regulariser's λθ (added after clipping, data-free) is part of the logged gradient."""
    params = topology.protocol
    return params.clip if params.regularization == 0.0 else None


@dataclass(frozen=True)
class Replay(Generic[RunT]):
    """Everything the auditor learned from a run directory (`RunT`: what its auditor rebuilds)."""

    rundir: Path
    topology: Topology
    auditor: ProtocolAuditor[RunT]
    logs: Mapping[int, NodeLog]
    realized: RunT  # the auditor's transcript: a Transcript, an ExchangeSchedule, ...
    node_problems: tuple[Finding, ...]  # about one node's log: missing, damaged, foreign, odd records
    consistency: tuple[Finding, ...]  # between logs, and inferences made to fill gaps
    private: PrivateSection | None = None
    data_dir: Path | None = None  # the run's data folder, given in test mode: learning auditors recompute from it
    payloads_stripped: bool = False  # the view logs are structure-only copies: no payload, no output value

    @property
    def sampler_kinds(self) -> dict[int, str]:
        return {node: log.sampler_kind for node, log in self.logs.items()}

    @property
    def final_outputs(self) -> dict[int, np.ndarray]:
        """Every logged output value (none in structure-only logs)."""
        if self.payloads_stripped:
            return {}
        return {node: from_tensor(log.final_output.value) for node, log in self.logs.items() if log.final_output}

    @property
    def final_estimates(self) -> dict[int, np.ndarray]:
        """Every logged output's data coordinates: what the run computed, without an audit run's canaries."""
        dimension = self.topology.protocol.dimension
        return {node: value[:dimension] for node, value in self.final_outputs.items()}

    @property
    def effective_sensitivity(self) -> float:
        """The largest sensitivity any node's sampler asks for, and never below the published one."""
        declared = [log.effective_sensitivity for log in self.logs.values()]
        return max([self.topology.protocol.sensitivity, *(s for s in declared if s is not None)])

    def to_json(self) -> dict[str, object]:
        """The replay's findings for the report (payloads and private values stay out)."""
        return {
            "rundir": str(self.rundir),
            "protocol": self.auditor.name,
            "nodes": [self._node_json(node) for node in range(self.topology.n)],
            "node_problems": [finding.to_json() for finding in self.node_problems],
            "consistency": [finding.to_json() for finding in self.consistency],
            "private_logs_read": self.private is not None,
        }

    def _node_json(self, node: int) -> dict[str, object]:
        log = self.logs.get(node)
        return {
            "node": node,
            "log": "unusable" if log is None else "intact" if log.intact else "damaged",
            **self.realized.node_summary(node),
            "rejected_messages": None if log is None else log.rejected,
            "sampler_kind": None if log is None else log.sampler_kind,
        }
