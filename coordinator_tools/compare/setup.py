"""The two protocols of `netdp compare`, set up comparably.

Both learn the same logistic regression on the same split, with the same clip C, minibatch b and
replace-one-example adjacency (so the same Δ = 2C/b), and the same number of gradient steps per
node on average: Muffliato-GD takes T_gd steps at every node, each followed by K gossip rounds;
the random walk takes T = n·T_gd steps in all (T_gd visits per node on average, no cap).

Learning rates: gossip's η_gd = 0.5 is the Muffliato-GD demo's (measured on breast_cancer); the
walk's default is η_gd/n, so that its n·T_gd single-node steps move the model as far as gossip's
T_gd averaged steps. A sweep of simulated walks on the default setup (16-node hypercube, σ at mean
ε = 1) gave test accuracy 0.86 at η = 0.01 to 0.03, falling to 0.80 at η = 0.5; gossip was flat
(0.89 to 0.87) for η_gd from 0.1 to 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from coordinator_tools.dataprep.learning_data import bundled
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import GENERATORS, generate
from node.learning import derived_sensitivity
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.rw_sgd import RwSgdParams
from node.topology import NetworkParams, ProtocolParams, Topology

GOSSIP = "muffliato-gd"
WALK = "rw-sgd"
PROTOCOLS = (GOSSIP, WALK)
# Muffliato-GD's exact column is a Gaussian (ε, δ), the same at every order: its published α is only a label.
GOSSIP_ALPHA = 2.0


@dataclass(frozen=True)
class CompareSetup:
    """What both runs share, and each protocol's own learning rate."""

    graph: str = "hypercube"
    n: int | None = 16
    graph_seed: int = 0
    dataset: str = "breast_cancer"
    steps_per_node: int = 10  # T_gd; the walk takes n·T_gd steps
    gossip_rounds: int = 1  # K
    clip: float = 1.0
    batch: int = 16
    gossip_learning_rate: float = 0.5
    walk_learning_rate: float | None = None  # None: gossip_learning_rate / n
    delta: float = 1e-5

    @property
    def sensitivity(self) -> float:
        """Δ = 2C/b: one example of a minibatch replaced."""
        return derived_sensitivity(self.clip, "example", self.batch)

    @property
    def dimension(self) -> int:
        """The model's length: the dataset's features."""
        return int(bundled(self.dataset).x.shape[1])

    def make_graph(self) -> nx.Graph:
        """The one graph both protocols run on (a seeded kind gets `graph_seed`)."""
        takes = GENERATORS[self.graph].parameters
        return generate(self.graph, n=self.n if "n" in takes else None,
                        seed=self.graph_seed if "seed" in takes else None)

    def params(self, protocol: str, sigma: float, alpha: float, n: int) -> ProtocolParams:
        """The published parameters of `protocol` at noise σ per gradient step (α: the audit's order)."""
        common = dict(sigma=sigma, sensitivity=self.sensitivity, alpha=alpha, dimension=self.dimension,
                      task="logistic", clip=self.clip, batch=self.batch, adjacency="example")
        if protocol == GOSSIP:
            return MuffliatoGDParams(**common, steps=self.steps_per_node, gossip_rounds=self.gossip_rounds,
                                     accelerated=False, learning_rate=self.gossip_learning_rate)
        return RwSgdParams(**common, steps=n * self.steps_per_node, learning_rate=self.walk_rate(n))

    def walk_rate(self, n: int) -> float:
        """The walk's learning rate: as given, or gossip's divided by n."""
        return self.gossip_learning_rate / n if self.walk_learning_rate is None else self.walk_learning_rate


def comparison_topology(setup: CompareSetup, graph: nx.Graph, params: ProtocolParams, *, run_id: str,
                        addresses: Sequence[str] | None = None) -> Topology:
    """The published topology of one protocol on the shared graph (Metropolis weights for both)."""
    return build_topology(graph, graph_name=setup.graph, run_id=run_id, protocol=params,
                          graph_seed=setup.graph_seed if GENERATORS[setup.graph].seeded else None,
                          addresses=addresses,
                          network=NetworkParams(round_deadline_s=5.0, startup_deadline_s=60.0))
