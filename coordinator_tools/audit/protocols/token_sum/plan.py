"""Plan a token summation before it runs: the ring's one path, or the walk ex ante over simulated paths.

The ring's path is public and fixed, so its plan is the audit of that path. The walk's path is
drawn at run time, so its plan averages simulated walks of Alg. 3 as `plan.mixture_losses`
does for randomized gossip: (1/(α−1)) log E exp((α−1)·loss(path)) in RDP, and the exact (ε, δ)
of the path-averaged Gaussian profile, with each source's local-DP loss averaged over its
simulated visits; Thm 3 does not depend on the path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.plan import (
    Plan,
    PlanOptions,
    baseline_sigmas,
    calibrate_mixture_sigma,
    calibrate_sigma,
    mixture_losses,
)
from coordinator_tools.audit.protocols.base import OnTopology
from coordinator_tools.audit.protocols.token_sum.accountant import (
    DEFINITIONS,
    PLANNED_WALK_EXACT,
    account,
    bound_of,
    notes,
)
from coordinator_tools.audit.protocols.token_sum.histogram import account_histogram, not_computed
from coordinator_tools.audit.protocols.token_sum.model import linear_model
from coordinator_tools.audit.protocols.token_sum.run import (
    TokenRun,
    planned_ring,
    published_section,
    simulated_walk,
)
from node.errors import ConfigError
from node.topology import Topology

DEFAULT_WALKS = 20
DEFAULT_SEED = 0


@dataclass(frozen=True)
class PlannedWalks(OnTopology):
    """The simulated walks a plan averaged over (what its report's `run` describes)."""

    topology: Topology
    walks: tuple[TokenRun, ...]

    def run_section(self) -> dict[str, object]:
        return published_section(self.topology) | {"walks": len(self.walks),
                                                    "mean_visits": self._mean_visits().tolist()}

    def node_summary(self, node: int) -> dict[str, object]:
        return {"mean_visits": float(self._mean_visits()[node])}

    def _mean_visits(self) -> np.ndarray:
        return np.mean([walk.visits() for walk in self.walks], axis=0)


def plan_ring(topology: Topology, options: PlanOptions) -> Plan:
    """The audit of the ring's planned path, with σ calibrated for a target if asked."""
    if options.schedules is not None or options.seed is not None:
        raise ConfigError("--schedules and --seed simulate random paths; the ring's path is fixed")
    run = planned_ring(topology)
    accounting = accounting_of(topology, options)
    details: dict[str, object] = {"cycles": topology.protocol.cycles,
                                  "noise_placement": topology.protocol.noise_placement}
    if options.target is not None:
        upper = view_geometry(linear_model(run), options.threat_model).upper
        sigmas = {"exact": calibrate_sigma(upper, sensitivity=accounting["sensitivity"], delta=options.delta,
                                           target=options.target),
                  **baseline_sigmas(topology.n, sensitivity=accounting["sensitivity"], delta=options.delta,
                                    target=options.target, releases=topology.protocol.cycles)}
        accounting["sigma"] = sigmas["exact"]
        details["calibration"] = _calibration(options, sigmas)
    details["paper"] = bound_of(run, accounting).to_json()
    losses = account(run, **accounting)
    headline = (f"n = {topology.n}, ring of K = {topology.protocol.cycles} cycles, "
                f"{topology.protocol.noise_placement} noise placement, sigma = {accounting['sigma']:.6g}")
    return Plan(run=run, losses=losses, details=details, headline=headline)


def plan_histogram(topology: Topology, options: PlanOptions) -> Plan:
    """The audit of the ring histogram's planned path at its published γ (no calibration: Thm 2 gives γ)."""
    if options.schedules is not None or options.seed is not None:
        raise ConfigError("--schedules and --seed simulate random paths; the ring's path is fixed")
    if options.target is not None or options.sigma is not None or options.sensitivity is not None:
        raise ConfigError("ring-histogram plans at its published gamma; calibrate it with `netdp topology generate "
                          "--target-epsilon/--target-delta` (PAbD Thm 2)")
    params = topology.protocol
    accounting = accounting_of(topology, options)
    run = planned_ring(topology)
    losses = account_histogram(run, **accounting)
    details: dict[str, object] = {"cycles": params.cycles, "categories": params.categories, "gamma": params.gamma,
                                  "paper": bound_of(run, accounting).to_json(),
                                  "exact_not_computed": not_computed(losses).to_json()}
    headline = (f"n = {topology.n}, ring histogram of L = {params.categories} categories, K = {params.cycles} "
                f"cycles, gamma = {params.gamma:.6g}")
    return Plan(run=run, losses=losses, details=details, headline=headline)


def plan_walks(topology: Topology, options: PlanOptions) -> Plan:
    """The walk ex ante: the mixture over `options.schedules` simulated walks."""
    count = options.schedules or DEFAULT_WALKS
    seed = DEFAULT_SEED if options.seed is None else options.seed
    rng = np.random.default_rng(seed)
    walks = tuple(simulated_walk(topology, rng) for _ in range(count))
    geometries = [view_geometry(linear_model(walk), options.threat_model) for walk in walks]
    visits = np.stack([walk.visits() for walk in walks])
    accounting = accounting_of(topology, options)
    steps = topology.protocol.steps
    details: dict[str, object] = {
        "walks": count, "seed": seed, "steps": steps,
        "ex_ante": "mixture over the simulated walks, the path revealed to the observer: RDP (1/(alpha-1)) "
                   "log E exp((alpha-1) rdp), exact (eps, delta) from the averaged profile",
    }
    if options.target is not None:
        upper = np.stack([geometry.upper for geometry in geometries])
        sigmas = {"exact": calibrate_mixture_sigma(upper, sensitivity=accounting["sensitivity"],
                                                   delta=options.delta, target=options.target),
                  **baseline_sigmas(topology.n, sensitivity=accounting["sensitivity"], delta=options.delta,
                                    target=options.target, releases=steps / topology.n)}
        accounting["sigma"] = sigmas["exact"]
        details["calibration"] = _calibration(options, sigmas)
    bound = bound_of(walks[0], accounting, realized=False)
    details["paper"] = bound.to_json()
    column = bound.column(topology.n)
    losses = mixture_losses(geometries, (column.rdp, column.eps), sigma=accounting["sigma"],
                            sensitivity=accounting["sensitivity"], alpha=accounting["alpha"], delta=options.delta,
                            threat_model=options.threat_model, notes=notes(bound), releases=visits)
    losses.definitions.update({**DEFINITIONS, "exact": PLANNED_WALK_EXACT})
    losses.exact_given = "the path"
    headline = (f"n = {topology.n}, walk of T = {steps} contributions ex ante over {count} simulated walks "
                f"(seed {seed}), sigma = {accounting['sigma']:.6g}")
    return Plan(run=PlannedWalks(topology, walks), losses=losses, details=details, headline=headline)


def accounting_of(topology: Topology, options: PlanOptions) -> AccountingOptions:
    """The published parameters with the plan's overrides."""
    params = topology.protocol
    if options.rounds is not None or options.accelerated is not None:
        raise ConfigError(f"--rounds, --plain and --accelerated plan gossip; this topology runs {params.name}")
    return AccountingOptions(
        sigma=params.sigma if options.sigma is None else options.sigma,
        sensitivity=params.sensitivity if options.sensitivity is None else options.sensitivity,
        alpha=params.alpha if options.alpha is None else options.alpha,
        delta=options.delta, conversion=options.conversion, threat_model=options.threat_model)


def _calibration(options: PlanOptions, sigmas: dict[str, float]) -> dict[str, object]:
    return {"target_eps": options.target.epsilon, "rule": options.target.rule, "sigma": sigmas}
