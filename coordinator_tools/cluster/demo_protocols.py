"""What `netdp demo` does differently per protocol: its parameters, its data, and the result it prints.

The averaging protocols (synchronous and randomized Muffliato) average synthetic vectors and print
every node's estimate against the true mean. Muffliato-GD learns a logistic regression on
scikit-learn's bundled breast-cancer data, split as `netdp data split` splits it, at parameters
chosen for a privacy level a researcher would call meaningful (`LearningDemo`), and prints the final
test accuracy of the run, of a trusted aggregator and of local DP next to the pairwise ε; random-walk
DP-SGD does the same on Davis' Southern Women graph (`RandomWalkDemo`). Personalized CD runs the
AISTATS 2018 synthetic task on its agents' similarity graph (`PersonalizedDemo`) and prints the mean
test accuracy of purely local models, of the private run and of non-private CD.
Each protocol is one object in DEMO_PROTOCOLS; the pipeline (`demo`) is the same for all.
"""

from __future__ import annotations

import argparse
import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import networkx as nx
import numpy as np
from rich.table import Table

from coordinator_tools.audit.command import AuditOptions
from coordinator_tools.cluster.command import CONSOLE
from coordinator_tools.cluster.launch import ClusterResult
from coordinator_tools.datasets import (
    SEED_BITS,
    node_data_file,
    synthetic_values,
    write_node_files,
)
from coordinator_tools.learning_data import bundled, load_test_set, write_minibatch_split
from coordinator_tools.personalized_task import TRAIN_SIZES, PersonalizedTask, generate_task, task_topology, write_task
from coordinator_tools.theory import (
    muffliato_mse_bound,
    muffliato_t_stop,
    worst_case_spread,
)
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology, gossip_mixing, new_run_id
from coordinator_tools.topology.generators import generate
from node.data import load_vector
from node.errors import ConfigError
from node.learning import derived_sensitivity
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.personalized_cd import PersonalizedCDParams
from node.protocols.rw_sgd import RwSgdParams
from node.topology import MuffliatoParams, NetworkParams, ProtocolParams, Topology


class DemoProtocol(ABC):
    """One protocol as the demo runs it."""

    sigma: ClassVar[float]  # the noise when --sigma is not given
    graph: ClassVar[str | None] = "hypercube"  # the graph kind when --graph is not given (None: its own graph)
    nodes: ClassVar[int | None] = None  # n when --n is not given and the kind takes one (None: the demo's 16)

    @abstractmethod
    def params(self, args: argparse.Namespace, graph: nx.Graph) -> ProtocolParams:
        """The published parameters on `graph` (args.sigma is already resolved)."""

    def topology(self, args: argparse.Namespace, network: NetworkParams) -> Topology:
        """The published topology on free loopback ports: graph kind args.graph on args.n nodes, derived weights."""
        graph = generate(args.graph, n=args.n)
        return build_topology(graph, graph_name=args.graph, run_id=new_run_id(f"demo-{args.graph}"),
                              protocol=self.params(args, graph), addresses=loopback_addresses(graph.number_of_nodes()),
                              network=network)

    @abstractmethod
    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        """Every node's private data file, in data_dir."""

    def audit_options(self, data_dir: Path) -> AuditOptions:
        """How the demo audits the run."""
        return AuditOptions()

    @abstractmethod
    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """What the run computed, against what it should have (before the audit's privacy summary)."""


def loopback_addresses(n: int) -> list[str]:
    """One free 127.0.0.1 port per node."""
    return [f"127.0.0.1:{port}" for port in free_loopback_ports(n)]


class AveragingDemo(DemoProtocol):
    """Private averaging of synthetic vectors in the ball of radius Δ/2 (--dimension, --sensitivity)."""

    sigma = 0.5
    dimension: ClassVar[int] = 4
    sensitivity: ClassVar[float] = 1.0

    def dimension_of(self, args: argparse.Namespace) -> int:
        """--dimension, or the demo's own."""
        return self.dimension if args.dimension is None else args.dimension

    def sensitivity_of(self, args: argparse.Namespace) -> float:
        """--sensitivity, or the demo's own."""
        return self.sensitivity if args.sensitivity is None else args.sensitivity

    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        protocol = topology.protocol
        write_node_files(synthetic_values(topology.n, protocol.dimension, protocol.sensitivity, args.data_seed),
                         data_dir)

    def mse_bound(self, topology: Topology) -> float | None:
        """A theorem's bound on the mean squared error per coordinate, when the protocol has one."""
        return None

    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """True mean, every node's estimate, and the MSE (next to the protocol's bound, if any)."""
        topology = result.topology
        values = np.array([load_vector(node_data_file(data_dir, v), topology.protocol.dimension)
                           for v in range(topology.n)])
        true_mean = values.mean(axis=0)
        table = Table(title=f"{topology.n} nodes, {topology.graph}, {topology.protocol.name}, "
                            f"sigma = {topology.protocol.sigma:g}")
        table.add_column("node", justify="right")
        table.add_column("estimate (first coordinates)")
        table.add_column("squared error / D", justify="right")
        shown = min(3, topology.protocol.dimension)
        table.add_row("true mean", np.array2string(true_mean[:shown], precision=4), "")
        errors = []
        for node_id, estimate in sorted(result.estimates().items()):
            errors.append(float(np.mean((estimate - true_mean) ** 2)))
            table.add_row(str(node_id), np.array2string(estimate[:shown], precision=4), f"{errors[-1]:.3e}")
        CONSOLE.print(table)
        mse, bound = float(np.mean(errors)), self.mse_bound(topology)
        if bound is None:
            CONSOLE.print(f"mean squared error per coordinate {mse:.3e}")
            return
        verdict = "[green]within[/green]" if mse <= bound else "[red]above[/red]"
        CONSOLE.print(f"mean squared error per coordinate {mse:.3e}, {verdict} Muffliato Thm 2's bound "
                      f"3 sigma^2 / n = {bound:.3e}")


class MuffliatoDemo(AveragingDemo):
    """Synchronous Muffliato with T = T_stop for the worst-case data spread."""

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> MuffliatoParams:
        sensitivity = self.sensitivity_of(args)
        gap = gossip_mixing(graph, "metropolis").spectral_gap
        rounds = muffliato_t_stop(graph.number_of_nodes(), gap, args.sigma, worst_case_spread(sensitivity))
        return MuffliatoParams(sigma=args.sigma, sensitivity=sensitivity, alpha=args.alpha, rounds=rounds,
                               dimension=self.dimension_of(args))

    def mse_bound(self, topology: Topology) -> float | None:
        return muffliato_mse_bound(topology.n, topology.protocol.sigma)


class AsyncDemo(AveragingDemo):
    """Randomized Muffliato: a fixed number of ticks per node at a brisk clock rate."""

    exchanges: ClassVar[int] = 40
    tick_rate: ClassVar[float] = 20.0

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> MuffliatoAsyncParams:
        return MuffliatoAsyncParams(sigma=args.sigma, sensitivity=self.sensitivity_of(args), alpha=args.alpha,
                                    dimension=self.dimension_of(args), exchanges=self.exchanges,
                                    tick_rate=self.tick_rate)


class LearningDemo(DemoProtocol):
    """Muffliato-GD: logistic regression on breast_cancer by private SGD, with example-level privacy.

    Minibatches of b = 16 examples taken cyclically from each node's share (28 or 29 on 16 nodes),
    every example's gradient clipped to C = 1, so replacing one example moves a step's gradient by
    at most Δ = 2C/b = 0.125; T = 50 steps of η = 0.5, each followed by one plain gossip round on
    the demo's graph (a 16-node hypercube by default: the papers' exponential graph, degree 4).
    σ = 0.75 per step was measured on that graph (the planned run, and ten seeded simulations of
    the learning): mean pairwise ε ≈ 2.5 and worst pair ≈ 5.3 (local DP's) at δ = 1e-5, central
    DP ≈ 1.1, with test accuracy ≈ 0.91 for the run and a trusted aggregator against ≈ 0.79 for
    local DP and 0.66 for the majority class. σ = 0.5 gives ≈ 0.93 at mean ε ≈ 4 (worst ≈ 8.6).
    """

    name: ClassVar[str] = "muffliato-gd"
    dataset: ClassVar[str] = "breast_cancer"
    sigma = 0.75
    steps: ClassVar[int] = 50
    learning_rate: ClassVar[float] = 0.5
    batch: ClassVar[int] = 16
    clip: ClassVar[float] = 1.0

    def refuse_vector_flags(self, args: argparse.Namespace) -> None:
        """--dimension and --sensitivity are the data's and the clip's to set in a learning demo."""
        given = [flag for flag, value in (("--dimension", args.dimension), ("--sensitivity", args.sensitivity))
                 if value is not None]
        if given:
            raise ConfigError(f"{given[0]} does not apply to the {self.name} demo: the data set the model's "
                              "dimension, and the clip and minibatch its sensitivity")

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> MuffliatoGDParams:
        self.refuse_vector_flags(args)
        return MuffliatoGDParams(
            sigma=args.sigma, sensitivity=derived_sensitivity(self.clip, "example", self.batch), alpha=args.alpha,
            dimension=bundled(self.dataset).x.shape[1], task="logistic", steps=self.steps, gossip_rounds=1,
            accelerated=False, learning_rate=self.learning_rate, clip=self.clip, batch=self.batch,
            adjacency="example")  # fmt: skip

    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        """The split `netdp data split breast_cancer` makes; every node needs a whole minibatch."""
        seed = secrets.randbits(SEED_BITS) if args.data_seed is None else args.data_seed
        write_minibatch_split(self.dataset, self.batch, topology, data_dir, seed)

    def audit_options(self, data_dir: Path) -> AuditOptions:
        return AuditOptions(data=data_dir)

    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """Final test accuracy of the run and its baselines, and what it cost in pairwise ε."""
        utility = report["utility"]
        _, _, test_y = load_test_set(data_dir)
        table = Table(title=f"{self.dataset}: test accuracy after {utility['steps'][-1]} steps, "
                            f"sigma = {report['sigma']:g} per step")
        table.add_column("model")
        table.add_column("accuracy", justify="right")
        for name, label in ((("netdp", self.run_label), ("central", "central: trusted aggregator"),
                             ("local", "local DP: every node alone"))):
            table.add_row(label, f"{utility[name][-1]:.3f}")
        table.add_row("majority class", f"{max(np.mean(test_y > 0), np.mean(test_y < 0)):.3f}")
        CONSOLE.print(table)
        eps = report["summary"]["pair_columns"]["exact_eps_upper"]
        baselines = report["baselines"]
        CONSOLE.print(f"pairwise epsilon at delta = {report['delta']:g} (exact): mean {float(eps['mean']):.3g}, "
                      f"worst pair {float(eps['max']):.3g}; local DP {float(baselines['ldp']['eps']):.3g}, "
                      f"central DP {float(baselines['central']['eps']):.3g}")

    run_label: ClassVar[str] = "netdp (mean over nodes)"


class RandomWalkDemo(LearningDemo):
    """Random-walk DP-SGD on Davis' Southern Women graph (32 nodes, ICML 2024 Fig. 3) on breast_cancer.

    The model walks T = 320 steps (10 visits per node on average) along Metropolis transitions,
    each a minibatch of b = 8 examples clipped to C = 1 (Δ = 2C/b = 0.25) plus noise σ = 0.5 = 2Δ:
    noise multiplier 2, the smallest at which Thm 3 holds at order α = 2 (σ_m² ≥ 2α(α − 1)).
    Each node takes at most N_max = 20 gradient steps (Remark 5). The page shows Thm 3's pairwise
    loss beside the graph's communicability, and the run's model against a trusted curator.
    """

    name = "rw-sgd"
    graph = "davis_southern_women"
    sigma = 0.5
    steps = 320
    batch = 8
    contribution_cap: ClassVar[int] = 20
    run_label = "netdp: the walk's model (its last holder's)"

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> RwSgdParams:
        self.refuse_vector_flags(args)
        return RwSgdParams(
            sigma=args.sigma, sensitivity=derived_sensitivity(self.clip, "example", self.batch), alpha=args.alpha,
            dimension=bundled(self.dataset).x.shape[1], task="logistic", steps=self.steps,
            learning_rate=self.learning_rate, clip=self.clip, batch=self.batch, adjacency="example",
            contribution_cap=self.contribution_cap)  # fmt: skip


class PersonalizedDemo(DemoProtocol):
    """Personalized private CD on the AISTATS 2018 synthetic task (`coordinator_tools.personalized_task`).

    n = 40 agents, one process each, p = 5 features (--dimension), on their similarity graph at
    γ = 0.1 (about 16 neighbours each); every agent makes T_i = 5 updates on a Poisson clock of rate
    2/s with μ = 1 and every example's gradient clipped to l1 norm L₀ = 0.3, under a budget
    ε̄ = 5 (--epsilon), δ̄ = e^-5, which Thm 1 splits into ε = 1 per update. The task comes from
    --data-seed (default 0). Measured on the default task over 60 seeded simulations of the run:
    mean test accuracy 0.907 for purely local models, 0.940 ± 0.005 for private CD and 0.956 for
    non-private CD (the same updates without noise); ε̄ = 4 gives 0.934, ε̄ = 3 0.921 ± 0.008.
    """

    name: ClassVar[str] = "personalized-cd"
    sigma = 1.0  # the noise as the nodes draw it: the logged Laplace scales
    graph = None  # the agents' similarities make the graph
    nodes = 40
    dimension: ClassVar[int] = 5
    mu: ClassVar[float] = 1.0
    lipschitz: ClassVar[float] = 0.3
    updates: ClassVar[int] = 5
    epsilon: ClassVar[float] = 5.0
    delta: ClassVar[float] = math.exp(-5)
    tick_rate: ClassVar[float] = 2.0
    data_seed: ClassVar[int] = 0

    def params(self, args: argparse.Namespace, graph: nx.Graph | None = None) -> PersonalizedCDParams:
        """The published parameters (the graph does not change them)."""
        if args.sensitivity is not None:
            raise ConfigError(f"--sensitivity does not apply to the {self.name} demo: the l1 clip L0 = "
                              f"{self.lipschitz:g} and each agent's size set it")
        return PersonalizedCDParams(
            dimension=self.dimension if args.dimension is None else args.dimension, mu=self.mu,
            lipschitz=self.lipschitz, max_examples=TRAIN_SIZES[1], updates=self.updates,
            epsilon=self.epsilon if args.epsilon is None else args.epsilon, delta=self.delta,
            tick_rate=self.tick_rate, alpha=args.alpha)  # fmt: skip

    def task(self, args: argparse.Namespace) -> PersonalizedTask:
        """The synthetic task of --n agents and --dimension features, from --data-seed."""
        dimension = self.dimension if args.dimension is None else args.dimension
        return generate_task(args.n, dimension, self.data_seed if args.data_seed is None else args.data_seed)

    def topology(self, args: argparse.Namespace, network: NetworkParams) -> Topology:
        if args.graph is not None:
            raise ConfigError(f"--graph does not apply to the {self.name} demo: the agents' similarities make its "
                              "graph")
        return task_topology(self.task(args), self.params(args), run_id=new_run_id("demo-personalized"),
                             addresses=loopback_addresses(args.n), network=network)

    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        write_task(self.task(args), data_dir)

    def audit_options(self, data_dir: Path) -> AuditOptions:
        return AuditOptions(data=data_dir)

    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """Mean test accuracy of the three kinds of model, and what the agents spent of their budgets."""
        utility = report["utility"]
        table = Table(title=f"{result.topology.n} agents, mean test accuracy on their own test sets "
                            f"({utility['test_examples']} examples)")
        table.add_column("models")
        table.add_column("accuracy", justify="right")
        for key, label in (("local", "purely local (no communication)"), ("private", "private CD (this run)"),
                           ("non_private", "non-private CD (simulated, same updates)")):
            table.add_row(label, "-" if utility[key] is None else f"{utility[key]:.3f}")
        CONSOLE.print(table)
        agents = [agent for agent in report["personalized"]["agents"] if "budget" in agent]
        if agents:
            fullest = max(agents, key=lambda agent: agent["theorem1"] / agent["budget"]["epsilon"])
            CONSOLE.print(f"budgets: the fullest agent (node {fullest['node']}) spent epsilon {fullest['theorem1']:.4g} "
                          f"of {fullest['budget']['epsilon']:g} by Thm 1 at delta {fullest['budget']['delta']:.3g} "
                          f"({fullest['pld']:.4g} by the PLD accountant) in {fullest['updates']} updates")


DEMO_PROTOCOLS: dict[str, DemoProtocol] = {
    "muffliato": MuffliatoDemo(),
    "muffliato-async": AsyncDemo(),
    "muffliato-gd": LearningDemo(),
    "rw-sgd": RandomWalkDemo(),
    "personalized-cd": PersonalizedDemo(),
}
