"""What `netdp demo` does differently per protocol: its parameters, its data, and the result it prints.

The averaging protocols (synchronous and randomized Muffliato) average synthetic vectors, with σ
calibrated by the planner for a target mean exact ε (`AveragingDemo`) unless --sigma is given, print
the nodes' estimates against the true mean, and after the audit where the network amplified privacy:
the exact ε per hop distance against local DP's. The synchronous demo runs in the regime where it
does: 128 nodes, T·deg = 28 received values per observer, well below the n − 1 = 127 unknown inputs
(`MuffliatoDemo`). Muffliato-GD learns a logistic regression on
scikit-learn's bundled breast-cancer data, split as `netdp data split` splits it, at parameters
chosen for a privacy level a researcher would call meaningful (`LearningDemo`), and prints the final
test accuracy of the run, of a trusted aggregator and of local DP next to the pairwise ε; random-walk
DP-SGD does the same on Davis' Southern Women graph (`RandomWalkDemo`). Personalized CD runs the
AISTATS 2018 synthetic task on its agents' similarity graph (`PersonalizedDemo`) and prints the mean
test accuracy of purely local models, of the private run and of non-private CD.
Each protocol's plug-in names its demo object (`demo_protocols`); the pipeline (`demo`) is the same for all.
"""

from __future__ import annotations

import argparse
import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import ClassVar

import networkx as nx
import numpy as np
from rich.table import Table

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import Target, summarize
from coordinator_tools.audit.plan_command import calibrated_sigma
from coordinator_tools.audit.run_audit import DEFAULT_DELTA, AuditOptions, audit_run
from coordinator_tools.cluster.command import CONSOLE
from coordinator_tools.cluster.launch import ClusterResult
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.compare.designs import DesignSetup, averaging_decor, baseline_rows
from coordinator_tools.dataprep.datasets import (
    SEED_BITS,
    synthetic_values,
    write_node_files,
)
from coordinator_tools.dataprep.learning_data import (
    bundled,
    load_test_set,
    write_minibatch_split,
)
from coordinator_tools.dataprep.personalized_task import (
    TRAIN_SIZES,
    PersonalizedTask,
    generate_task,
    task_topology,
    write_task,
)
from coordinator_tools.topology.build import build_topology, new_run_id
from coordinator_tools.topology.generators import generate
from node.data import load_vector, node_data_file
from node.errors import ConfigError
from node.learning import derived_sensitivity
from node.protocols.decor import DecorParams
from node.protocols.muffliato import MuffliatoParams
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.personalized_cd import PersonalizedCDParams
from node.protocols.registry import load_attribute, plugins
from node.protocols.rw_sgd import RwSgdParams
from node.topology import NetworkParams, ProtocolParams, Topology, replace_fields


class DemoProtocol(ABC):
    """One protocol as the demo runs it."""

    sigma: ClassVar[float | None]  # the noise when --sigma is not given (None: calibrated for a target ε)
    graph: ClassVar[str | None] = "hypercube"  # the graph kind when --graph is not given (None: its own graph)
    nodes: ClassVar[int | None] = None  # n when --n is not given and the kind takes one (None: the demo's 16)
    processes: ClassVar[int | None] = None  # node processes when --ids-per-process is not given (None: one per node)
    takes_rounds: ClassVar[bool] = False  # whether --rounds sets its gossip rounds T

    @abstractmethod
    def params(self, args: argparse.Namespace, graph: nx.Graph) -> ProtocolParams:
        """The published parameters on `graph` (args.sigma is already resolved)."""

    def topology(self, args: argparse.Namespace, network: NetworkParams) -> Topology:
        """The published topology on free loopback ports: graph kind args.graph on args.n nodes, derived weights."""
        graph = generate(args.graph, n=args.n)
        return build_topology(graph, graph_name=args.graph, run_id=new_run_id(f"demo-{args.graph}"),
                              protocol=self.params(args, graph),
                              addresses=loopback_addresses(graph.number_of_nodes(),
                                                           self.ids_per_process(args, graph.number_of_nodes())),
                              network=network)

    def ids_per_process(self, args: argparse.Namespace, n: int) -> int:
        """--ids-per-process, or as many as spread the n ids over the demo's processes."""
        if args.ids_per_process is not None:
            return args.ids_per_process
        return 1 if self.processes is None else -(-n // self.processes)

    @abstractmethod
    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        """Every node's private data file, in data_dir."""

    def audit_options(self, data_dir: Path) -> AuditOptions:
        """How the demo audits the run."""
        return AuditOptions()

    @abstractmethod
    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """What the run computed, against what it should have (before the audit's privacy summary)."""

    def print_privacy(self, topology: Topology, audit_dir: Path, report: Mapping[str, object]) -> None:
        """What the audit found that the protocol's demo is about (after the audit's summary); nothing by default."""
        return None


def loopback_addresses(n: int, ids_per_process: int = 1) -> list[str]:
    """One free 127.0.0.1 port per process, shared by each `ids_per_process` consecutive node ids."""
    if ids_per_process < 1:
        raise ConfigError(f"--ids-per-process must be at least 1, got {ids_per_process}")
    ports = free_loopback_ports(-(-n // ids_per_process))
    return [f"127.0.0.1:{ports[v // ids_per_process]}" for v in range(n)]


class AveragingDemo(DemoProtocol):
    """Private averaging of synthetic vectors in the ball of radius Δ/2 (--dimension, --sensitivity).

    Without --sigma, σ is the planner's smallest for the target mean exact ε at δ = 1e-5
    (--target-eps): max over observers v of (1/n) Σ_u ε_{u→v}, Muffliato's rule.
    """

    sigma = None
    dimension: ClassVar[int] = 4
    sensitivity: ClassVar[float] = 1.0
    target_eps: ClassVar[float] = 2.0
    delta: ClassVar[float] = DEFAULT_DELTA  # the audit's δ, at which the target is met
    shown_nodes: ClassVar[int] = 4  # estimates printed, beside the worst node's

    def dimension_of(self, args: argparse.Namespace) -> int:
        """--dimension, or the demo's own."""
        return self.dimension if args.dimension is None else args.dimension

    def sensitivity_of(self, args: argparse.Namespace) -> float:
        """--sensitivity, or the demo's own."""
        return self.sensitivity if args.sensitivity is None else args.sensitivity

    def target_of(self, args: argparse.Namespace) -> float:
        """--target-eps, or the demo's own."""
        return self.target_eps if args.target_eps is None else args.target_eps

    def topology(self, args: argparse.Namespace, network: NetworkParams) -> Topology:
        """The published topology; without --sigma, planned at σ = Δ and then published at the calibrated σ."""
        if args.sigma is not None:
            if args.target_eps is not None:
                CONSOLE.print(f"sigma = {args.sigma:g} as given: --sigma wins over --target-eps", highlight=False)
            return super().topology(args, network)
        draft = super().topology(argparse.Namespace(**{**vars(args), "sigma": self.sensitivity_of(args)}), network)
        args.sigma = calibrated_sigma(draft, self.target_of(args), self.delta)
        CONSOLE.print(f"sigma = {args.sigma:.4g} calibrated by the planner for mean exact eps {self.target_of(args):g} "
                      f"at delta {self.delta:g}", highlight=False)
        return replace_fields(draft, protocol={**draft.protocol.model_dump(), "sigma": args.sigma})

    def audit_options(self, data_dir: Path) -> AuditOptions:
        """The data folder too, for the report's MSE against the true mean."""
        return AuditOptions(data=data_dir)

    def write_data(self, topology: Topology, data_dir: Path, args: argparse.Namespace) -> None:
        protocol = topology.protocol
        write_node_files(synthetic_values(topology.n, protocol.dimension, protocol.sensitivity, args.data_seed),
                         data_dir)

    def print_utility(self, result: ClusterResult, data_dir: Path, report: Mapping[str, object]) -> None:
        """True mean, a few nodes' estimates and the worst one's (the audit's summary gives the MSE and its bound)."""
        topology = result.topology
        values = np.array([load_vector(node_data_file(data_dir, v), topology.protocol.dimension)
                           for v in range(topology.n)])
        true_mean = values.mean(axis=0)
        estimates = result.estimates()
        errors = {v: float(np.mean((estimate - true_mean) ** 2)) for v, estimate in estimates.items()}
        table = Table(title=f"{topology.n} nodes, {topology.graph}, {topology.protocol.name}, "
                            f"sigma = {topology.protocol.sigma:.4g}")
        table.add_column("node", justify="right")
        table.add_column("estimate (first coordinates)")
        table.add_column("squared error / D", justify="right")
        shown = min(3, topology.protocol.dimension)
        table.add_row("true mean", np.array2string(true_mean[:shown], precision=4), "")
        worst = max(errors, key=errors.__getitem__)
        rows = sorted(errors)[:self.shown_nodes]
        for node_id in rows + ([worst] if worst not in rows else []):
            label = f"{node_id} (worst)" if node_id == worst else str(node_id)
            table.add_row(label, np.array2string(estimates[node_id][:shown], precision=4), f"{errors[node_id]:.3e}")
        CONSOLE.print(table)

    def print_privacy(self, topology: Topology, audit_dir: Path, report: Mapping[str, object]) -> None:
        """Exact ε per hop distance against local DP's, from the pairs file, and where amplification lives."""
        if report["sigma"] == 0:
            return
        pairs = read_pairs(audit_dir, ["source", "observer", "hop_distance", "exact_eps_upper", "paper_eps",
                                       "ldp_eps", "exact_reconstructable"])
        ldp = float(report["baselines"]["ldp"]["eps"])
        hops, eps, rebuilt = pairs["hop_distance"], pairs["exact_eps_upper"], pairs["exact_reconstructable"]
        table = Table(title=f"Where the network amplifies privacy: exact eps at delta = {report['delta']:g} by hop "
                            f"distance, against local DP's {ldp:.3g} (sigma = {report['sigma']:.4g})")
        for column in ("hops", "pairs", "reconstructed (at LDP)", "exact eps: mean", "max", "paper eps: mean",
                       "exact / LDP"):
            table.add_column(column, justify="right")
        groups = [(f"{hop:g}", hops == hop) for hop in np.unique(hops[np.isfinite(hops)])]
        for label, rows in [*groups, ("all", np.ones_like(rebuilt))]:
            table.add_row(label, str(int(rows.sum())), str(int(rebuilt[rows].sum())), f"{eps[rows].mean():.3g}",
                          f"{eps[rows].max():.3g}", f"{np.nanmean(pairs['paper_eps'][rows]):.3g}",
                          f"{eps[rows].mean() / np.mean(pairs['ldp_eps'][rows]):.2f}")
        CONSOLE.print(table)
        rule = summarize(pair_matrix(pairs, "exact_eps_upper", topology.n), "mean")
        at_ldp = [label for label, rows in groups if rebuilt[rows].all()]
        where = f" (hop {', '.join(at_ldp)})" if at_ldp else ""
        kept = ~rebuilt
        helps = (f"where it helps: the other pairs are at {eps[kept].mean() / np.mean(pairs['ldp_eps'][kept]):.2f} "
                 "of it on average" if kept.any() else "it helps no pair")
        CONSOLE.print(f"Mean exact eps {rule:.3g} by Muffliato's rule (the worst observer's mean over the n nodes). "
                      f"Where it does not help: {int(rebuilt.sum())} of {rebuilt.size} pairs are reconstructed"
                      f"{where} and sit at local DP; {helps}.", highlight=False)


class MuffliatoDemo(AveragingDemo):
    """Synchronous Muffliato, accelerated, T = 4 rounds on a 128-node hypercube as 8 processes of 16 ids.

    Chosen with the planner (target mean exact ε = 2 at δ = 1e-5, Δ = 1) so that the network
    amplifies privacy: each observer receives T·deg = 4 × 7 = 28 values of the n − 1 = 127 other
    noisy inputs, so only its 7 neighbours' (their round-0 messages) are reconstructed: 896 of
    16256 pairs at local DP (ε 5.56 at σ = 0.814), hop 2 at 2.95, hops 3-4 at 2.21, and hops 5-7,
    which 4 rounds do not reach, at 0; the paper's bound gives 8.33 at hop 1 and 0.76 at hop 4.
    Local DP needs σ = 1.98 for ε = 2. The expected MSE (noise 0.0153 σ², data at most 0.0037 for
    any inputs in the ball) stays within Thm 2's 3σ²/n although T < T_stop = 10. On the 16-node
    hypercube at T = T_stop = 5 instead, 144 of 240 pairs are reconstructed; at T = 7 on these 128
    nodes the antipodal hops 6-7 are too; a 64-node hypercube at T = 4 reaches mean 2 with local
    DP at only 3.77.
    """

    nodes = 128
    processes = 8
    takes_rounds = True
    rounds: ClassVar[int] = 4
    dimension = 32  # the MSE over 128 × 32 coordinates exceeds Thm 2's bound in ~0.1% of runs (10% at D = 4)

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> MuffliatoParams:
        return MuffliatoParams(sigma=args.sigma, sensitivity=self.sensitivity_of(args), alpha=args.alpha,
                               rounds=self.rounds if args.rounds is None else args.rounds,
                               dimension=self.dimension_of(args))


class DecorDemo(AveragingDemo):
    """DECOR averaging on the 16-node hypercube as `netdp compare --designs` runs it, σ calibrated for a curious node.

    Noise in round 0 only (independent σ, pairwise σ_cor = 30 σ), then noise-free gossip until the
    pairwise terms are mixed out (`compare.designs.averaging_decor`; --rounds overrides the total).
    The planner calibrates σ for mean exact ε 2 against each curious node (which knows the pairwise
    secrets on its own edges). The same run is then audited against an external eavesdropper (every
    message, no secret) and against the coalition of node 0's neighbours, which together hold every
    secret on node 0's edges: the demo prints the MSE against central and local DP's at the same
    mean ε, and the threat model under which the correlated noise stops protecting.
    """

    dimension = 64  # the MSE is one draw of the mean's noise per coordinate: ±18% over 64 of them
    takes_rounds = True

    def params(self, args: argparse.Namespace, graph: nx.Graph) -> DecorParams:
        params = averaging_decor(graph, sigma=args.sigma, sensitivity=self.sensitivity_of(args), alpha=args.alpha,
                                 dimension=self.dimension_of(args))
        return params if args.rounds is None else params.model_copy(update={"rounds": args.rounds})

    def print_privacy(self, topology: Topology, audit_dir: Path, report: Mapping[str, object]) -> None:
        """The hop table, then ε under each threat model and MSE against the baselines at the same mean ε."""
        super().print_privacy(topology, audit_dir, report)
        folder = audit_dir.parent
        coalition = tuple(sorted(topology.neighbours[0]))
        audit_run(folder / "run", folder / "audit-eavesdropper", AuditOptions(eavesdropper=True, attack_pairs="none"))
        colluded = audit_run(folder / "run", folder / "audit-coalition",
                             AuditOptions(colluders=coalition, attack_pairs="none"))
        table = Table(title=f"Who learns what: exact eps at delta = {report['delta']:g}")
        for column in ("threat model", "mean eps", "worst pair eps", "local DP eps"):
            table.add_column(column, justify="right")
        ldp = float(report["baselines"]["ldp"]["eps"])  # type: ignore[index]
        means = {}
        for name, audited in (("curious-observer", audit_dir), ("eavesdropper", folder / "audit-eavesdropper")):
            pairs = read_pairs(audited, ["source", "observer", "exact_eps_upper"])
            eps = pair_matrix(pairs, "exact_eps_upper", topology.n)
            means[name] = summarize(eps, "mean")
            table.add_row(name, f"{means[name]:.3g}", f"{summarize(eps, 'worst'):.3g}", f"{ldp:.3g}")
        node0 = next(loss for loss in colluded["collusion"]["losses"] if loss["source"] == 0)  # type: ignore[index]
        table.add_row(f"node 0's {len(coalition)} neighbours together", "", f"{node0['exact_eps_upper']:.3g} "
                      "(node 0)", f"{ldp:.3g}")
        CONSOLE.print(table)
        mse = float(report["utility"]["mse"])  # type: ignore[index]
        shared = DesignSetup(graph=nx.Graph(dict(enumerate(topology.neighbours))), graph_name=topology.graph,
                             target=Target(means["curious-observer"], "mean"), dimension=topology.protocol.dimension,
                             sensitivity=topology.protocol.sensitivity, delta=float(report["delta"]))  # type: ignore[arg-type]
        central, local = (float(baseline_rows(shared, name, ["any"])[0]["utility"])  # type: ignore[arg-type]
                          for name in ("central", "ldp"))
        CONSOLE.print(closing_lines(mse, central=central, local=local, means=means, coalition=float(
            node0["exact_eps_upper"]), ldp=ldp, rounds=topology.protocol.rounds), highlight=False)


def closing_lines(mse: float, *, central: float, local: float, means: Mapping[str, float], coalition: float,
                  ldp: float, rounds: int) -> str:
    """Where correlated noise wins (its MSE below local DP's at the same mean ε; with too few --rounds the pairwise
    terms have not mixed out and it does not), and the threat model under which it stops."""
    against = (f"at the same mean eps {means['curious-observer']:.3g} against a curious node, which cannot remove the "
               f"pairwise terms on edges it does not hold; an eavesdropper, holding none, is at mean eps "
               f"{means['eavesdropper']:.3g}")
    coalition_line = (f"node 0's neighbours together hold every secret on its edges and see its value under its "
                      f"independent noise alone, eps {coalition:.3g} against local DP's {ldp:.3g} (audit-coalition/).")
    if mse < local:
        return (f"Where correlated noise wins: MSE {mse:.3g} per coordinate, {mse / central:.2f}x central DP's "
                f"{central:.3g} and {mse / local:.2g}x local DP's {local:.3g} {against}. Where it stops winning: "
                f"{coalition_line}")
    return (f"Correlated noise does not win in this run: after T = {rounds} rounds the pairwise terms have not mixed "
            f"out, MSE {mse:.3g} per coordinate is {mse / local:.2g}x local DP's {local:.3g} and {mse / central:.2f}x "
            f"central DP's {central:.3g} {against} (leave --rounds out for enough rounds). Under collusion: "
            f"{coalition_line}")


class AsyncDemo(AveragingDemo):
    """Randomized Muffliato: a fixed number of ticks per node at a brisk clock rate, on the 16-node hypercube.

    It keeps its own 16 nodes, one process each: its planner simulates schedules (about a minute
    for 64 nodes at 10 ticks each), and each observer's 50-70 exchanges on 16 nodes reach every
    input, so its calibrated σ (1.76 for mean ε 2) buys little amplification (mean exact ε about
    1.8 in a run, local DP 2.3): the demo shows where randomized gossip does not help.
    """

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
    the learning): the exact column, the proven bound, gives every pair ε ≈ 5.2–5.3 at δ = 1e-5,
    about local DP's 5.3 (all but the last few of u's 50 steps reach every node of the hypercube);
    the linearized value, which is no bound, gives mean ≈ 2.5; central DP ≈ 1.1; test accuracy
    ≈ 0.91 for the run and a trusted aggregator against ≈ 0.79 for local DP and 0.66 for the
    majority class. σ = 0.5 gives ≈ 0.93 (local DP ε ≈ 8.6).
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
    """Personalized private CD on the AISTATS 2018 synthetic task (`coordinator_tools.dataprep.personalized_task`).

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
                             addresses=loopback_addresses(args.n, self.ids_per_process(args, args.n)),
                             network=network)

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
            CONSOLE.print(f"budgets: the fullest agent (node {fullest['node']}) spent epsilon "
                          f"{fullest['theorem1']:.4g} of {fullest['budget']['epsilon']:g} by Thm 1 "
                          f"at delta {fullest['budget']['delta']:.3g} "
                          f"({fullest['pld']:.4g} by the PLD accountant) in {fullest['updates']} updates")


# netdp's own demos, each named by its protocol's plug-in (node.protocols.*).
MUFFLIATO = MuffliatoDemo()
MUFFLIATO_ASYNC = AsyncDemo()
DECOR = DecorDemo()
MUFFLIATO_GD = LearningDemo()
RW_SGD = RandomWalkDemo()
PERSONALIZED_CD = PersonalizedDemo()


@cache
def demo_protocols() -> Mapping[str, DemoProtocol]:
    """The demo of every registered protocol that has one, by protocol name."""
    demos = {name: load_attribute(plugin.demo) for name, plugin in plugins().items() if plugin.demo is not None}
    wrong = [name for name, demo in demos.items() if not isinstance(demo, DemoProtocol)]
    if wrong:
        raise ConfigError(f"protocol {wrong[0]!r} registers {plugins()[wrong[0]].demo}, which is not a DemoProtocol")
    return demos
