"""Noise σ per protocol for a target mean pairwise ε, by a bracketing search on σ over plans.

A plan evaluation is one `auditor.plan(topology, PlanOptions(sigma, alpha, schedules))`; the
number it bounds is Muffliato's mean rule, max_v (1/n) Σ_u ε_{u→v} (`summarize(eps, "mean")`), on
the protocol's honest planned column: `exact_eps_upper` for Muffliato-GD (the proven bound, each
source's steps that reach the observer composed under the assumptions the report states, never the
linearized value; a Gaussian (ε, δ), the same at every Rényi order) and `ex_ante` for the random
walk (amplification by iteration averaged over simulated walks, proven under the same assumptions
if every step is non-expansive, converted from one Rényi order α). The walk's order is chosen on quick plans
(QUICK_WALKS simulated walks): σ is calibrated at the smallest order of ORDERS whose ε floor is at
most half the target, and the order with the smallest mean at that σ is kept; σ is then calibrated
at that order on the ex-ante column as the audit draws it (the same walks from the same seed), so
the planned and the audited ex-ante columns are the same numbers.

The search keeps a bracket [low (misses the target), high (meets it)] and steps by log-log
interpolation, kept inside the bracket's middle; it returns `high` once its mean is within
EPS_RTOL below the target (or the bracket is narrower than SIGMA_RTOL).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from coordinator_tools.audit.conversion import rdp_to_epsilon
from coordinator_tools.audit.plan import PlanOptions, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.rw_sgd.accountant import DEFAULT_WALKS as QUICK_WALKS
from coordinator_tools.compare.setup import GOSSIP, GOSSIP_ALPHA, CompareSetup, comparison_topology
from node.errors import ConfigError

ORDERS = (2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0)
EPS_RTOL = 2e-3  # the returned σ's planned mean lies in [target (1 - EPS_RTOL), target]
SIGMA_RTOL = 1e-6
MAX_STEPS = 60
FLOOR_RDP = 1e-9  # smaller RDP (< δ²) converts to ε = 0 (the library's KL case)
COLUMN = {GOSSIP: "exact_eps_upper", "rw-sgd": "ex_ante"}


@dataclass(frozen=True)
class Calibration:
    """σ that meets the target, the order α it was planned at, its planned mean ε and the plans it took."""

    protocol: str
    sigma: float
    alpha: float
    planned_mean_eps: float
    evaluations: int
    column: str


class PlannedMean:
    """Planned mean ε of one protocol as a function of (σ, α, simulated walks), counting plan evaluations."""

    def __init__(self, setup: CompareSetup, protocol: str) -> None:
        self.setup, self.protocol = setup, protocol
        self.graph = setup.make_graph()
        self.auditor = auditor_named(protocol)
        self.evaluations = 0

    def __call__(self, sigma: float, alpha: float, walks: int | None = None) -> float:
        params = self.setup.params(self.protocol, sigma, alpha, self.graph.number_of_nodes())
        topology = comparison_topology(self.setup, self.graph, params, run_id=f"plan-{self.protocol}")
        options = PlanOptions(sigma=sigma, alpha=alpha, delta=self.setup.delta, schedules=walks)
        losses = self.auditor.plan(topology, options).losses
        self.evaluations += 1
        eps = losses.exact_eps_upper if self.protocol == GOSSIP else losses.columns[COLUMN[self.protocol]].eps
        return summarize(eps, "mean")


def smallest_sigma(mean: Callable[[float], float], target: float, start: float) -> tuple[float, float]:
    """(σ, mean(σ)) with target (1 − EPS_RTOL) <= mean(σ) <= target, for a mean decreasing in σ."""
    low: tuple[float, float] | None = None  # (σ, mean) missing the target
    high: tuple[float, float] | None = None  # (σ, mean) meeting it
    sigma = start
    for _ in range(MAX_STEPS):
        value = mean(sigma)
        if value > target:
            low = (sigma, value)
        else:
            high = (sigma, value)
            if value >= target * (1 - EPS_RTOL):
                return high
        if low is None:  # only met so far: go down, faster when far below the target
            sigma /= min(4.0, max(1.1, target / max(value, target / 4)))
        elif high is None:  # only missed so far: go up (a slope of -1 in log-log overshoots ε ∝ σ^-2)
            sigma *= min(4.0, max(1.1, value / target))
        elif high[0] / low[0] < 1 + SIGMA_RTOL:
            return high
        else:
            sigma = _interpolate(low, high, target)
    raise ConfigError(f"no sigma found with mean eps within {EPS_RTOL:g} below {target:g} in {MAX_STEPS} plans")


def _interpolate(low: tuple[float, float], high: tuple[float, float], target: float) -> float:
    """Where the log-log line through the bracket's ends crosses the target, kept in the bracket's middle 80%."""
    (s0, m0), (s1, m1) = low, high
    x0, x1 = math.log(s0), math.log(s1)
    if m1 > 0:
        y0, y1, y = math.log(m0), math.log(m1), math.log(target)
        x = x0 + (x1 - x0) * (y0 - y) / (y0 - y1) if y0 != y1 else (x0 + x1) / 2
    else:
        x = (x0 + x1) / 2
    return math.exp(min(max(x, x0 + 0.1 * (x1 - x0)), x0 + 0.9 * (x1 - x0)))


def epsilon_floor(alpha: float, delta: float) -> float:
    """ε at δ of a vanishing RDP at order α: no order-α bound above δ² goes below it, whatever σ."""
    return float(rdp_to_epsilon([alpha], [FLOOR_RDP], delta))


def calibrate(setup: CompareSetup, protocol: str, target: float) -> Calibration:
    """σ of `protocol` whose planned mean ε meets `target` (within EPS_RTOL below it)."""
    mean = PlannedMean(setup, protocol)
    if protocol == GOSSIP:
        sigma, value = smallest_sigma(lambda s: mean(s, GOSSIP_ALPHA), target, setup.sensitivity)
        return Calibration(protocol, sigma, GOSSIP_ALPHA, value, mean.evaluations, COLUMN[protocol])
    feasible = [alpha for alpha in ORDERS if epsilon_floor(alpha, setup.delta) <= target / 2]
    if not feasible:
        raise ConfigError(f"no Renyi order up to {ORDERS[-1]:g} reaches mean eps {target:g} at delta "
                          f"{setup.delta:g}; raise the target")
    quick, _ = smallest_sigma(lambda s: mean(s, feasible[0], QUICK_WALKS), target, setup.sensitivity)
    means = {alpha: mean(quick, alpha, QUICK_WALKS) for alpha in feasible}
    best = min(means, key=means.__getitem__)
    sigma, value = smallest_sigma(lambda s: mean(s, best), target, quick)
    return Calibration(protocol, sigma, best, value, mean.evaluations, COLUMN[protocol])
