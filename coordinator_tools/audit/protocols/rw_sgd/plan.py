"""Plan a random-walk DP-SGD run before it happens: ex ante over simulated walks of the published W.

Each simulated walk is accounted as a realized one (the linear-Gaussian view, and amplification
by iteration) and the plan reports their mixture, (1/(α−1)) log E exp((α−1)·loss); Thm 3 takes
each source's expected contributions, T/n (the walk's stationary distribution is uniform), capped.
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.plan import Plan, PlanOptions, mixture_losses
from coordinator_tools.audit.protocols.rw_sgd.accountant import (
    DEFAULT_SEED,
    DEFAULT_WALKS,
    NOTES,
    communicability,
    ex_ante_column,
    order_notes,
    paper_column,
)
from coordinator_tools.audit.protocols.token_sum.model import linear_model
from coordinator_tools.audit.protocols.token_sum.plan import PlannedWalks, accounting_of
from coordinator_tools.audit.protocols.token_sum.run import simulated_walk
from node.errors import ConfigError
from node.topology import Topology


def plan_walk(topology: Topology, options: PlanOptions) -> Plan:
    """The run ex ante: the mixture over `options.schedules` simulated walks (by default the audit's own 200, so
    that the ex-ante column of a plan and of the run's audit agree; no calibration to a target yet)."""
    if options.target is not None:
        raise ConfigError("--target calibrates sigma for the averaging and summation protocols; for rw-sgd, plan "
                          "with --sigma and read the columns")
    count = options.schedules or DEFAULT_WALKS
    seed = DEFAULT_SEED if options.seed is None else options.seed
    rng = np.random.default_rng(seed)
    walks = tuple(simulated_walk(topology, rng) for _ in range(count))
    accounting = accounting_of(topology, options)
    params = topology.protocol
    expected = params.steps / topology.n
    if params.contribution_cap is not None:
        expected = min(expected, params.contribution_cap)
    losses = mixture_losses([view_geometry(linear_model(walk), options.threat_model) for walk in walks],
                            paper_column(topology, np.full(topology.n, expected), accounting),
                            sigma=accounting["sigma"], sensitivity=accounting["sensitivity"],
                            alpha=accounting["alpha"], delta=options.delta, threat_model=options.threat_model,
                            notes=NOTES, releases=np.stack([walk.visits() for walk in walks]))
    losses.columns["ex_ante"] = ex_ante_column(walks, accounting)
    losses.facts["communicability"] = communicability(topology)
    losses.notes.extend(order_notes(accounting))
    details: dict[str, object] = {"walks": count, "seed": seed, "steps": params.steps,
                                  "expected_contributions": expected}
    headline = (f"n = {topology.n}, random-walk DP-SGD of T = {params.steps} steps ex ante over {count} simulated "
                f"walks (seed {seed}), sigma = {accounting['sigma']:.6g}, sender {params.sender}")
    return Plan(run=PlannedWalks(topology, walks), losses=losses, details=details, headline=headline)
