"""Plan a run before it happens: its pairwise losses, its stopping time, and the noise it needs.

The plan is the audit of the planned transcript (every node completes every round, nobody
drops), so planned and realized runs are accounted by the same code and reported in the same
schema. On top: T_stop from Muffliato Thm 2, and calibration of σ for a target ε at δ, either
by Muffliato's comparison rule (ε̄ = max over observers v of (1/n) Σ_u ε_{u→v}) or for the
worst pair. Calibration uses the exact loss at its conservative upper end; it bisects on σ,
which is sound because every exact loss decreases in σ (μ = (Δ/σ)·‖Π_v e_u‖, the projection
does not depend on σ). The baselines are calibrated to the same target by the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from coordinator_tools.audit.accountants import account
from coordinator_tools.audit.conversion import Conversion, gaussian_epsilon, squared_mu
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.transcript import Transcript, planned_transcript
from coordinator_tools.theory import muffliato_t_stop, worst_case_spread
from node.topology import Topology

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
class Plan:
    """The planned run's losses, and what the planner adds to the report (key "plan")."""

    transcript: Transcript
    losses: PairwiseLosses
    details: dict[str, object]


def plan(
    topology: Topology,
    *,
    rounds: int,
    accelerated: bool,
    sigma: float,
    sensitivity: float,
    alpha: float,
    delta: float,
    conversion: Conversion = "tight",
    threat_model: ThreatModel = ThreatModel(),
    target: Target | None = None,
) -> Plan:
    """Account the planned run; with a target, at the smallest σ that meets it instead of `sigma`."""
    transcript = planned_transcript(topology, rounds=rounds, accelerated=accelerated)
    details: dict[str, object] = {"rounds": rounds, "accelerated": accelerated}
    if target is not None:
        n = topology.n
        geometries = {
            "exact": view_geometry(transcript, threat_model).upper,
            "ldp": _constant_geometry(n, 1.0),
            "central": _constant_geometry(n, 1.0 / n),
        }
        sigmas = {
            name: calibrate_sigma(geometry, sensitivity=sensitivity, delta=delta, target=target)
            for name, geometry in geometries.items()
        }
        sigma = sigmas["exact"]
        details["calibration"] = {"target_eps": target.epsilon, "rule": target.rule, "sigma": sigmas}
    details["t_stop"] = (
        muffliato_t_stop(topology.n, topology.spectral_gap, sigma, worst_case_spread(sensitivity), accelerated)
        if sigma > 0
        else None
    )
    losses = account(
        transcript, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta,
        threat_model=threat_model, conversion=conversion,
    )  # fmt: skip
    return Plan(transcript=transcript, losses=losses, details=details)


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


def _constant_geometry(n: int, value: float) -> np.ndarray:
    """A baseline's p: the same for every pair, NaN on the diagonal."""
    geometry = np.full((n, n), value)
    np.fill_diagonal(geometry, np.nan)
    return geometry
