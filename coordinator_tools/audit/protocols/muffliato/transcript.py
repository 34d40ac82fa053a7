"""The realized schedule of a synchronous gossip run: who mixed whose value in which round.

Both the auditor (rebuilt from view logs) and the planner (from the topology, with no
drop-outs) produce a Transcript; every accountant takes one, so planned and realized runs
are accounted by the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator_tools.audit.protocols.base import OnTopology, run_header
from node.mixing import chebyshev_omega
from node.topology import Topology

Message = tuple[int, int]  # (sender w, round t): the value x_w^t


@dataclass(frozen=True)
class Transcript(OnTopology):
    """What really happened in a synchronous Muffliato run.

    Round t (0 <= t < rounds) is the exchange of the values x^t. For node v:

    * ``used[v][t]`` is the set of neighbours whose round-t value v mixed into x_v^{t+1}
      (the neighbours it dropped at round t are missing; their weight went to v's self-loop).
      ``used[v]`` has one entry per round v completed, so ``len(used[v])`` is the number of
      rounds v completed (fewer than ``rounds`` if it stopped early).
    * ``received[v]`` lists the messages in v's view, in log order, as (sender, round):
      v received x_sender^round (used, or refused after its round closed).
    * ``inferred[v]`` lists the rounds a replay rebuilt from v's neighbours' records.

    With every node completing every round and every neighbour used, this is the plan.
    Round t runs on the graph of step t // rounds_per_step (Muffliato-GD gossips K rounds
    per step, each step perhaps on a graph drawn for it; Muffliato's graph is fixed).
    """

    topology: Topology
    rounds: int
    accelerated: bool
    used: tuple[tuple[frozenset[int], ...], ...]
    received: tuple[tuple[Message, ...], ...]
    inferred: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    rounds_per_step: int = 1

    @property
    def omega(self) -> float:
        """Chebyshev scale parameter (only meaningful when accelerated)."""
        return chebyshev_omega(self.topology.spectral_gap)

    def completed_rounds(self, node: int) -> int:
        return len(self.used[node])

    def run_section(self) -> dict[str, object]:
        """The report's `run`: the schedule that was accounted."""
        return run_header(self.topology) | {
            "rounds": self.rounds,
            "accelerated": self.accelerated,
            "rounds_completed": [self.completed_rounds(v) for v in range(self.n)],
            "messages_used": sum(len(used) for node in self.used for used in node),
            "messages_planned": sum(len(self.neighbours(v, t)) for v in range(self.n) for t in range(self.rounds)),
        }

    def node_summary(self, node: int) -> dict[str, object]:
        """What the replay established about one node's rounds."""
        return {"rounds_completed": self.completed_rounds(node), "inferred_rounds": list(self.inferred.get(node, ()))}

    def neighbours(self, node: int, round_index: int) -> tuple[int, ...]:
        """The node's neighbours in round t: those of its step's graph."""
        return self.topology.neighbours_at(node, round_index // self.rounds_per_step)

    def realized_row(self, node: int, round_index: int) -> dict[int, float]:
        """Row `node` of the mixing matrix W_t that was really applied at round t."""
        row = self.topology.weight_row_at(node, round_index // self.rounds_per_step)
        used = self.used[node][round_index]
        for peer in self.neighbours(node, round_index):
            if peer not in used:
                row[node] += row.pop(peer)
        return row


def planned_transcript(topology: Topology, *, rounds: int | None = None, accelerated: bool | None = None,
                       rounds_per_step: int = 1) -> Transcript:
    """The transcript of a run in which every node completes every round and nobody drops."""
    rounds = topology.protocol.rounds if rounds is None else rounds
    if accelerated is None:  # a protocol without the option gossips plain
        accelerated = getattr(topology.protocol, "accelerated", False)

    def neighbours(v: int, t: int) -> tuple[int, ...]:
        return topology.neighbours_at(v, t // rounds_per_step)

    used = tuple(tuple(frozenset(neighbours(v, t)) for t in range(rounds)) for v in range(topology.n))
    received = tuple(tuple((w, t) for t in range(rounds) for w in neighbours(v, t)) for v in range(topology.n))
    return Transcript(topology=topology, rounds=rounds, accelerated=accelerated, used=used, received=received,
                      rounds_per_step=rounds_per_step)
