"""What a token summation did: the contributions in hop order, and which token values each node saw.

The sum token's value at hop h is the sum of the contributions of hops 0..h − 1, so every
value a node can see is named by that prefix length h (the result: all of them). A
contribution is its holder's input plus, when the protocol's public rule says so, a noise
draw with a public std: on the ring every n − 1 hops (single placement) or at every hop with
std σ/√n and the first with σ (distributed placement); on the walk at every hop. The same
structure holds a realized run (rebuilt from the logs), the planned ring, and simulated walks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.protocols.base import OnTopology, run_header
from coordinator_tools.audit.protocols.token_sum.history import TokenHistory
from coordinator_tools.audit.protocols.token_sum.walks import simulate_walk
from node.protocols import ring_histogram, ring_sum, rw_sgd, walk_sum
from node.topology import Topology


@dataclass(frozen=True)
class Contribution:
    """One hop's addition to the token: its holder's input, and noise of std σ·scale (scale None: none)."""

    holder: int | None  # None: no log tells who held the hop (a finding says so); left out of the accounting
    scale: float | None
    bears_input: bool = True  # False: noise only (random-walk DP-SGD past the holder's contribution cap)


@dataclass(frozen=True)
class TokenRun(OnTopology):
    """A token summation's contributions, in hop order, and every node's view (prefix lengths, ascending)."""

    topology: Topology
    contributions: tuple[Contribution, ...]
    views: tuple[tuple[int, ...], ...]
    histories: tuple[TokenHistory, ...] = ()  # realized runs: each token's hops as the logs show them

    @property
    def total(self) -> int:
        """The prefix of the whole sum (the result)."""
        return len(self.contributions)

    def visits(self) -> np.ndarray:
        """How many contributions each node made (noise-only visits past a cap not counted)."""
        holders = np.array([c.holder for c in self.contributions if c.holder is not None and c.bears_input],
                           dtype=int)
        return np.bincount(holders, minlength=self.n)

    def holders(self) -> np.ndarray:
        """The holder of every hop, −1 where no log tells."""
        return np.array([-1 if c.holder is None else c.holder for c in self.contributions], dtype=int)

    def bearing(self) -> np.ndarray:
        """Whether every hop's contribution holds its holder's input."""
        return np.array([c.bears_input for c in self.contributions], dtype=bool)

    def output_prefix(self, node: int) -> int:
        """The prefix of the value `node` outputs: the whole sum, or (random-walk DP-SGD) the model after its last
        step, zeros if the walk never came."""
        if self.protocol != rw_sgd.PROTOCOL_NAME:
            return self.total
        held = [hop for hop, c in enumerate(self.contributions) if c.holder == node]
        return held[-1] + 1 if held else 0

    def value_scale(self) -> float:
        """What a contribution is multiplied by as it goes in: 1 for a sum, −γ for a gradient step."""
        params = self.topology.protocol
        return -params.learning_rate if self.protocol == rw_sgd.PROTOCOL_NAME else 1.0

    def output_of(self, value: np.ndarray) -> np.ndarray:
        """What a node outputs from the token's value: that value, or a ring histogram's debiased estimate."""
        params = self.topology.protocol
        if self.protocol != ring_histogram.PROTOCOL_NAME:
            return value
        return ring_histogram.debiased(value, gamma=params.gamma, n=self.n, cycles=params.cycles)

    def result_observers(self) -> list[int]:
        """The nodes whose view holds the whole sum, the result (every node but the last holder, in a whole run)."""
        return [v for v, view in enumerate(self.views) if self.total in view]

    def run_section(self) -> dict[str, object]:
        return published_section(self.topology) | {
            "contributions": self.total,
            "noisy_contributions": sum(c.scale is not None for c in self.contributions),
            "visits": self.visits().tolist(),
        }

    def node_summary(self, node: int) -> dict[str, object]:
        return {"visits": int(self.visits()[node]), "values_seen": len(self.views[node])}


def published_section(topology: Topology) -> dict[str, object]:
    """The report's `run` keys that the topology fixes."""
    params = topology.protocol
    section = run_header(topology) | {"contributions_planned": planned_contributions(topology)}
    if params.name == ring_sum.PROTOCOL_NAME:
        return section | {"cycles": params.cycles, "noise_placement": params.noise_placement}
    if params.name == ring_histogram.PROTOCOL_NAME:
        return section | {"cycles": params.cycles, "categories": params.categories, "gamma": params.gamma,
                          "initial_elements": ring_histogram.initial_elements(params.gamma, topology.n),
                          "target_epsilon": params.target_epsilon, "target_delta": params.target_delta}
    if params.name == rw_sgd.PROTOCOL_NAME:
        return section | {"steps": params.steps, "contribution_cap": params.contribution_cap,
                          "sender": params.sender, "task": params.task, "learning_rate": params.learning_rate}
    return section | {"steps": params.steps}


def planned_contributions(topology: Topology) -> int:
    """Contributions of a whole run: K·n on the ring, T on the walk."""
    params = topology.protocol
    ring = params.name in (ring_sum.PROTOCOL_NAME, ring_histogram.PROTOCOL_NAME)
    return params.cycles * topology.n if ring else params.steps


def noise_scale(topology: Topology, hop: int) -> float | None:
    """The public rule: the std over σ of the noise in hop `hop`'s contribution (None: x_u goes in bare)."""
    params = topology.protocol
    if params.name == ring_sum.PROTOCOL_NAME:
        return ring_sum.noise_sigma(hop, topology.n, params.cycles, 1.0, params.noise_placement)
    return 1.0


def contributions(topology: Topology, holders: Sequence[int | None]) -> tuple[Contribution, ...]:
    """The contributions of a path of holders, hop 0 first; past a contribution cap, a visit adds noise only."""
    params = topology.protocol
    if params.name != rw_sgd.PROTOCOL_NAME:
        return tuple(Contribution(holder, noise_scale(topology, hop)) for hop, holder in enumerate(holders))
    visits: Counter[int] = Counter()
    made: list[Contribution] = []
    for holder in holders:
        bears = holder is None or params.contributes(visits[holder])
        if holder is not None:
            visits[holder] += 1
        made.append(Contribution(holder, 1.0, bears))
    return tuple(made)


def path_run(topology: Topology, holders: Sequence[int]) -> TokenRun:
    """A whole run along `holders`: each node sees the token whenever it comes from another node, and
    every node but the last holder sees the result (a summation's; random-walk DP-SGD publishes none)."""
    views: list[list[int]] = [[] for _ in range(topology.n)]
    for hop in range(1, len(holders)):
        if holders[hop] != holders[hop - 1]:
            views[holders[hop]].append(hop)
    if topology.protocol.name != rw_sgd.PROTOCOL_NAME:
        for v in range(topology.n):
            if v != holders[-1]:
                views[v].append(len(holders))
    return TokenRun(topology, contributions(topology, holders), tuple(map(tuple, views)))


def planned_ring(topology: Topology) -> TokenRun:
    """The ring's one possible run: hop h at node h mod n."""
    return path_run(topology, [hop % topology.n for hop in range(planned_contributions(topology))])


def transition_matrix(topology: Topology) -> np.ndarray:
    """The published walk's W (Alg. 3's: uniform over all n nodes on the complete graph), row by row."""
    matrix = np.zeros((topology.n, topology.n))
    for u in range(topology.n):
        for v, probability in topology.transition_row(u).items():
            matrix[u, v] = probability
    return matrix


def simulated_walk(topology: Topology, rng: np.random.Generator) -> TokenRun:
    """One walk from node 0 along the topology's transition rows."""
    steps = planned_contributions(topology)
    return path_run(topology, simulate_walk(transition_matrix(topology), steps, walk_sum.START, rng).tolist())
