"""Plan a run before it happens: what every protocol's planner shares.

A plan is the audit of a planned schedule (every node completes every round, nobody drops)
or, for randomized schedules, of simulated ones, so planned and realized runs are accounted
by the same code and reported in the same schema. Simulated schedules are reported as their
mixture (`mixture_losses`): the loss of an observer who learns which schedule ran, an upper
bound on one who does not (post-processing): RDP (1/(α−1)) log E exp((α−1)·rdp), and the
exact (ε, δ) from the schedule-averaged Gaussian privacy profile. Calibration finds the smallest σ whose
loss meets a target ε at δ, either by Muffliato's comparison rule (ε̄ = max over observers v
of (1/n) Σ_u ε_{u→v}) or for the worst pair. It bisects on σ, which is sound because every
loss the planners calibrate decreases in σ (μ = (Δ/σ)·√p, p does not depend on σ). The
baselines are calibrated to the same target by the same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from coordinator_tools.audit.baselines import central_dp, local_dp
from coordinator_tools.audit.conversion import (
    Conversion,
    gaussian_epsilon,
    gaussian_mixture_epsilon,
    gaussian_rdp,
    mixture_rdp,
    squared_mu,
)
from coordinator_tools.audit.exact import ViewGeometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.realized import RealizedRun
from node.errors import ConfigError

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
class Bound:
    """What one of a plan's numbers must be: PlanOptions and `netdp plan`'s arguments check the same bounds."""

    valid: Callable[[float], bool]
    meaning: str  # "a number > 0": what an error says was expected


POSITIVE = Bound(lambda x: x > 0, "a number > 0")
NON_NEGATIVE = Bound(lambda x: x >= 0, "a number >= 0")
ORDER = Bound(lambda x: x > 1, "a Renyi order > 1")
PROBABILITY = Bound(lambda x: 0 < x < 1, "a number in (0, 1)")
COUNT = Bound(lambda x: x >= 1 and x == int(x), "a whole number >= 1")


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

    def __post_init__(self) -> None:
        bounds = {"sigma": NON_NEGATIVE, "sensitivity": POSITIVE, "alpha": ORDER, "delta": PROBABILITY,
                  "rounds": COUNT, "schedules": COUNT}
        for name, bound in bounds.items():
            value = getattr(self, name)
            if value is not None and not bound.valid(value):
                raise ConfigError(f"plan option {name}: expected {bound.meaning}, got {value!r}")


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
    _reachable(geometry, target)
    values, inverse = np.unique(geometry, return_inverse=True)

    def loss(sigma: float) -> float:
        mu = np.sqrt(squared_mu(values, sigma=sigma, sensitivity=sensitivity))
        return summarize(gaussian_epsilon(mu, delta)[inverse].reshape(geometry.shape), target.rule)

    return smallest_sigma(loss, sensitivity=sensitivity, target=target)


def calibrate_mixture_sigma(geometries: np.ndarray, *, sensitivity: float, delta: float, target: Target) -> float:
    """Smallest σ whose ex-ante exact loss over simulated schedules (p per pair, schedules on axis 0) meets `target`."""
    _reachable(geometries, target)

    def loss(sigma: float) -> float:
        mu = np.sqrt(squared_mu(geometries, sigma=sigma, sensitivity=sensitivity))
        return summarize(gaussian_mixture_epsilon(mu, delta), target.rule)

    return smallest_sigma(loss, sensitivity=sensitivity, target=target)


def _reachable(geometry: np.ndarray, target: Target) -> None:
    """No σ meets a target when a view pins an input down without noise (p = ∞: a token seen around bare hops)."""
    if np.any(np.isinf(geometry)):
        u, v = (int(x[0]) for x in np.nonzero(np.isinf(geometry))[-2:])
        raise ConfigError(f"no sigma meets eps <= {target.epsilon:g}: node {v}'s view pins node {u}'s input down "
                          "whatever the noise")


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


def baseline_sigmas(n: int, *, sensitivity: float, delta: float, target: Target,
                    releases: float = 1) -> dict[str, float]:
    """σ the local-DP and central-DP baselines need for the same target, each noisy release composed `releases`
    times."""
    return {
        name: calibrate_sigma(_constant_geometry(n, releases * value), sensitivity=sensitivity, delta=delta,
                              target=target)
        for name, value in (("ldp", 1.0), ("central", 1.0 / n))
    }


def _constant_geometry(n: int, value: float) -> np.ndarray:
    """A baseline's p: the same for every pair, NaN on the diagonal."""
    geometry = np.full((n, n), value)
    np.fill_diagonal(geometry, np.nan)
    return geometry


def mixture_losses(
    geometries: Sequence[ViewGeometry],
    paper: tuple[np.ndarray, np.ndarray],
    *,
    sigma: float,
    sensitivity: float,
    alpha: float,
    delta: float,
    threat_model: ThreatModel,
    notes: Sequence[str],
    releases: np.ndarray | None = None,
    paper_conversion: Conversion | None = None,
) -> PairwiseLosses:
    """The ex-ante columns of K equally likely simulated schedules, their geometries along axis 0.

    `paper` is the paper column (rdp, eps), already ex ante, its ε by `paper_conversion` from a
    per-pair μ (None: a closed form stated in ε). `releases` [k, u] counts each
    source's noisy contributions per schedule (token walks): each source's local-DP loss is then
    the mixture of its own; None means one contribution per source in every schedule.
    """
    n = geometries[0].lower.shape[0]

    def mus(values: np.ndarray) -> np.ndarray:
        return np.sqrt(squared_mu(values, sigma=sigma, sensitivity=sensitivity))

    lower, upper = (mus(np.stack([getattr(g, end) for g in geometries])) for end in ("lower", "upper"))
    ldp_sources: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
    if releases is None:
        ldp = local_dp(sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)
        central = central_dp(n=n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)
        ldp_rdp, ldp_eps = ldp.rdp, ldp.eps
    else:
        sources = mus(np.asarray(releases, dtype=float))
        ldp_sources = (mixture_rdp(gaussian_rdp(sources, alpha), alpha), gaussian_mixture_epsilon(sources, delta))
        ldp_rdp, ldp_eps = float(np.max(ldp_sources[0])), float(np.max(ldp_sources[1]))
        central = central_dp(n=n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta,
                             releases=float(np.mean(releases)))
    return PairwiseLosses(
        alpha=alpha,
        delta=delta,
        sigma=sigma,
        sensitivity=sensitivity,
        threat_model=threat_model,
        paper_rdp=paper[0],
        paper_eps=paper[1],
        exact_rdp_lower=mixture_rdp(gaussian_rdp(lower, alpha), alpha),
        exact_eps_lower=gaussian_mixture_epsilon(lower, delta),
        exact_rdp_upper=mixture_rdp(gaussian_rdp(upper, alpha), alpha),
        exact_eps_upper=gaussian_mixture_epsilon(upper, delta),
        reconstructable=np.all([g.reconstructable for g in geometries], axis=0),
        ill_conditioned=np.any([g.ill_conditioned for g in geometries], axis=0),
        exact_method=geometries[0].method,
        ldp_rdp=ldp_rdp,
        ldp_eps=ldp_eps,
        central_rdp=central.rdp,
        central_eps=central.eps,
        ldp_source_rdp=ldp_sources[0],
        ldp_source_eps=ldp_sources[1],
        paper_conversion=paper_conversion,
        notes=[*notes, f"ex ante: mixture over {len(geometries)} simulated schedules; exact by the averaged "
                       "Gaussian profile"],
    )
