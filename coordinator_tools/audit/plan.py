"""Plan a run before it happens: what every protocol's planner shares.

A plan is the audit of a planned schedule (every node completes every round, nobody drops)
or, for randomized schedules, of simulated ones, so planned and realized runs are accounted
by the same code and reported in the same schema. Calibration finds the smallest σ whose
loss meets a target ε at δ, either by Muffliato's comparison rule (ε̄ = max over observers v
of (1/n) Σ_u ε_{u→v}) or for the worst pair. It bisects on σ, which is sound because every
loss the planners calibrate decreases in σ (μ = (Δ/σ)·√p, p does not depend on σ). The
baselines are calibrated to the same target by the same rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from coordinator_tools.audit.conversion import Conversion, gaussian_epsilon, squared_mu
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel

if TYPE_CHECKING:
    from coordinator_tools.audit.protocols.base import RealizedRun

Rule = Literal["mean", "worst"]
# Bisection stops when the bracket on σ is this narrow (relative); the upper end is returned.
SIGMA_RTOL = 1e-6


@dataclass(frozen=True)
class Target:
    """ε at the plan's δ that the exact loss must not exceed, under `rule`."""

    epsilon: float
    rule: Rule

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError(f"target epsilon must be > 0, got {self.epsilon}")


@dataclass(frozen=True)
class PlanOptions:
    """What a planner is asked; None means the topology's published value (or the planner's default)."""

    sigma: float | None = None
    sensitivity: float | None = None
    alpha: float | None = None
    delta: float = 1e-5
    conversion: Conversion = "tight"
    threat_model: ThreatModel = ThreatModel()
    target: Target | None = None
    rounds: int | None = None  # synchronous gossip: rounds T
    accelerated: bool | None = None  # synchronous gossip: Chebyshev or plain
    schedules: int | None = None  # randomized schedules: how many to simulate
    seed: int | None = None  # randomized schedules: seed of the simulation


@dataclass(frozen=True)
class Plan:
    """The planned run's losses, what the planner adds to the report (key "plan"), and a headline."""

    run: RealizedRun
    losses: PairwiseLosses
    details: dict[str, object]
    headline: str


def summarize(eps: np.ndarray, rule: Rule) -> float:
    """The number a target bounds: the worst pair, or max_v (1/n) Σ_{u≠v} ε_{u→v} (Muffliato §2.3)."""
    if rule == "worst":
        return float(np.nanmax(eps))
    return float(np.max(np.nansum(eps, axis=0) / eps.shape[0]))


def calibrate_sigma(geometry: np.ndarray, *, sensitivity: float, delta: float, target: Target) -> float:
    """Smallest σ (to SIGMA_RTOL, rounded up) whose exact loss meets `target`.

    `geometry` is p = ‖Π_v e_u‖² per pair [u, v] (NaN where not accounted); the loss of each
    distinct p is computed once per step, so symmetric graphs calibrate fast.
    """
    values, inverse = np.unique(geometry, return_inverse=True)

    def loss(sigma: float) -> float:
        mu = np.sqrt(squared_mu(values, sigma=sigma, sensitivity=sensitivity))
        return summarize(gaussian_epsilon(mu, delta)[inverse].reshape(geometry.shape), target.rule)

    return smallest_sigma(loss, sensitivity=sensitivity, target=target)


def smallest_sigma(loss: Callable[[float], float], *, sensitivity: float, target: Target) -> float:
    """Smallest σ (to SIGMA_RTOL, rounded up) with loss(σ) <= target, for a loss decreasing in σ."""
    if loss(0.0) <= target.epsilon:
        return 0.0
    high = sensitivity
    while loss(high) > target.epsilon:
        high *= 2
    low = 0.0
    while high - low > SIGMA_RTOL * high:
        middle = (low + high) / 2
        low, high = (low, middle) if loss(middle) <= target.epsilon else (middle, high)
    return high


def baseline_sigmas(n: int, *, sensitivity: float, delta: float, target: Target) -> dict[str, float]:
    """σ the local-DP and central-DP baselines need for the same target."""
    return {
        name: calibrate_sigma(_constant_geometry(n, value), sensitivity=sensitivity, delta=delta, target=target)
        for name, value in (("ldp", 1.0), ("central", 1.0 / n))
    }


def _constant_geometry(n: int, value: float) -> np.ndarray:
    """A baseline's p: the same for every pair, NaN on the diagonal."""
    geometry = np.full((n, n), value)
    np.fill_diagonal(geometry, np.nan)
    return geometry
