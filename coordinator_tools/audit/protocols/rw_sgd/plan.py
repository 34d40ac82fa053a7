"""Plan a random-walk DP-SGD run before it happens: ex ante over simulated walks of the published W.

Each simulated walk is accounted as a realized one (its exact bound and its linearized value) and
the plan reports their mixture, (1/(α−1)) log E exp((α−1)·loss), the path told to the observer; Thm 3 takes
each source's expected contributions, T/n (the walk's stationary distribution is uniform), capped.
The `ex_ante` column is drawn as the audit draws it (the same walks from the same seed), unless
`--schedules` fixes how many walks it takes.
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.plan import Plan, PlanOptions, mixture_losses
from coordinator_tools.audit.protocols.rw_sgd.accountant import (
    DEFAULT_SEED,
    DEFAULT_WALKS,
    NOTES,
    communicability,
    definitions,
    ex_ante_column,
    order_notes,
    paper_column,
)
from coordinator_tools.audit.protocols.rw_sgd.sensitivity import reachable_counts, step_geometry
from coordinator_tools.audit.protocols.token_sum.plan import PlannedWalks, accounting_of
from coordinator_tools.audit.protocols.token_sum.run import simulated_walk
from coordinator_tools.audit.reachable import linearized_column, reachable_geometry, state_assumptions
from node.errors import ConfigError
from node.topology import Topology

PLANNED = {
    "paper": "ICML 2024 Thm 3 as in an audit, with each source's expected gradient steps, min(T/n, cap)",
    "exact": "the path told to the observer: the mixture over the simulated walks of each walk's proven bound "
             "(reachable-step composition given that walk, under the report's assumptions), an upper bound for an "
             "observer who is not told it",
}
PLANNED_LINEARIZED = ("the path told to the observer: the mixture over the simulated walks of each walk's linearized "
                      "value (every gradient a fixed input, as in an audit)")


def plan_walk(topology: Topology, options: PlanOptions) -> Plan:
    """The run ex ante: the mixture over `options.schedules` simulated walks (200 by default), and the ex-ante
    column as the run's audit draws it (no calibration to a target yet)."""
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
    losses = mixture_losses([reachable_geometry(reachable_counts(walk, options.threat_model)) for walk in walks],
                            paper_column(topology, np.full(topology.n, expected), accounting),
                            sigma=accounting["sigma"], sensitivity=accounting["sensitivity"],
                            alpha=accounting["alpha"], delta=options.delta, threat_model=options.threat_model,
                            notes=NOTES, releases=np.stack([walk.visits() for walk in walks]))
    losses.columns["ex_ante"] = ex_ante_column(topology, accounting, seed=seed, walks=options.schedules)
    losses.facts["communicability"] = communicability(topology)
    losses.notes.extend(order_notes(accounting))
    losses.exact_given = "the path"
    linearized = [step_geometry(walk, options.threat_model) for walk in walks]
    state_assumptions(losses, linearized_column(np.stack([g.lower for g in linearized]),
                                                np.stack([g.upper for g in linearized]), accounting, mixture=True),
                      {**definitions(losses.columns["ex_ante"]), "linearized": PLANNED_LINEARIZED})
    losses.definitions.update(PLANNED)
    details: dict[str, object] = {"walks": count, "seed": seed, "steps": params.steps,
                                  "expected_contributions": expected,
                                  "ex_ante": losses.columns["ex_ante"].sampling}
    headline = (f"n = {topology.n}, random-walk DP-SGD of T = {params.steps} steps ex ante over {count} simulated "
                f"walks (seed {seed}), sigma = {accounting['sigma']:.6g}, sender {params.sender}")
    return Plan(run=PlannedWalks(topology, walks), losses=losses, details=details, headline=headline)
