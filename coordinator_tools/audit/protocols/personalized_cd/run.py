"""What a personalized-CD run really did, from its view logs: each agent's releases and the ε it paid for each.

An agent's public log holds, per paid release r (from 0: its warm start, if published, then update t
as release t + w, w = 1 with a warm start, else 0): a `budget` record of step r (the ε the release
spent; an update's written with its `step_inputs`) before the model left the node, then the `sent`
records of its broadcast (kind `model`, sequence r + 1, or r + 1 + P for an update after P steps of
model propagation) to every neighbour. A propagation step's broadcast (sequences 2..P + 1) is
computed from released models only (`node.protocols.personalized_cd`): it pays nothing and is no
release here. The rebuild keeps, per agent, the ε of every paid release in order, and notes:
* a release (a broadcast, as its own log or a receiver's names it) without its budget record:
  an error in a private run, the model left unpaid;
* budget records out of order or twice for a step: an error (every logged spend still counts);
* an agent without a usable log: its releases are counted from what its neighbours received,
  each at its published ε (a warning: the spend is inferred, not read).
An agent may have run under a lower budget than the published one (`netdp-node --budget`), which
its run header declares (`node.agent_budget`): it is checked against that one, the stricter.
The rebuild also keeps what the canary model (`canary_model`) unrolls the broadcasts from: who
logged which broadcast (sender, sequence) in its view, each agent's own sent broadcasts, and the
neighbour broadcasts each of its updates used (its `step_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coordinator_tools.audit.protocols.base import OnTopology, run_header
from coordinator_tools.audit.records import Finding, NodeLog
from coordinator_tools.audit.report import json_number
from node.agent_budget import logged_budget
from node.message import kind_of
from node.protocols.personalized_cd import MODEL, PersonalizedCDParams
from node.topology import Topology


def record_problem(topology: Topology, node: int, kind: str, entry: Any) -> str | None:
    """Why a public record cannot belong to personalized CD, or None."""
    params: PersonalizedCDParams = topology.protocol
    if kind in ("sent", "received", "rejected"):
        if kind_of(entry) != MODEL:
            return f"a message of kind {kind_of(entry)!r}; personalized CD only broadcasts {MODEL!r}"
        if not 1 <= entry.sequence <= params.releases:
            return f"broadcast sequence {entry.sequence} is outside 1..{params.releases}"
    elif kind == "budget" and entry.step >= params.spend_count:
        return f"budget step {entry.step} is beyond the {params.spend_count} paid releases of an agent"
    elif kind == "step_inputs" and entry.step >= params.wakeups:
        return f"step {entry.step} is beyond the {params.wakeups} wake-ups of an agent"
    if kind == "budget" and not (params.private and np.isfinite(entry.epsilon) and entry.epsilon > 0.0):
        return f"a budget record of epsilon {entry.epsilon:g}" + ("" if params.private else " in a non-private run")
    if kind == "step_inputs":
        strangers = [ref.peer for ref in entry.inputs if ref.peer not in topology.neighbours[node]]
        if strangers:
            return f"step {entry.step} used a model of node {strangers[0]}, not a neighbour"
    return None


@dataclass
class BroadcastRun(OnTopology):
    """Every agent's spends in step order (its releases), read from the logs or inferred."""

    topology: Topology
    spends: dict[int, list[float]] = field(default_factory=dict)  # agent -> ε of each of its releases
    inferred: set[int] = field(default_factory=set)  # agents whose spends come from the published split
    heard: np.ndarray | None = None  # [u, v]: v logged at least one broadcast of u
    declared: dict[int, tuple[float, float]] = field(default_factory=dict)  # agent -> budget its header declares
    views: dict[int, frozenset[tuple[int, int]]] = field(default_factory=dict)  # observer -> (sender, sequence) seen
    sent: dict[int, frozenset[int]] = field(default_factory=dict)  # agent -> sequences of the broadcasts it logged
    used: dict[int, dict[int, dict[int, int]]] = field(default_factory=dict)  # agent -> update -> {peer: sequence}

    def budget_of(self, agent: int) -> tuple[float, float] | None:
        """The (ε̄_i, δ̄_i) the agent is held to: the published one, or the stricter one its log declares."""
        published = self.topology.protocol.budget_of(agent)
        declared = self.declared.get(agent)
        if published is None or declared is None:
            return published
        return min(published[0], declared[0]), min(published[1], declared[1])

    def releases(self, agent: int) -> int:
        return len(self.spends.get(agent, ()))

    def updates(self, agent: int) -> int:
        """The agent's releases that were updates (a published warm start is not one)."""
        return max(0, self.releases(agent) - self.topology.protocol.warm_start_releases)

    def run_section(self) -> dict[str, object]:
        params: PersonalizedCDParams = self.topology.protocol
        return run_header(self.topology) | {
            "private": params.private, "updates_planned": params.updates,
            "updates": [self.updates(agent) for agent in range(self.n)],
            "inferred_spends": sorted(self.inferred),
        }

    def node_summary(self, node: int) -> dict[str, object]:
        return {"updates": self.updates(node), "epsilon_sum": json_number(sum(self.spends.get(node, ()))),
                "spend_inferred": node in self.inferred}


def planned_run(topology: Topology) -> BroadcastRun:
    """The run as published: every agent makes all its releases at their published ε, every neighbour hears them."""
    spends = {agent: _published(topology, agent) for agent in range(topology.n)}
    return BroadcastRun(topology, spends, heard=_adjacency(topology))


def rebuild_run(topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> BroadcastRun:
    """Each agent's spends from its own log, or inferred from its neighbours' when its log is unusable."""
    params: PersonalizedCDParams = topology.protocol
    heard = np.zeros((topology.n, topology.n), dtype=bool)
    received: dict[int, int] = {}  # agent -> highest sequence of its broadcasts in any log
    for observer, log in logs.items():
        for key in log.values_in_view():
            heard[key.peer, observer] = True
            received[key.peer] = max(received.get(key.peer, 0), key.id.sequence)
    run = BroadcastRun(
        topology, heard=heard,
        declared={agent: budget for agent, log in logs.items() if (budget := logged_budget(log.header)) is not None},
        views={observer: frozenset((key.peer, key.id.sequence) for key in log.values_in_view())
               for observer, log in logs.items()},
        sent={agent: frozenset(key.id.sequence for key in log.sent) for agent, log in logs.items()},
        used={agent: {int(record.step): {ref.peer: int(ref.sequence) for ref in record.inputs}
                      for record in log.of_kind("step_inputs")} for agent, log in logs.items()},
    )  # fmt: skip
    for agent in range(topology.n):
        log = logs.get(agent)
        if log is not None:
            paid = params.paid_releases(max(received.get(agent, 0), _own_releases(log)))
            run.spends[agent] = _logged_spends(agent, log, topology, paid, findings)
        elif received.get(agent):
            paid = params.paid_releases(received[agent])
            run.spends[agent] = _published(topology, agent)[:paid]
            run.inferred.add(agent)
            findings.append(Finding("warning", "inferred_spend", agent,
                                    f"node {agent} has no usable log: its {paid} paid releases seen by its "
                                    "neighbours are counted at their published epsilon"))
    return run


def _own_releases(log: NodeLog) -> int:
    return max((key.id.sequence for key in log.sent), default=0)


def _logged_spends(agent: int, log: NodeLog, topology: Topology, releases: int,
                   findings: list[Finding]) -> list[float]:
    """The ε of every spend the agent logged (all count, in or out of order); a release beyond them is unpaid."""
    spends: list[float] = []
    for record in log.of_kind("budget"):
        if record.step != len(spends):
            findings.append(Finding("error", "budget_out_of_order", agent,
                                    f"node {agent} logged the spend of step {record.step} after {len(spends)} "
                                    "spends; it counts all the same"))
        spends.append(float(record.epsilon))
    if not topology.protocol.private:
        return [np.inf] * releases  # every release of non-private CD is unprotected
    if releases > len(spends):
        findings.append(Finding("error", "release_without_budget", agent,
                                f"node {agent} released {releases} models but logged the spend of {len(spends)} "
                                "releases: the others are counted at their published epsilon"))
        spends += _published(topology, agent)[len(spends):releases]
    return spends


def _published(topology: Topology, agent: int) -> list[float]:
    """The ε of each of an agent's releases as published (unprotected in non-private CD)."""
    params: PersonalizedCDParams = topology.protocol
    epsilons = params.release_epsilons(agent, topology.n)
    return [np.inf] * params.spend_count if epsilons is None else list(epsilons)


def _adjacency(topology: Topology) -> np.ndarray:
    adjacency = np.zeros((topology.n, topology.n), dtype=bool)
    for v, peers in enumerate(topology.neighbours):
        adjacency[list(peers), v] = True
    return adjacency
